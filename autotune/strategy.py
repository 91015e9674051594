"""The strategy plugin interface.

A strategy proposes pass sequences and learns from their costs. It gets an ``Evaluate`` callable
(sequence -> cost, lower is better), the ``SearchSpace`` and a seed; it never touches the
compiler or the cache. The tuning loop in ``autotune.core.tuner`` owns budget accounting: when the
budget is spent, ``Evaluate`` raises ``BudgetExhausted`` and the strategy's ``minimize`` returns.

Plugins are one file each in ``strategies/`` (the ``autotune.strategies`` package), discovered by
scanning that package's source for ``class ...(Strategy)`` definitions *without importing them*,
so ``autotune strategies`` never imports torch. Third-party plugins register through the
``autotune.strategies`` entry-point group (``name = "package.module:Class"``).
"""

from __future__ import annotations

import abc
import ast
import threading
import importlib
import importlib.metadata
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from autotune.core.options import EMPTY, UNSET, CompilerOptions, OptionDim
from autotune.errors import BadInput, UnknownName


class BudgetExhausted(Exception):
    """Raised by ``Evaluate`` once the evaluation budget (or the time limit) is spent."""


@dataclass(frozen=True)
class SearchSpace:
    """Variable-length sequences over ``actions``, of length ``min_length``..``max_length``.

    ``encode``/``decode`` map a sequence to a fixed-length integer vector of ``max_length``
    slots, where value ``len(actions)`` (``stop``) ends the sequence: the encoding the
    vector-based optimisers (optuna, nevergrad) search over.
    """

    actions: tuple[str, ...]
    max_length: int
    min_length: int = 1
    #: The target whose pipeline judges the costs (``Target.key``): a learned policy trained for
    #: another target is refused (its notion of a good ordering belongs to another compiler).
    target: str = "cpu"
    #: The compiler options searched beside the sequence (``core/options.py``; empty: the pass order
    #: alone). Each dimension's choices are ``UNSET`` (the compiler's default) and its values.
    options: tuple[OptionDim, ...] = ()
    #: False for ``--space options``: the sequence is not searched (every candidate's is empty).
    passes: bool = True

    def __post_init__(self):
        if not self.actions:
            raise BadInput("the search space has no actions")
        if self.max_length < 1:
            raise BadInput("--max-length must be at least 1")
        if not 0 <= self.min_length <= self.max_length:
            raise BadInput("min_length must be between 0 and max_length")

    @property
    def n_actions(self) -> int:
        return len(self.actions)

    @property
    def stop(self) -> int:
        return len(self.actions)

    def index(self, action: str) -> int:
        return self.actions.index(action)

    def decode(self, codes: Sequence[int]) -> tuple[str, ...]:
        """Integer slots -> sequence: read until the first ``stop`` (values are taken mod n+1); always
        empty when the sequence is not searched (``passes`` False)."""
        if not self.passes:
            return ()
        out: list[str] = []
        for code in codes[: self.max_length]:
            code = int(code) % (self.n_actions + 1)
            if code == self.stop:
                break
            out.append(self.actions[code])
        if len(out) < self.min_length:
            # Too short: take the first slots regardless of stop markers, skipping them.
            out = [self.actions[int(c) % self.n_actions] for c in codes[: self.min_length]]
        return tuple(out)

    def encode(self, sequence: Sequence[str]) -> tuple[int, ...]:
        """Sequence -> ``max_length`` slots, padded with ``stop``."""
        if len(sequence) > self.max_length:
            raise BadInput(f"sequence of length {len(sequence)} exceeds max_length {self.max_length}")
        codes = [self.index(a) for a in sequence]
        return tuple(codes + [self.stop] * (self.max_length - len(codes)))

    def random_sequence(self, rng: random.Random) -> tuple[str, ...]:
        if not self.passes:
            return ()
        length = rng.randint(max(1, self.min_length), self.max_length)
        return tuple(rng.choice(self.actions) for _ in range(length))

    #: Options a random draw changes on average: most options leave most modules alone and some make
    #: them much slower, so a draw that changed every option at once would rarely tell which one paid.
    RANDOM_CHANGES = 1.5

    def random_options(self, rng: random.Random) -> CompilerOptions:
        """A random option set: each dimension changed with probability ``RANDOM_CHANGES / dims``, to a
        value drawn uniformly (empty when no options are searched)."""
        if not self.options:
            return EMPTY
        p = min(1.0, self.RANDOM_CHANGES / len(self.options))
        return CompilerOptions.of({d.name: rng.choice(d.values) for d in self.options if rng.random() < p})

    def options_from(self, choices) -> CompilerOptions:
        """An option set from one choice per dimension (a mapping name -> value, ``UNSET`` for the
        compiler's default; names not searched are ignored)."""
        names = {d.name for d in self.options}
        return CompilerOptions.of({k: v for k, v in dict(choices).items() if k in names and v is not UNSET})


@dataclass(frozen=True)
class Trial:
    """One evaluation as a strategy sees it."""

    sequence: tuple[str, ...]
    cost: float
    ok: bool  # False: a step failed (cost is then the failure penalty)
    options: CompilerOptions = EMPTY  # the compiler options it was judged under


class Evaluate(abc.ABC):
    """What a strategy calls to score sequences. Provided by the tuner; never built by strategies."""

    @abc.abstractmethod
    def __call__(self, sequence: Sequence[str], options: CompilerOptions | None = None) -> float:
        """Cost of one sequence (lower is better), compiled with ``options`` (None: the compiler's
        default). Raises ``BudgetExhausted`` when spent."""

    @abc.abstractmethod
    def many(self, sequences: Sequence[Sequence[str]], options: Sequence[CompilerOptions] | None = None) -> list[float]:
        """Costs of several sequences, compiled in parallel across workers; ``options``: one option set
        per sequence (None: the compiler's default for all).

        Evaluates at most the remaining budget; if the batch is larger, the costs of the
        evaluated prefix are recorded and ``BudgetExhausted`` is raised.
        """

    @property
    @abc.abstractmethod
    def remaining(self) -> int:
        """Evaluations left in the budget."""

    @property
    @abc.abstractmethod
    def failure_cost(self) -> float:
        """The finite cost returned for a sequence whose step failed (worse than doing nothing)."""

    @property
    @abc.abstractmethod
    def history(self) -> list[Trial]:
        """Every trial so far, in order."""

    @property
    @abc.abstractmethod
    def empty_cost(self) -> float:
        """Cost of the module as it is (the empty sequence), free of charge: no budget is spent."""

    def guarded(self, sequence: Sequence[str]) -> bool:
        """Whether ``sequence``'s failure cost is the GPU guard's (the pass ran, the state adds kernel
        launches: never an answer, but a step-by-step strategy may go on from it), not a failed pass."""
        return False


class BudgetShare(Evaluate):
    """``evaluate`` limited to ``n`` more evaluations (``BudgetExhausted`` after them): a strategy that
    spends part of its budget one way and the rest another (``ppo`` orders passes with its policy, then
    searches compiler options by ``coordinate_descent``). Everything else is ``evaluate``'s."""

    def __init__(self, evaluate: Evaluate, n: int):
        self._inner, self._left = evaluate, int(n)

    def __call__(self, sequence: Sequence[str], options: CompilerOptions | None = None) -> float:
        return self.many([sequence], None if options is None else [options])[0]

    def many(self, sequences: Sequence[Sequence[str]], options: Sequence[CompilerOptions] | None = None) -> list[float]:
        if self._left <= 0:
            raise BudgetExhausted()
        take = list(sequences)[: self._left]
        costs = self._inner.many(take, None if options is None else list(options)[: len(take)])
        self._left -= len(take)
        if len(take) < len(sequences):
            raise BudgetExhausted()
        return costs

    @property
    def remaining(self) -> int:
        return min(self._left, self._inner.remaining)

    @property
    def failure_cost(self) -> float:
        return self._inner.failure_cost

    @property
    def history(self) -> list[Trial]:
        return self._inner.history

    @property
    def empty_cost(self) -> float:
        return self._inner.empty_cost

    def guarded(self, sequence: Sequence[str]) -> bool:
        return self._inner.guarded(sequence)

    def __getattr__(self, name: str):  # what a run's Evaluate adds (metrics, input_metrics)
        return getattr(self._inner, name)


def coordinate_descent(evaluate: Evaluate, space: SearchSpace, sequence: tuple[str, ...], cost: float,
                       start: CompilerOptions = EMPTY) -> None:
    """Compiler options by coordinate descent after ``sequence`` (found at ``cost``): each option in turn
    tried at every value not scored yet (one ``evaluate.many``, in parallel) with the others held, the
    best kept when it is cheaper; sweeps repeat until one changes nothing. Then, as greedy restarts, the
    descent starts again from the cheapest option set scored but not descended from, until the budget
    ends or no option set is left to try. ``greedy``'s way with options, and ``ppo``'s fallback (its
    policy orders passes, not options). ``start``: the option set ``cost`` was found with (a warm start,
    ``Strategy.warm``); the descent begins there."""
    # option set (sorted items) -> cost; what the run already scored after ``sequence`` (the screen's
    # candidates) is not paid for twice
    scored: dict[tuple, float] = {t.options.items: finite(t.cost, evaluate.failure_cost)
                                  for t in evaluate.history if t.sequence == tuple(sequence)}
    scored[start.items] = cost
    expanded: set[tuple] = set()
    point: tuple | None = start.items
    while point is not None:
        _descend_options(evaluate, space, sequence, point, scored, expanded)
        frontier = sorted((c, p) for p, c in scored.items() if p not in expanded)
        point = frontier[0][1] if frontier else None


def _descend_options(evaluate: Evaluate, space: SearchSpace, sequence: tuple[str, ...], start: tuple,
                     scored: dict, expanded: set) -> None:
    """One coordinate descent from the option set ``start`` (see ``coordinate_descent``)."""
    current, best = start, scored[start]
    improved = True
    while improved:
        improved = False
        expanded.add(current)
        for dim in space.options:
            held = dict(current)
            points = [space.options_from({**held, dim.name: v}).items for v in dim.choices if v != held.get(dim.name)]
            points = [p for p in dict.fromkeys(points) if p not in scored]
            if not points:
                continue
            costs = evaluate.many([sequence] * len(points), [CompilerOptions(p) for p in points])
            for p, c in zip(points, costs):
                scored[p] = finite(c, evaluate.failure_cost)
            pick = min(points, key=lambda p: scored[p])
            if scored[pick] < best:
                current, best, improved = pick, scored[pick], True
                expanded.add(current)


class Strategy(abc.ABC):
    """Base class of all strategies. Subclasses set ``name`` and implement ``minimize``.

    Constructor keyword options come from the CLI (``--option key=value`` and strategy-specific
    flags such as ``--sampler``/``--optimizer``); unknown options must raise ``BadInput``.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    #: How it searches compiler options (``SearchSpace.options``), in words for the run's report.
    options_by: ClassVar[str] = "jointly with the sequence"

    #: Where to start (``warm``): a point already evaluated, e.g. the screen's best (``core/screen.py``).
    start: Trial | None = None

    def __init__(self, **options):
        if options:
            raise BadInput(f"strategy '{self.name}' takes no option(s) {', '.join(sorted(options))}")

    def warm(self, start: Trial) -> None:
        """Start from ``start`` (a point the run has evaluated, its cost known): called before
        ``minimize``. Each strategy uses it in its library's way (optuna ``enqueue_trial``, nevergrad
        ``suggest``, greedy descends from it, random draws half its candidates around it); the default
        keeps it in ``start``. The point stays a trial of the run either way: the answer may be it."""
        self.start = start

    @abc.abstractmethod
    def minimize(self, evaluate: Evaluate, space: SearchSpace, seed: int) -> None:
        """Search until ``evaluate`` raises ``BudgetExhausted`` (the tuner catches it) or done."""


class AskTellStrategy(Strategy):
    """The shared loop of ask/tell optimisers: ask a batch, evaluate it in parallel, tell the costs."""

    #: Sequences asked per round; more keeps all workers busy, fewer learns faster.
    batch_size: ClassVar[int] = 4

    @abc.abstractmethod
    def setup(self, space: SearchSpace, seed: int, budget: int) -> None:
        """Create the underlying optimiser."""

    @abc.abstractmethod
    def ask(self, n: int) -> list:
        """``n`` candidates (opaque tokens the strategy can later map back)."""

    @abc.abstractmethod
    def sequence_of(self, candidate) -> tuple[str, ...]:
        """The pass sequence a candidate stands for."""

    def options_of(self, candidate) -> CompilerOptions:
        """The compiler options a candidate stands for (default: the compiler's own)."""
        return EMPTY

    @abc.abstractmethod
    def tell(self, candidate, cost: float) -> None:
        """Report a candidate's cost."""

    def warm_up(self, start: Trial) -> None:
        """Tell the optimiser where to start (``Strategy.warm``), after ``setup`` (default: nothing)."""

    def minimize(self, evaluate: Evaluate, space: SearchSpace, seed: int) -> None:
        self.setup(space, seed, evaluate.remaining)
        if self.start is not None:
            self.warm_up(self.start)
        while evaluate.remaining > 0:
            candidates = self.ask(min(self.batch_size, evaluate.remaining))
            if not candidates:
                return
            costs = evaluate.many([self.sequence_of(c) for c in candidates], [self.options_of(c) for c in candidates])
            for candidate, cost in zip(candidates, costs):
                self.tell(candidate, cost)


class ArchiveAskTell(AskTellStrategy):
    """Ask/tell over an optimiser library, with the bookkeeping done once, here.

    Many optimiser candidates decode to the same sequence (slots after STOP are ignored, a mutation
    may hit an unused slot). The archive (``known``: (sequence, options) -> cost) answers a candidate whose
    sequence and options are already scored at once, without spending budget; ``ask`` keeps asking (up to
    ``max_retries`` library candidates per wanted one) for fresh sequences, and once the tries left
    only just cover the candidates still wanted it takes anything, so it never comes back empty and
    a run always spends its budget. Candidates asked twice in one batch are scored once and told
    to both. Costs are made finite (the failure cost) before a library sees them.

    As nevergrad's base optimiser keeps its bookkeeping in public ``ask``/``tell`` and lets
    subclasses override ``_internal_*``, a subclass here only says how to ask its library for one
    candidate, which sequence a candidate stands for, and how to tell it a cost.
    """

    max_retries: int = 20

    @abc.abstractmethod
    def _internal_ask(self):
        """One candidate from the library (an opaque token)."""

    @abc.abstractmethod
    def _internal_sequence(self, token) -> tuple[str, ...]:
        """The pass sequence a library candidate stands for (called once per token)."""

    @abc.abstractmethod
    def _internal_tell(self, token, cost: float) -> None:
        """Report a finite cost for a library candidate."""

    def _internal_options(self, token) -> CompilerOptions:
        """The compiler options a library candidate stands for (default: the compiler's own; a strategy
        that searches ``SearchSpace.options`` overrides it)."""
        return EMPTY

    def minimize(self, evaluate: Evaluate, space: SearchSpace, seed: int) -> None:
        self._failure_cost = evaluate.failure_cost
        # What the run evaluated before (the screen's candidates): answered at once, never paid for twice.
        self.known: dict[tuple, float] = {(t.sequence, t.options): finite(t.cost, self._failure_cost)
                                          for t in evaluate.history}
        self._open: list = []  # the current batch's candidates not told yet
        super().minimize(evaluate, space, seed)

    def ask(self, n: int) -> list:
        """Up to ``n`` candidates ``((sequence, options), [tokens])``, preferring unscored ones."""
        batch: dict[tuple, list] = {}
        tries = n * self.max_retries
        for attempt in range(tries):
            if len(batch) >= n:
                break
            token = self._internal_ask()
            point = (self._internal_sequence(token), self._internal_options(token))
            if point in batch:  # asked twice in this batch: scored once, told to both
                batch[point].append(token)
            elif point in self.known and tries - attempt > n - len(batch):
                self._internal_tell(token, self.known[point])
            else:
                batch[point] = [token]
        self._open = list(batch.items())
        return self._open[:]

    def sequence_of(self, candidate) -> tuple[str, ...]:
        return candidate[0][0]

    def options_of(self, candidate) -> CompilerOptions:
        return candidate[0][1]

    def tell(self, candidate, cost: float) -> None:
        point, tokens = candidate
        cost = finite(cost, self._failure_cost)
        self.known[point] = cost
        self._open = [c for c in self._open if c is not candidate]
        for token in tokens:
            self._internal_tell(token, cost)


# ---- discovery ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StrategyInfo:
    name: str
    target: str  # "module:Class"
    description: str = ""
    source: str = "builtin"  # builtin | entry-point


def _strategies_dir() -> Path:
    import autotune.strategies as pkg

    return Path(next(iter(pkg.__path__)))


#: ``ast.parse`` one thread at a time: CPython 3.11's AST constructor is not thread-safe ("AST constructor
#: recursion depth mismatch" failed one of ``compare``'s concurrent runs on Ray once, in a fresh clone at d771860).
_PARSE_LOCK = threading.Lock()


def _scan_file(path: Path, package: str) -> list[StrategyInfo]:
    """Find Strategy subclasses in a plugin file by reading its syntax tree (no import)."""
    try:
        with _PARSE_LOCK:
            tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return []
    found = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
        if not bases & {"Strategy", "AskTellStrategy", "ArchiveAskTell"}:
            continue
        name = desc = None
        for stmt in node.body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in targets:
                    if isinstance(t, ast.Name) and isinstance(stmt.value, ast.Constant):
                        if t.id == "name":
                            name = stmt.value.value
                        elif t.id == "description":
                            desc = stmt.value.value
        if name:
            found.append(StrategyInfo(name, f"{package}.{path.stem}:{node.name}", desc or ""))
    return found


def available() -> dict[str, StrategyInfo]:
    """Every strategy: built-in plugin files, then entry points (which may not shadow built-ins)."""
    out: dict[str, StrategyInfo] = {}
    for path in sorted(_strategies_dir().glob("*.py")):
        if path.name.startswith("_"):
            continue
        for info in _scan_file(path, "autotune.strategies"):
            out.setdefault(info.name, info)
    for ep in importlib.metadata.entry_points(group="autotune.strategies"):
        out.setdefault(ep.name, StrategyInfo(ep.name, ep.value, "", "entry-point"))
    return out


def load(name: str) -> type[Strategy]:
    """Import and return the strategy class registered as ``name``."""
    infos = available()
    if name not in infos:
        raise UnknownName("strategy", name, list(infos))
    module_name, _, attr = infos[name].target.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise BadInput(f"strategy '{name}' cannot be loaded: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Strategy)):
        raise BadInput(f"strategy '{name}' ({infos[name].target}) is not a Strategy subclass")
    return cls


def create(name: str, **options) -> Strategy:
    return load(name)(**options)


def positive_int(strategy: str, key: str, value) -> int:
    """Validate an integer option of a strategy (booleans are not integers here)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadInput(f"{strategy}: {key} must be a positive integer, not {value!r}")
    return value


def finite(cost: float, fallback: float) -> float:
    """Optimisers dislike inf/nan: map them to ``fallback``."""
    return fallback if cost is None or math.isnan(cost) or math.isinf(cost) else cost
