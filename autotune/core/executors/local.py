"""The ``local`` executor: today's crash-isolated worker processes on this machine (the default).

Nothing to start and nothing to configure: each pool is an ``autotune.core.workers.WorkerPool``.
"""

from __future__ import annotations

import os

from autotune.core.workers import WorkerPool


class LocalExecutor:
    """Crash-isolated worker processes on this machine (``WorkerPool``), pinned one per core."""

    name = "local"
    #: A local pool is driven by one thread at a time (its dispatcher shares the idle list unlocked).
    concurrent = False

    def __init__(self, pin: bool = True, start_timeout: float = 180.0, **_ignored):
        self.pin, self.start_timeout = pin, start_timeout

    def default_workers(self) -> int:
        """One worker per core, at most 4 (each holds a warm compiler; more only queue on 2 cores)."""
        return max(1, min(4, os.cpu_count() or 1))

    def pool(self, factory: str, init_args: tuple = (), size: int = 1, env: dict | None = None) -> WorkerPool:
        return WorkerPool(factory, init_args, size=size, env=env, start_timeout=self.start_timeout, pin=self.pin)

    def describe(self) -> dict:
        return {"name": "local", "cpus": os.cpu_count()}

    def close(self) -> None:
        pass
