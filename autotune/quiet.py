"""Filter the CUDA plugin's import-time lines out of stderr.

With the ``gpu`` extra installed, ``import jax`` loads jax's CUDA plugin, whose stub logs "Could not
find cuda drivers on your machine, GPU will not be used." (with absl's "All log messages before
absl::InitializeLog() is called" before it) on every machine without a GPU, CPU-only work
included, and again when jax starts its backends (plugin discovery). They are written by C++ to
file descriptor 2 before absl is initialised, so neither ``TF_CPP_MIN_LOG_LEVEL`` nor
``JAX_PLATFORMS=cpu`` silences them. ``cuda_plugin_lines_filtered`` sends descriptor 2 to a
temporary file around the import or the first backend start and writes back every line but
those: a failure still says why.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile

_NOISE = re.compile(r"cudart_stub\.cc:\d+\] Could not find cuda drivers|"
                    r"^WARNING: All log messages before absl::InitializeLog\(\) is called")


@contextlib.contextmanager
def cuda_plugin_lines_filtered():
    """Run the body (``import jax``, or jax's first backend start) with the CUDA plugin's lines
    dropped from stderr and every other line it printed written back."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [ln for ln in tmp.read().decode("utf-8", "replace").splitlines(True) if not _NOISE.search(ln)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()
