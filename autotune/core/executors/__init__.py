"""Executors: where the compiler workers of a backend live (one file per executor).

An executor builds *pools* of warm handler objects (the class a backend names as its ``worker``,
e.g. ``autotune.testing.toy:ToyWorker``) with the interface the backend and the Evaluator use
(``autotune.core.workers.PoolRequests``): ``dispatcher()`` (``submit(key, job)`` while
iterating; yields ``(key, item)`` with ``item`` a handler value, a ``PassFailed`` or ``StopJob``),
``run_many``, ``call(method, *args, timeout=)``, ``stream`` and ``close()``. Neither the Evaluator
nor the cache knows which executor runs the steps: the cache stays the driver's one SQLite file and
workers never open it.

- ``local`` (default): crash-isolated subprocesses on this machine (``autotune.core.workers``).
- ``ray``: Ray actors, each hosting one warm handler; crashes are restarted by Ray itself.

Executors are found by name like backends and strategies: the built-ins below, then third-party
classes registered under the ``autotune.executors`` entry point (``name = "package.module:Class"``,
constructed with the options ``get`` receives). Any backend runs on any executor: the executor only
hosts the handler its backend names.
"""

from __future__ import annotations

from typing import Protocol

from autotune.core import plugins
from autotune.errors import AutotuneError

ENTRY_POINT_GROUP = "autotune.executors"
BUILTIN = {"local": "autotune.core.executors.local:LocalExecutor", "ray": "autotune.core.executors.ray:RayExecutor"}


class ExecutorLost(AutotuneError):
    """The machines running the workers went away mid-run (e.g. the Ray cluster stopped).

    Not a step's fault: nothing is recorded for the step in flight; the tuner stops the run as it
    does on Ctrl-C (completed trials kept, the ``--resume`` command printed).
    """

    exit_code = 1


class Executor(Protocol):
    name: str
    #: Whether several driver threads may drive one pool at once (each with its own dispatcher).
    concurrent: bool

    def default_workers(self) -> int:
        """Workers to start when the user names no number (local: cores, at most 4; Ray: cluster CPUs)."""

    def pool(self, factory: str, init_args: tuple = (), size: int = 1, env: dict | None = None):
        """A pool of ``size`` handlers ``factory(*init_args)`` (a ``module:callable`` path)."""

    def describe(self) -> dict:
        """What ran the steps, for a run's JSON: at least ``{"name": ...}``."""

    def close(self) -> None: ...


def available() -> dict[str, str]:
    """Executor name -> ``module:Class``: the built-ins, then third-party entry points."""
    return plugins.names(BUILTIN, ENTRY_POINT_GROUP)


def get(name: str | None = None, **options) -> Executor:
    """An executor by name (default ``local``); ``options`` go to its class.

    Bad names and unusable options (an unreachable Ray address, an incompatible Ray version) raise
    ``BadInput``/``UnknownName`` before any work is done.
    """
    name = (name or "local").strip().lower()
    return plugins.load("executor", name, available())(**options)
