"""``tune``: the one place the search loop closes.

It owns everything a strategy must not: budget accounting (one sequence evaluation = one unit,
cache hits included), the time limit, seeding, the objective, trial records in SQLite, the progress
display, resumption of an interrupted run, and the validity check of the result. A strategy only
sees ``Evaluate`` (sequence -> cost) and the ``SearchSpace``.

Resumption: strategies are deterministic under their seed, so ``resume`` re-runs the strategy
from the start while the recorded trials answer its first asks without compiling or spending
budget again; a run continues exactly where it stopped, with the same accounting.
"""

from __future__ import annotations

import json
import math
import random
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from autotune.core import objectives as objectives_mod
from autotune import strategy as strategy_mod
from autotune.errors import AutotuneError, BadInput
from autotune.core.evaluator import Evaluator, Result
from autotune.core.executors import ExecutorLost
from autotune.core.metrics import Metrics
from autotune.core.module import Module
from autotune.strategy import BudgetExhausted, Evaluate, SearchSpace, Trial

DEFAULT_MAX_LENGTH = 16
#: A failed sequence costs this much more than the XLA default (finite, so optimisers can learn).
FAILURE_FACTOR = 1.25


@dataclass(frozen=True)
class TrialRecord:
    n: int
    sequence: tuple[str, ...]
    cost: float
    status: str  # ok | failed | invalid
    state: str | None
    cached: bool
    message: str | None = None


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
    validity: dict | None  # the validation report of ``best``
    invalid: tuple[tuple[tuple[str, ...], str], ...]  # candidates rejected by the check, with reasons
    seconds: float
    steps_compiled: int
    steps_cached: int
    history: tuple[float, ...]  # best-so-far cost after each evaluation
    executor: dict | None = None  # what ran the steps (autotune.core.executors: local or ray, and where)

    @property
    def best_sequence(self) -> tuple[str, ...]:
        return self.best.sequence if self.best else ()

    @property
    def beats_default(self) -> bool:
        """True when the best valid sequence is strictly better than XLA's default ordering."""
        return self.best is not None and self.best.cost < self.default_cost

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
            "invalid": [{"sequence": list(s), "reason": r} for s, r in self.invalid],
            "improvement_final_ops": self.improvement(True), "improvement_raw_ops": self.improvement(False),
            "seconds": self.seconds, "steps_compiled": self.steps_compiled, "steps_cached": self.steps_cached,
            "cache_hit_rate": self.cache_hit_rate, "executor": self.executor,
        }


class Progress:
    """Progress display hooks; the CLI installs a rich bar, the API default is silent."""

    def start(self, total: int, description: str) -> None: ...

    def update(self, done: int, best: float | None, rate: float, hit_rate: float) -> None: ...

    def stop(self) -> None: ...


class RichProgress(Progress):
    """A rich progress bar with best-so-far, evaluations/s and cache hit rate."""

    def __init__(self, unit: str = ""):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as RP, TextColumn, TimeElapsedColumn

        self.unit = unit
        self._rp = RP(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("best [cyan]{task.fields[best]}"), TextColumn("{task.fields[rate]} eval/s"),
            TextColumn("cache hits {task.fields[hits]}"), TimeElapsedColumn(), transient=False,
        )
        self._task = None

    def start(self, total: int, description: str) -> None:
        self._rp.start()
        self._task = self._rp.add_task(description, total=total, best="-", rate="-", hits="-")

    def update(self, done, best, rate, hit_rate) -> None:
        self._rp.update(
            self._task, completed=done, best="-" if best is None else f"{best:g}",
            rate=f"{rate:.1f}", hits=f"{hit_rate:.0%}",
        )

    def stop(self) -> None:
        self._rp.stop()


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
    def __init__(self, evaluator: Evaluator, root: Module, objective, budget: int, time_limit: float | None,
                 run_id: str, replay: list[TrialRecord], progress: Progress):
        self.ev = evaluator
        self.root = root
        self.objective = objective
        self.budget = budget
        self.deadline = time.monotonic() + time_limit if time_limit else None
        self.run_id = run_id
        self.replay = replay
        self.progress = progress
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
        self.default_cost = self.cost_of_state(default.state, raw=True)
        self.failure_cost = FAILURE_FACTOR * self.default_cost + 1.0
        self._state_of: dict[tuple[str, ...], str | None] = {(): root.fingerprint}
        self._final: dict[str, Result] = {}
        self._empty_cost: float | None = None

    def empty_cost(self) -> float:
        if self._empty_cost is None:
            self._empty_cost = self.cost_of_state(self.root.fingerprint)
        return self._empty_cost

    def time_up(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    # ---- costs ---------------------------------------------------------------------------------
    def cost_of_state(self, state: str, raw: bool = False) -> float:
        """Objective of a module state; ``raw`` skips the default pipeline (for the default itself)."""
        obj = self.objective
        if obj.name == "runtime":
            return self.runtime_of(state)
        if obj.after_default and not raw:
            final = self.final_of([state])[state]
            if not final.ok:
                return math.nan
            return obj.from_metrics(final.metrics)
        return obj.from_metrics(self.ev.metrics(state))

    def final_of(self, states: Sequence[str]) -> dict[str, Result]:
        missing = [s for s in dict.fromkeys(states) if s not in self._final]
        if missing:
            for s, r in zip(missing, self.ev.final_many(missing)):
                self._final[s] = r
        return {s: self._final[s] for s in states}

    def runtime_of(self, state: str) -> float:
        from autotune.core.runtime import measure_runtime

        return measure_runtime(self.ev, state)

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
                    self._truncate_replay(n)
                todo.append(k)
        if todo:
            results = self.ev.evaluate_many(self.root, [seqs[k] for k in todo])
            ok_states = [r.state for r in results if r.ok]
            if self.objective.after_default and self.objective.name != "runtime":
                self.final_of(ok_states)
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
        cost = self.cost_of_state(result.state)
        if math.isnan(cost):
            final = self._final.get(result.state)
            msg = f"XLA's default pipeline fails after this sequence: {final.message if final else '?'}"
            return TrialRecord(n, seq, self.failure_cost, "failed", result.state, cached, msg)
        return TrialRecord(n, seq, cost, "ok", result.state, cached)

    def _record(self, rec: TrialRecord, persist: bool) -> None:
        rec = replace(rec, n=len(self.records))
        self.records.append(rec)
        if persist:
            with self.ev.cache.write() as db:
                db.execute(
                    "INSERT OR REPLACE INTO trials(run, n, sequence, cost, status, cached, state, message, seconds, created)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?)",
                    [self.run_id, rec.n, ",".join(rec.sequence), rec.cost, rec.status, int(rec.cached), rec.state,
                     rec.message, time.perf_counter() - self.t0, time.time()],
                )
        if rec.status == "ok" and (self.best is None or rec.cost < self.best.cost):
            self.best = rec
        self.best_history.append(self.best.cost if self.best else math.nan)
        elapsed = max(1e-9, time.perf_counter() - self.t0)
        compiled, cached = self.steps()
        self.progress.update(len(self.records), self.best.cost if self.best else None,
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
            c = self.cost_of_state(result.state)
            if not math.isnan(c) and c <= cost:
                current, state, cost = candidate, result.state, c
        return current, state, cost

    def _truncate_replay(self, n: int) -> None:
        self.replay = self.replay[:n]
        with self.ev.cache.write() as db:
            db.execute("DELETE FROM trials WHERE run=? AND n>=?", [self.run_id, n])


def evaluation_session(evaluator: Evaluator, module: Module, objective: str = "final-ops", budget: int = 10**9,
                       run_id: str | None = None, time_limit: float | None = None) -> RunEvaluate:
    """An ``Evaluate`` for ``module`` outside a strategy run (e.g. to train a policy on many modules).

    Trials are recorded under ``run_id`` (a fresh id by default) like any run's.
    """
    root = evaluator.prepare(module)
    run_id = run_id or _new_run_id()
    _save_run(evaluator.cache, run_id, created=time.time(), updated=time.time(), status="session",
              module=root.fingerprint, module_name=root.name, strategy="session", objective=objective,
              budget=budget, seed=0, max_length=0, options={}, version=evaluator.version)
    tuner = _Tuner(evaluator, root, objectives_mod.get(objective), budget, time_limit, run_id, [], Progress())
    tuner.strategy_name, tuner.seed = "session", 0
    return RunEvaluate(tuner)


# ---- run records -------------------------------------------------------------------------------------
def _new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def load_run(cache, run_id: str) -> dict:
    row = cache.db.execute("SELECT * FROM runs WHERE id=?", [run_id]).fetchone()
    if row is None:
        raise BadInput(f"no run '{run_id}' in {cache.path}")
    cols = [d[0] for d in cache.db.execute("SELECT * FROM runs LIMIT 0").description]
    return dict(zip(cols, row))


def load_trials(cache, run_id: str) -> list[TrialRecord]:
    rows = cache.db.execute(
        "SELECT n, sequence, cost, status, state, cached, message FROM trials WHERE run=? ORDER BY n", [run_id]
    ).fetchall()
    out = []
    for i, (n, seq, cost, status, state, cached, message) in enumerate(rows):
        if n != i:  # a gap means rows after it were never committed together; replay stops there
            break
        out.append(TrialRecord(n, tuple(s for s in seq.split(",") if s), cost, status, state, bool(cached), message))
    return out


def _save_run(cache, run_id: str, **fields) -> None:
    fields = {k: (json.dumps(v) if isinstance(v, (dict, list)) else v) for k, v in fields.items()}
    with cache.write() as db:
        exists = db.execute("SELECT 1 FROM runs WHERE id=?", [run_id]).fetchone()
        if exists:
            sets = ", ".join(f"{k}=?" for k in fields)
            db.execute(f"UPDATE runs SET {sets} WHERE id=?", [*fields.values(), run_id])
        else:
            keys = ["id", *fields]
            db.execute(f"INSERT INTO runs({', '.join(keys)}) VALUES ({', '.join('?' * len(keys))})", [run_id, *fields.values()])


# ---- the entry point -------------------------------------------------------------------------------------
def tune(
    evaluator: Evaluator,
    module: Module | None,
    strategy: str = "random",
    budget: int = 200,
    objective: str = "final-ops",
    seed: int = 0,
    max_length: int = DEFAULT_MAX_LENGTH,
    time_limit: float | None = None,
    options: dict | None = None,
    progress: Progress | None = None,
    resume: str | None = None,
    validate: bool = True,
    validation_seed: int = 0,
    prune: bool = True,
) -> TuneResult:
    """Search for the best pass sequence for ``module`` with ``strategy``.

    ``budget`` counts sequence evaluations, cache hits included. ``prune`` shortens the best
    sequence afterwards (passes whose removal does not worsen the cost are dropped; at most its
    length in extra evaluations, outside the budget). With ``resume=RUN_ID`` every
    other setting is taken from the recorded run and its completed trials are replayed.
    """
    cache = evaluator.cache
    progress = progress or Progress()
    replay: list[TrialRecord] = []
    if resume:
        run = load_run(cache, resume)
        if run["version"] != evaluator.version:
            raise BadInput(f"run '{resume}' was made with {run['version']}, not {evaluator.version}")
        proto = cache.state_proto(evaluator.version, run["module"])
        if proto is None:
            raise BadInput(f"run '{resume}': its module is no longer in the cache")
        root = Module(run["module_name"], proto, run["module"])
        strategy, objective, budget, seed = run["strategy"], run["objective"], run["budget"], run["seed"]
        max_length = run["max_length"]
        options = json.loads(run["options"] or "{}")
        validate = validate and bool(run["validate"])
        if time_limit is None and run["time_limit"]:
            time_limit = run["time_limit"]
        replay = load_trials(cache, resume)
        run_id = resume
    else:
        if module is None:
            raise BadInput("no module to tune")
        if budget is None or budget < 1:
            raise BadInput(f"--budget must be a positive number of evaluations, not {budget}")
        if time_limit is not None and time_limit <= 0:
            raise BadInput("--time-limit must be positive")
        root = evaluator.prepare(module)
        run_id = _new_run_id()
    obj = objectives_mod.get(objective)
    strat = strategy_mod.create(strategy, **(options or {}))
    space = SearchSpace(evaluator.pipeline.passes(), max_length)
    _save_run(cache, run_id, created=time.time(), updated=time.time(), status="running", module=root.fingerprint,
              module_name=root.name, strategy=strategy, objective=objective, budget=budget, seed=seed,
              max_length=max_length, options=options or {}, version=evaluator.version, validate=int(validate),
              time_limit=time_limit)

    tuner = _Tuner(evaluator, root, obj, budget, time_limit, run_id, replay, progress)
    tuner.strategy_name, tuner.seed = strategy, seed
    status, reason = "finished", None
    _seed_everything(seed)
    progress.start(budget, f"{strategy} on {root.name}")
    try:
        try:
            strat.minimize(RunEvaluate(tuner), space, seed)
        except BudgetExhausted:
            pass
        if tuner.time_up():
            status = "time-limit"
    except KeyboardInterrupt:
        status = "interrupted"
    except ExecutorLost as exc:  # the cluster went away: stop as on Ctrl-C, completed trials kept
        status, reason = "interrupted", str(exc)
    finally:
        progress.stop()
    if status == "interrupted":
        _save_run(cache, run_id, status="interrupted", updated=time.time())
        raise Interrupted(run_id, _summarise(tuner, status, validate=False, validation_seed=validation_seed,
                                             prune=False), reason)
    result = _summarise(tuner, status, validate, validation_seed, prune)
    _save_run(cache, run_id, status=status, updated=time.time(),
              best_sequence=",".join(result.best_sequence), best_cost=result.best_cost, summary=result.to_dict())
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
    ev = tuner.ev
    invalid: list[tuple[tuple[str, ...], str]] = []
    best: Candidate | None = None
    validity = None
    ranked = sorted((r for r in tuner.records if r.status == "ok"), key=lambda r: (r.cost, r.n))
    seen: set[str] = set()
    for rec in ranked:
        if rec.state in seen or rec.state is None:
            continue
        seen.add(rec.state)
        if len(seen) > 8:  # give up after 8 distinct rejected candidates
            break
        found = rec.sequence
        if prune and rec.cost < tuner.default_cost and tuner.objective.name != "runtime":
            seq, state, cost = tuner.prune(rec.sequence, rec.cost)
            rec = replace(rec, sequence=seq, state=state, cost=cost)
        report = None
        if validate:
            report = validity_of(ev, tuner.root, rec.state, validation_seed)
            if not report["ok"]:
                invalid.append((rec.sequence, report.get("reason") or "outputs differ"))
                _mark_invalid(ev.cache, tuner.run_id, rec.state, report.get("reason"))
                continue
        final = tuner.final_of([rec.state])[rec.state]
        best = Candidate(rec.sequence, rec.state, ev.metrics(rec.state), final.metrics if final.ok else None, rec.cost,
                         found)
        validity = report
        break
    compiled, cached = tuner.steps()
    return TuneResult(
        run_id=tuner.run_id, module=tuner.root.name, fingerprint=tuner.root.fingerprint,
        strategy=tuner.strategy_name, objective=tuner.objective.name, seed=tuner.seed, budget=tuner.budget, evaluations=len(tuner.records),
        status=status, input=tuner.input_metrics, default=tuner.default_result.metrics,
        default_cost=tuner.default_cost, best=best, validity=validity, invalid=tuple(invalid),
        seconds=time.perf_counter() - tuner.t0, steps_compiled=compiled, steps_cached=cached,
        history=tuple(tuner.best_history), executor=_executor_of(ev),
    )


def _executor_of(ev: Evaluator) -> dict | None:
    executor = getattr(ev.pipeline, "executor", None)
    return executor.describe() if executor is not None else None


def validity_of(evaluator: Evaluator, root: Module, state: str, seed: int = 0) -> dict:
    """Validate (full compile + same outputs on random inputs), cached per (root, state, seed)."""
    key = f"{evaluator.version}|{root.fingerprint}|{state}|{seed}"
    report = evaluator.cache.get_report("validity", key)
    if report is None:
        from autotune.core.validation import validate as run_validation

        report = run_validation(evaluator.pipeline, root, evaluator.module(state, root.name), seed=seed).to_dict()
        evaluator.cache.put_report("validity", key, report)
    return report


def _mark_invalid(cache, run_id: str, state: str, reason: str | None) -> None:
    with cache.write() as db:
        db.execute("UPDATE trials SET status='invalid', message=? WHERE run=? AND state=? AND status='ok'",
                   [f"validation failed: {reason}", run_id, state])
