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


@dataclass(frozen=True)
class Candidate:
    """A module the tuner reports: raw metrics, metrics after XLA's default pipeline, cost."""

    sequence: tuple[str, ...]
    state: str
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
            "cache_hit_rate": self.cache_hit_rate, "executor": self.executor,
        }


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


class _Tuner:
    def __init__(self, evaluator: Evaluator, root: Module, objective: Objective, budget: int,
                 time_limit: float | None, run_id: str, replay: list[TrialRecord], observer: Observer,
                 seed: int = 0, strategy: str = "session"):
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
        # The evaluator may outlive this run (compare, an API session): count this run's steps only.
        self.steps0 = (evaluator.stats.steps_compiled, evaluator.stats.steps_cached)
        self.input_metrics = evaluator.metrics(root.fingerprint)
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
) -> TuneResult:
    """Search for the best pass sequence for ``module`` with ``strategy``.

    The settings may come as keywords or as one ``RunSpec`` (``spec`` wins). ``budget`` counts
    sequence evaluations, cache hits included. ``prune`` shortens the best sequence afterwards
    (passes whose removal does not worsen a deterministic objective are dropped; at most its length
    in extra evaluations, outside the budget). With ``resume=RUN_ID`` every other setting is taken
    from the recorded run and its completed trials are replayed.
    """
    store = RunStore(evaluator.cache)
    observer = observer or Observer()
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
        root = evaluator.prepare(module)
        run_id = new_run_id()
    obj = objective if isinstance(objective, Objective) and objective.name == spec.objective \
        else objectives_mod.get(spec.objective)
    strat = strategy_mod.create(spec.strategy, **spec.options)
    space = SearchSpace(evaluator.pipeline.passes(), spec.max_length)
    store.save(run_id, created=time.time(), updated=time.time(), status="running", module=root.fingerprint,
               module_name=root.name, strategy=spec.strategy, objective=spec.objective, budget=spec.budget,
               seed=spec.seed, max_length=spec.max_length, options=spec.options, version=evaluator.version,
               validate=spec.validate, time_limit=spec.time_limit)

    tuner = _Tuner(evaluator, root, obj, spec.budget, spec.time_limit, run_id, replay, observer, spec.seed,
                   spec.strategy)
    status, reason = "finished", None
    _seed_everything(spec.seed)
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
    finally:
        observer.on_run_end()
    if status == "interrupted":
        store.save(run_id, status="interrupted", updated=time.time())
        raise Interrupted(run_id, _summarise(tuner, status, validate=False, validation_seed=validation_seed,
                                             prune=False), reason)
    result = _summarise(tuner, status, spec.validate, validation_seed, spec.prune)
    store.save(run_id, status=status, updated=time.time(), best_sequence=result.best_sequence,
               best_cost=result.best_cost, summary=result.to_dict())
    return result


class Interrupted(AutotuneError):
    """Ctrl-C: the run is saved; ``partial`` holds the best so far; resume with its id."""

    exit_code = 130

    def __init__(self, run_id: str, partial: TuneResult, reason: str | None = None):
        super().__init__(f"{reason or 'interrupted'}; resume with: autotune run --resume {run_id}")
        self.run_id, self.partial = run_id, partial


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % (2**32))
    except ImportError:  # pragma: no cover
        pass


def _summarise(tuner: _Tuner, status: str, validate: bool, validation_seed: int, prune: bool = True) -> TuneResult:
    """Pick what the run may report: candidates in order of cost, each pruned (deterministic
    objectives), validated, and its win confirmed by the objective; a rejected candidate is
    recorded with its reason and the next one is tried."""
    ev, obj = tuner.ev, tuner.objective
    invalid: list[tuple[tuple[str, ...], str]] = []
    best: Candidate | None = None
    validity = None
    claim: Claim | None = None
    confirmations = 0
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
            seq, state, cost = tuner.prune(rec.sequence, rec.cost)
            rec = replace(rec, sequence=seq, state=state, cost=cost)
        if validate:
            report = validity_of(ev, tuner.root, rec.state, validation_seed)
            if not report["ok"]:
                invalid.append((rec.sequence, report.get("reason") or "outputs differ"))
                tuner.runs.mark_invalid(tuner.run_id, rec.state, report.get("reason"))
                continue
        else:
            from autotune.core.validation import not_checked

            report = not_checked().to_dict()
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
    compiled, cached = tuner.steps()
    return TuneResult(
        run_id=tuner.run_id, module=tuner.root.name, fingerprint=tuner.root.fingerprint,
        strategy=tuner.strategy_name, objective=obj.name, seed=tuner.seed, budget=tuner.budget,
        evaluations=len(tuner.records), status=status, input=tuner.input_metrics,
        default=tuner.default_result.metrics, default_cost=tuner.default_cost, best=best, validity=validity,
        invalid=tuple(invalid), seconds=time.perf_counter() - tuner.t0, steps_compiled=compiled,
        steps_cached=cached, history=tuple(tuner.best_history), claim=claim,
        executor=_executor_of(ev),
    )


def _executor_of(ev: Evaluator) -> dict | None:
    executor = getattr(ev.pipeline, "executor", None)
    return executor.describe() if executor is not None else None


def validity_of(evaluator: Evaluator, root: Module, state: str, seed: int = 0) -> dict:
    """The validation level of ``state`` against ``root`` (``Validation.to_dict()``).

    ``identical`` when the state ends, after XLA's default pipeline, as the same module as the
    default does (both final states are cached transitions, nothing runs); otherwise
    ``validation.establish`` compiles and, where this machine can, executes both modules.
    Levels that are facts about the two modules (identical, executed, executed-with-stand-ins,
    invalid) are cached per (root, state, seed); ``executed-region``, ``compiled`` and
    ``unverified`` depend on this machine's memory and are established again next time.
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
                           identical=identical, finals=finals)
        report = result.to_dict()
        if result.level not in (COMPILED, UNVERIFIED, EXECUTED_REGION):
            evaluator.cache.put_report("validation", key, report)
    return report
