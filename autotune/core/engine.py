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
                step_timeout: float = 120.0, pipeline: str = "xla"):
    """Yield an ``Evaluator`` whose cache and worker pool are closed on exit."""
    from autotune import pipelines

    cache = Cache(db)
    backend = pipelines.get(
        pipeline, workers=workers or default_workers(), cache=cache,
        include_target_specific=include_target_specific, step_timeout=step_timeout,
    )
    try:
        yield Evaluator(backend, cache)
    finally:
        backend.close()
        cache.close()
