"""How autotune starts its own Python child processes (compiler workers, the isolated parser, the
zoo's lowering child, the CUDA device probe).

Why ``-P``: ``python -m pkg.mod`` puts the working directory first on ``sys.path``. Run from a clone
of this repository with autotune installed (not editable), the child would then import the source
folder ``autotune/`` (which lacks ``autotune.pipelines``: that package lives in ``pipelines/`` and is
mapped in only by the install) instead of the installed package, and die before its first message.
``-P`` (Python >= 3.11) leaves the working directory off the path, so a child imports exactly what
its parent imported, from any directory.
"""

from __future__ import annotations

import sys


def python_module_command(module: str) -> list[str]:
    """The command line that runs ``module`` as ``__main__`` in this interpreter, never importing from
    the working directory."""
    return [sys.executable, "-P", "-m", module]


def python_code_command(code: str) -> list[str]:
    """The command line that runs ``code`` (``python -c``) in this interpreter, never importing from the
    working directory (``-c`` puts it first on the path, as ``-m`` does)."""
    return [sys.executable, "-P", "-c", code]


def startup_failure(stderr: str) -> str | None:
    """The last line of a Python traceback in ``stderr`` when the child died in Python before doing
    its work (an import error, a broken environment); None when it holds no traceback (the
    compiler itself aborted, which is a statement about the input)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for line in lines:  # ``python -m`` that cannot find its module prints one line, no traceback
        if "Error while finding module specification" in line:
            return line.split(": ", 1)[-1][:300]
    if not any(ln.startswith("Traceback (most recent call last)") for ln in lines):
        return None
    return lines[-1][:300]
