"""The ``ray`` executor: compiler workers as Ray actors, on one machine or a whole cluster.

Each actor hosts one warm handler (whatever worker class the backend names, e.g.
``autotune.testing.toy:ToyWorker``: the same one the local pool runs in a subprocess), constructed
inside the actor once and reused for every step; any backend runs here. The driver keeps the
cache (one SQLite file) and the search; actors only receive a module's bytes and pass names and send
back ``StepOut`` values, so a cluster needs no shared file system.

Crash semantics match the local pool:

- A compiler's fatal error (XLA: a CHECK failure, LOG(FATAL), a signal) kills the actor's process. Ray restarts
  it (``max_restarts``; no hand-made respawn), and its new incarnation reads the last words the old
  one wrote to its own stderr file (same node: the actor id names the file), so the step is recorded
  as ``crash`` with the compiler's message. A death with no compiler output at all (killed from
  outside, its node lost, restarted elsewhere) is retried once before it is recorded.
- A hung step is cancelled by the per-step timeout: ``ray.wait`` with a deadline, then
  ``ray.kill(actor, no_restart=False)``; the step is recorded as ``timeout`` and Ray restarts it.
- If no actor can be (re)started within ``start_timeout`` (the cluster stopped, its nodes gone),
  ``ExecutorLost`` is raised: the tuner stops the run as on Ctrl-C, keeping every completed trial.

A pool may be driven by several threads at once (``compare`` runs several tunings over one pool):
each ``dispatcher()`` keeps its own jobs, and the pool's idle list is guarded by a lock.
"""

from __future__ import annotations

import itertools
import os
import socket
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

from autotune.core.executors import ExecutorLost
from autotune.core.workers import Job, PoolRequests, StopJob, rebuild_error, stderr_tail
from autotune.errors import AutotuneError, BadInput, PassFailed
from autotune.version import install_line


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:400]


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast, in one line, on a host:port nobody answers (Ray's own client retries for minutes)."""
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise BadInput(f"--ray-address {address}: expected auto, HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout).close()
    except OSError as exc:
        raise BadInput(f"cannot reach a Ray cluster at {address} ({exc.strerror or exc})") from None


def connect(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Join (or start) a Ray cluster; True when this call started it (so ``close`` stops it).

    ``address``: None or ``local`` starts a private local instance; ``auto`` joins the cluster this
    machine is part of (``ray start`` ran here); ``HOST:PORT`` joins that head (GCS port, usually
    6379); ``ray://HOST:10001`` connects through Ray Client. Any failure, an incompatible Ray
    version included, is one line (``BadInput``, exit 2).
    """
    try:
        import ray
    except ImportError:  # ray is an extra: a local run never needs it
        raise BadInput(f"the ray executor needs Ray, which this installation lacks: {install_line('ray')}") from None
    if ray.is_initialized():
        return False
    address = (address or "").strip() or None
    kwargs = dict(include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    if address in (None, "local"):
        kwargs["num_cpus"] = num_cpus
        where = "a local Ray instance"
        address = None
    else:
        if address != "auto":
            _check_reachable(address)
        if address.startswith("ray://"):
            kwargs = {"logging_level": "ERROR"}
        where = f"the Ray cluster at {address}"
    try:
        ray.init(address=address, **kwargs)
    except Exception as exc:  # ConnectionError, version mismatch (RuntimeError), bad options, ...
        raise BadInput(f"cannot use {where}: {_first_line(exc)}") from None
    _keep_stdout_clean()
    return True


def _keep_stdout_clean() -> None:
    """Ray prints cluster notices (e.g. "A worker died ...") on the driver's *stdout*; autotune's
    stdout is machine-readable (``--json``), so they go to stderr. Ray is pinned exactly
    (pyproject.toml), which is what makes reaching this private hook acceptable."""
    from ray._private import worker as ray_worker

    original = getattr(ray_worker, "print_to_stdstream", None)
    if original is None or getattr(original, "_autotune", False):
        return

    def to_stderr(data, ignore_prefix: bool):
        return original({**data, "is_err": True}, ignore_prefix)

    to_stderr._autotune = True
    ray_worker.print_to_stdstream = to_stderr


class RayExecutor:
    """Builds ``RayPool``s on a Ray cluster (``address``) or on a private local instance."""

    name = "ray"
    #: Several driver threads may share one pool (each with its own dispatcher).
    concurrent = True

    def __init__(self, address: str | None = None, num_cpus: int | None = None, max_restarts: int = -1,
                 start_timeout: float = 180.0, **_ignored):
        address = address or None
        self.address = address or "local"
        self.max_restarts = int(max_restarts)
        self.start_timeout = float(start_timeout)
        self._started = connect(address, num_cpus)
        self._pools: list[RayPool] = []

    def cpus(self) -> int:
        import ray

        return max(1, int(ray.cluster_resources().get("CPU", 1)))

    def default_workers(self) -> int:
        """One actor per CPU of the cluster (actors beyond that would only wait for a CPU)."""
        return self.cpus()

    def pool(self, factory: str, init_args: tuple = (), size: int = 1, env: dict | None = None) -> "RayPool":
        pool = RayPool(factory, init_args, size, env, self.start_timeout, self.max_restarts)
        self._pools.append(pool)
        return pool

    def describe(self) -> dict:
        import ray

        try:
            nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
            cpus = self.cpus()
        except Exception:  # noqa: BLE001 - describing must not fail a finished run
            nodes, cpus = None, None
        return {"name": "ray", "address": self.address, "nodes": nodes, "cpus": cpus, "ray": ray.__version__}

    def close(self) -> None:
        for pool in self._pools:
            pool.close()
        self._pools.clear()
        if self._started:
            import ray

            ray.shutdown()
            self._started = False


# ---- the actor side ----------------------------------------------------------------------------------
class _HandlerHost:
    """One Ray actor: a warm handler plus its own stderr file (the compiler's last words)."""

    def __init__(self, factory: str, init_args: tuple):
        import importlib

        import ray

        self._log = os.path.join(tempfile.gettempdir(), f"autotune-ray-{ray.get_runtime_context().get_actor_id()}.log")
        # A restarted incarnation: what the previous process printed before it died.
        self._last_words = stderr_tail(self._log) if os.path.exists(self._log) else ""
        fd = os.open(self._log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 2)
        os.close(fd)
        module_name, _, attr = factory.partition(":")
        self._handler = getattr(importlib.import_module(module_name), attr)(*init_args)

    def hello(self) -> tuple[int, str, str]:
        """(pid, node id, last words of the previous incarnation); the words are handed out once."""
        import ray

        words, self._last_words = self._last_words, ""
        return os.getpid(), ray.get_runtime_context().get_node_id(), words

    def run(self, method: str, args: tuple) -> list[tuple[str, object]]:
        """``handler.method(*args)`` as a list of ("item", value) / ("error", payload), like a worker's stream."""
        try:
            os.ftruncate(2, 0)
            os.lseek(2, 0, os.SEEK_SET)
        except OSError:
            pass
        out: list[tuple[str, object]] = []
        try:
            result = getattr(self._handler, method)(*args)
            if hasattr(result, "__next__"):
                for item in result:
                    out.append(("item", item))
            else:
                out.append(("item", result))
        except AutotuneError as exc:
            out.append(("error", (type(exc).__name__, str(exc), getattr(exc, "status", None))))
        except Exception as exc:  # a bug or an unexpected compiler error: the job fails, the actor lives
            out.append(("error", ("AutotuneError", f"{type(exc).__name__}: {_first_line(exc)}", None)))
        return out

    def bye(self) -> None:
        try:
            os.unlink(self._log)
        except OSError:
            pass


# ---- the driver side -----------------------------------------------------------------------------------
class _Actor:
    _ids = itertools.count()

    def __init__(self, handle):
        self.id = next(self._ids)
        self.handle = handle
        self.pid: int | None = None
        self.node: str | None = None


class RayPool(PoolRequests):
    """``size`` actors hosting ``factory(*init_args)``; the ``WorkerPool`` interface over Ray."""

    def __init__(self, factory: str, init_args: tuple = (), size: int = 1, env: dict | None = None,
                 start_timeout: float = 180.0, max_restarts: int = -1):
        import ray

        self.size = max(1, int(size))
        self.start_timeout = start_timeout
        cls = ray.remote(num_cpus=1, max_restarts=max_restarts, max_task_retries=0)(_HandlerHost)
        options = {"runtime_env": {"env_vars": dict(env)}} if env else {}
        self._lock = threading.Lock()
        self._idle: list[_Actor] = []
        self._busy: set[int] = set()  # ids of actors taken by a dispatcher and not yet released
        self._warming: dict = {}  # hello ref -> (actor, deadline)
        self.actors = [_Actor(cls.options(**options).remote(factory, tuple(init_args))) for _ in range(self.size)]
        self.crashes = 0
        self.timeouts = 0
        self.restarts = 0
        self.started = self.size
        for actor in self.actors:
            self._warm(actor)

    # ---- actor states (idle / busy in one dispatcher / warming) -------------------------------------------
    def _warm(self, actor: _Actor, deadline: float | None = None) -> None:
        ref = actor.handle.hello.remote()
        with self._lock:
            self._warming[ref] = (actor, deadline or time.monotonic() + self.start_timeout)

    def _warmed(self, ref) -> None:
        """A hello answered (or failed): the actor is idle, asked again, or given up on."""
        import ray

        with self._lock:
            entry = self._warming.pop(ref, None)
        if entry is None:  # another dispatcher took it
            return
        actor, deadline = entry
        try:
            actor.pid, actor.node, _ = ray.get(ref)
        except ray.exceptions.RayActorError:
            if time.monotonic() < deadline:  # restarting: ask again (calls queue until it is up)
                time.sleep(0.05)
                self._warm(actor, deadline)
            return
        self._release(actor)

    def _expire_warming(self) -> None:
        now = time.monotonic()
        with self._lock:
            for ref, (actor, deadline) in list(self._warming.items()):
                if now >= deadline:
                    del self._warming[ref]

    def _take(self) -> _Actor | None:
        with self._lock:
            if not self._idle:
                return None
            actor = self._idle.pop()
            self._busy.add(id(actor))
            return actor

    def _release(self, actor: _Actor) -> None:
        with self._lock:
            self._busy.discard(id(actor))
            self._idle.append(actor)

    def busy_elsewhere(self) -> bool:
        """Whether some actor is out on a job or warming (it will come back to ``_idle``)."""
        with self._lock:
            return bool(self._busy or self._warming)

    def warming(self) -> dict:
        with self._lock:
            return dict(self._warming)

    def pids(self) -> list[int]:
        return [a.pid for a in self.actors if a.pid is not None]

    def warm(self, n: int | None = None) -> None:
        """Wait until ``n`` (default all) actors have started their handler."""
        import ray

        want = min(n or self.size, self.size)
        deadline = time.monotonic() + self.start_timeout
        while True:
            with self._lock:
                ready = len(self._idle)
            waiting = self.warming()
            if ready >= want or not waiting:
                break
            if time.monotonic() >= deadline:
                raise ExecutorLost(f"Ray workers did not start within {self.start_timeout:.0f}s")
            done, _ = ray.wait(list(waiting), num_returns=1, timeout=1.0)
            for ref in done:
                self._warmed(ref)

    def close(self) -> None:
        import ray

        try:
            ray.get([a.handle.bye.remote() for a in self.actors], timeout=5)
        except Exception:  # noqa: BLE001 - closing must not fail: the actors are killed next
            pass
        for actor in self.actors:
            try:
                ray.kill(actor.handle, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
        self.actors.clear()
        with self._lock:
            self._idle.clear()
            self._warming.clear()

    def __enter__(self) -> "RayPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- requests (call/stream/run_many: workers.PoolRequests, on this dispatcher) -------------------------
    def dispatcher(self, on_start: Callable[[object, int], None] | None = None) -> "RayDispatcher":
        return RayDispatcher(self, on_start or self.on_start)

    #: Test hook: called with (job key, actor pid) when a job is handed to an actor.
    on_start: Callable[[object, int], None] | None = None


def _limit(job: Job) -> float:
    """A job's deadline: ``per_item_timeout`` per step (a run_steps job carries its step list)."""
    steps = len(job.args[2]) if job.method == "run_steps" and len(job.args) > 2 else 1
    return job.per_item_timeout * max(1, steps)


class RayDispatcher:
    """The ``workers.Dispatcher`` contract over actors: ``(key, item)`` pairs, one ``StopJob`` per job."""

    def __init__(self, pool: RayPool, on_start):
        self.pool = pool
        self.on_start = on_start
        self.queue: deque = deque()  # (key, job, attempt)
        self.running: dict = {}  # ref -> (actor, key, job, deadline, attempt)
        self.postmortem: dict = {}  # hello ref -> (actor, key, job, attempt, ray's message, deadline)

    def submit(self, key, job: Job) -> None:
        self.queue.append((key, job, 0))

    def __iter__(self) -> Iterator[tuple[object, object]]:
        import ray

        running, postmortem = self.running, self.postmortem
        starved_since = None
        try:
            while self.queue or running or postmortem:
                self._start_queued()
                warming = self.pool.warming() if self.queue else {}
                waits = list(running) + list(postmortem) + list(warming)
                if not waits:
                    starved_since = starved_since or time.monotonic()
                    self._wait_while_starved(starved_since)
                    continue
                starved_since = None
                deadlines = ([d for (_, _, _, d, _) in running.values()] + [e[5] for e in postmortem.values()]
                             + [d for (_, d) in warming.values()])
                timeout = max(0.0, min(deadlines) - time.monotonic())
                ready, _ = ray.wait(waits, num_returns=1, timeout=timeout)
                if ready:
                    ready, _ = ray.wait(waits, num_returns=len(waits), timeout=0)
                for ref in ready:
                    if ref in running:
                        yield from self._finished(ref)
                    elif ref in postmortem:
                        yield from self._postmortem(ref)
                    else:
                        self.pool._warmed(ref)
                yield from self._expire(time.monotonic())
        finally:
            self._abandon()

    def _start_queued(self) -> None:
        """Hand queued jobs to idle actors, as many as there are idle actors."""
        while self.queue:
            actor = self.pool._take()
            if actor is None:
                break
            key, job, attempt = self.queue.popleft()
            ref = actor.handle.run.remote(job.method, job.args)
            self.running[ref] = (actor, key, job, time.monotonic() + _limit(job), attempt)
            if self.on_start:
                self.on_start(key, actor.pid)

    def _wait_while_starved(self, starved_since: float) -> None:
        """Nothing to wait on: every live actor is busy in another driver thread's dispatcher
        (``compare`` keeps several runs in flight on one pool). Pause briefly for one to come back, for
        as long as an actor may take to start; only then is the cluster lost."""
        pool = self.pool
        if pool.busy_elsewhere() and time.monotonic() - starved_since < pool.start_timeout:
            time.sleep(0.005)
            return
        raise ExecutorLost("no Ray worker could be started (is the cluster still up?)")

    def _expire(self, now: float) -> Iterator[tuple[object, object]]:
        """Past their deadlines: a running job's actor is killed (Ray restarts it) and the job answers
        a timeout; a dead actor not restarted in time loses the cluster; late starters are dropped."""
        import ray

        pool = self.pool
        for ref, (actor, key, job, deadline, _) in list(self.running.items()):
            if now >= deadline:
                del self.running[ref]
                pool.timeouts += 1
                try:
                    ray.kill(actor.handle, no_restart=False)  # Ray restarts it
                except Exception:  # noqa: BLE001 - already gone: the hello below finds out
                    pass
                pool._warm(actor)
                yield key, PassFailed(f"step exceeded its {_limit(job):g}s limit; worker killed", "timeout")
                yield key, StopJob
        for ref, entry in list(self.postmortem.items()):
            if now >= entry[5]:
                raise ExecutorLost(f"a Ray worker died and was not restarted within "
                                   f"{pool.start_timeout:.0f}s ({entry[4]})")
        pool._expire_warming()

    def _abandon(self) -> None:
        """A consumer that stops early (or an interrupt) leaves actors mid-job: restart them, so a
        stale result can never answer a later job."""
        import ray

        for actor, *_ in list(self.running.values()) + [(e[0],) for e in self.postmortem.values()]:
            try:
                ray.kill(actor.handle, no_restart=False)
            except Exception:  # noqa: BLE001
                pass
            self.pool._warm(actor)
        self.running.clear()
        self.postmortem.clear()

    def _finished(self, ref) -> Iterator[tuple[object, object]]:
        import ray

        actor, key, job, _, attempt = self.running.pop(ref)
        try:
            out = ray.get(ref)
        except ray.exceptions.RayActorError as exc:  # the process died mid-step: ask its next incarnation why
            hello = actor.handle.hello.remote()
            self.postmortem[hello] = (actor, key, job, attempt, _first_line(exc),
                                      time.monotonic() + self.pool.start_timeout)
            return
        except ray.exceptions.RayTaskError as exc:
            self.pool._release(actor)
            yield key, AutotuneError(_first_line(exc))
            yield key, StopJob
            return
        except ray.exceptions.RayError as exc:
            raise ExecutorLost(f"lost the Ray cluster: {_first_line(exc)}") from None
        self.pool._release(actor)
        for kind, payload in out:
            yield key, (payload if kind == "item" else rebuild_error(payload))
        yield key, StopJob

    def _postmortem(self, ref) -> Iterator[tuple[object, object]]:
        import ray

        actor, key, job, attempt, ray_message, deadline = self.postmortem.pop(ref)
        try:
            actor.pid, actor.node, words = ray.get(ref)
        except ray.exceptions.RayActorError:
            if time.monotonic() >= deadline:
                raise ExecutorLost(f"a Ray worker died and could not be restarted ({ray_message})") from None
            time.sleep(0.05)
            self.postmortem[actor.handle.hello.remote()] = (actor, key, job, attempt, ray_message, deadline)
            return
        self.pool.restarts += 1
        self.pool._release(actor)
        if not words and attempt == 0:
            # Killed from outside or its node lost: nothing says the step did it. Try once more.
            self.queue.appendleft((key, job, attempt + 1))
            return
        self.pool.crashes += 1
        yield key, PassFailed(f"worker died: {words}" if words else ray_message, "crash")
        yield key, StopJob
