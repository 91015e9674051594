"""Fleet tuning: ONE pass sequence for many modules.

A compiler team does not ship one ordering per model; it asks whether a reordering helps the whole
fleet. A fleet is not a second tuner: it is a run (``tuner.tune`` given a list of modules, through
the one run loop of ``core.loop``) whose ``Search`` (``FleetSearch``) scores a sequence on every
module and aggregates (``FleetObjective``); any strategy searches it unchanged:

* each module's cost under the run's objective (final-ops by default) is divided by the cost of
  XLA's default ordering on that module, and the fleet cost is the **mean ratio** (1.0 = the
  default everywhere; 0.99 = 1% better on average). "Mean relative change" is that minus one.
* a module made **worse** than its default is reported and, unless ``allow_regressions``,
  disqualifies the sequence: it gets the failure cost, as if a pass had failed. A pass failing on
  any module fails the sequence too.

Budget accounting stays honest: one fleet evaluation (the sequence on every module) is one unit.
Every module's steps go through the same evaluator and cache as single-module runs, in one batch
across the worker pool. Trials and the summary are stored as a run (``autotune runs`` lists it,
``--resume`` continues it, Ctrl-C raises ``Interrupted`` like any run, ``export`` writes a record
that applies to every member, ``explain RUN_ID --module NAME`` explains one member). The best
sequence is pruned (``loop.prune``) and validated on every member (``loop.choose``) like a single
module's.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from autotune.core import gpu_guard
from autotune.core.evaluator import Evaluator
from autotune.core.loop import GUARDED, Choice, PhaseClock, Search, prune, validity_of
from autotune.core.metrics import Metrics
from autotune.core.module import Module
from autotune.core.objectives import Objective, ObjectiveContext
from autotune.core.observer import Observer
from autotune.core.options import EMPTY, CompilerOptions
from autotune.core.levels import EXECUTED, EXECUTED_WITH_STAND_INS
from autotune.core.results import FleetResult, MemberResult, summed  # noqa: F401 (re-exported; defined there)
from autotune.core.runs import RunInfo, TrialRecord
from autotune.core.spec import RunSpec
from autotune.errors import AutotuneError, BadInput

#: The failure cost of a fleet sequence, in units of the default's (1.0), as the single-module tuner's.
FAILURE_COST = 1.25
#: A module's cost above its default by more than this (relative) counts as a regression.
TOLERANCE = 1e-12


# ---- the objective ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FleetScore:
    """One sequence scored on the fleet."""

    cost: float  # the aggregate (FAILURE_COST when disqualified)
    ratios: tuple[float | None, ...]  # per module: cost / default cost (None: failed there)
    regressed: tuple[int, ...]  # modules made worse than their default
    failed: tuple[int, ...]  # modules where a pass (or the default pipeline after it) failed
    disqualified: bool

    @property
    def mean_relative_change(self) -> float | None:
        ok = [r for r in self.ratios if r is not None]
        return sum(ok) / len(ok) - 1.0 if ok and len(ok) == len(self.ratios) else None


@dataclass(frozen=True)
class FleetObjective:
    """Mean of per-module ``cost / default cost``; a regression or a failure disqualifies."""

    allow_regressions: bool = False
    failure_cost: float = FAILURE_COST

    @staticmethod
    def ratio(cost: float, default: float) -> float:
        if default > 0:
            return cost / default
        return (cost + 1.0) / (default + 1.0)  # a zero default (an empty module): shift, keep the order

    def score(self, costs: Sequence[float | None], defaults: Sequence[float]) -> FleetScore:
        if len(costs) != len(defaults) or not costs:
            raise ValueError("one cost and one default per module, at least one module")
        ratios = tuple(None if c is None or math.isnan(c) else self.ratio(c, d) for c, d in zip(costs, defaults))
        failed = tuple(i for i, r in enumerate(ratios) if r is None)
        regressed = tuple(i for i, (c, d) in enumerate(zip(costs, defaults))
                          if i not in failed and c > d + TOLERANCE * max(1.0, abs(d)))
        disqualified = bool(failed) or (bool(regressed) and not self.allow_regressions)
        cost = self.failure_cost if disqualified else sum(ratios) / len(ratios)
        return FleetScore(float(cost), ratios, regressed, failed, disqualified)


# ---- results ---------------------------------------------------------------------------------------------
# ---- the fleet as a run ----------------------------------------------------------------------------------
#: Run options that say a stored run is a fleet (its members, their names, whether regressions are allowed).
FLEET_KEYS = ("fleet", "fleet_names", "allow_regressions")


def fleet_fingerprint(roots: Sequence[Module]) -> str:
    return "fleet-" + hashlib.sha256(",".join(sorted(r.fingerprint for r in roots)).encode()).hexdigest()[:26]


def prepare_fleet(evaluator: Evaluator, modules: Sequence[Module]) -> list[Module]:
    """The normalised members of a new fleet run (each module once)."""
    if len(modules) < 1:
        raise BadInput("a fleet needs at least one module")
    roots = [evaluator.prepare(m) for m in modules]
    seen: dict[str, str] = {}
    for r in roots:
        if r.fingerprint in seen:
            raise BadInput(f"{r.name} and {seen[r.fingerprint]} are the same module; a fleet lists each once")
        seen[r.fingerprint] = r.name
    return roots


def fleet_fields(roots: Sequence[Module], spec: RunSpec) -> dict:
    """What the run store keeps of a fleet: its fingerprint, a name, and its members in the options."""
    return {"module": fleet_fingerprint(roots), "module_name": f"fleet of {len(roots)}",
            "options": {**spec.options, "fleet": [r.fingerprint for r in roots],
                        "fleet_names": [r.name for r in roots], "allow_regressions": spec.allow_regressions}}


def fleet_roots(evaluator: Evaluator, run: RunInfo) -> list[Module]:
    """The members of a stored fleet run, from the cache (to resume it)."""
    roots = []
    for fp, name in zip(run.options["fleet"], run.options.get("fleet_names") or run.options["fleet"]):
        proto = evaluator.cache.state_proto(evaluator.version, fp)
        if proto is None:
            raise BadInput(f"run '{run.id}': its module {name} is no longer in the cache")
        roots.append(Module(name, proto, fp))
    return roots


class FleetSearch(Search):
    """A fleet's search (the run loop's ``Search``): per-module costs for sequences, through one
    evaluator, aggregated by ``FleetObjective``.

    Each module keeps its own ``ObjectiveContext`` (its default, its memoised finals), so the
    objective measures every member exactly as a single-module run would. The fleet's default cost
    is 1.0 (XLA's default everywhere).
    """

    default_cost = 1.0

    def __init__(self, evaluator: Evaluator, roots: Sequence[Module], objective: Objective, spec: RunSpec,
                 run_id: str, replay: list[TrialRecord], observer: Observer, clock: PhaseClock | None = None):
        super().__init__(evaluator, spec, run_id, replay, observer, clock)
        self.roots, self.objective = list(roots), objective
        self.fobj = FleetObjective(spec.allow_regressions)
        self.failure_cost = self.fobj.failure_cost
        base = evaluator.pipeline.baseline
        self.phases.enter("default", f"{base} pipeline on every module")
        defaults = evaluator.final_many([r.fingerprint for r in self.roots])  # == Evaluator.default(root)
        for root, d in zip(self.roots, defaults):
            if not d.ok:
                raise AutotuneError(f"{base} pipeline fails on {root.name}: {d.message}")
        self.defaults = defaults
        self.ctxs = [ObjectiveContext(evaluator, r, d, self.seed) for r, d in zip(self.roots, defaults)]
        self.default_costs = [objective.default_cost(c) for c in self.ctxs]
        #: Compiler options every candidate has (``--compiler-option``): one option set for the whole fleet.
        self.fixed = CompilerOptions.of(spec.compiler_options)
        self.inputs = [evaluator.metrics(r.fingerprint) for r in self.roots]
        self._states: dict[tuple[str, ...], tuple[str | None, ...]] = {(): tuple(r.fingerprint for r in self.roots)}

    # ---- scoring ---------------------------------------------------------------------------------------
    def costs(self, states: Sequence[str | None], options: CompilerOptions = EMPTY) -> list[float | None]:
        """One state per member (None: failed there) -> its cost under ``options`` (with the run's fixed
        ones; None: failed or unmeasurable)."""
        out = []
        options = self.fixed.merged(options)
        for state, ctx in zip(states, self.ctxs):
            c = None if state is None else self.objective.cost(state, ctx.with_options(options))
            out.append(None if c is None or math.isnan(c) else float(c))
        return out

    def _prepare(self, all_states: Sequence[Sequence[str | None]]) -> None:
        """Batch work for many sequences' states, member by member (the finals compile in parallel)."""
        for i, ctx in enumerate(self.ctxs):
            states = [states[i] for states in all_states if states[i] is not None]
            if states:
                self.objective.prepare(list(dict.fromkeys(states)), ctx)

    def states_of(self, seqs: Sequence[tuple[str, ...]]) -> list[tuple[str | None, ...]]:
        """Every module's state after each sequence, all (module, sequence) pairs in one batch (it
        keeps all workers busy even when a strategy asks one sequence at a time)."""
        pairs = [(r.fingerprint, s) for s in seqs for r in self.roots]
        results = self.ev.evaluate_pairs([(fp, self.ev.pipeline.check_passes(s)) for fp, s in pairs])
        n = len(self.roots)
        out = []
        for k, seq in enumerate(seqs):
            states = tuple(r.state if r.ok else None for r in results[k * n:(k + 1) * n])
            self._states[seq] = states
            out.append(states)
        return out

    def score_many(self, seqs: Sequence[tuple[str, ...]], options: Sequence[CompilerOptions] | None = None
                   ) -> list[tuple[FleetScore, tuple[str | None, ...]]]:
        all_states = self.states_of(seqs)
        self._prepare(all_states)
        options = options or [EMPTY] * len(seqs)
        return [(self.fobj.score(self.costs(states, o), self.default_costs), states)
                for states, o in zip(all_states, options)]

    def summed_metrics(self, states: Sequence[str | None]) -> Metrics | None:
        """The fleet as one module after reaching ``states`` (``summed``)."""
        if any(s is None for s in states):
            return None
        return summed([self.ev.metrics(s) for s in states])

    # ---- the loop's hooks -------------------------------------------------------------------------------
    def fresh(self, seqs: list[tuple[str, ...]], options: list[CompilerOptions]) -> list[TrialRecord]:
        out = []
        for seq, opts, (score, _) in zip(seqs, options, self.score_many(seqs, options)):
            message = None
            if score.failed or score.regressed:
                names = [self.roots[i].name for i in (score.failed or score.regressed)]
                message = ("fails on " if score.failed else f"worse than {self.ev.pipeline.baseline} on ") + ", ".join(names)
            guarded = None if score.disqualified else self._guard_states(self.states(seq))
            if guarded is not None:  # the search is steered away from it (``loop.GUARDED``)
                out.append(TrialRecord(0, seq, self.failure_cost, GUARDED, None, False, guarded, opts))
                continue
            # a disqualified sequence is never a result
            out.append(TrialRecord(0, seq, score.cost, "failed" if score.disqualified else "ok", None, False, message,
                                   opts))
        return out

    def trial_ok(self, rec: TrialRecord) -> bool:
        return not (rec.message or "").startswith("fails on")  # a regression is not a failed pass

    def states(self, seq: tuple[str, ...]) -> tuple[str | None, ...]:
        return self._states[seq] if seq in self._states else self.states_of([seq])[0]

    def metrics_after(self, sequence: tuple[str, ...]) -> Metrics | None:
        if sequence not in self._states and not any(r.sequence == sequence for r in self.records):
            return None
        return self.summed_metrics(self.states(sequence))

    @property
    def input_metrics(self) -> Metrics:
        return self.summed_metrics([r.fingerprint for r in self.roots])

    def empty_cost(self) -> float:
        return self.fobj.score(self.costs([r.fingerprint for r in self.roots]), self.default_costs).cost

    def ranked(self, recheck: bool) -> list[TrialRecord]:
        """Sequences that beat XLA's default on the fleet, best first (shorter first on a tie)."""
        return sorted((r for r in self.records if r.status == "ok" and r.cost < self.default_cost),
                      key=lambda r: (r.cost, len(r.sequence)))

    def key(self, rec: TrialRecord):
        return self.states(rec.sequence), rec.options.key

    def prune_candidate(self, rec: TrialRecord) -> TrialRecord:
        def evaluate(candidate):
            score, states = self.score_many([candidate])[0]
            return None if score.disqualified else (states, score.cost)

        seq, _, cost = prune(rec.sequence, rec.cost, evaluate)
        return replace(rec, sequence=seq, cost=cost)

    def check(self, rec: TrialRecord, n: int, seed: int) -> tuple[list, str | None]:
        options = self.fixed.merged(rec.options)
        reports = [validity_of(self.ev, root, s, seed, self.validate_seconds, options=options)
                   for root, s in zip(self.roots, self.states(rec.sequence))]
        bad = [(root.name, r) for root, r in zip(self.roots, reports) if not r.ok]
        if options and not bad:  # options are offered only where both modules ran and agreed
            bad = [(root.name, replace(r, reason=f"compiler options are offered only when executed; reached {r.level}"))
                   for root, r in zip(self.roots, reports) if r.level not in (EXECUTED, EXECUTED_WITH_STAND_INS)]
        reason = "; ".join(f"{name}: {r.reason or 'outputs differ'}" for name, r in bad) if bad else None
        if reason and options:
            reason = f"with {options.describe()}: {reason}"
        return reports, reason

    def unchecked(self) -> list:
        return [None] * len(self.roots)

    def guard(self, rec: TrialRecord) -> str | None:
        return self._guard_states(self.states(rec.sequence))

    def guarded_cost(self, rec: TrialRecord) -> float:
        return self.fobj.score(self.costs(self.states(rec.sequence), rec.options), self.default_costs).cost

    def _guard_states(self, states: Sequence[str | None]) -> str | None:
        """Each member's GPU guard (``core.gpu_guard``), the first that objects; ``allow_regressions``
        turns it off as it lets a member's cost rise."""
        target = self.ev.pipeline.target
        if self.spec.allow_regressions or not target.is_gpu:
            return None
        for root, state, ctx, default in zip(self.roots, states, self.ctxs, self.defaults):
            final = ctx.final(state) if state is not None else None
            if final is not None and final.ok:
                reason = gpu_guard.breach(final.metrics, default.metrics, target.name)
                if reason is not None:
                    return f"{root.name}: {reason}"
        return None

    def result(self, status: str, choice: Choice | None, invalid: tuple) -> FleetResult:
        options = EMPTY
        if choice is None:  # XLA's default on every module
            seq = found = ()
            states, costs, reports = tuple(d.state for d in self.defaults), self.default_costs, self.unchecked()
        else:
            seq, found, reports = choice.rec.sequence, choice.found, choice.report
            options = self.fixed.merged(choice.rec.options)
            states = self.states(seq)
            costs = self.costs(states, choice.rec.options)
        compiled, cached = self.steps()
        return FleetResult(
            run_id=self.run_id, modules=tuple(r.name for r in self.roots), fingerprint=fleet_fingerprint(self.roots),
            strategy=self.strategy_name, objective=self.objective.name, seed=self.seed, budget=self.budget,
            evaluations=len(self.records), status=status, best_sequence=seq, found_sequence=found,
            best_cost=choice.rec.cost if choice is not None else 1.0,
            members=tuple(self._member(i, states[i], costs[i], reports[i], choice is not None)
                          for i in range(len(self.roots))),
            allow_regressions=self.fobj.allow_regressions, invalid=invalid,
            seconds=time.perf_counter() - self.t0, steps_compiled=compiled, steps_cached=cached,
            history=tuple(self.best_history),
            disqualified=sum(1 for r in self.records if (r.message or "").startswith("worse than")),
            failed=sum(1 for r in self.records if (r.message or "").startswith("fails on")),
            target=self.ev.pipeline.target, best_options=options)

    def _member(self, i: int, state: str | None, cost: float | None, report, chosen: bool) -> MemberResult:
        root, default_cost = self.roots[i], self.default_costs[i]
        final = self.ctxs[i].final(state) if chosen and state else self.defaults[i]
        return MemberResult(
            name=root.name, fingerprint=root.fingerprint, input=self.inputs[i], default=self.defaults[i].metrics,
            default_cost=default_cost, state=state, tuned=final.metrics if final is not None and final.ok else None,
            tuned_raw=self.ev.metrics(state) if state else None, cost=cost,
            ratio=None if cost is None else FleetObjective.ratio(cost, default_cost),
            regressed=cost is not None and cost > default_cost + TOLERANCE * max(1.0, abs(default_cost)),
            validation=report)
