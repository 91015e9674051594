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

For a measured objective (``runtime``) the search's costs are noisy samples: a run's outcome is its
confirmation instead (``RunRow.claim``: the interleaved A/B ratio tuned/default with its confidence
interval): a win only when the whole interval lies below ``1 - min_effect``, a loss only when it
lies above ``1 + min_effect``, otherwise a tie ("no significant difference").

Accounting: ``evaluations`` is the budget actually spent (``TuneResult.evaluations``); wall time is
measured around each ``tune`` call (validation included); compiled/cached steps are the shared
evaluator's counters before and after the run (``TuneResult.steps_*`` are cumulative over the
evaluator). The order of strategies is rotated per (module, seed), so no strategy always runs first on
a module with a cold cache (results do not depend on order: strategies are deterministic under their
seed with a cold or warm cache; only wall time and hit rate do).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from autotune.core.spec import DEFAULT_MAX_LENGTH, DEFAULT_OBJECTIVE, check_budget, check_max_length, check_time_limit
from autotune.errors import BadInput
from autotune.reporting.comparison import Comparison, ModuleInfo, RunRow, family_of, row_from_result, summarise
from autotune import strategy as strategy_mod
from autotune.core import objectives
from autotune.core.tuner import Interrupted, tune
from autotune.core.cache import Cache
from autotune.core.runs import RunStore
from autotune.core.evaluator import Evaluator

#: Keys of ``options_per_strategy[label]`` that configure the comparison, not the strategy.
RESERVED_OPTIONS = ("strategy", "budget")


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
    screen: bool = True,
) -> Comparison:
    """Run every (strategy, module, seed) through ``tune`` at equal budgets on one shared evaluator.

    ``modules`` are ``autotune.core.module.Module`` objects (named; the family comes from the name
    prefix). ``options_per_strategy`` maps a label to strategy options (see ``resolve``). ``screen=False``:
    a measured objective's runs skip the screen (``core/screen.py``), each strategy alone; a note says so.
    A Ctrl-C stops after the run in flight: its partial result is kept and the comparison is
    returned with ``status="interrupted"``.
    """
    _check_settings(modules, budget, seeds, objective, time_limit, max_length)
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
    settings = dict(objective=objective, max_length=max_length, time_limit=time_limit, validate=validate,
                    screen=screen)
    notes = () if screen or not objectives.get(objective).judges_options else (
        "every run skipped the screen (--no-screen): each strategy searched alone, no single option value was "
        "raced against XLA's default first",)
    progress.start(len(jobs))
    parallel = _parallel_runs(evaluator)
    try:
        if parallel > 1:
            done, status = _run_concurrently(evaluator, jobs, settings, progress, parallel)
        else:
            done, status = _run_in_turn(evaluator, jobs, settings, progress)
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
        pipeline_version=evaluator.version, status=status, judged_by=evaluator.pipeline.target.judged_by(),
        baseline=evaluator.pipeline.baseline, notes=notes,
    )


def _check_settings(modules: list, budget: int, seeds: list[int], objective: str, time_limit, max_length: int) -> None:
    """Every setting of a comparison checked before its first run (``BadInput``, one line)."""
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


def _run_in_turn(evaluator, jobs: list, settings: dict, progress) -> tuple[list, str]:
    """The runs one after another (an executor that takes one driver thread): ``(done, status)``."""
    done, status = [], "finished"
    try:
        for job in jobs:
            row, stop = _run_one(evaluator, job, settings, progress, per_evaluation=True)
            if row is not None:
                done.append((job[0], row))
            if stop:
                return done, "interrupted"
    except KeyboardInterrupt:  # between two runs: keep what is done
        status = "interrupted"
    return done, status


def _parallel_runs(evaluator) -> int:
    """Runs to keep in flight at once: one per worker when the executor can take several driver
    threads at once (Ray); one otherwise (the local pool is one process's, used by one loop)."""
    if not evaluator.pipeline.executor.concurrent or evaluator.cache.path == ":memory:":
        return 1
    return max(1, int(evaluator.pipeline.workers))


def _run_one(evaluator, job, settings: dict, progress, per_evaluation: bool) -> tuple[RunRow | None, bool]:
    """One (module, strategy, seed) run -> (its row or None, whether the comparison must stop)."""
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
        row = row_from_result(label, base, result, run_budget, seconds, compiled, cached)
        if row.run_id:  # the wall-time axis of its search (report plots for a measured objective)
            row = replace(row, history_seconds=tuple(RunStore(evaluator.cache).trial_seconds(row.run_id)))
    elif row is not None:
        row = replace(row, seconds=seconds, steps_compiled=compiled, steps_cached=cached)
    if row is not None:
        progress.run_finished(index, row)
    return row, stop


def _run_concurrently(evaluator, jobs, settings: dict, progress, parallel: int):
    """Several runs at once over one executor (``compare --executor ray``): each driver thread has
    its own Evaluator and its own handle on the same cache file (so step counts stay per run and no
    SQLite connection is shared between threads); every compile goes to the shared worker pool."""
    import threading
    from concurrent.futures import ThreadPoolExecutor


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


