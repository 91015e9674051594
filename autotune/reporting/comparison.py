"""The comparison model: one ``RunRow`` per (strategy, module, seed) run (``autotune.reporting.rows``),
one ``StrategySummary`` per strategy, the ``Comparison`` that holds them (round-trips through JSON), and how rows are
rebuilt from runs already in the cache (``row_from_run``, ``comparison_of_runs``: nothing compiled).
The metric is ``autotune.reporting.metric``; the driver that makes the runs is
``autotune.reporting.compare``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

from autotune.core.runs import RunStore
from autotune.core.target import Target
from autotune.core.validation import UNVERIFIED, Validation
from autotune.errors import BadInput
from autotune.reporting.metric import PAPER, RATIO_FLOOR, TIE_RTOL, PaperMetric, paper_metric  # noqa: F401
from autotune.reporting.rows import FAMILIES, RunRow, family_of  # noqa: F401  (their old home)

@dataclass(frozen=True)
class StrategySummary:
    strategy: str  # label
    base_strategy: str
    options: dict
    budget: int
    runs: int
    errors: int
    modules: int
    raw: PaperMetric  # the paper's metric on raw ops
    final: PaperMetric  # ... on final-ops
    by_family: dict[str, dict[str, PaperMetric]]  # family -> {"raw": ..., "final": ...}
    wins: int
    ties: int
    losses: int
    validity_failures: int  # runs whose best candidate was rejected by the validity check
    no_valid_best: int  # runs that ended with no valid sequence at all
    evaluations: int
    seconds: float
    steps_compiled: int
    steps_cached: int
    objective_geomean: float | None  # geometric mean over runs of best objective / default objective

    @property
    def cache_hit_rate(self) -> float:
        total = self.steps_compiled + self.steps_cached
        return self.steps_cached / total if total else 0.0

    @property
    def mean_evaluations(self) -> float:
        ok = self.runs - self.errors
        return self.evaluations / ok if ok else 0.0

    def to_dict(self) -> dict:
        return {
            "strategy": self.strategy, "base_strategy": self.base_strategy, "options": self.options,
            "budget": self.budget, "runs": self.runs, "errors": self.errors, "modules": self.modules,
            "raw": self.raw.to_dict(), "final": self.final.to_dict(),
            "by_family": {f: {k: m.to_dict() for k, m in d.items()} for f, d in self.by_family.items()},
            "wins": self.wins, "ties": self.ties, "losses": self.losses,
            "validity_failures": self.validity_failures, "no_valid_best": self.no_valid_best,
            "evaluations": self.evaluations, "mean_evaluations": self.mean_evaluations, "seconds": self.seconds,
            "steps_compiled": self.steps_compiled, "steps_cached": self.steps_cached,
            "cache_hit_rate": self.cache_hit_rate, "objective_geomean": self.objective_geomean,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "StrategySummary":
        return cls(
            d["strategy"], d["base_strategy"], dict(d.get("options") or {}), d["budget"], d["runs"], d["errors"],
            d["modules"], PaperMetric.from_dict(d["raw"]), PaperMetric.from_dict(d["final"]),
            {f: {k: PaperMetric.from_dict(m) for k, m in v.items()} for f, v in (d.get("by_family") or {}).items()},
            d["wins"], d["ties"], d["losses"], d["validity_failures"], d["no_valid_best"], d["evaluations"],
            d["seconds"], d["steps_compiled"], d["steps_cached"], d.get("objective_geomean"),
        )


def summarise(label: str, base: str, options: dict, budget: int, rows: Sequence[RunRow]) -> StrategySummary:
    ok = [r for r in rows if r.ok]
    families = sorted({r.family for r in ok})
    by_family = {f: {"raw": paper_metric([r for r in ok if r.family == f], final=False),
                     "final": paper_metric([r for r in ok if r.family == f], final=True)} for f in families}
    outcomes = [r.outcome for r in ok]
    rel = [r.best_cost / r.default_cost for r in ok
           if r.best_cost is not None and r.default_cost and r.default_cost > 0 and r.best_cost > 0]
    return StrategySummary(
        strategy=label, base_strategy=base, options=_jsonable(options), budget=budget, runs=len(rows),
        errors=len(rows) - len(ok), modules=len({r.module for r in rows}),
        raw=paper_metric(ok, final=False), final=paper_metric(ok, final=True), by_family=by_family,
        wins=outcomes.count("win"), ties=outcomes.count("tie"), losses=outcomes.count("loss"),
        validity_failures=sum(r.validity_failure for r in ok),
        no_valid_best=sum(1 for r in ok if r.best_raw_ops is None),
        evaluations=sum(r.evaluations for r in ok), seconds=sum(r.seconds for r in rows),
        steps_compiled=sum(r.steps_compiled for r in rows), steps_cached=sum(r.steps_cached for r in rows),
        objective_geomean=math.exp(statistics.fmean(math.log(x) for x in rel)) if rel else None,
    )


def _jsonable(options: dict) -> dict:
    return {k: (v if isinstance(v, (str, int, float, bool)) or v is None else str(v)) for k, v in options.items()}


# ---- the comparison -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModuleInfo:
    name: str
    family: str
    input_ops: int | None
    default_ops: int | None

    @property
    def default_reduction(self) -> int | None:
        if self.input_ops is None or self.default_ops is None:
            return None
        return self.input_ops - self.default_ops


@dataclass(frozen=True)
class Comparison:
    objective: str
    budget: int
    seeds: tuple[int, ...]
    max_length: int
    time_limit: float | None
    validate: bool
    strategies: tuple[str, ...]  # labels, in the order asked
    modules: tuple[ModuleInfo, ...]
    runs: tuple[RunRow, ...]
    summaries: tuple[StrategySummary, ...]
    seconds: float
    pipeline_version: str = ""
    status: str = "finished"  # finished | interrupted
    ratio_floor: float = RATIO_FLOOR
    notes: tuple[str, ...] = ()
    #: Which pipeline applied and judged the runs, in words (``Target.judged_by``; "" when unknown).
    judged_by: str = ""
    #: The baseline every run was measured against, in the backend's words (``Backend.baseline``).
    baseline: str = "XLA's default"

    def summary(self, label: str) -> StrategySummary:
        for s in self.summaries:
            if s.strategy == label:
                return s
        raise KeyError(label)

    def rows(self, label: str | None = None) -> list[RunRow]:
        return [r for r in self.runs if label is None or r.strategy == label]

    def to_dict(self) -> dict:
        return {
            "objective": self.objective, "budget": self.budget, "seeds": list(self.seeds),
            "max_length": self.max_length, "time_limit": self.time_limit, "validate": self.validate,
            "strategies": list(self.strategies),
            "modules": [asdict(m) | {"default_reduction": m.default_reduction} for m in self.modules],
            "summaries": [s.to_dict() for s in self.summaries],
            "runs": [r.to_dict() for r in self.runs],
            "seconds": self.seconds, "pipeline_version": self.pipeline_version, "status": self.status,
            "ratio_floor": self.ratio_floor, "paper": dict(PAPER), "notes": list(self.notes),
            "judged_by": self.judged_by, "baseline": self.baseline,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Comparison":
        return cls(
            objective=d["objective"], budget=d["budget"], seeds=tuple(d["seeds"]), max_length=d["max_length"],
            time_limit=d.get("time_limit"), validate=d.get("validate", True), strategies=tuple(d["strategies"]),
            modules=tuple(ModuleInfo(m["name"], m["family"], m.get("input_ops"), m.get("default_ops"))
                          for m in d["modules"]),
            runs=tuple(RunRow.from_dict(r) for r in d["runs"]),
            summaries=tuple(StrategySummary.from_dict(s) for s in d["summaries"]),
            seconds=d.get("seconds", 0.0), pipeline_version=d.get("pipeline_version", ""),
            status=d.get("status", "finished"), ratio_floor=d.get("ratio_floor", RATIO_FLOOR),
            notes=tuple(d.get("notes") or ()), judged_by=d.get("judged_by", ""),
            baseline=d.get("baseline") or "XLA's default",
        )

    def merged(self, other: "Comparison", notes: Sequence[str] = ()) -> "Comparison":
        """This comparison plus ``other``'s strategies (same objective; modules matched by name)."""
        if other.objective != self.objective:
            raise BadInput(f"cannot merge comparisons on {self.objective} and {other.objective}")
        clash = set(self.strategies) & set(other.strategies)
        if clash:
            raise BadInput(f"both comparisons have strategy {sorted(clash)[0]!r}")
        known = {m.name for m in self.modules}
        return Comparison(
            objective=self.objective, budget=max(self.budget, other.budget),
            seeds=tuple(dict.fromkeys(self.seeds + other.seeds)), max_length=self.max_length,
            time_limit=self.time_limit, validate=self.validate and other.validate,
            strategies=self.strategies + other.strategies,
            modules=self.modules + tuple(m for m in other.modules if m.name not in known),
            runs=self.runs + other.runs, summaries=self.summaries + other.summaries,
            seconds=self.seconds + other.seconds, pipeline_version=self.pipeline_version or other.pipeline_version,
            status="interrupted" if "interrupted" in (self.status, other.status) else "finished",
            ratio_floor=self.ratio_floor, notes=self.notes + other.notes + tuple(notes),
            judged_by=self.judged_by or other.judged_by, baseline=self.baseline,
        )


def row_from_result(label: str, base: str, result, budget: int, seconds: float, compiled: int, cached: int) -> RunRow:
    """The ``RunRow`` of a live ``TuneResult`` (``compare`` builds its table from these; stored runs
    go through the same summary reader, so live and rebuilt reports agree)."""
    history = tuple(None if (h is None or (isinstance(h, float) and math.isnan(h))) else float(h)
                    for h in result.history)
    return _row_from_summary(label, base, result.to_dict(), budget, history, seconds, compiled, cached)


def _row_from_summary(label: str, base: str, s: dict, budget: int, history: tuple[float | None, ...],
                      seconds: float, compiled: int, cached: int) -> RunRow:
    """A ``RunRow`` from a run's summary (``TuneResult.to_dict()``, also what the runs table stores)."""
    best = s.get("best") or None
    validation = Validation.from_dict(s.get("validity"))
    level = validation.level if validation else None
    return RunRow(
        strategy=label, base_strategy=base, module=s["module"], family=family_of(s["module"]), seed=s["seed"],
        budget=budget, run_id=s["run_id"], status=s["status"], evaluations=s["evaluations"],
        input_ops=s["input"]["instructions"], default_ops=s["default"]["instructions"],
        default_cost=float(s["default_cost"]), best_cost=float(best["cost"] if best else s["default_cost"]),
        best_raw_ops=best["raw"]["instructions"] if best else None,
        best_final_ops=best["final"]["instructions"] if best and best.get("final") else None,
        best_sequence=tuple(best["sequence"]) if best else (),
        best_options=dict(best.get("compiler_options") or {}) if best else {},
        valid=None if level in (None, UNVERIFIED) else validation.ok,
        validation=level,
        rejected=tuple((tuple(x["sequence"]), str(x["reason"])) for x in s.get("invalid") or ()),
        seconds=seconds, steps_compiled=compiled, steps_cached=cached, history=history, claim=s.get("claim"),
    )


# ---- reports from runs already in the cache ------------------------------------------------------------
def row_from_run(cache, run_id: str) -> RunRow:
    """A ``RunRow`` rebuilt from a finished run's stored summary and trials (no compiling).

    The best-so-far history is the running minimum of the recorded trials' costs, as the tuner
    kept it while the run worked.
    """
    store = RunStore(cache)
    run = store.get(run_id)
    if not run.finished:
        raise BadInput(f"run '{run_id}' has not finished (status {run.status}); resume it first")
    s = run.summary
    history, low = [], math.inf
    for t in store.trials(run_id):
        if t.status == "ok" and t.cost is not None and not math.isnan(t.cost):
            low = min(low, t.cost)
        history.append(None if low == math.inf else low)
    row = _row_from_summary(run.strategy, run.strategy, s, run.budget, tuple(history),
                            float(s.get("seconds") or 0.0), int(s.get("steps_compiled") or 0),
                            int(s.get("steps_cached") or 0))
    return replace(row, history_seconds=tuple(store.trial_seconds(run_id))[:len(history)])


def comparison_of_runs(cache, run_ids: Sequence[str]) -> Comparison:
    """A ``Comparison`` of runs already in the cache, grouped by strategy (one objective only)."""
    if not run_ids:
        raise BadInput("give the ids of the runs to report on (see `autotune runs`)")
    store = RunStore(cache)
    runs = [store.get(rid) for rid in dict.fromkeys(run_ids)]
    objectives_used = sorted({r.objective for r in runs})
    if len(objectives_used) > 1:
        raise BadInput(f"runs with different objectives ({', '.join(objectives_used)}) cannot share one report")
    judges = sorted({str(r.summary.get("judged_by") or "") for r in runs})
    if len(judges) > 1:
        raise BadInput(f"runs judged by different targets cannot share one report ({'; '.join(j or 'cpu' for j in judges)})")
    rows = [row_from_run(cache, r.id) for r in runs]
    labels = list(dict.fromkeys(r.strategy for r in rows))
    budgets = sorted({r.budget for r in rows})
    modules, seen = [], set()
    for r in rows:
        if r.module not in seen:
            seen.add(r.module)
            modules.append(ModuleInfo(r.module, r.family, r.input_ops, r.default_ops))
    summaries = []
    for label in labels:
        mine = [r for r in rows if r.strategy == label]
        options = next(x.options for x in runs if x.strategy == label)
        summaries.append(summarise(label, label, options, max(r.budget for r in mine), mine))
    notes = () if len(budgets) == 1 else (f"runs had different budgets ({', '.join(map(str, budgets))}); "
                                          "the comparison is not at equal budget",)
    return Comparison(
        objective=objectives_used[0], budget=budgets[-1], seeds=tuple(sorted({r.seed for r in rows})),
        max_length=max(x.max_length for x in runs), time_limit=None,
        validate=all(x.validate for x in runs), strategies=tuple(labels), modules=tuple(modules),
        runs=tuple(rows), summaries=tuple(summaries), seconds=sum(r.seconds for r in rows),
        pipeline_version=", ".join(sorted({x.version for x in runs})), notes=notes, judged_by=judges[0],
        baseline=Target.from_dict(runs[0].summary.get("target")).baseline,
    )
