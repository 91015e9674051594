"""A small pool of compiler worker processes with crash isolation.

Why not ``concurrent.futures`` or ``multiprocessing.Pool``: an XLA fatal error (CHECK failure,
LOG(FATAL)) kills the whole process, and a hung pass never returns. A standard pool then breaks as a
whole (``BrokenProcessPool``) or waits forever. Here each worker is a plain subprocess
(``python -m autotune.core.workers``, so nothing from the caller's ``__main__`` is re-imported) talking
over a socket pair with ``multiprocessing.connection``. The parent waits with a deadline per
message; on a deadline or a dead socket it kills that one worker, turns the event into a
``PassFailed`` (``timeout`` or ``crash``, with the last lines the compiler printed to stderr) and
starts a replacement on the next request. Handlers may stream: a generator's items arrive one by
one, so a crash in step 7 of a job still delivers steps 1-6.

Memory: every worker runs under a memory limit (``worker_memory_limit``), so a runaway allocation
(executing a big module, folding a huge constant) fails that worker with "worker exceeded its
memory limit of X GiB" instead of taking the machine down; the pool replaces the worker and the
run goes on. The limit is ``RLIMIT_DATA`` (see ``_limit_memory`` for why not ``RLIMIT_AS``).
"""

from __future__ import annotations

import importlib
import itertools
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

from autotune.core.worker_memory import (MEMORY_ENV, describe_bytes, memory_message, parse_size,  # noqa: F401
                                          worker_memory_limit)
from autotune.core.child import python_module_command
from autotune.errors import AutotuneError, PassFailed, WorkerStartFailed
from autotune import errors

# What an allocation failure looks like from the worker: XLA's status, C++'s exception, Python's.
_MEMORY_SIGNS = re.compile(r"RESOURCE_EXHAUSTED|Out of memory|std::bad_alloc|MemoryError|Cannot allocate memory",
                           re.I)

_FATAL_LINE = re.compile(r"^(F\d{4}|E\d{4}|Check failed|\*\*\* SIG|INTERNAL|.*RET_CHECK)", re.M)


@dataclass(frozen=True)
class Job:
    """One request: ``handler.method(*args)``; ``per_item_timeout`` bounds each streamed item."""

    method: str
    args: tuple
    per_item_timeout: float


def stderr_text(path: str) -> str:
    """The last 20 kB of a worker's log (its current job's output: the log is cut per job)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 20000))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def stderr_tail(path: str, limit: int = 400) -> str:
    """The compiler's own words: the most telling line (a CHECK failure, a fatal log line) of a log file.

    Shared by the local pool and the Ray executor's actors, so a crash reads the same with either.
    """
    text = stderr_text(path)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("@")]
    fatal = [ln for ln in lines if _FATAL_LINE.match(ln)]
    # The compiler's own line (a CHECK failure) beats the signal handler's "*** SIGABRT received".
    words = [ln for ln in fatal if not ln.startswith("*** SIG")] or fatal
    pick = words[-1] if words else (lines[-1] if lines else "")
    return pick[:limit]

class _Worker:
    _ids = itertools.count()

    def __init__(self, factory: str, init_args: tuple, env: dict[str, str] | None, start_timeout: float,
                 cpu: int | None = None, memory_limit: int = 0):
        self.id = next(self._ids)
        self.memory_limit = memory_limit
        parent_sock, child_sock = socket.socketpair()
        self.stderr_path = os.path.join(tempfile.gettempdir(), f"autotune-worker-{os.getpid()}-{self.id}.log")
        self._stderr = open(self.stderr_path, "wb")
        full_env = dict(os.environ)
        full_env.update(env or {})
        if cpu is not None:
            full_env["AUTOTUNE_WORKER_CPU"] = str(cpu)
        full_env["AUTOTUNE_WORKER_MEMORY_BYTES"] = str(int(memory_limit))
        self.proc = subprocess.Popen(
            [*python_module_command("autotune.core.workers"), str(child_sock.fileno()), factory],
            pass_fds=(child_sock.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=self._stderr,
            stderr=self._stderr,
            env=full_env,
            start_new_session=True,  # a Ctrl-C in the terminal reaches the parent, which stops workers
        )
        child_sock.close()
        self.conn = Connection(parent_sock.detach())
        self.conn.send(init_args)
        if not self.conn.poll(start_timeout):
            self.kill()
            raise AutotuneError(f"compiler worker did not start within {start_timeout:.0f}s")
        try:
            kind, payload = self.conn.recv()
        except (EOFError, OSError):
            self.kill()
            raise WorkerStartFailed(f"compiler worker failed to start: {self.stderr_tail()}") from None
        if kind != "ready":
            self.kill()
            raise WorkerStartFailed(f"compiler worker failed to start: {payload}")
        self.pid = self.proc.pid
        self.cpu = cpu

    def stderr_text(self) -> str:
        return stderr_text(self.stderr_path)

    def stderr_tail(self, limit: int = 400) -> str:
        """The compiler's own words: the most telling line of what the worker printed last."""
        return stderr_tail(self.stderr_path, limit)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.close()

    def close(self) -> None:
        try:
            self.conn.close()
        except OSError:
            pass
        try:
            self._stderr.close()
            os.unlink(self.stderr_path)
        except OSError:
            pass

    def describe_death(self) -> str:
        code = self.proc.poll()
        if self.memory_limit and _MEMORY_SIGNS.search(self.stderr_text()):
            return memory_message(self.memory_limit, self.stderr_tail())
        if code is None:
            return "worker stopped answering"
        if code < 0:
            try:
                return f"worker killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"worker killed by signal {-code}"
        return f"worker exited with code {code}"


class PoolRequests:
    """The request side every pool offers, built on its ``dispatcher``: the local ``WorkerPool`` and
    the Ray executor's pool share it, so the Evaluator and the backends cannot tell them apart."""

    def dispatcher(self, on_start=None):  # pragma: no cover - every pool defines its own
        raise NotImplementedError

    def call(self, method: str, *args, timeout: float = 600.0):
        """Run one non-streaming request on a worker and return its result."""
        items = list(self.stream(method, *args, timeout=timeout))
        return items[-1] if items else None

    def stream(self, method: str, *args, timeout: float = 600.0) -> Iterator:
        """Yield the items of one (streaming) request; a death ends the stream with PassFailed."""
        for _, item in self.run_many([Job(method, args, timeout)]):
            if item is StopJob:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def run_many(self, jobs: Sequence[Job], on_start: Callable[[int, int], None] | None = None) -> Iterator[tuple[int, object]]:
        """Run a fixed list of jobs in parallel; yield ``(job_index, item)`` as items arrive."""
        dispatcher = self.dispatcher(on_start)
        for index, job in enumerate(jobs):
            dispatcher.submit(index, job)
        yield from dispatcher


class WorkerPool(PoolRequests):
    """``size`` long-lived workers created by ``factory(*init_args)`` (a ``module:callable`` path)."""

    def __init__(
        self,
        factory: str,
        init_args: tuple = (),
        size: int = 1,
        env: dict[str, str] | None = None,
        start_timeout: float = 180.0,
        pin: bool = True,
        memory_limit: int | None = None,
    ):
        self.factory, self.init_args, self.size = factory, init_args, max(1, int(size))
        #: Bytes per worker (0: unlimited); by default derived from the machine (``worker_memory_limit``).
        self.memory_limit = worker_memory_limit(self.size) if memory_limit is None else int(memory_limit)
        self.exclusive_runs = 0  # times ``exclusive`` lifted the limit (validation says so in its reason)
        self.memory_failures = 0
        self.env, self.start_timeout = env, start_timeout
        self.pin = pin
        self._idle: list[_Worker] = []
        self._all: list[_Worker] = []
        self.crashes = 0
        self.timeouts = 0
        self.started = 0

    # ---- lifecycle -----------------------------------------------------------------------------
    def _spawn(self) -> _Worker:
        worker = _Worker(self.factory, self.init_args, self.env, self.start_timeout, self._free_cpu(),
                         self.memory_limit)
        self._all.append(worker)
        self.started += 1
        return worker

    def _take(self) -> _Worker:
        while self._idle:
            worker = self._idle.pop()
            if worker.alive():
                return worker
            self._discard(worker)
        return self._spawn()

    def _discard(self, worker: _Worker) -> None:
        worker.kill()
        if worker in self._all:
            self._all.remove(worker)

    def _free_cpu(self) -> int | None:
        """Pin each worker to its own core when there are enough cores.

        XLA's MLIR import spreads verification over a thread pool; two unpinned workers on two
        cores then fight over both cores. One core each gives more throughput (bench/perf.py).
        """
        if not self.pin:
            return None
        try:
            cpus = sorted(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            return None
        if self.size > len(cpus):
            return None
        taken = {w.cpu for w in self._all if w.alive()}
        free = [c for c in cpus if c not in taken]
        return free[0] if free else None

    @contextmanager
    def exclusive(self):
        """One worker holding the memory all of them share, for a request too big for one share.

        The limits guarantee that every worker at its limit at once still fits the machine
        (``worker_memory_limit``); with the idle workers stopped and only one allowed, that one may
        have it all. Used by validation for an execution that its worker's share refused (a 9.3 GiB
        MoE region next to an 8.2 GiB share on a 23 GB machine with two workers). Yields whether
        the limit grew; the pool is as before afterwards (fresh workers start on demand)."""
        if self.size == 1 or not self.memory_limit or len(self._idle) < len([w for w in self._all if w.alive()]):
            yield False  # a single worker already, no limit, or a worker busy elsewhere
            return
        saved = (self.size, self.memory_limit)
        self._drop_idle()
        self.size, self.memory_limit = 1, worker_memory_limit(1)
        lifted = self.memory_limit > saved[1]
        self.exclusive_runs += int(lifted)
        try:
            yield lifted
        finally:
            self._drop_idle()
            self.size, self.memory_limit = saved

    def _drop_idle(self) -> None:
        for worker in self._idle:
            self._discard(worker)
        self._idle.clear()

    def pids(self) -> list[int]:
        return [w.pid for w in self._all if w.alive()]

    def warm(self, n: int | None = None) -> None:
        """Start workers ahead of time (they take ~1-2 s each to import jaxlib)."""
        while len(self._all) < (n or self.size):
            self._idle.append(self._spawn())

    def close(self) -> None:
        for worker in list(self._all):
            try:
                worker.conn.send(None)
            except OSError:
                pass
        deadline = time.monotonic() + 3
        for worker in list(self._all):
            try:
                worker.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            worker.kill()
        self._all.clear()
        self._idle.clear()

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- requests (call/stream/run_many come from PoolRequests) ----------------------------------
    def dispatcher(self, on_start: Callable[[object, int], None] | None = None) -> "Dispatcher":
        return Dispatcher(self, on_start or self.on_start)

    #: Test hook: called with (job key, worker pid) when a job is handed to a worker.
    on_start: Callable[[object, int], None] | None = None


class Dispatcher:
    """Keeps every worker busy; jobs may be submitted while results are being consumed.

    Iterating yields ``(key, item)``: an item is a handler's streamed value, or an exception
    instance closing that job (``PassFailed`` for crashes/timeouts, an ``AutotuneError`` raised by
    the handler). Every job ends with exactly one ``(key, StopJob)`` after its items. Iteration ends
    when no job is queued or running.
    """

    def __init__(self, pool: WorkerPool, on_start):
        self.pool = pool
        self.on_start = on_start
        self.queue: list[tuple[object, Job]] = []
        self.running: dict[int, tuple[_Worker, object, Job, float]] = {}  # fd -> (worker, key, job, deadline)

    def submit(self, key, job: Job) -> None:
        self.queue.append((key, job))

    def __iter__(self) -> Iterator[tuple[object, object]]:
        running = self.running
        try:
            while self.queue or running:
                self._start_queued()
                now = time.monotonic()
                timeout = max(0.0, min(d for (_, _, _, d) in running.values()) - now)
                ready = wait([w.conn for (w, _, _, _) in running.values()], timeout=timeout)
                if not ready:
                    yield from self._expire()
                    continue
                for conn in ready:
                    yield from self._receive(conn)
        finally:
            # A consumer that stops early (or an interrupt) leaves workers mid-job: they cannot be
            # reused safely, so they are killed; the pool starts fresh ones when needed.
            for worker, _, _, _ in running.values():
                self.pool._discard(worker)
            running.clear()

    def _start_queued(self) -> None:
        """Hand queued jobs to workers until every one of the pool's workers is busy."""
        while self.queue and len(self.running) < self.pool.size:
            key, job = self.queue.pop(0)
            worker = self.pool._take()
            worker.conn.send((0, job.method, job.args))
            self.running[worker.conn.fileno()] = (worker, key, job, time.monotonic() + job.per_item_timeout)
            if self.on_start:
                self.on_start(key, worker.pid)

    def _expire(self) -> Iterator[tuple[object, object]]:
        """Kill every worker past its job's deadline; the job answers a timeout."""
        for fd, (worker, key, job, deadline) in list(self.running.items()):
            if time.monotonic() >= deadline:
                del self.running[fd]
                self.pool.timeouts += 1
                self.pool._discard(worker)
                yield key, PassFailed(f"step exceeded its {job.per_item_timeout:g}s limit; worker killed", "timeout")
                yield key, StopJob

    def _receive(self, conn) -> Iterator[tuple[object, object]]:
        """One message from a ready worker: a streamed item (its deadline restarts), the job's end
        (an answer or an error; the worker goes back to the pool) or the worker's death."""
        pool = self.pool
        worker, key, job, _ = self.running[conn.fileno()]
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):
            del self.running[conn.fileno()]
            yield from self._died(worker, key)
            return
        if kind == "item":
            self.running[conn.fileno()] = (worker, key, job, time.monotonic() + job.per_item_timeout)
            yield key, payload
            return
        del self.running[conn.fileno()]
        if kind == "error" and worker.memory_limit and _MEMORY_SIGNS.search(str(payload[1])):
            # It hit its limit and said so: its heap may be left fragmented or half-freed,
            # so it is replaced rather than reused.
            pool.memory_failures += 1
            pool._discard(worker)
            yield key, PassFailed(memory_message(worker.memory_limit, str(payload[1])[:300]), "crash")
            yield key, StopJob
            return
        pool._idle.append(worker)
        if kind == "error":
            yield key, rebuild_error(payload)
        yield key, StopJob

    def _died(self, worker: _Worker, key) -> Iterator[tuple[object, object]]:
        """A worker's pipe closed mid-job: its job answers a crash, saying why the process died."""
        pool = self.pool
        pool.crashes += 1
        try:
            worker.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        detail = worker.stderr_tail()
        message = worker.describe_death()
        if message.startswith("worker exceeded its memory limit"):
            pool.memory_failures += 1
        elif detail:
            message += f": {detail}"
        pool._discard(worker)
        yield key, PassFailed(message, "crash")
        yield key, StopJob


class _StopJob:
    def __repr__(self) -> str:
        return "StopJob"


StopJob = _StopJob()


def rebuild_error(payload) -> AutotuneError:
    """The exception a worker reported as ``(class name, message, status)``, rebuilt in the driver.

    Shared by the local pool and the Ray executor, so a handler's error reads the same with either.
    """
    cls_name, message, status = payload
    if cls_name == "PassFailed":
        return PassFailed(message, status or "error")
    cls = getattr(errors, cls_name, AutotuneError)
    try:
        return cls(message)
    except TypeError:
        return AutotuneError(message)


# ---- the worker side ---------------------------------------------------------------------------------
def _limit_memory() -> None:
    """Apply the parent's per-worker limit as ``RLIMIT_DATA`` before jaxlib is imported.

    Why RLIMIT_DATA: it counts what a process really allocates (private writable memory: heap,
    anonymous mmaps; since Linux 4.7), so an allocation beyond it fails at once, in the worker,
    enforced by the kernel: XLA reports RESOURCE_EXHAUSTED, C++ throws bad_alloc, numpy raises
    MemoryError. RLIMIT_AS counts reserved address space instead: a worker with a warm XLA client
    has 1.5 GiB of virtual memory for 0.33 GiB resident (thread stacks, allocator arenas; measured
    on the GPT-2 example, 17 threads), and that grows with the core count, so an address-space
    limit would fail healthy workers on big machines. A watchdog polling RSS from the parent acts
    only after the memory is taken (a runaway allocation can take gigabytes between two polls),
    and cgroups need privileges this tool cannot assume.
    """
    try:
        limit = int(os.environ.get("AUTOTUNE_WORKER_MEMORY_BYTES", "0"))
    except ValueError:
        return
    if limit > 0:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        try:
            resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
        except (ValueError, OSError):
            pass


#: Inside a worker: the cores the process was started with and the one it is pinned to (``_serve``).
_ALL_CPUS: frozenset[int] | None = None
_PINNED_CPU: int | None = None


def _set_process_affinity(cpus) -> None:
    """Every thread of this process on ``cpus`` (``sched_setaffinity(0, ...)`` moves the calling
    thread only; the compiler's thread pools exist already)."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        tids = ["0"]
    for tid in tids:
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass


@contextmanager
def all_cores():
    """Inside a worker, for a request that executes a whole program (validation, timing): every
    thread may use all the cores the worker was started with, then it is pinned again.

    Workers are pinned one per core for the search's many small compiles (``Pool._free_cpu``), but
    an execution runs alone and is bounded in time: pinned, XLA's intra-op pool and the input
    drawing shared one core (gpt-oss's MoE region: 45 s pinned, 21 s on both cores of a 2-core
    machine). A no-op in a worker that was never pinned."""
    if _PINNED_CPU is None or not _ALL_CPUS:
        yield
        return
    _set_process_affinity(_ALL_CPUS)
    try:
        yield
    finally:
        _set_process_affinity({_PINNED_CPU})


def _pin(cpu: int) -> None:
    """Pin this worker to ``cpu``, remembering the cores it had for ``all_cores``. Set on the
    importable module: a worker runs this file as ``__main__``, while handlers import it by name."""
    this = importlib.import_module("autotune.core.workers")
    try:
        this._ALL_CPUS = frozenset(os.sched_getaffinity(0))
        _set_process_affinity({cpu})
        this._PINNED_CPU = cpu
    except OSError:
        this._ALL_CPUS = this._PINNED_CPU = None


def _serve(fd: int, factory: str) -> None:
    _limit_memory()
    conn = Connection(fd)
    init_args = conn.recv()
    try:
        # The handler (XLA's client and its thread pools) is made before pinning, so its pools are
        # sized for every core, which ``all_cores`` lends back to an execution.
        module_name, _, attr = factory.partition(":")
        handler = getattr(importlib.import_module(module_name), attr)(*init_args)
    except BaseException as exc:  # report start-up failures to the parent instead of dying silently
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    cpu = os.environ.get("AUTOTUNE_WORKER_CPU")
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        _pin(int(cpu))
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        index, method, args = msg
        _truncate_stderr()
        try:
            result = getattr(handler, method)(*args)
            if hasattr(result, "__next__"):
                for item in result:
                    conn.send(("item", item))
            else:
                conn.send(("item", result))
            conn.send(("end", None))
        except AutotuneError as exc:
            conn.send(("error", (type(exc).__name__, str(exc), getattr(exc, "status", None))))
        except Exception as exc:  # a bug or an unexpected compiler error: the job fails, the worker lives
            conn.send(("error", ("AutotuneError", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", None)))


def _truncate_stderr() -> None:
    """Keep only the current job's compiler output, so a crash message is about this job."""
    try:
        os.ftruncate(2, 0)
        os.lseek(2, 0, os.SEEK_SET)
    except OSError:
        pass


if __name__ == "__main__":
    _serve(int(sys.argv[1]), sys.argv[2])
