"""One place that wires cache, pipeline and evaluator together for a command or an API call."""

from __future__ import annotations

import os
from contextlib import contextmanager

from autotune.core.cache import Cache
from autotune.core.evaluator import Evaluator


def default_workers() -> int:
    """Worker processes by default: one per core, at most 4 (each holds a warm XLA client)."""
    return max(1, min(4, os.cpu_count() or 1))


@contextmanager
def open_engine(db=None, workers: int | None = None, include_target_specific: bool = False,
                step_timeout: float = 120.0, backend: str | None = None):
    """Yield an ``Evaluator`` whose cache and worker pool are closed on exit.

    ``backend`` names a registered backend (default: ``$AUTOTUNE_BACKEND`` or ``xla``).
    """
    from autotune.core import backend as backends

    cache = Cache(db)
    options = {"include_target_specific": include_target_specific} if include_target_specific else {}
    try:
        backend = backends.get(backend, workers=workers or default_workers(), cache=cache,
                               step_timeout=step_timeout, **options)
    except BaseException:
        cache.close()
        raise
    try:
        yield Evaluator(backend, cache)
    finally:
        backend.close()
        cache.close()
