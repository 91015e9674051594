"""Executors: where the compiler workers of a pipeline live (one file per executor).

An executor builds *pools* of warm handler objects (``pipelines.xla.worker:XlaWorker``) with the
interface the backend and the Evaluator already use: ``dispatcher()`` (``submit(key, job)`` while
iterating; yields ``(key, item)`` with ``item`` a handler value, a ``PassFailed`` or ``StopJob``),
``run_many``, ``call(method, *args, timeout=)``, ``stream`` and ``close()``. Neither the Evaluator
nor the cache knows which executor runs the steps: the cache stays the driver's one SQLite file and
workers never open it.

- ``local`` (default): crash-isolated subprocesses on this machine (``autotune.core.workers``).
- ``ray``: Ray actors, each hosting one warm handler; crashes are restarted by Ray itself.
"""

from __future__ import annotations

import os
from typing import Protocol

from autotune.errors import AutotuneError, UnknownName

EXECUTORS = ("local", "ray")


class ExecutorLost(AutotuneError):
    """The machines running the workers went away mid-run (e.g. the Ray cluster stopped).

    Not a step's fault: nothing is recorded for the step in flight; the tuner stops the run as it
    does on Ctrl-C (completed trials kept, the ``--resume`` command printed).
    """

    exit_code = 1


class Executor(Protocol):
    name: str

    def pool(self, factory: str, init_args: tuple = (), size: int = 1, env: dict | None = None):
        """A pool of ``size`` handlers ``factory(*init_args)`` (a ``module:callable`` path)."""

    def describe(self) -> dict:
        """What ran the steps, for a run's JSON: at least ``{"name": ...}``."""

    def close(self) -> None: ...


def get(name: str | None = None, **options) -> Executor:
    """An executor by name (default ``$AUTOTUNE_EXECUTOR`` or ``local``); ``options`` go to its class.

    Bad names and unusable options (an unreachable Ray address, an incompatible Ray version) raise
    ``BadInput`` before any work is done.
    """
    name = (name or os.environ.get("AUTOTUNE_EXECUTOR") or "local").strip().lower()
    if name == "local":
        from autotune.core.executors.local import LocalExecutor

        return LocalExecutor(**options)
    if name == "ray":
        from autotune.core.executors.ray import RayExecutor

        return RayExecutor(**options)
    raise UnknownName("executor", name, EXECUTORS)
