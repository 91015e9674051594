"""``tune``: the one place the search loop closes.

It owns everything a strategy must not: budget accounting (one sequence evaluation = one unit,
cache hits included), the time limit, seeding, trial records (through the ``RunStore``), progress
(through one ``Observer``), resumption of an interrupted run, and choosing what may be reported:
the best candidate that passes the validity check and whose win the objective confirms. A strategy
only sees ``Evaluate`` (sequence -> cost) and the ``SearchSpace``; the objective only sees states
(``Objective.cost(state, ctx)``); neither is special-cased here by name.

Resumption: strategies are deterministic under their seed, so ``resume`` re-runs the strategy
from the start while the recorded trials answer its first asks without compiling or spending
budget again; a run continues exactly where it stopped, with the same accounting.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from autotune import strategy as strategy_mod
from autotune.core import objectives as objectives_mod
from autotune.core.evaluator import Evaluator, Result
from autotune.core.executors import ExecutorLost
from autotune.core.metrics import Metrics
from autotune.core.module import Module
from autotune.core.objectives import Claim, Objective, ObjectiveContext
from autotune.core.observer import Observer
from autotune.core.runs import RunStore, TrialRecord, new_run_id
from autotune.core.spec import DEFAULT_MAX_LENGTH, RunSpec
from autotune.errors import AutotuneError, BadInput
from autotune.strategy import BudgetExhausted, Evaluate, SearchSpace, Trial

__all__ = ["tune", "TuneResult", "Candidate", "Interrupted", "evaluation_session", "validity_of", "TrialRecord",
           "DEFAULT_MAX_LENGTH"]

#: A failed sequence costs this much more than the XLA default (finite, so optimisers can learn).
FAILURE_FACTOR = 1.25
#: Distinct candidates the validity check may reject before the run reports nothing.
MAX_REJECTED = 8
#: Candidates a measured objective may try to confirm (the best, then runners-up) before it says
#: "no significant difference". Each costs one confirmation (see the objective's ``confirm``).
MAX_CONFIRMATIONS = 2
#: Weights at the price of parameters: a module whose entry constants hold at least this many bytes
#: is searched on its surrogate (those constants lifted to parameters, ``Backend.lift_constants``).
SURROGATE_MIN_BYTES = 1 << 20
#: Distinct surrogate candidates (the best and its runners-up) re-established on the real module.
SURROGATE_RECHECK = 3


@dataclass(frozen=True)
class Candidate:
    """A module the tuner reports: raw metrics, metrics after XLA's default pipeline, cost."""

    sequence: tuple[str, ...]  # what to apply: empty when the candidate does not beat the default
    state: str  # the module ``found`` reached
    raw: Metrics
    final: Metrics | None
    cost: float
    found: tuple[str, ...] = ()  # the sequence as the strategy found it, before pruning


@dataclass(frozen=True)
class TuneResult:
    run_id: str
    module: str
    fingerprint: str
    strategy: str
    objective: str
    seed: int
    budget: int
    evaluations: int
    status: str  # finished | interrupted | time-limit
    input: Metrics
    default: Metrics  # XLA's default ordering
    default_cost: float
    best: Candidate | None  # None: no valid sequence beat doing nothing
    validity: dict | None  # ``Validation.to_dict()`` of ``best``: its level, reason, stand-ins, report
    invalid: tuple[tuple[tuple[str, ...], str], ...]  # candidates rejected by the check, with reasons
    seconds: float
    steps_compiled: int
    steps_cached: int
    history: tuple[float, ...]  # best-so-far cost after each evaluation
    claim: Claim | None = None  # the objective's verdict on ``best`` against XLA's default
    executor: dict | None = None  # what ran the steps (autotune.core.executors: local or ray, and where)
    #: Seconds per phase (``observer.PHASES``: load, normalise, default, search, recheck, prune,
    #: validation, confirmation), in the order they ran; ``load`` is added by the caller that loaded the file.
    phases: tuple[tuple[str, float], ...] = ()
    #: Set when the search ran on a surrogate with the large constants lifted to parameters: how many,
    #: their bytes, each re-checked candidate's cost on the surrogate and on the real module,
    #: ``agree`` and a ``message`` saying what was done (``_Tuner.recheck``).
    surrogate: dict | None = None

    @property
    def validation(self):
        """The ``Validation`` of ``best`` (None when there is no best)."""
        from autotune.core.validation import Validation

        return Validation.from_dict(self.validity)

    @property
    def validation_level(self) -> str | None:
        v = self.validation
        return v.level if v else None

    @property
    def best_sequence(self) -> tuple[str, ...]:
        return self.best.sequence if self.best else ()

    @property
    def beats_default(self) -> bool:
        """True when the best valid sequence beats XLA's default ordering, as its objective judges
        it (for a measured objective: confirmed by interleaved re-measurement, not the search's sample)."""
        if self.best is None:
            return False
        if self.claim is not None:
            return self.claim.win
        return self.best.cost < self.default_cost

    @property
    def best_cost(self) -> float:
        return self.best.cost if self.best else self.default_cost

    @property
    def cache_hit_rate(self) -> float:
        total = self.steps_compiled + self.steps_cached
        return self.steps_cached / total if total else 0.0

    def improvement(self, final: bool = True) -> float | None:
        """The 2023 paper's ratio: the tuned sequence's instruction reduction / the default's, minus 1."""
        if self.best is None:
            return None
        tuned = self.best.final if final else self.best.raw
        if tuned is None:
            return None
        default_red = self.input.instructions - self.default.instructions
        tuned_red = self.input.instructions - tuned.instructions
        if default_red <= 0:
            return None
        return tuned_red / default_red - 1.0

    def to_dict(self) -> dict:
        best = None
        if self.best:
            best = {
                "sequence": list(self.best.sequence),
                "found_sequence": list(self.best.found or self.best.sequence),
                "cost": self.best.cost,
                "state": self.best.state,
                "raw": self.best.raw.to_dict(),
                "final": self.best.final.to_dict() if self.best.final else None,
            }
        return {
            "run_id": self.run_id, "module": self.module, "fingerprint": self.fingerprint,
            "strategy": self.strategy, "objective": self.objective, "seed": self.seed, "budget": self.budget,
            "evaluations": self.evaluations, "status": self.status,
            "input": self.input.to_dict(), "default": self.default.to_dict(), "default_cost": self.default_cost,
            "best": best, "beats_default": self.beats_default, "validity": self.validity,
            "validation_level": self.validation_level,
            "claim": self.claim.to_dict() if self.claim else None,
            "invalid": [{"sequence": list(s), "reason": r} for s, r in self.invalid],
            "improvement_final_ops": self.improvement(True), "improvement_raw_ops": self.improvement(False),
            "seconds": self.seconds, "steps_compiled": self.steps_compiled, "steps_cached": self.steps_cached,
            "cache_hit_rate": self.cache_hit_rate, "executor": self.executor, "history": list(self.history),
            "phases": dict(self.phases),
            "surrogate": self.surrogate,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "TuneResult":
        """The inverse of ``to_dict`` (derived keys such as ``beats_default`` are recomputed, not read)."""
        best = data.get("best")
        if best is not None:
            best = Candidate(tuple(best["sequence"]), best["state"], Metrics.from_dict(best["raw"]),
                             Metrics.from_dict(best["final"]) if best.get("final") else None, float(best["cost"]),
                             tuple(best.get("found_sequence") or ()))
        return cls(
            run_id=data["run_id"], module=data["module"], fingerprint=data["fingerprint"], strategy=data["strategy"],
            objective=data["objective"], seed=int(data["seed"]), budget=int(data["budget"]),
            evaluations=int(data["evaluations"]), status=data["status"], input=Metrics.from_dict(data["input"]),
            default=Metrics.from_dict(data["default"]), default_cost=float(data["default_cost"]), best=best,
            validity=data.get("validity"),
            invalid=tuple((tuple(i["sequence"]), i["reason"]) for i in data.get("invalid") or ()),
            seconds=float(data["seconds"]), steps_compiled=int(data["steps_compiled"]),
            steps_cached=int(data["steps_cached"]), history=tuple(float(h) for h in data.get("history") or ()),
            claim=Claim.from_dict(data.get("claim")), executor=data.get("executor"),
            phases=tuple((str(k), float(v)) for k, v in (data.get("phases") or {}).items()),
            surrogate=data.get("surrogate"),
        )


class RunEvaluate(Evaluate):
    """The ``Evaluate`` a strategy gets for one run: budget, objective, records, replay."""

    def __init__(self, tuner: "_Tuner"):
        self.t = tuner

    def __call__(self, sequence: Sequence[str]) -> float:
        return self.many([sequence])[0]

    def many(self, sequences: Sequence[Sequence[str]]) -> list[float]:
        t = self.t
        if self.remaining <= 0 or t.time_up():
            raise BudgetExhausted()
        take = [tuple(s) for s in sequences[: self.remaining]]
        costs = t.evaluate_sequences(take)
        if len(take) < len(sequences) or t.time_up():
            raise BudgetExhausted()
        return costs

    @property
    def remaining(self) -> int:
        return self.t.budget - len(self.t.records)

    @property
    def failure_cost(self) -> float:
        return self.t.failure_cost

    @property
    def empty_cost(self) -> float:
        return self.t.empty_cost()

    @property
    def history(self) -> list[Trial]:
        return [Trial(r.sequence, r.cost, r.status == "ok") for r in self.t.records]

    def metrics(self, sequence: Sequence[str]) -> Metrics | None:
        """Metrics of the module after ``sequence`` if it was evaluated (no budget spent)."""
        return self.t.metrics_after(tuple(sequence))

    @property
    def input_metrics(self) -> Metrics:
        return self.t.input_metrics


class PhaseClock:
    """Seconds per phase of a run (``observer.PHASES``), the observer told as each phase or step starts.

    Phases may alternate (``_summarise`` prunes, validates and confirms one candidate after another):
    each phase's seconds accumulate. ``result()`` lists them in the order they first ran.
    """

    def __init__(self, observer: Observer):
        self.observer = observer
        self.seconds: dict[str, float] = {}
        self.current: str | None = None
        self.since = time.perf_counter()

    def enter(self, phase: str, detail: str | None = None, estimate: float | None = None) -> None:
        if phase != self.current:
            self.stop()
            self.current, self.since = phase, time.perf_counter()
            self.seconds.setdefault(phase, 0.0)
        self.observer.on_phase(phase, detail, estimate)

    def stop(self) -> None:
        if self.current is not None:
            self.seconds[self.current] += time.perf_counter() - self.since
            self.current = None

    def result(self) -> tuple[tuple[str, float], ...]:
        now = time.perf_counter()
        # to the millisecond: what is shown, stored and read back (``to_dict``/``from_dict``) is the same
        return tuple((name, round(sec + (now - self.since if name == self.current else 0.0), 3))
                     for name, sec in self.seconds.items())


class _Tuner:
    def __init__(self, evaluator: Evaluator, root: Module, objective: Objective, budget: int,
                 time_limit: float | None, run_id: str, replay: list[TrialRecord], observer: Observer,
                 seed: int = 0, strategy: str = "session", clock: PhaseClock | None = None,
                 validate_seconds: float | None = None):
        self.ev = evaluator
        self.runs = RunStore(evaluator.cache)
        self.root = root
        self.objective = objective
        self.budget = budget
        self.deadline = time.monotonic() + time_limit if time_limit else None
        self.run_id = run_id
        self.replay = replay
        self.observer = observer
        self.seed = seed
        self.strategy_name = strategy
        self.records: list[TrialRecord] = []
        self.best: TrialRecord | None = None
        self.best_history: list[float] = []
        self.t0 = time.perf_counter()
        self.phases = clock or PhaseClock(observer)
        self.validate_seconds = validate_seconds
        #: ``(real root, description)`` while the search runs on a surrogate; ``recheck`` moves to it.
        self.real: tuple[Module, dict] | None = None
        self.real_info: dict | None = None  # what ``recheck`` compared (``TuneResult.surrogate``)
        # The evaluator may outlive this run (compare, an API session): count this run's steps only.
        self.steps0 = (evaluator.stats.steps_compiled, evaluator.stats.steps_cached)
        self.input_metrics = evaluator.metrics(root.fingerprint)
        self.phases.enter("default", "XLA's default pipeline on the module")
        default = evaluator.default(root)
        if not default.ok:
            raise AutotuneError(f"XLA's default pipeline fails on this module: {default.message}")
        self.default_result = default
        self.ctx = ObjectiveContext(evaluator, root, default, seed)
        self.default_cost = objective.default_cost(self.ctx)
        self.failure_cost = FAILURE_FACTOR * self.default_cost + 1.0
        self._state_of: dict[tuple[str, ...], str | None] = {(): root.fingerprint}
        self._empty_cost: float | None = None

    def empty_cost(self) -> float:
        if self._empty_cost is None:
            self._empty_cost = self.objective.cost(self.root.fingerprint, self.ctx)
        return self._empty_cost

    def time_up(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def metrics_after(self, sequence: tuple[str, ...]) -> Metrics | None:
        state = self._state_of.get(sequence)
        return self.ev.metrics(state) if state else None

    # ---- evaluation ----------------------------------------------------------------------------
    def evaluate_sequences(self, seqs: list[tuple[str, ...]]) -> list[float]:
        out: list[float | None] = [None] * len(seqs)
        todo: list[int] = []
        for k, seq in enumerate(seqs):
            n = len(self.records) + len(todo)
            if n < len(self.replay) and self.replay[n].sequence == seq and not todo:
                rec = self.replay[n]
                self._state_of[seq] = rec.state
                self._record(rec, persist=False)
                out[k] = rec.cost
            else:
                if n < len(self.replay):  # the strategy diverged from the recorded run: drop the rest
                    self.replay = self.replay[:n]
                    self.runs.truncate(self.run_id, n)
                todo.append(k)
        if todo:
            results = self.ev.evaluate_many(self.root, [seqs[k] for k in todo])
            self.objective.prepare([r.state for r in results if r.ok], self.ctx)
            for k, result in zip(todo, results):
                rec = self._trial(seqs[k], result)
                self._state_of[seqs[k]] = rec.state
                self._record(rec, persist=True)
                out[k] = rec.cost
        return [float(c) for c in out]

    def _trial(self, seq: tuple[str, ...], result: Result) -> TrialRecord:
        n = len(self.records)
        cached = result.compiled == 0
        if not result.ok:
            msg = f"step {result.failed_at + 1} ({seq[result.failed_at]}) {result.status}: {result.message}"
            return TrialRecord(n, seq, self.failure_cost, "failed", None, cached, msg)
        cost = self.objective.cost(result.state, self.ctx)
        if math.isnan(cost):
            msg = self.objective.failure(result.state, self.ctx)
            return TrialRecord(n, seq, self.failure_cost, "failed", result.state, cached, msg)
        return TrialRecord(n, seq, cost, "ok", result.state, cached)

    def _record(self, rec: TrialRecord, persist: bool) -> None:
        rec = replace(rec, n=len(self.records))
        self.records.append(rec)
        if persist:
            self.runs.add_trial(self.run_id, rec, time.perf_counter() - self.t0)
        if rec.status == "ok" and (self.best is None or rec.cost < self.best.cost):
            self.best = rec
        self.best_history.append(self.best.cost if self.best else math.nan)
        elapsed = max(1e-9, time.perf_counter() - self.t0)
        compiled, cached = self.steps()
        self.observer.on_trial(len(self.records), self.best.cost if self.best else None,
                               len(self.records) / elapsed, cached / (compiled + cached) if compiled + cached else 0.0)

    def steps(self) -> tuple[int, int]:
        """(compiled, cached) steps of this run so far."""
        return self.ev.stats.steps_compiled - self.steps0[0], self.ev.stats.steps_cached - self.steps0[1]

    def recheck(self) -> list[TrialRecord]:
        """Leave the surrogate: re-establish its best candidates on the real module and rank them there.

        The ``SURROGATE_RECHECK`` best distinct surrogate states that beat XLA's default there (the
        best and the runners-up that could overtake it; the best alone when none does) are evaluated
        on the real module, with XLA's default and the objective measured there too; from then on the
        tuner's root, context and default are the real ones, so pruning, validation and confirmation
        all happen on the real module. ``real_info`` records what was compared and whether surrogate
        and real module agree (same costs, same best).
        """
        real, info = self.real
        picks, seen = [], set()
        for rec in sorted((r for r in self.records if r.status == "ok" and r.state), key=lambda r: (r.cost, r.n)):
            if picks and rec.cost >= self.default_cost:
                break  # only contenders: candidates that beat XLA's default on the surrogate (or the best one)
            if rec.state not in seen:
                seen.add(rec.state)
                picks.append(rec)
            if len(picks) == SURROGATE_RECHECK:
                break
        surrogate_default = self.default_cost
        self.root, self.input_metrics = real, self.ev.metrics(real.fingerprint)
        default = self.ev.default(real)
        if not default.ok:
            raise AutotuneError(f"XLA's default pipeline fails on this module: {default.message}")
        self.default_result = default
        self.ctx = ObjectiveContext(self.ev, real, default, self.seed)
        self.default_cost = self.objective.default_cost(self.ctx)
        self.failure_cost = FAILURE_FACTOR * self.default_cost + 1.0
        results = self.ev.evaluate_many(real, [r.sequence for r in picks]) if picks else []
        self.objective.prepare([r.state for r in results if r.ok], self.ctx)
        ranked, checks = [], []
        for rec, result in zip(picks, results):
            cost = self.objective.cost(result.state, self.ctx) if result.ok else math.nan
            checks.append({"sequence": list(rec.sequence), "surrogate_cost": rec.cost,
                           "real_cost": None if math.isnan(cost) else cost})
            if not math.isnan(cost):
                ranked.append(replace(rec, cost=cost, state=result.state))
        ranked.sort(key=lambda r: (r.cost, r.n))
        same_costs = all(c["real_cost"] == c["surrogate_cost"] for c in checks) and surrogate_default == self.default_cost
        same_best = not ranked or not picks or ranked[0].sequence == picks[0].sequence
        agree = same_costs and same_best
        lifted = f"{info['constants']} constant(s) of {info['bytes'] / (1 << 20):.1f} MiB lifted to parameters"
        if agree:
            message = (f"searched on a surrogate ({lifted}); its {len(checks)} best candidate(s) re-checked on the "
                       "real module: same costs")
        else:
            diffs = "; ".join(f"{','.join(c['sequence']) or '(empty)'}: {c['surrogate_cost']:g} on the surrogate, "
                              f"{'fails' if c['real_cost'] is None else format(c['real_cost'], 'g')} on the real module"
                              for c in checks if c["real_cost"] != c["surrogate_cost"])
            if surrogate_default != self.default_cost:
                diffs = (diffs + "; " if diffs else "") + (f"XLA's default {surrogate_default:g} on the surrogate, "
                                                           f"{self.default_cost:g} on the real module")
            message = (f"surrogate and real module disagree ({diffs}): searched on a surrogate ({lifted}), the "
                       f"{len(checks)} best candidate(s) re-checked on the real module and ranked by their real "
                       "cost; the best there is reported" + ("" if same_best else " (not the surrogate's best)"))
        self.real_info = {**info, "rechecked": checks, "agree": agree, "message": message}
        self.real = None  # only now: a Ctrl-C above leaves the surrogate's partial answer unreported
        return ranked

    def prune(self, sequence: tuple[str, ...], cost: float) -> tuple[tuple[str, ...], str, float]:
        """Drop passes that do not help: one backward sweep, keeping a removal when the cost does
        not get worse. Searches return sequences padded with passes that change nothing (most
        passes are no-ops on most modules); a user should ship the short sequence. Costs at most
        ``len(sequence)`` evaluations outside the budget (not recorded as trials)."""
        current, state = sequence, self._state_of.get(sequence)
        for i in reversed(range(len(current))):
            if len(current) <= 1:
                break
            candidate = current[:i] + current[i + 1:]
            result = self.ev.evaluate_many(self.root, [candidate])[0]
            if not result.ok:
                continue
            c = self.objective.cost(result.state, self.ctx)
            if not math.isnan(c) and c <= cost:
                current, state, cost = candidate, result.state, c
        return current, state, cost


def evaluation_session(evaluator: Evaluator, module: Module, objective: str | Objective = RunSpec.objective,
                       budget: int = 10**9, run_id: str | None = None,
                       time_limit: float | None = None) -> RunEvaluate:
    """An ``Evaluate`` for ``module`` outside a strategy run (e.g. to train a policy on many modules).

    Trials are recorded under ``run_id`` (a fresh id by default) like any run's.
    """
    obj = objectives_mod.get(objective)
    root = evaluator.prepare(module)
    run_id = run_id or new_run_id()
    RunStore(evaluator.cache).save(
        run_id, created=time.time(), updated=time.time(), status="session", module=root.fingerprint,
        module_name=root.name, strategy="session", objective=obj.name, budget=budget, seed=0, max_length=0,
        options={}, version=evaluator.version)
    return RunEvaluate(_Tuner(evaluator, root, obj, budget, time_limit, run_id, [], Observer()))


# ---- the entry point -------------------------------------------------------------------------------------
def tune(
    evaluator: Evaluator,
    module: Module | None,
    strategy: str = RunSpec.strategy,
    budget: int = RunSpec.budget,
    objective: str | Objective = RunSpec.objective,
    seed: int = 0,
    max_length: int = DEFAULT_MAX_LENGTH,
    time_limit: float | None = None,
    options: dict | None = None,
    observer: Observer | None = None,
    resume: str | None = None,
    validate: bool = True,
    validation_seed: int = 0,
    prune: bool = True,
    spec: RunSpec | None = None,
    validate_seconds: float | None = None,
    surrogate: bool = True,
) -> TuneResult:
    """Search for the best pass sequence for ``module`` with ``strategy``.

    The settings may come as keywords or as one ``RunSpec`` (``spec`` wins). ``budget`` counts
    sequence evaluations, cache hits included. ``prune`` shortens the best sequence afterwards
    (passes whose removal does not worsen a deterministic objective are dropped; at most its length
    in extra evaluations, outside the budget). With ``resume=RUN_ID`` every other setting is taken
    from the recorded run and its completed trials are replayed. ``validate_seconds`` bounds each
    execution of validation (``limits.validate_seconds``; an execution estimated longer is not run:
    level ``compiled``, with the estimate). ``surrogate``: a module whose entry constants hold at
    least ``SURROGATE_MIN_BYTES`` (weights baked in) is searched on a surrogate with those constants
    lifted to parameters (XLA imports it ~15x faster at every step), then its best candidates are
    re-established on the real module (``_Tuner.recheck``; ``TuneResult.surrogate`` says what was done
    and whether the two agree). Ctrl-C at any point, validation included, raises
    ``Interrupted`` with the run saved and resumable.
    """
    store = RunStore(evaluator.cache)
    observer = observer or Observer()
    clock = PhaseClock(observer)
    replay: list[TrialRecord] = []
    if resume:
        run = store.get(resume)
        if "fleet" in run.options:
            raise BadInput(f"run '{resume}' is a fleet run; resuming one is not supported yet (start it again)")
        if run.version != evaluator.version:
            raise BadInput(f"run '{resume}' was made with {run.version}, not {evaluator.version}")
        proto = evaluator.cache.state_proto(evaluator.version, run.module)
        if proto is None:
            raise BadInput(f"run '{resume}': its module is no longer in the cache")
        root = Module(run.module_name, proto, run.module)
        spec = RunSpec(strategy=run.strategy, budget=run.budget, objective=run.objective, seed=run.seed,
                       max_length=run.max_length, options=run.options, validate=validate and run.validate,
                       time_limit=time_limit if time_limit is not None else run.time_limit, prune=prune)
        replay = store.trials(resume)
        run_id = resume
    else:
        if module is None:
            raise BadInput("no module to tune")
        if spec is None:
            name = objective.name if isinstance(objective, Objective) else objective
            spec = RunSpec(strategy=strategy, budget=budget, objective=name, seed=seed, max_length=max_length,
                           time_limit=time_limit, options=options or {}, validate=validate, prune=prune)
        clock.enter("normalise", "XLA's import round trip until the module is stable")
        try:
            root = evaluator.prepare(module)
        except BaseException:
            observer.on_run_end()
            raise
        run_id = new_run_id()
    obj = objective if isinstance(objective, Objective) and objective.name == spec.objective \
        else objectives_mod.get(spec.objective)
    strat = strategy_mod.create(spec.strategy, **spec.options)
    space = SearchSpace(evaluator.pipeline.passes(), spec.max_length)
    store.save(run_id, created=time.time(), updated=time.time(), status="running", module=root.fingerprint,
               module_name=root.name, strategy=spec.strategy, objective=spec.objective, budget=spec.budget,
               seed=spec.seed, max_length=spec.max_length, options=spec.options, version=evaluator.version,
               validate=spec.validate, time_limit=spec.time_limit)

    try:
        search_root, lifted = root, None
        if surrogate:
            search_root, lifted = _surrogate_of(evaluator, root, clock)
        tuner = _Tuner(evaluator, search_root, obj, spec.budget, spec.time_limit, run_id, replay, observer,
                       spec.seed, spec.strategy, clock, validate_seconds)
        if lifted is not None:
            tuner.real = (root, lifted)
    except BaseException:
        observer.on_run_end()
        raise
    status, reason = "finished", None
    seed_everything(spec.seed)
    clock.enter("search")
    observer.on_run_start(spec.budget, f"{spec.strategy} on {root.name}")
    try:
        try:
            strat.minimize(RunEvaluate(tuner), space, spec.seed)
        except BudgetExhausted:
            pass
        if tuner.time_up():
            status = "time-limit"
    except KeyboardInterrupt:
        status = "interrupted"
    except ExecutorLost as exc:  # the cluster went away: stop as on Ctrl-C, completed trials kept
        status, reason = "interrupted", str(exc)
    result = None
    try:
        if status != "interrupted":
            try:  # validation and confirmation: a Ctrl-C here stops them and keeps the run resumable
                result = _summarise(tuner, status, spec.validate, validation_seed, spec.prune)
            except KeyboardInterrupt:
                status, reason = "interrupted", "interrupted during validation"
    finally:
        clock.stop()
        observer.on_run_end()
    if status == "interrupted":
        store.save(run_id, status="interrupted", updated=time.time())
        raise Interrupted(run_id, _summarise(tuner, status, validate=False, validation_seed=validation_seed,
                                             prune=False, recheck=False), reason)
    store.save(run_id, status=status, updated=time.time(), best_sequence=result.best_sequence,
               best_cost=result.best_cost, summary=result.to_dict())
    return result


def _surrogate_of(evaluator: Evaluator, root: Module, clock: PhaseClock) -> tuple[Module, dict | None]:
    """``(module to search, description)``: the normalised surrogate of ``root`` with its large
    constants lifted to parameters, or ``(root, None)`` when it has too few constant bytes (or the
    backend cannot lift them)."""
    lift = evaluator.pipeline.lift_constants
    clock.enter("normalise", "looking for large constants to lift to parameters (a surrogate to search on)")
    try:
        lifted = lift(root)
    except AutotuneError:
        return root, None
    if lifted is None or lifted[2] < SURROGATE_MIN_BYTES:
        return root, None
    module, n, nbytes = lifted
    try:
        search_root = evaluator.prepare(module)
    except AutotuneError:  # the surrogate does not import: search the real module
        return root, None
    return search_root, {"constants": n, "bytes": nbytes, "fingerprint": search_root.fingerprint}


class Interrupted(AutotuneError):
    """Ctrl-C: the run is saved; ``partial`` holds the best so far; resume with its id."""

    exit_code = 130

    def __init__(self, run_id: str, partial: TuneResult, reason: str | None = None):
        super().__init__(f"{reason or 'interrupted'}; resume with: autotune run --resume {run_id}")
        self.run_id, self.partial = run_id, partial


def seed_everything(seed: int) -> None:
    """Seed Python's and numpy's global generators: strategies built on libraries that draw from
    them (and not from the seed they are given) stay deterministic under a run's seed."""
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % (2**32))
    except ImportError:  # pragma: no cover
        pass


def _summarise(tuner: _Tuner, status: str, validate: bool, validation_seed: int, prune: bool = True,
               recheck: bool = True) -> TuneResult:
    """Pick what the run may report: candidates in order of cost, each pruned (deterministic
    objectives), validated, and its win confirmed by the objective; a rejected candidate is
    recorded with its reason and the next one is tried."""
    ev, obj = tuner.ev, tuner.objective
    invalid: list[tuple[tuple[str, ...], str]] = []
    best: Candidate | None = None
    validity = None
    claim: Claim | None = None
    confirmations = 0
    clock = tuner.phases
    if tuner.real is not None and not recheck:  # an interrupted run's partial answer: not re-checked,
        # so nothing is reported as a best (the surrogate's modules hold parameters, not the weights)
        tuner.real_info = {**tuner.real[1], "rechecked": [], "agree": None,
                           "message": "searched on a surrogate with large constants lifted to parameters; "
                                      "interrupted before its best was re-checked on the real module"}
        ranked = []
    elif tuner.real is not None:
        clock.enter("recheck", "re-establishing the surrogate's best candidates on the real module")
        ranked = tuner.recheck()
    else:
        ranked = sorted((r for r in tuner.records if r.status == "ok"), key=lambda r: (r.cost, r.n))
    seen: set[str] = set()
    for i, rec in enumerate(ranked):
        if rec.state is None:
            continue
        # A measured objective's cost belongs to the compiled module: states with the same final
        # module are one candidate (the runner-up must be a different executable).
        key = rec.state if obj.deterministic else tuner.ctx.final(rec.state).state
        if key in seen:
            continue
        seen.add(key)
        if len(seen) > MAX_REJECTED:
            break
        found = rec.sequence
        if prune and obj.deterministic and rec.cost < tuner.default_cost:
            clock.enter("prune", f"candidate {len(seen)}: dropping passes that change nothing")
            seq, state, cost = tuner.prune(rec.sequence, rec.cost)
            rec = replace(rec, sequence=seq, state=state, cost=cost)
        if validate:
            clock.enter("validation", f"candidate {len(seen)}")
            report = validity_of(ev, tuner.root, rec.state, validation_seed, tuner.validate_seconds,
                                 progress=lambda line, n=len(seen): clock.enter("validation", f"candidate {n}: {line}"))
            if not report["ok"]:
                invalid.append((rec.sequence, report.get("reason") or "outputs differ"))
                tuner.runs.mark_invalid(tuner.run_id, rec.state, report.get("reason"))
                continue
        else:
            from autotune.core.validation import not_checked

            report = not_checked().to_dict()
        if not obj.deterministic:
            clock.enter("confirmation", "interleaved re-measurement of the best and XLA's default")
        verdict = obj.confirm(rec.state, rec.cost, tuner.ctx)
        if not verdict.win and not obj.deterministic and rec.cost < tuner.default_cost:
            confirmations += 1  # a measured win that did not hold up: try the runner-up, within limits
            # ... but only a runner-up that is itself a contender (measured faster, another executable);
            # otherwise this candidate's failed confirmation, with its interval, is the run's answer.
            if confirmations < MAX_CONFIRMATIONS and any(
                    r.state and r.cost < tuner.default_cost and tuner.ctx.final(r.state).state not in seen
                    for r in ranked[i + 1:]):
                continue
        final = tuner.ctx.final(rec.state)
        best = Candidate(rec.sequence, rec.state, ev.metrics(rec.state), final.metrics if final.ok else None,
                         rec.cost, found)
        validity = report
        claim = verdict
        break
    if best is not None and not (claim.win if claim is not None else best.cost < tuner.default_cost):
        best = replace(best, sequence=())  # nothing beats the default: apply nothing (``found`` keeps the search's)
    compiled, cached = tuner.steps()
    return TuneResult(
        run_id=tuner.run_id, module=tuner.root.name, fingerprint=tuner.root.fingerprint,
        strategy=tuner.strategy_name, objective=obj.name, seed=tuner.seed, budget=tuner.budget,
        evaluations=len(tuner.records), status=status, input=tuner.input_metrics,
        default=tuner.default_result.metrics, default_cost=tuner.default_cost, best=best, validity=validity,
        invalid=tuple(invalid), seconds=time.perf_counter() - tuner.t0, steps_compiled=compiled,
        steps_cached=cached, history=tuple(tuner.best_history), claim=claim,
        executor=_executor_of(ev), phases=tuner.phases.result(), surrogate=tuner.real_info,
    )


def _executor_of(ev: Evaluator) -> dict | None:
    return ev.pipeline.executor.describe()


def validity_of(evaluator: Evaluator, root: Module, state: str, seed: int = 0,
                bound_seconds: float | None = None, progress=None) -> dict:
    """The validation level of ``state`` against ``root`` (``Validation.to_dict()``).

    ``identical`` when the state ends, after XLA's default pipeline, as the same module as the
    default does (both final states are cached transitions, nothing runs); otherwise
    ``validation.establish`` compiles and, where this machine can, executes both modules.
    Levels that are facts about the two modules (identical, executed, executed-with-stand-ins,
    invalid) are cached per (root, state, seed); ``executed-region``, ``compiled`` and
    ``unverified`` depend on this machine's memory and time bound and are established again next
    time. ``bound_seconds`` bounds each execution (``validation.execution_plan``); ``progress``
    hears each step (one line).
    """
    from autotune.core.validation import COMPILED, EXECUTED_REGION, UNVERIFIED, establish

    key = f"{evaluator.version}|{root.fingerprint}|{state}|{seed}"
    report = evaluator.cache.get_report("validation", key)
    if report is None:
        final, default = evaluator.final(state), evaluator.default(root)
        identical = final.ok and default.ok and final.state == default.state
        finals = (evaluator.module(default.state, root.name), evaluator.module(final.state, root.name)) \
            if final.ok and default.ok else None
        result = establish(evaluator.pipeline, root, evaluator.module(state, root.name), seed=seed,
                           identical=identical, bound_seconds=bound_seconds, progress=progress, finals=finals)
        report = result.to_dict()
        if result.level not in (COMPILED, UNVERIFIED, EXECUTED_REGION):
            evaluator.cache.put_report("validation", key, report)
    return report
