"""The Evaluator: a pass sequence in, a cached result out.

``evaluate(root, sequence)`` walks the sequence one step at a time through the cache's transition
table; only the uncached tail is compiled, in one worker job whose steps stream back and are stored
as they arrive (a crash in step 7 keeps steps 1-6). ``evaluate_many`` does the same for a batch and
spreads the tails over all workers, so independent sequences compile in parallel.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from autotune.core.backend import DEFAULT
from autotune.core.cache import Cache, Transition
from autotune.errors import BadInput, PassFailed
from autotune.core.metrics import Metrics
from autotune.core.module import Module
from autotune.core.workers import StopJob


@dataclass(frozen=True)
class Result:
    """The outcome of one sequence on one module."""

    module: str  # fingerprint of the (normalised) input
    sequence: tuple[str, ...]
    status: str  # ok | error | crash | timeout
    state: str | None  # fingerprint of the resulting module (None when a step failed)
    metrics: Metrics | None
    failed_at: int | None = None
    message: str | None = None
    compiled: int = 0  # steps compiled for this call
    cached: int = 0  # steps answered by the cache
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class EvaluatorStats:
    sequences: int = 0
    steps_compiled: int = 0
    steps_cached: int = 0
    compile_seconds: float = 0.0

    @property
    def hit_rate(self) -> float:
        total = self.steps_compiled + self.steps_cached
        return self.steps_cached / total if total else 0.0


class Evaluator:
    """Owns the cache and the pipeline's worker pool for one tuning session."""

    #: Bytes of recently used module protos kept decompressed: a search steps from the same few
    #: states again and again, and reading one back from the cache (zlib + SHA-256 check) costs
    #: ~15 ms for a module with 5 MB of weights baked in.
    PROTO_MEMO_BYTES = 256 << 20

    def __init__(self, pipeline, cache: Cache):
        self.pipeline = pipeline
        self.cache = cache
        self.stats = EvaluatorStats()
        self._protos: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self._proto_bytes = 0

    def _state_proto(self, version: str, fp: str) -> bytes | None:
        """``cache.state_proto`` through a small LRU of decompressed protos (see PROTO_MEMO_BYTES)."""
        key = (version, fp)
        proto = self._protos.get(key)
        if proto is not None:
            self._protos.move_to_end(key)
            return proto
        proto = self.cache.state_proto(version, fp)
        if proto is not None and len(proto) <= self.PROTO_MEMO_BYTES // 4:
            self._protos[key] = proto
            self._proto_bytes += len(proto)
            while self._proto_bytes > self.PROTO_MEMO_BYTES:
                self._proto_bytes -= len(self._protos.popitem(last=False)[1])
        return proto

    @property
    def version(self) -> str:
        return self.pipeline.version

    # ---- modules ---------------------------------------------------------------------------------
    def prepare(self, module: Module) -> Module:
        """The normalised root of a loaded module (the compiler's import round trip, ``Backend.normalize``; cached)."""
        version = self.version
        fp = self.cache.root(version, module.fingerprint)
        if fp is not None:
            proto = self.cache.state_proto(version, fp)
            if proto is not None and self.cache.state_metrics(version, fp) is not None:
                return Module(module.name, proto, fp)
        try:
            root = self.pipeline.normalize(module)
        except PassFailed as exc:  # the input itself does not go through the compiler's importer
            raise BadInput(f"{module.name}: {exc}") from None
        self.cache.put_state(version, root.fingerprint, root.proto, self.pipeline.measure(root))
        self.cache.put_root(version, module.fingerprint, root.fingerprint, module.name)
        return root

    def module(self, fp: str, name: str = "module") -> Module:
        proto = self.cache.state_proto(self.version, fp)
        if proto is None:
            raise KeyError(f"state {fp} is not in the cache")
        return Module(name, proto, fp)

    def metrics(self, fp: str) -> Metrics:
        metrics = self.cache.state_metrics(self.version, fp)
        if metrics is None:
            raise KeyError(f"state {fp} is not in the cache")
        return metrics

    def default(self, root: Module) -> Result:
        """The compiler's default ordering on ``root`` (cached as the pseudo-action ``DEFAULT``)."""
        return self.evaluate_pairs([(root.fingerprint, (DEFAULT,))])[0]

    def final(self, state: str) -> Result:
        """A state followed by the compiler's default pipeline: what the backend will actually compile."""
        return self.final_many([state])[0]

    def final_many(self, states: Sequence[str]) -> list[Result]:
        """``final`` for several states, compiled in parallel."""
        return self.evaluate_pairs([(s, (DEFAULT,)) for s in states])

    def steps(self, pairs: Sequence[tuple[str, str]]) -> list[Result]:
        """One action applied to one state, for each ``(state fingerprint, action)`` pair, in parallel.

        The building block of an exhaustive search over distinct states: sequences that reach the
        same module share everything after it, so a breadth-first walk expands each state once.
        """
        actions = self.pipeline.check_passes([a for _, a in pairs])
        return self.evaluate_pairs([(s, (a,)) for (s, _), a in zip(pairs, actions)])

    # ---- sequences ----------------------------------------------------------------------------------
    def evaluate(self, root: Module, sequence: Sequence[str]) -> Result:
        return self.evaluate_many(root, [sequence])[0]

    def evaluate_many(self, root: Module, sequences: Sequence[Sequence[str]]) -> list[Result]:
        seqs = [self.pipeline.check_passes(s) for s in sequences]
        return self.evaluate_pairs([(root.fingerprint, s) for s in seqs])

    def evaluate_pairs(self, items: Sequence[tuple[str, tuple[str, ...]]]) -> list[Result]:
        """Evaluate (start state fingerprint, checked sequence) pairs, one step per worker job, cache
        consulted first. The start states may differ (a fleet evaluates one sequence on many roots);
        sequences must already be ``check_passes``-ed (or pseudo-actions).

        Each sequence advances through cached transitions as far as it can; its next uncached step
        becomes a job. Identical steps (same state, same action) wanted by several sequences are
        compiled once; when a job's result is stored, every sequence waiting on it walks on. Jobs
        go to whichever worker is free, so independent sequences compile in parallel.
        """
        t0 = time.perf_counter()
        version = self.version
        n = len(items)
        roots = [root for root, _ in items]
        seqs = [tuple(seq) for _, seq in items]
        state = list(roots)
        pos = [0] * n
        compiled = [0] * n
        cached = [0] * n
        done: dict[int, Result] = {}
        own: dict[int, tuple[str, str]] = {}  # a step this sequence itself just compiled
        waiting: dict[tuple[str, str], list[int]] = {}
        dispatcher = self.pipeline.dispatcher()

        def advance(i: int) -> None:
            seq = seqs[i]
            while pos[i] < len(seq):
                key = (state[i], seq[pos[i]])
                t = self.cache.transition(version, *key)
                if t is None or (t.status == "ok" and self.cache.state_metrics(version, t.dst) is None):
                    break
                if own.get(i) == key:
                    own.pop(i)
                else:
                    cached[i] += 1
                if t.status != "ok":
                    done[i] = Result(roots[i], seq, t.status, None, None, pos[i], t.message, compiled[i], cached[i])
                    return
                state[i] = t.dst
                pos[i] += 1
            if pos[i] == len(seq):
                done[i] = Result(roots[i], seq, "ok", state[i], self.metrics(state[i]), None, None, compiled[i], cached[i])
                return
            key = (state[i], seq[pos[i]])
            if key in waiting:
                waiting[key].append(i)
                return
            proto = self._state_proto(version, key[0])
            if proto is None:
                if key[0] == roots[i]:
                    raise KeyError(f"the input module {key[0]} is no longer in the cache; load it again")
                # Its bytes were corrupt or lost: forget how we got there and walk again from the root.
                self.cache.forget_state(version, key[0])
                state[i], pos[i] = roots[i], 0
                advance(i)
                return
            waiting[key] = [i]
            dispatcher.submit(key, self.pipeline.step_job(proto, key[0], [key[1]]))

        for i in range(n):
            advance(i)
        for key, item in dispatcher:
            if item is StopJob:
                waiters = waiting.pop(key, [])
                if self.cache.transition(version, *key) is None:  # the job ended without an answer
                    self._store(key, PassFailed("worker returned no result", "crash"))
                if waiters:
                    compiled[waiters[0]] += 1
                    own[waiters[0]] = key
                for i in waiters:
                    advance(i)
                continue
            self._store(key, item)
        elapsed = time.perf_counter() - t0
        self.stats.sequences += n
        self.stats.steps_cached += sum(cached)
        self.cache.hits += sum(cached)
        self.cache.misses += sum(compiled)
        return [replace(done[i], seconds=elapsed) for i in range(n)]

    def _store(self, key: tuple[str, str], item) -> None:
        """Record one step's outcome (a StepOut or a PassFailed) as a transition and a state."""
        version = self.version
        src, action = key
        if isinstance(item, PassFailed):
            self.cache.put_transition(version, Transition(src, action, None, item.status, str(item), 0.0))
        elif isinstance(item, BaseException):
            raise item
        elif item.status == "ok":
            # item.proto is None when the step changed nothing (the state is the stored source).
            if item.proto is not None and self.cache.state_metrics(version, item.fingerprint) is None:
                self.cache.put_state(version, item.fingerprint, item.proto, Metrics.from_dict(item.metrics))
            self.cache.put_transition(version, Transition(src, action, item.fingerprint, "ok", None, item.seconds))
        else:
            self.cache.put_transition(version, Transition(src, action, None, "error", item.message, item.seconds))
        self.stats.steps_compiled += 1
        self.stats.compile_seconds += getattr(item, "seconds", 0.0)
