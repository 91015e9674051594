"""Fleet tuning: ONE pass sequence for many modules.

A compiler team does not ship one ordering per model; it asks whether a reordering helps the whole
fleet. ``tune_fleet`` searches one sequence for several modules with any strategy, unchanged: the
strategy sees one ``Evaluate`` whose cost aggregates over the modules (``FleetObjective``):

* each module's cost under the run's objective (final-ops by default) is divided by the cost of
  XLA's default ordering on that module, and the fleet cost is the **mean ratio** (1.0 = the
  default everywhere; 0.99 = 1% better on average). "Mean relative change" is that minus one.
* a module made **worse** than its default is reported and, unless ``allow_regressions``,
  disqualifies the sequence: it gets the failure cost, as if a pass had failed. A pass failing on
  any module fails the sequence too.

Budget accounting stays honest: one fleet evaluation (the sequence on every module) is one unit.
Every module's steps go through the same evaluator and cache as single-module runs, in one batch
across the worker pool. Trials and the summary are stored as a run (``autotune runs`` lists it,
``export`` writes a record that applies to every member, ``explain RUN_ID --module NAME`` explains
one member).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from autotune.core import objectives as objectives_mod
from autotune.core.evaluator import Evaluator
from autotune.core.metrics import Metrics
from autotune.core.module import Module
from autotune.core.objectives import ObjectiveContext
from autotune.core.observer import Observer
from autotune.core.runs import RunStore, TrialRecord, new_run_id
from autotune.core.spec import RunSpec
from autotune.errors import AutotuneError, BadInput
from autotune.strategy import BudgetExhausted, Evaluate, SearchSpace, Trial

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
@dataclass(frozen=True)
class MemberResult:
    """The fleet's sequence on one module."""

    name: str
    fingerprint: str
    input: Metrics
    default: Metrics
    default_cost: float
    state: str | None
    tuned: Metrics | None  # after the sequence and XLA's default pipeline (final-ops objectives)
    tuned_raw: Metrics | None
    cost: float | None
    ratio: float | None
    regressed: bool
    validity: dict | None = None

    def to_dict(self) -> dict:
        data = asdict(self)
        for k in ("input", "default", "tuned", "tuned_raw"):
            m = getattr(self, k)
            data[k] = m.to_dict() if m is not None else None
        data["relative_change"] = None if self.ratio is None else self.ratio - 1.0
        return data


@dataclass(frozen=True)
class FleetResult:
    run_id: str
    modules: tuple[str, ...]
    fingerprint: str  # of the fleet (its members' fingerprints)
    strategy: str
    objective: str
    seed: int
    budget: int
    evaluations: int
    status: str
    best_sequence: tuple[str, ...]
    found_sequence: tuple[str, ...]
    best_cost: float  # mean ratio to the default; 1.0 = XLA's default everywhere
    members: tuple[MemberResult, ...]  # the best sequence on every module
    allow_regressions: bool
    invalid: tuple[tuple[tuple[str, ...], str], ...]
    seconds: float
    steps_compiled: int
    steps_cached: int
    history: tuple[float, ...]
    default_cost: float = 1.0
    disqualified: int = 0  # evaluations rejected because some module got worse than its default
    failed: int = 0  # evaluations where a pass (or the default pipeline after it) failed on some module

    @property
    def beats_default(self) -> bool:
        return bool(self.best_sequence) and self.best_cost < self.default_cost

    @property
    def validation(self) -> str | None:
        """The weakest validation level among the members (None: not validated)."""
        from autotune.core.validation import rank

        levels = [m.validity.get("level") for m in self.members if m.validity is not None]
        if not levels or len(levels) != len(self.members):
            return None
        return min(levels, key=lambda lv: rank(lv) if lv else -1)

    @property
    def regressions(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.members if m.regressed)

    def to_dict(self) -> dict:
        valid = [m.validity.get("ok") for m in self.members if m.validity is not None]
        return {
            "run_id": self.run_id, "fleet": True, "modules": list(self.modules), "fingerprint": self.fingerprint,
            "strategy": self.strategy, "objective": self.objective, "seed": self.seed, "budget": self.budget,
            "evaluations": self.evaluations, "status": self.status, "allow_regressions": self.allow_regressions,
            "best": {"sequence": list(self.best_sequence), "found_sequence": list(self.found_sequence),
                     "cost": self.best_cost} if self.best_sequence else None,
            "best_cost": self.best_cost, "default_cost": self.default_cost,
            "mean_relative_change": self.best_cost - 1.0, "beats_default": self.beats_default,
            "regressions": list(self.regressions),
            "validity": {"ok": all(valid), "level": self.validation}
            if valid and len(valid) == len(self.members) else None,
            "members": [m.to_dict() for m in self.members],
            "invalid": [{"sequence": list(s), "reason": r} for s, r in self.invalid],
            "seconds": self.seconds, "steps_compiled": self.steps_compiled, "steps_cached": self.steps_cached,
            "disqualified_evaluations": self.disqualified, "failed_evaluations": self.failed,
        }


# ---- the search ------------------------------------------------------------------------------------------
def fleet_fingerprint(roots: Sequence[Module]) -> str:
    return "fleet-" + hashlib.sha256(",".join(sorted(r.fingerprint for r in roots)).encode()).hexdigest()[:26]


class _Fleet:
    """Per-module costs for sequences, through one evaluator; the state a ``FleetEvaluate`` reads.

    Each module keeps its own ``ObjectiveContext`` (its default, its memoised finals), so the
    objective measures every member exactly as a single-module run would.
    """

    def __init__(self, evaluator: Evaluator, roots: Sequence[Module], objective, fleet_objective: FleetObjective,
                 budget: int, time_limit: float | None, run_id: str, observer: Observer, seed: int = 0):
        self.ev, self.roots, self.objective, self.fobj = evaluator, list(roots), objective, fleet_objective
        self.budget, self.run_id, self.observer = budget, run_id, observer
        self.runs = RunStore(evaluator.cache)
        self.deadline = time.monotonic() + time_limit if time_limit else None
        self.t0 = time.perf_counter()
        self.steps0 = (evaluator.stats.steps_compiled, evaluator.stats.steps_cached)
        defaults = evaluator.final_many([r.fingerprint for r in self.roots])  # == Evaluator.default(root)
        for root, d in zip(self.roots, defaults):
            if not d.ok:
                raise AutotuneError(f"XLA's default pipeline fails on {root.name}: {d.message}")
        self.defaults = defaults
        self.ctxs = [ObjectiveContext(evaluator, r, d, seed) for r, d in zip(self.roots, defaults)]
        self.default_costs = [objective.default_cost(c) for c in self.ctxs]
        self.inputs = [evaluator.metrics(r.fingerprint) for r in self.roots]
        self.records: list[tuple[tuple[str, ...], FleetScore, tuple[str | None, ...]]] = []
        self.best: tuple[tuple[str, ...], FleetScore] | None = None
        self.history: list[float] = []
        self._states: dict[tuple[str, ...], tuple[str | None, ...]] = {(): tuple(r.fingerprint for r in self.roots)}

    def _costs(self, states: Sequence[str | None]) -> list[float | None]:
        """One state per member (None: failed there) -> its cost (None: failed or unmeasurable)."""
        out = []
        for state, ctx in zip(states, self.ctxs):
            c = None if state is None else self.objective.cost(state, ctx)
            out.append(None if c is None or math.isnan(c) else float(c))
        return out

    def _prepare(self, all_states: Sequence[Sequence[str | None]]) -> None:
        """Batch work for many sequences' states, member by member (the finals compile in parallel)."""
        for i, ctx in enumerate(self.ctxs):
            states = [states[i] for states in all_states if states[i] is not None]
            if states:
                self.objective.prepare(list(dict.fromkeys(states)), ctx)

    def final(self, i: int, state: str):
        return self.ctxs[i].final(state)

    def time_up(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def states_of(self, seqs: Sequence[tuple[str, ...]]) -> list[tuple[str | None, ...]]:
        """Every module's state after each sequence, all (module, sequence) pairs in one batch."""
        pairs = [(r.fingerprint, s) for s in seqs for r in self.roots]
        # One batch over every (module, sequence) pair keeps all workers busy even when a strategy
        # asks one sequence at a time. (An integration point: a public ``Evaluator.evaluate_pairs``.)
        results = self.ev.evaluate_pairs([(fp, self.ev.pipeline.check_passes(s)) for fp, s in pairs])
        n = len(self.roots)
        out = []
        for k, seq in enumerate(seqs):
            states = tuple(r.state if r.ok else None for r in results[k * n:(k + 1) * n])
            self._states[seq] = states
            out.append(states)
        return out

    def score_many(self, seqs: Sequence[tuple[str, ...]]) -> list[tuple[FleetScore, tuple[str | None, ...]]]:
        all_states = self.states_of(seqs)
        self._prepare(all_states)
        return [(self.fobj.score(self._costs(states), self.default_costs), states) for states in all_states]

    def evaluate(self, seqs: list[tuple[str, ...]]) -> list[float]:
        out = []
        for seq, (score, states) in zip(seqs, self.score_many(seqs)):
            self._record(seq, score, states)
            out.append(score.cost)
        return out

    def _record(self, seq, score: FleetScore, states) -> None:
        n = len(self.records)
        self.records.append((seq, score, states))
        status = "failed" if score.disqualified else "ok"  # a disqualified sequence is never a result
        message = None
        if score.failed or score.regressed:
            names = [self.roots[i].name for i in score.failed] or [self.roots[i].name for i in score.regressed]
            message = ("fails on " if score.failed else "worse than XLA's default on ") + ", ".join(names)
        self.runs.add_trial(self.run_id, TrialRecord(n, seq, score.cost, status, None, False, message),
                            time.perf_counter() - self.t0)
        if not score.disqualified and (self.best is None or score.cost < self.best[1].cost):
            self.best = (seq, score)
        self.history.append(self.best[1].cost if self.best else math.nan)
        elapsed = max(1e-9, time.perf_counter() - self.t0)
        compiled, cached = self.steps()
        self.observer.on_trial(len(self.records), self.best[1].cost if self.best else None,
                               len(self.records) / elapsed, cached / (compiled + cached) if compiled + cached else 0.0)

    def steps(self) -> tuple[int, int]:
        return self.ev.stats.steps_compiled - self.steps0[0], self.ev.stats.steps_cached - self.steps0[1]

    def summed_metrics(self, states: Sequence[str | None]) -> Metrics | None:
        """The fleet as one module (counts summed): the features a learning strategy observes."""
        if any(s is None for s in states):
            return None
        ms = [self.ev.metrics(s) for s in states]
        ops: dict[str, int] = {}
        for m in ms:
            for op, c in m.opcodes:
                ops[op] = ops.get(op, 0) + c
        return Metrics(sum(m.instructions for m in ms), sum(m.flops for m in ms),
                       sum(m.transcendentals for m in ms), sum(m.bytes_accessed for m in ms),
                       tuple(sorted(ops.items())))


class FleetEvaluate(Evaluate):
    """The ``Evaluate`` a strategy gets for a fleet: the same contract as a single module's."""

    def __init__(self, fleet: _Fleet):
        self.f = fleet

    def __call__(self, sequence: Sequence[str]) -> float:
        return self.many([sequence])[0]

    def many(self, sequences: Sequence[Sequence[str]]) -> list[float]:
        if self.remaining <= 0 or self.f.time_up():
            raise BudgetExhausted()
        take = [tuple(s) for s in sequences[: self.remaining]]
        costs = self.f.evaluate(take)
        if len(take) < len(sequences) or self.f.time_up():
            raise BudgetExhausted()
        return costs

    @property
    def remaining(self) -> int:
        return self.f.budget - len(self.f.records)

    @property
    def failure_cost(self) -> float:
        return self.f.fobj.failure_cost

    @property
    def empty_cost(self) -> float:
        score = self.f.fobj.score(self.f._costs([r.fingerprint for r in self.f.roots]), self.f.default_costs)
        return score.cost

    @property
    def history(self) -> list[Trial]:
        return [Trial(seq, score.cost, not score.failed) for seq, score, _ in self.f.records]

    def metrics(self, sequence: Sequence[str]) -> Metrics | None:
        states = self.f._states.get(tuple(sequence))
        return self.f.summed_metrics(states) if states else None

    @property
    def input_metrics(self) -> Metrics:
        return self.f.summed_metrics([r.fingerprint for r in self.f.roots])


def tune_fleet(evaluator: Evaluator, modules: Sequence[Module], strategy: str = "random", budget: int = 200,
               objective: str = "final-ops", seed: int = 0, max_length: int = 16, time_limit: float | None = None,
               options: dict | None = None, observer: Observer | None = None, validate: bool = True,
               validation_seed: int = 0, minimize: bool = True, allow_regressions: bool = False) -> FleetResult:
    """Search one sequence for every module in ``modules`` (see the module docstring).

    ``minimize`` shrinks the best sequence with ddmin to the shortest subsequence with the same
    fleet cost and no new regression (outside the budget, through the cache).
    """
    from autotune import strategy as strategy_mod
    from autotune.core.tuner import seed_everything

    if len(modules) < 1:
        raise BadInput("a fleet needs at least one module")
    spec = RunSpec(strategy=strategy, budget=budget, objective=objective, seed=seed, max_length=max_length,
                   time_limit=time_limit, options=options or {}, validate=validate, prune=minimize)
    observer = observer or Observer()
    roots = [evaluator.prepare(m) for m in modules]
    seen: dict[str, str] = {}
    for r in roots:
        if r.fingerprint in seen:
            raise BadInput(f"{r.name} and {seen[r.fingerprint]} are the same module; a fleet lists each once")
        seen[r.fingerprint] = r.name
    obj = objectives_mod.get(objective)
    strat = strategy_mod.create(strategy, **(options or {}))
    space = SearchSpace(evaluator.pipeline.passes(), max_length)
    run_id = new_run_id()
    fp = fleet_fingerprint(roots)
    names = [r.name for r in roots]
    store = RunStore(evaluator.cache)
    store.save(run_id, created=time.time(), updated=time.time(), status="running", module=fp,
              module_name=f"fleet of {len(roots)}", strategy=strategy, objective=objective, budget=budget, seed=seed,
              max_length=max_length, version=evaluator.version, validate=int(validate), time_limit=time_limit,
              options={**(options or {}), "fleet": [r.fingerprint for r in roots], "fleet_names": names,
                       "allow_regressions": allow_regressions})
    fleet = _Fleet(evaluator, roots, obj, FleetObjective(allow_regressions), budget, spec.time_limit, run_id,
                   observer, seed)
    status = "finished"
    seed_everything(seed)
    observer.on_run_start(budget, f"{strategy} on a fleet of {len(roots)}")
    try:
        try:
            strat.minimize(FleetEvaluate(fleet), space, seed)
        except BudgetExhausted:
            pass
        if fleet.time_up():
            status = "time-limit"
    except KeyboardInterrupt:
        status = "interrupted"
    finally:
        observer.on_run_end()
    result = _summarise(fleet, strategy, seed, status, validate, validation_seed, minimize and obj.deterministic)
    store.save(run_id, status=status, updated=time.time(), best_sequence=result.best_sequence,
               best_cost=result.best_cost, summary=result.to_dict())
    return result


def _summarise(fleet: _Fleet, strategy: str, seed: int, status: str, validate: bool, validation_seed: int,
               minimize: bool) -> FleetResult:
    from autotune.core.minimize import ddmin_core
    from autotune.core.tuner import validity_of

    ranked = sorted(((seq, score) for seq, score, _ in fleet.records if not score.disqualified),
                    key=lambda x: (x[1].cost, len(x[0])))
    invalid: list[tuple[tuple[str, ...], str]] = []
    chosen: tuple[tuple[str, ...], tuple[str, ...], FleetScore, tuple] | None = None
    tried: set[tuple[str | None, ...]] = set()
    for seq, score in ranked:
        if score.cost >= 1.0 or len(tried) >= 8:  # nothing beats the default (or 8 candidates were rejected)
            break
        found = seq
        if minimize and len(seq) > 1:
            def keeps(cands):
                return [not s.disqualified and s.cost <= score.cost for s, _ in fleet.score_many(cands)]

            if not keeps([()])[0]:
                seq = ddmin_core(seq, keeps)
        score, states = fleet.score_many([seq])[0]
        if states in tried:
            continue
        tried.add(states)
        reports = [None] * len(states)
        if validate:
            reports = [validity_of(fleet.ev, root, s, validation_seed) for root, s in zip(fleet.roots, states)]
            bad = [(root.name, r) for root, r in zip(fleet.roots, reports) if not r.get("ok")]
            if bad:
                invalid.append((seq, "; ".join(f"{n}: {r.get('reason') or 'outputs differ'}" for n, r in bad)))
                continue
        chosen = (seq, found, score, states, reports)
        break
    members = []
    if chosen is None:  # XLA's default on every module
        seq, found, score, states, reports = (), (), None, tuple(d.state for d in fleet.defaults), [None] * len(fleet.roots)
        costs = fleet.default_costs
    else:
        seq, found, score, states, reports = chosen
        costs = fleet._costs(states)
    for i, root in enumerate(fleet.roots):
        final = fleet.final(i, states[i]) if chosen is not None and states[i] else fleet.defaults[i]
        cost = costs[i]
        members.append(MemberResult(
            name=root.name, fingerprint=root.fingerprint, input=fleet.inputs[i], default=fleet.defaults[i].metrics,
            default_cost=fleet.default_costs[i], state=states[i],
            tuned=final.metrics if final is not None and final.ok else None,
            tuned_raw=fleet.ev.metrics(states[i]) if states[i] else None, cost=cost,
            ratio=None if cost is None else FleetObjective.ratio(cost, fleet.default_costs[i]),
            regressed=cost is not None and cost > fleet.default_costs[i] + TOLERANCE * max(1.0, abs(fleet.default_costs[i])),
            validity=reports[i]))
    compiled, cached = fleet.steps()
    return FleetResult(
        run_id=fleet.run_id, modules=tuple(r.name for r in fleet.roots), fingerprint=fleet_fingerprint(fleet.roots),
        strategy=strategy, objective=fleet.objective.name, seed=seed, budget=fleet.budget,
        evaluations=len(fleet.records), status=status, best_sequence=seq, found_sequence=found,
        best_cost=score.cost if score is not None else 1.0, members=tuple(members),
        allow_regressions=fleet.fobj.allow_regressions, invalid=tuple(invalid),
        seconds=time.perf_counter() - fleet.t0, steps_compiled=compiled, steps_cached=cached,
        history=tuple(fleet.history),
        disqualified=sum(1 for _, sc, _ in fleet.records if sc.regressed and sc.disqualified and not sc.failed),
        failed=sum(1 for _, sc, _ in fleet.records if sc.failed))
