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
from dataclasses import dataclass, field, replace

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

    def answer(self, root: Module, sequence: Sequence[str], options=None) -> Module:
        """An answer's module, as a full compile takes it: ``sequence`` applied to ``root`` (XLA's default
        pipeline still runs after it) and compiled with ``options``; ``BadInput`` where a step fails."""
        module = root
        if sequence:
            result = self.evaluate(root, list(sequence))
            if not result.ok:
                raise BadInput(f"the answer's sequence fails at step {result.failed_at + 1}: {result.message}")
            module = self.module(result.state, root.name)
        return module.with_options(options) if options else module

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
        walk = _Walk([root for root, _ in items], [tuple(seq) for _, seq in items], self.pipeline.dispatcher())
        n = len(items)
        for i in range(n):
            self._advance(walk, i)
        for key, item in walk.dispatcher:
            if item is StopJob:
                self._step_ended(walk, key)
            else:
                self._store(key, item)
        elapsed = time.perf_counter() - t0
        self.stats.sequences += n
        self.stats.steps_cached += sum(walk.cached)
        self.cache.hits += sum(walk.cached)
        self.cache.misses += sum(walk.compiled)
        return [replace(walk.done[i], seconds=elapsed) for i in range(n)]

    def _advance(self, walk: "_Walk", i: int) -> None:
        """Walk sequence ``i`` through cached transitions as far as it goes; then it is done (every
        step cached, or one failed), waits on a step already being compiled, or submits its next step."""
        version = self.version
        seq, root = walk.seqs[i], walk.roots[i]
        while walk.pos[i] < len(seq):
            key = (walk.state[i], seq[walk.pos[i]])
            t = self.cache.transition(version, *key)
            if t is None or (t.status == "ok" and self.cache.state_metrics(version, t.dst) is None):
                break
            if walk.own.get(i) == key:
                walk.own.pop(i)
            else:
                walk.cached[i] += 1
            if t.status != "ok":
                walk.done[i] = Result(root, seq, t.status, None, None, walk.pos[i], t.message, walk.compiled[i],
                                      walk.cached[i])
                return
            walk.state[i] = t.dst
            walk.pos[i] += 1
        if walk.pos[i] == len(seq):
            walk.done[i] = Result(root, seq, "ok", walk.state[i], self.metrics(walk.state[i]), None, None,
                                  walk.compiled[i], walk.cached[i])
            return
        key = (walk.state[i], seq[walk.pos[i]])
        if key in walk.waiting:
            walk.waiting[key].append(i)
            return
        proto = self._state_proto(version, key[0])
        if proto is None:
            if key[0] == root:
                raise KeyError(f"the input module {key[0]} is no longer in the cache; load it again")
            # Its bytes were corrupt or lost: forget how we got there and walk again from the root.
            self.cache.forget_state(version, key[0])
            walk.state[i], walk.pos[i] = root, 0
            self._advance(walk, i)
            return
        walk.waiting[key] = [i]
        walk.dispatcher.submit(key, self.pipeline.step_job(proto, key[0], [key[1]]))

    def _step_ended(self, walk: "_Walk", key: tuple[str, str]) -> None:
        """A step's job ended: the first sequence waiting on it counts it as compiled, and every
        sequence waiting on it walks on (a job that ended without an answer is stored as a crash)."""
        waiters = walk.waiting.pop(key, [])
        if self.cache.transition(self.version, *key) is None:  # the job ended without an answer
            self._store(key, PassFailed("worker returned no result", "crash"))
        if waiters:
            walk.compiled[waiters[0]] += 1
            walk.own[waiters[0]] = key
        for i in waiters:
            self._advance(walk, i)

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


@dataclass
class _Walk:
    """Where each sequence of one ``evaluate_pairs`` batch stands (mutable, lives for one call).

    ``own`` marks a step a sequence itself just compiled (counted as compiled, not cached, when it
    walks over it); ``waiting`` maps a step being compiled to the sequences waiting on it.
    """

    roots: list[str]
    seqs: list[tuple[str, ...]]
    dispatcher: object
    state: list[str] = field(init=False)
    pos: list[int] = field(init=False)
    compiled: list[int] = field(init=False)
    cached: list[int] = field(init=False)
    done: dict[int, Result] = field(default_factory=dict)
    own: dict[int, tuple[str, str]] = field(default_factory=dict)
    waiting: dict[tuple[str, str], list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.roots)
        self.state = list(self.roots)
        self.pos, self.compiled, self.cached = [0] * n, [0] * n, [0] * n
