"""One place that wires executor, cache, backend and evaluator together for a command or an API call."""

from __future__ import annotations

from contextlib import contextmanager

from autotune.core.cache import Cache
from autotune.core.evaluator import Evaluator
from autotune.core import backend as backends, executors


@contextmanager
def open_engine(db=None, workers: int | None = None, include_target_specific: bool = False,
                step_timeout: float = 120.0, backend: str | None = None, executor: str | None = None,
                executor_options: dict | None = None, target: str | None = None):
    """Yield an ``Evaluator`` whose cache, worker pool and executor are closed on exit.

    ``backend`` names a registered backend (default ``xla``); ``target`` the machine the module
    runs on (default ``cpu``; a GPU name or config for the xla backend, ``core/target.py``).
    ``executor``: where its workers run, a registered executor (``local``, the default, or ``ray``);
    ``executor_options`` go to it (for ray: ``address``, ``num_cpus``, ``max_restarts``). Any
    backend runs on any executor. Every choice is a value: nothing is read from the environment
    here (the CLI reads its defaults there once). The executor is opened before the cache, so a bad
    address costs nothing.
    """
    ex = executors.get(executor, **(executor_options or {}))
    options = {"include_target_specific": include_target_specific} if include_target_specific else {}
    if target is not None:
        options["target"] = target
    if workers is None:
        workers = ex.default_workers()
    try:
        cache = Cache(db)
    except BaseException:
        ex.close()
        raise
    try:
        backend = backends.get(backend, workers=workers, cache=cache, step_timeout=step_timeout, executor=ex,
                               **options)
    except BaseException:
        cache.close()
        ex.close()
        raise
    try:
        yield Evaluator(backend, cache)
    finally:
        backend.close()
        cache.close()
        ex.close()
