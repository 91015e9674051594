"""The screen: every single option value raced against XLA's default before a strategy searches.

Why. In the joint space of a dozen options (51 values on the CPU) and the pass order, a budget of
20-30 random-ish draws often never isolates the one option that pays: ResNet-50's YNNPACK reduce
fusions (0.82-0.94 alone) were found in 3 of 6 nevergrad runs at budget 20, and the winners found
were worse combinations. A measured objective can afford to ask each value once: the screen does,
then combines what paid, and only then hands the whole space to the strategy, warm-started from the
screen's best (``Strategy.warm``).

What it does, in the run's budget (each candidate one evaluation, like any trial, recorded and
replayed on ``--resume``):

1. **singles**: each value of each dimension (``SearchSpace.options``, in the backend's order, with the
   per-site dimensions ``site:...``, hottest first, interleaved: ``singles``) on the empty sequence, alone, raced
   against XLA's default with the objective's own measurement (runtime: ``Runtime.cost`` with the bar
   at ``1 - min_effect``, not at the best so far). At most ``share`` of the budget is spent here,
   so that the strategy keeps ``1 - SHARE`` of it; what does not fit is said (``left_out``).
2. **sequential confirmation**: a value whose interval (``stats.RatioEvidence``) straddles the bar is
   timed ``EXTRA_ROUNDS`` more rounds, up to ``MAX_EXTENSIONS`` times (``stats.sequential``, done by the
   objective before its measurement is cached, so the trial's cost is the joined figure and a resumed run
   replays it), instead of being dropped or taken on one draw; rounds are not evaluations (no budget),
   their seconds are in the timing notes.
3. **combination**: the values that paid, best first, added one at a time to the best (one per
   dimension), each combination timed as a new candidate and kept only when it is cheaper; at most
   ``MAX_COMBINED`` such evaluations.

Nothing here is claimed: the screen's candidates are trials like any other, and the run's answer is
still the best trial validated on two draws of inputs and confirmed by the objective (``loop.choose``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Protocol

from autotune.core.options import CompilerOptions
from autotune.core.stats import RatioEvidence
from autotune.strategy import BudgetExhausted, Evaluate, SearchSpace, Trial

#: Fraction of the budget the screen may spend (singles and combinations): the strategy keeps the rest.
SHARE = 2 / 3
#: Rounds added to a straddling candidate per extension, and the extensions allowed (the cap).
EXTRA_ROUNDS = 16
MAX_EXTENSIONS = 2
#: Combinations of paying values timed at most.
MAX_COMBINED = 3


class Judge(Protocol):
    """What the screen asks of the run about a candidate on the empty sequence with ``options``, after
    its evaluation: the objective's evidence against the default (its sequential confirmation included)."""

    def evidence(self, options: CompilerOptions) -> RatioEvidence | None: ...


def policy(bar: float) -> dict:
    """What a measured objective reads while the screen runs (``ctx.shared["screening"]``): the bar, and the
    cap on sequential confirmation (``stats.sequential``)."""
    return {"bar": float(bar), "rounds": EXTRA_ROUNDS, "extensions": MAX_EXTENSIONS}


@dataclass(frozen=True)
class Probe:
    """One screened candidate: its option set, cost, evidence (None: it failed or has none) and the
    extra rounds its sequential confirmation took."""

    options: CompilerOptions
    cost: float
    evidence: RatioEvidence | None
    extra_rounds: int = 0
    combined: bool = False

    def to_dict(self) -> dict:
        return {"options": self.options.as_dict(), "cost": None if not math.isfinite(self.cost) else self.cost,
                "evidence": None if self.evidence is None else asdict(self.evidence),
                "extra_rounds": self.extra_rounds, "combined": self.combined}


@dataclass(frozen=True)
class ScreenResult:
    """What the screen did: every probe in order, the values it could not afford (``left_out``), the
    bar, and the best point it hands to the strategy (None when nothing beat the default)."""

    probes: tuple[Probe, ...]
    singles: int
    left_out: int
    bar: float
    best: Trial | None = None
    stopped: str | None = None  # why it ended early (the budget or the time limit)
    paid: tuple[str, ...] = field(default=())

    @property
    def evaluations(self) -> int:
        return len(self.probes)

    def to_dict(self) -> dict:
        """The run's ``search_notes["screen"]``."""
        return {"singles": self.singles, "screened": sum(not p.combined for p in self.probes),
                "left_out": self.left_out, "combined": sum(p.combined for p in self.probes),
                "evaluations": self.evaluations, "bar": self.bar,
                "extended": sum(p.extra_rounds > 0 for p in self.probes),
                "extra_rounds": sum(p.extra_rounds for p in self.probes), "paid": list(self.paid),
                "best": None if self.best is None else {"options": self.best.options.as_dict(),
                                                        "cost": self.best.cost},
                "stopped": self.stopped, "probes": [p.to_dict() for p in self.probes]}


#: Per-site decisions (``site:...`` dimensions, the module's hottest first) are screened one after every
#: this many of the backend's option values, so that a budget too small for all singles still tries both
#: kinds: the module's hot spots and XLA's module-wide switches.
SITE_EVERY = 2


def singles(space: SearchSpace) -> list[CompilerOptions]:
    """Every single option value of ``space``, one option set each: the backend's options in their order,
    with a per-site decision after every ``SITE_EVERY`` of them (the rest of either kind at the end)."""
    plain = [CompilerOptions.of({d.name: v}) for d in space.options if not d.name.startswith("site:") for v in d.values]
    sited = [CompilerOptions.of({d.name: v}) for d in space.options if d.name.startswith("site:") for v in d.values]
    out: list[CompilerOptions] = []
    while plain or sited:
        out += plain[:SITE_EVERY] + sited[:1]
        plain, sited = plain[SITE_EVERY:], sited[1:]
    return out


def affordable(budget: int, n: int, share: float = SHARE) -> int:
    """How many of ``n`` singles a budget of ``budget`` evaluations screens: all when they fit in
    ``share`` of it, else that share (at least one when the budget allows any)."""
    return max(0, min(n, math.floor(budget * share), budget - 1))


def screen(evaluate: Evaluate, space: SearchSpace, judge: Judge, bar: float,
           progress: Callable[[str], None] = lambda line: None, share: float = SHARE,
           max_combined: int = MAX_COMBINED) -> ScreenResult:
    """Screen ``space``'s option values with ``evaluate`` (the run's: budget, records, replay), judged by
    ``judge`` against ``bar`` (``1 - min_effect``); see the module doc. ``progress`` hears one line per
    step. Returns what was done; ``BudgetExhausted`` ends it early (said in ``stopped``)."""
    values = singles(space)
    budget = evaluate.remaining
    n = affordable(budget, len(values), share)
    todo, spend = values[:n], math.floor(budget * share)
    probes: list[Probe] = []
    stopped = None
    try:
        for i, options in enumerate(todo):
            progress(f"{i + 1}/{len(todo)} {options.describe()}")
            probes.append(_probe(evaluate, judge, options))
            progress(f"{i + 1}/{len(todo)} {options.describe()}: {_said(probes[-1], bar)}")
        paid = sorted((p for p in probes if p.evidence is not None and p.evidence.paid(bar)), key=_ratio)
        best = paid[0] if paid else None
        combined = 0
        for p in paid[1:]:
            if best is None or combined >= max_combined or len(probes) >= spend:
                break
            if set(p.options.names) & set(best.options.names):
                continue
            options = best.options.merged(p.options)
            progress(f"combining: {options.describe()}")
            probe = _combined(_probe(evaluate, judge, options))
            probes.append(probe)
            combined += 1
            progress(f"combining: {options.describe()}: {_said(probe, bar)}")
            if probe.evidence is not None and probe.evidence.paid(bar) and _ratio(probe) < _ratio(best):
                best = probe
    except BudgetExhausted:
        stopped = "budget"
        paid = sorted((p for p in probes if p.evidence is not None and p.evidence.paid(bar)), key=_ratio)
        best = paid[0] if paid else None
    chosen = None if best is None else Trial((), best.cost, True, best.options)
    return ScreenResult(tuple(probes), len(values), len(values) - n, bar, chosen, stopped,
                        tuple(p.options.describe() for p in paid))


def _ratio(probe: Probe) -> float:
    """What the screen ranks on: the probe's ratio to the default over all its rounds (its trial's cost is
    the search's first figure, before any sequential confirmation)."""
    return probe.evidence.ratio if probe.evidence is not None else math.inf


def _combined(probe: Probe) -> Probe:
    return replace(probe, combined=True)


def _probe(evaluate: Evaluate, judge: Judge, options: CompilerOptions) -> Probe:
    """One candidate: evaluated (one unit of budget; the objective times it further while its interval
    straddles the bar, ``stats.sequential``), then its evidence read back."""
    cost = evaluate((), options)
    found = judge.evidence(options) if math.isfinite(cost) and cost < evaluate.failure_cost else None
    return Probe(options, cost, found, 0 if found is None else found.extended)


def _evidence(ev: RatioEvidence) -> str:
    if ev.low is None or ev.high is None:
        return f"{ev.ratio:.3f} ({ev.rounds} rounds)"
    return f"{ev.ratio:.3f} [{ev.low:.3f}, {ev.high:.3f}] ({ev.rounds} rounds)"


def _said(probe: Probe, bar: float) -> str:
    """One line on a probe for the progress display."""
    ev = probe.evidence
    if ev is None:
        return "failed or not measured"
    verdict = "paid" if ev.paid(bar) else "undecided" if ev.straddles(bar) else "did not pay"
    return f"{_evidence(ev)} {verdict}" + (f" after {probe.extra_rounds} more rounds" if probe.extra_rounds else "")
