"""Objectives: what "better module" means, as one number to minimise, and what it takes to claim it.

An objective owns its measurement. The tuner resolves it once (``get(name)``) and then only calls
the contract below; no code outside an objective's own file asks which objective it is.

* ``cost(state, ctx)``: the number for one module state (NaN when the state cannot be measured, e.g.
  XLA's default pipeline fails after it; ``failure(state, ctx)`` then says why).
* ``prepare(states, ctx)``: batch work ahead of ``cost`` (compiles in parallel), optional.
* ``default_cost(ctx)``: the number for XLA's default ordering, the baseline of every claim.
* ``confirm(state, cost, ctx)``: the evidence that ``state`` (found at ``cost``) beats the default, as a ``Claim``. A
  deterministic objective (an instruction count) needs none beyond the two numbers; a measured one
  (runtime) re-measures before anything is claimed.

Built in, one file each: ``final-ops`` (default), ``ops``, ``cost``, ``runtime``, and for a GPU
target ``kernels`` and ``roofline`` (read off the GPU-compiled module; ``docs/gpu.md``). Third parties
register more through the ``autotune.objectives`` entry-point group (``name = "pkg.mod:Class"``).

Why several (see ``docs/xla-mechanics.md`` section 6): the raw instruction count right after a sequence
rewards *not* running canonicalising expanders that the backend runs anyway, so it overstates wins;
``final-ops`` counts what the backend will actually see.
"""

from __future__ import annotations

import abc
import copy
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import ClassVar

from autotune.core import plugins
from autotune.core.metrics import Metrics
from autotune.core.options import EMPTY, CompilerOptions
from autotune.errors import BadInput

ENTRY_POINT_GROUP = "autotune.objectives"


@dataclass(frozen=True)
class Claim:
    """Whether a candidate beats XLA's default on an objective, with the evidence for it.

    ``ratio`` is candidate / default (below 1 is better). A measured objective fills ``low``/``high``
    (a confidence interval of the ratio at ``confidence``), ``min_effect`` (the smallest relative
    improvement it calls a win) and ``rounds``; ``win`` is True only when the whole interval lies
    below ``1 - min_effect``. ``message`` is one line for a person.
    """

    win: bool
    cost: float
    default_cost: float
    message: str
    ratio: float | None = None
    low: float | None = None
    high: float | None = None
    confidence: float | None = None
    min_effect: float | None = None
    rounds: int | None = None
    measured: bool = False
    #: The independent measurements (each its own inputs and buffers) the interval is over; None: one's rounds.
    instances: int | None = None
    #: A measured objective's compile times of the candidate and of the default (seconds; None: not timed).
    compile_seconds: float | None = None
    default_compile_seconds: float | None = None

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict | None) -> "Claim | None":
        if not data:
            return None
        fields = {k: data.get(k) for k in cls.__dataclass_fields__}
        fields["cost"] = math.nan if fields["cost"] is None else float(fields["cost"])
        fields["default_cost"] = math.nan if fields["default_cost"] is None else float(fields["default_cost"])
        fields["measured"] = bool(fields.get("measured"))
        return cls(**fields)


class ObjectiveContext:
    """What an objective may use while measuring the states of one module (one per run or check).

    It wraps the evaluator (cached metrics, module bytes, the default pipeline after a state) and
    remembers the final module of each state it was asked for, so a batch of candidates compiles
    its default pipelines once and in parallel.
    """

    def __init__(self, evaluator, root, default, seed: int = 0):
        self.evaluator = evaluator
        self.root = root
        self.default = default  # evaluator.Result of XLA's default ordering on ``root``
        self.seed = int(seed)
        self._final: dict = {}
        #: The compiler options the states are judged under (``core/options.py``; empty: XLA's default).
        #: Only a measured objective can see them; ``with_options`` gives the context of one candidate.
        self.options = EMPTY
        #: What a measured objective keeps across the candidates of one run (racing's best so far, the
        #: timing it saved), shared by every ``with_options`` view of this context.
        self.shared: dict = {}

    def with_options(self, options) -> "ObjectiveContext":
        """This context for candidates compiled with ``options`` (a view: the same evaluator, root,
        default, final modules and shared state)."""
        options = CompilerOptions.of(options)
        if options == self.options:
            return self
        view = copy.copy(self)
        view.options = options
        return view

    def candidate(self, state: str):
        """``state``'s module as the candidate compiles it: with this context's compiler options."""
        module = self.module(state)
        return module.with_options(self.options) if self.options else module

    @property
    def backend(self):
        return self.evaluator.pipeline

    @property
    def cache(self):
        return self.evaluator.cache

    @property
    def version(self) -> str:
        return self.evaluator.version

    def metrics(self, state: str) -> Metrics:
        return self.evaluator.metrics(state)

    def module(self, state: str):
        return self.evaluator.module(state, self.root.name)

    def finals(self, states: Sequence[str]) -> dict:
        """``state -> Result`` of XLA's default pipeline after each state (memoised, parallel)."""
        missing = [s for s in dict.fromkeys(states) if s not in self._final]
        if missing:
            for s, r in zip(missing, self.evaluator.final_many(missing)):
                self._final[s] = r
        return {s: self._final[s] for s in states}

    def final(self, state: str):
        return self.finals([state])[state]


class Objective(abc.ABC):
    """Base class of every objective (see the module docstring for the contract)."""

    name: ClassVar[str]
    description: ClassVar[str]
    unit: ClassVar[str] = "instructions"
    #: Same state, same cost, every time: a lower cost is a win without re-measuring, and a cached
    #: cost may be compared with any other. False for measured objectives (runtime).
    deterministic: ClassVar[bool] = True

    #: Whether it can judge compiler options (``core/options.py``): only a measured objective can.
    judges_options: ClassVar[bool] = False

    def prepare(self, states: Sequence[str], ctx: ObjectiveContext) -> None:
        """Do batch work for ``states`` before ``cost`` is asked for each (default: nothing)."""

    def retract(self, state: str, ctx: ObjectiveContext) -> None:
        """The search set ``state`` (under ``ctx.options``) aside after measuring it (its outputs differ from
        the default's): a measured objective no longer treats it as the best so far (default: nothing)."""

    def evidence(self, state: str, ctx: ObjectiveContext):
        """A measured objective's evidence on ``state`` against the default (``stats.RatioEvidence``: ratio
        and interval), for the screen (``core/screen.py``); None where the objective has none (default). While
        the screen runs, ``ctx.shared["screening"]`` holds its bar and its cap on sequential confirmation
        (``bar``, ``rounds``, ``extensions``): a measured objective times a straddling candidate further.
        """
        return None

    def search_notes(self, ctx: ObjectiveContext) -> dict | None:
        """What the objective did across a run's search that a report should say (runtime: racing's
        savings); None when nothing."""
        return None

    @abc.abstractmethod
    def cost(self, state: str, ctx: ObjectiveContext) -> float:
        """The objective's value for a module state; NaN when it cannot be measured."""

    @abc.abstractmethod
    def default_cost(self, ctx: ObjectiveContext) -> float:
        """The value for XLA's default ordering of the root module."""

    def failure(self, state: str, ctx: ObjectiveContext) -> str:
        """Why ``cost(state)`` was NaN, in one line."""
        final = ctx.final(state)
        return f"{ctx.backend.baseline} pipeline fails after this sequence: {final.message}"

    def confirm(self, state: str, cost: float, ctx: ObjectiveContext) -> Claim:
        """Deterministic objectives: the recorded costs are the evidence."""
        default = self.default_cost(ctx)
        ratio = cost / default if default else None
        if cost < default:
            message = f"{self.name} {default:g} -> {cost:g}"
        else:
            base = ctx.backend.baseline
            message = f"no sequence beat {base} on {self.name}: keep {base}"
        return Claim(cost < default, cost, default, message, ratio=ratio)


class MetricObjective(Objective):
    """An objective read off a module's metrics: raw (right after the sequence) or after XLA's
    default pipeline (``after_default``), which is what the backend will actually see."""

    after_default: ClassVar[bool] = True
    #: A figure the target's pipeline must report about its final module (``Metrics.compiled``,
    #: e.g. ``kernels`` on a GPU target); None when the objective reads only what every target has.
    requires: ClassVar[str | None] = None

    @abc.abstractmethod
    def from_metrics(self, metrics: Metrics) -> float:
        """The cost of a module from its metrics."""

    def prepare(self, states: Sequence[str], ctx: ObjectiveContext) -> None:
        if self.after_default:
            ctx.finals(states)

    def cost(self, state: str, ctx: ObjectiveContext) -> float:
        if not self.after_default:
            return self.from_metrics(ctx.metrics(state))
        final = ctx.final(state)
        return self.from_metrics(final.metrics) if final.ok else math.nan

    def default_cost(self, ctx: ObjectiveContext) -> float:
        # XLA's default module is already the output of the default pipeline: read it as it is.
        if self.requires and ctx.default.metrics.figure(self.requires) is None:
            raise BadInput(f"objective {self.name} reads the {self.requires} of the compiled module, which the "
                           f"{ctx.backend.target.name} target does not report (use a GPU target: --target h100)")
        return self.from_metrics(ctx.default.metrics)


class FigureObjective(MetricObjective):
    """An objective that is one of the target pipeline's figures of the final module
    (``Metrics.compiled``: ``kernels``, ``estimate_us``), NaN where it was not reported."""

    #: The figure's name in ``Metrics.compiled``.
    figure: ClassVar[str]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.requires = cls.figure

    def from_metrics(self, metrics: Metrics) -> float:
        value = metrics.figure(self.figure)
        return math.nan if value is None else float(value)


BUILTIN = {
    "final-ops": "autotune.core.objectives.final_ops:FinalOps",
    "ops": "autotune.core.objectives.ops:Ops",
    "cost": "autotune.core.objectives.cost:Cost",
    "kernels": "autotune.core.objectives.kernels:Kernels",
    "roofline": "autotune.core.objectives.roofline:Roofline",
    "runtime": "autotune.core.objectives.runtime:Runtime",
}


def available() -> dict[str, str]:
    """Objective name -> ``module:Class``: the built-ins, then third-party entry points."""
    return plugins.names(BUILTIN, ENTRY_POINT_GROUP)


def get(name: str | Objective, **options) -> Objective:
    """Resolve an objective by name (once, at the edge); an Objective instance passes through."""
    if isinstance(name, Objective):
        return name
    return plugins.load("objective", name, available())(**options)
