"""Compare search strategies on many modules at equal budgets, with the 2023 paper's metric.

``compare`` runs every (strategy, module, seed) through ``autotune.core.tuner.tune`` on ONE shared
evaluator (one cache, one worker pool), so a compile step one run needed is never repeated by
another, and returns a ``Comparison``: one ``RunRow`` per run plus one ``StrategySummary`` per
strategy. ``autotune.reporting.report`` turns it into Markdown/HTML/PNG; ``to_dict``/``from_dict`` round-trip
it through JSON.

The paper's metric ("Target-independent XLA optimization using Reinforcement Learning", 2023)
-----------------------------------------------------------------------------------------------
For one module, with ``I`` the instruction count of the (normalised) input, ``D`` the count after
XLA's default ordering, and ``T`` the count of the tuned module::

    ratio = (I - T) / (I - D)          # tuned reduction / default reduction

and a strategy's score is the geometric mean of ``ratio`` over modules; ``score - 1`` is the "x% more
reduction than XLA's default" the paper reports. Computed twice:

* **raw ops**: ``T`` = instructions right after the tuned sequence (the paper's own metric);
* **final-ops**: ``T`` = instructions after the tuned sequence *followed by XLA's default pipeline*
  (what the backend actually sees; the honest number).

Edge cases, decided here and stated in every report:

* **Seeds**: per module, the ratios of its seeds are averaged (arithmetic mean) first, then the
  geometric mean runs over modules.
* **Ratio <= 0** (the tuned sequence removed nothing or added instructions, e.g. a raw-ops ratio of a
  sequence that skips XLA's canonicalising expanders) has no logarithm: each run's ratio is floored at
  ``RATIO_FLOOR`` (0.01, i.e. "1% of the default's reduction") before averaging, and the number of
  floored runs is reported next to the mean. The floor is a heavy penalty (log 0.01 = -4.6), on
  purpose: a geometric mean must not hide a module the strategy made worse.
* **Default reduction <= 0** (XLA's default ordering removes nothing from this module, so no ratio
  exists): the module is left out of that strategy's geometric mean and counted as ``excluded``.
* **No valid best** (every candidate failed or was rejected by validation; ``TuneResult.best`` is
  None): the user keeps the untuned module, so the raw ratio is 0 (floored, counted) and the
  final-ops ratio is 1 (XLA's default pipeline alone).
* **Tuned module that XLA's pipeline cannot finish** (possible only with the ``ops`` objective and no
  validation): final-ops ratio floored and counted.
* **Runs that raised** (e.g. XLA's default pipeline fails on the module): kept as rows with
  ``error`` set, counted, and left out of every aggregate.

Wins / ties / losses compare each run's best objective value with XLA's default ordering on the
same objective (``TuneResult.best_cost`` vs ``default_cost``; a tie is equality within a relative
1e-9, which for instruction counts means equal).

Accounting: ``evaluations`` is the budget actually spent (``TuneResult.evaluations``); wall time is
measured around each ``tune`` call (validation included); compiled/cached steps are the shared
evaluator's counters before and after the run (``TuneResult.steps_*`` are cumulative over the
evaluator). The order of strategies is rotated per (module, seed), so no strategy always runs first on
a module with a cold cache (results do not depend on order: strategies are deterministic under their
seed with a cold or warm cache; only wall time and hit rate do).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from autotune.core.spec import DEFAULT_MAX_LENGTH, DEFAULT_OBJECTIVE, check_budget, check_max_length, check_time_limit
from autotune.errors import BadInput

RATIO_FLOOR = 0.01
TIE_RTOL = 1e-9
FAMILIES = ("gpt2", "bert", "resnet")
#: Keys of ``options_per_strategy[label]`` that configure the comparison, not the strategy.
RESERVED_OPTIONS = ("strategy", "budget")

#: The 2023 paper's headline numbers (raw-ops metric, geometric mean of the ratio, minus 1).
PAPER = {"gpt2": 0.133, "mixed": 0.104}


def family_of(name: str) -> str:
    """Model family from a module name prefix: gpt2_/bert_/resnet_, else "other"."""
    low = name.lower()
    for fam in FAMILIES:
        if low.startswith(fam + "_"):
            return fam
    return "other"


# ---- rows ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunRow:
    """One (strategy, module, seed) run, flattened to JSON-friendly fields."""

    strategy: str  # the label (a strategy name, or a configured variant such as "ppo-zero-shot")
    base_strategy: str  # the strategy plugin that ran
    module: str
    family: str
    seed: int
    budget: int
    run_id: str | None = None
    status: str = "finished"  # finished | time-limit | interrupted | error
    error: str | None = None
    evaluations: int = 0
    input_ops: int | None = None
    default_ops: int | None = None
    default_cost: float | None = None
    best_cost: float | None = None  # objective of the reported best (default_cost when none)
    best_raw_ops: int | None = None
    best_final_ops: int | None = None
    best_sequence: tuple[str, ...] = ()
    valid: bool | None = None  # validity of the reported best (None: not validated / no best)
    rejected: tuple[tuple[tuple[str, ...], str], ...] = ()  # candidates rejected by validation
    validation: str | None = None  # validation level of the reported best (``autotune.core.validation``)
    seconds: float = 0.0
    steps_compiled: int = 0
    steps_cached: int = 0
    history: tuple[float | None, ...] = ()  # best-so-far objective after each evaluation (None: nothing ok yet)

    # -- derived ----------------------------------------------------------------------------------------
    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def default_reduction(self) -> int | None:
        if self.input_ops is None or self.default_ops is None:
            return None
        return self.input_ops - self.default_ops

    def ratio(self, final: bool = True) -> float | None:
        """Tuned reduction / default reduction, unfloored; None when undefined (see module doc)."""
        red = self.default_reduction
        if not self.ok or red is None or red <= 0:
            return None
        if self.best_raw_ops is None:  # no valid best: the untuned module (+ XLA's default for final)
            return 1.0 if final else 0.0
        tuned = self.best_final_ops if final else self.best_raw_ops
        if tuned is None:  # XLA's pipeline fails after the sequence: counts as nothing gained
            return -math.inf
        return (self.input_ops - tuned) / red

    def floored_ratio(self, final: bool = True) -> float | None:
        r = self.ratio(final)
        return None if r is None else max(r, RATIO_FLOOR)

    def improvement(self, final: bool = True) -> float | None:
        r = self.ratio(final)
        return None if r is None or math.isinf(r) else r - 1.0

    @property
    def outcome(self) -> str | None:
        """win / tie / loss against XLA's default on the objective (None for an errored run)."""
        if not self.ok or self.default_cost is None or self.best_cost is None:
            return None
        tol = TIE_RTOL * max(1.0, abs(self.default_cost))
        if self.best_cost < self.default_cost - tol:
            return "win"
        if self.best_cost > self.default_cost + tol:
            return "loss"
        return "tie"

    @property
    def validity_failure(self) -> bool:
        """The run's best (at least one top candidate) was rejected by the validity check."""
        return bool(self.rejected)

    @property
    def cache_hit_rate(self) -> float:
        total = self.steps_compiled + self.steps_cached
        return self.steps_cached / total if total else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["best_sequence"] = list(self.best_sequence)
        d["rejected"] = [{"sequence": list(s), "reason": r} for s, r in self.rejected]
        d["history"] = [None if h is None else float(h) for h in self.history]
        d.update(
            default_reduction=self.default_reduction,
            ratio_raw=_json_num(self.ratio(False)), ratio_final=_json_num(self.ratio(True)),
            improvement_raw=self.improvement(False), improvement_final=self.improvement(True),
            outcome=self.outcome, validity_failure=self.validity_failure, cache_hit_rate=self.cache_hit_rate,
        )
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RunRow":
        names = set(cls.__dataclass_fields__)
        kw = {k: v for k, v in d.items() if k in names}
        kw["best_sequence"] = tuple(kw.get("best_sequence") or ())
        kw["rejected"] = tuple((tuple(x["sequence"]), x["reason"]) for x in kw.get("rejected") or ())
        kw["history"] = tuple(kw.get("history") or ())
        return cls(**kw)


def _json_num(x: float | None):
    if x is None:
        return None
    if math.isinf(x):
        return "-inf" if x < 0 else "inf"
    return x


# ---- aggregates -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PaperMetric:
    """The paper's metric over a set of runs: geometric mean of per-module (seed-averaged) ratios."""

    geomean_ratio: float | None  # None: no module had a defined ratio
    modules: int  # modules in the mean
    floored_runs: int  # runs whose ratio was < RATIO_FLOOR (incl. <= 0) and was floored
    excluded_modules: int  # modules left out: XLA's default reduces nothing (or every run errored)
    per_module: dict[str, float] = field(default_factory=dict)  # seed-averaged floored ratio per module

    @property
    def improvement(self) -> float | None:
        """``geomean - 1``: the "x% more reduction than XLA's default" of the paper."""
        return None if self.geomean_ratio is None else self.geomean_ratio - 1.0

    def to_dict(self) -> dict:
        return {"geomean_ratio": self.geomean_ratio, "improvement": self.improvement, "modules": self.modules,
                "floored_runs": self.floored_runs, "excluded_modules": self.excluded_modules,
                "per_module": dict(self.per_module)}

    @classmethod
    def from_dict(cls, d: dict) -> "PaperMetric":
        return cls(d["geomean_ratio"], d["modules"], d["floored_runs"], d["excluded_modules"],
                   dict(d.get("per_module") or {}))


def paper_metric(rows: Sequence[RunRow], final: bool = True) -> PaperMetric:
    """Aggregate ``rows`` (one strategy) as the paper does; see the module doc for the edge cases."""
    by_module: dict[str, list[RunRow]] = {}
    for r in rows:
        by_module.setdefault(r.module, []).append(r)
    per_module: dict[str, float] = {}
    floored = excluded = 0
    for module, runs in by_module.items():
        ratios = []
        for r in runs:
            raw = r.ratio(final)
            if raw is None:
                continue
            if raw < RATIO_FLOOR:
                floored += 1
            ratios.append(max(raw, RATIO_FLOOR))
        if not ratios:
            excluded += 1
            continue
        per_module[module] = sum(ratios) / len(ratios)
    if not per_module:
        return PaperMetric(None, 0, floored, excluded, {})
    geo = math.exp(sum(math.log(v) for v in per_module.values()) / len(per_module))
    return PaperMetric(geo, len(per_module), floored, excluded, per_module)


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
            notes=tuple(d.get("notes") or ()),
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
        )


# ---- progress ----------------------------------------------------------------------------------------------
class CompareProgress:
    """Hooks for a display over the runs of a comparison (the default is silent)."""

    def start(self, total: int) -> None: ...

    def run_started(self, index: int, label: str, module: str, seed: int, budget: int) -> None: ...

    def run_finished(self, index: int, row: RunRow) -> None: ...

    def tune_progress(self):
        """An ``autotune.core.observer.Observer`` for the run in flight (per-evaluation bar), or None."""
        return None

    def stop(self) -> None: ...


# ---- entry point ---------------------------------------------------------------------------------------------
def resolve(strategies: Sequence[str], options_per_strategy: dict | None) -> list[tuple[str, str, dict, int | None]]:
    """(label, strategy, options, budget override) per requested label; BadInput for unknown names.

    A label is a strategy name, or any name whose ``options_per_strategy`` entry says
    ``{"strategy": NAME, ...}`` (a configured variant, e.g. ``"ppo-zero-shot"``). The reserved key
    ``budget`` overrides the shared budget for that label (e.g. a zero-shot roll-out of a trained
    policy); every other key is passed to the strategy.
    """
    from autotune import strategy as strategy_mod

    if not strategies:
        raise BadInput("no strategies to compare")
    labels = list(strategies)
    if len(set(labels)) != len(labels):
        dup = next(s for s in labels if labels.count(s) > 1)
        raise BadInput(f"strategy '{dup}' is listed twice")
    opts_all = dict(options_per_strategy or {})
    unknown_keys = sorted(set(opts_all) - set(labels))
    if unknown_keys:
        raise BadInput(f"options given for '{unknown_keys[0]}', which is not among the strategies compared")
    out = []
    for label in labels:
        opts = dict(opts_all.get(label) or {})
        base = opts.pop("strategy", label)
        budget = opts.pop("budget", None)
        if budget is not None:
            try:
                check_budget(budget)
            except BadInput as exc:
                raise BadInput(f"{label}: {exc}") from None
        cls = strategy_mod.load(base)  # UnknownName (BadInput) before any work
        cls(**opts)  # options checked up front too (unknown options -> BadInput)
        out.append((label, base, opts, budget))
    return out


def compare(
    evaluator,
    modules: list,
    strategies: list[str],
    budget: int,
    seeds: list[int],
    objective: str = DEFAULT_OBJECTIVE,
    time_limit: float | None = None,
    max_length: int = DEFAULT_MAX_LENGTH,
    options_per_strategy: dict | None = None,
    validate: bool = True,
    progress: CompareProgress | None = None,
) -> Comparison:
    """Run every (strategy, module, seed) through ``tune`` at equal budgets on one shared evaluator.

    ``modules`` are ``autotune.core.module.Module`` objects (named; the family comes from the name
    prefix). ``options_per_strategy`` maps a label to strategy options (see ``resolve``).
    A Ctrl-C stops after the run in flight: its partial result is kept and the comparison is
    returned with ``status="interrupted"``.
    """
    from autotune.core import objectives

    check_budget(budget)
    check_max_length(max_length)
    check_time_limit(time_limit)
    if not seeds:
        raise BadInput("no seeds given")
    if not modules:
        raise BadInput("no modules to compare on")
    names = [m.name for m in modules]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise BadInput(f"two modules are named '{dup}'; module names must be unique in a comparison")
    objectives.get(objective)
    plan = resolve(strategies, options_per_strategy)
    seeds = list(dict.fromkeys(int(s) for s in seeds))
    progress = progress or CompareProgress()

    t0 = time.perf_counter()
    jobs = []
    for mi, module in enumerate(modules):
        for si, seed in enumerate(seeds):
            k = (mi * len(seeds) + si) % len(plan)
            for label, base, opts, own_budget in plan[k:] + plan[:k]:  # rotate who meets the cold cache
                jobs.append((len(jobs), module, seed, label, base, opts, own_budget or budget))
    settings = dict(objective=objective, max_length=max_length, time_limit=time_limit, validate=validate)
    progress.start(len(jobs))
    parallel = _parallel_runs(evaluator)
    try:
        if parallel > 1:
            done, status = _run_concurrently(evaluator, jobs, settings, progress, parallel)
        else:
            done, status = [], "finished"
            try:
                for job in jobs:
                    row, stop = _run_one(evaluator, job, settings, progress, per_evaluation=True)
                    if row is not None:
                        done.append((job[0], row))
                    if stop:
                        status = "interrupted"
                        break
            except KeyboardInterrupt:  # between two runs: keep what is done
                status = "interrupted"
    finally:
        progress.stop()
    runs = [row for _, row in sorted(done, key=lambda x: x[0])]
    infos: dict[str, ModuleInfo] = {}
    for row in runs:
        if row.input_ops is not None:
            infos.setdefault(row.module, ModuleInfo(row.module, row.family, row.input_ops, row.default_ops))

    summaries = []
    for label, base, opts, own_budget in plan:
        rows = [r for r in runs if r.strategy == label]
        summaries.append(summarise(label, base, opts, own_budget or budget, rows))
    module_infos = tuple(infos.get(m.name) or ModuleInfo(m.name, family_of(m.name), None, None) for m in modules)
    return Comparison(
        objective=objective, budget=budget, seeds=tuple(seeds), max_length=max_length, time_limit=time_limit,
        validate=validate, strategies=tuple(label for label, *_ in plan), modules=module_infos,
        runs=tuple(runs), summaries=tuple(summaries), seconds=time.perf_counter() - t0,
        pipeline_version=getattr(evaluator, "version", ""), status=status,
    )


def _parallel_runs(evaluator) -> int:
    """Runs to keep in flight at once: one per worker when the executor can take several driver
    threads at once (Ray); one otherwise (the local pool is one process's, used by one loop)."""
    executor = getattr(evaluator.pipeline, "executor", None)
    if not getattr(executor, "concurrent", False) or evaluator.cache.path == ":memory:":
        return 1
    return max(1, int(getattr(evaluator.pipeline, "workers", 1)))


def _run_one(evaluator, job, settings: dict, progress, per_evaluation: bool) -> tuple[RunRow | None, bool]:
    """One (module, strategy, seed) run -> (its row or None, whether the comparison must stop)."""
    from autotune.core.tuner import Interrupted, tune

    index, module, seed, label, base, opts, run_budget = job
    progress.run_started(index, label, module.name, seed, run_budget)
    before = (evaluator.stats.steps_compiled, evaluator.stats.steps_cached)
    start = time.perf_counter()
    row, result, stop = None, None, False
    try:
        result = tune(evaluator, module, strategy=base, budget=run_budget, seed=seed, options=dict(opts),
                      observer=progress.tune_progress() if per_evaluation else None, **settings)
    except Interrupted as exc:
        result, stop = exc.partial, True
    except KeyboardInterrupt:
        stop = True
    except BadInput:
        raise
    except Exception as exc:  # noqa: BLE001 - one module's failure must not lose the rest
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        row = RunRow(label, base, module.name, family_of(module.name), seed, run_budget, status="error", error=msg)
    seconds = time.perf_counter() - start
    compiled = evaluator.stats.steps_compiled - before[0]
    cached = evaluator.stats.steps_cached - before[1]
    if result is not None:
        row = _row(label, base, result, run_budget, seconds, compiled, cached)
    elif row is not None:
        row = _replace(row, seconds=seconds, steps_compiled=compiled, steps_cached=cached)
    if row is not None:
        progress.run_finished(index, row)
    return row, stop


def _run_concurrently(evaluator, jobs, settings: dict, progress, parallel: int):
    """Several runs at once over one executor (``compare --executor ray``): each driver thread has
    its own Evaluator and its own handle on the same cache file (so step counts stay per run and no
    SQLite connection is shared between threads); every compile goes to the shared worker pool."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from autotune.core.cache import Cache
    from autotune.core.evaluator import Evaluator

    local = threading.local()
    handles: list = []
    stop = threading.Event()

    def work(job):
        if stop.is_set():
            return job[0], None
        if not hasattr(local, "ev"):
            local.ev = Evaluator(evaluator.pipeline, Cache(evaluator.cache.path))
            handles.append(local.ev.cache)
        row, interrupted = _run_one(local.ev, job, settings, progress, per_evaluation=False)
        if interrupted:
            stop.set()
        return job[0], row

    try:
        with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="autotune-run") as pool:
            done = [(i, row) for i, row in pool.map(work, jobs) if row is not None]
    except KeyboardInterrupt:
        stop.set()
        done = []
    finally:
        for cache in handles:
            cache.close()
    return done, "interrupted" if stop.is_set() else "finished"


def _replace(row: RunRow, **kw) -> RunRow:
    from dataclasses import replace

    return replace(row, **kw)


def _row(label: str, base: str, result, budget: int, seconds: float, compiled: int, cached: int) -> RunRow:
    history = tuple(None if (h is None or (isinstance(h, float) and math.isnan(h))) else float(h)
                    for h in result.history)
    return _row_from_summary(label, base, result.to_dict(), budget, history, seconds, compiled, cached)


def _row_from_summary(label: str, base: str, s: dict, budget: int, history: tuple[float | None, ...],
                      seconds: float, compiled: int, cached: int) -> RunRow:
    """A ``RunRow`` from a run's summary (``TuneResult.to_dict()``, also what the runs table stores)."""
    from autotune.core.validation import UNVERIFIED, Validation

    best = s.get("best") or None
    validity = s.get("validity")
    level = s.get("validation_level") or (Validation.from_dict(validity).level if validity else None)
    return RunRow(
        strategy=label, base_strategy=base, module=s["module"], family=family_of(s["module"]), seed=s["seed"],
        budget=budget, run_id=s["run_id"], status=s["status"], evaluations=s["evaluations"],
        input_ops=s["input"]["instructions"], default_ops=s["default"]["instructions"],
        default_cost=float(s["default_cost"]), best_cost=float(best["cost"] if best else s["default_cost"]),
        best_raw_ops=best["raw"]["instructions"] if best else None,
        best_final_ops=best["final"]["instructions"] if best and best.get("final") else None,
        best_sequence=tuple(best["sequence"]) if best else (),
        valid=None if level in (None, UNVERIFIED) else bool(validity.get("ok")),
        validation=level,
        rejected=tuple((tuple(x["sequence"]), str(x["reason"])) for x in s.get("invalid") or ()),
        seconds=seconds, steps_compiled=compiled, steps_cached=cached, history=history,
    )


# ---- reports from runs already in the cache ------------------------------------------------------------
def row_from_run(cache, run_id: str) -> RunRow:
    """A ``RunRow`` rebuilt from a finished run's stored summary and trials (no compiling).

    The best-so-far history is the running minimum of the recorded trials' costs, as the tuner
    kept it while the run worked.
    """
    from autotune.core.runs import RunStore

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
    return _row_from_summary(run.strategy, run.strategy, s, run.budget, tuple(history),
                             float(s.get("seconds") or 0.0), int(s.get("steps_compiled") or 0),
                             int(s.get("steps_cached") or 0))


def comparison_of_runs(cache, run_ids: Sequence[str]) -> Comparison:
    """A ``Comparison`` of runs already in the cache, grouped by strategy (one objective only)."""
    from autotune.core.runs import RunStore

    if not run_ids:
        raise BadInput("give the ids of the runs to report on (see `autotune runs`)")
    store = RunStore(cache)
    runs = [store.get(rid) for rid in dict.fromkeys(run_ids)]
    objectives_used = sorted({r.objective for r in runs})
    if len(objectives_used) > 1:
        raise BadInput(f"runs with different objectives ({', '.join(objectives_used)}) cannot share one report")
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
        pipeline_version=", ".join(sorted({x.version for x in runs})), notes=notes,
    )
