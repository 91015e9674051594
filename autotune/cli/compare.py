"""``autotune compare``: several strategies on many modules at equal budgets, with a written report."""

from __future__ import annotations

from pathlib import Path

import click

from autotune.errors import AutotuneError, BadInput
from autotune.cli import cli
from autotune.reporting.progress import RichCompareProgress
from autotune.core.spec import DEFAULT_MAX_LENGTH, check_budget, check_max_length
from autotune.cli.common import check_writable, coerce, console, db_option, json_option, load_model, module_paths, print_json, workers_option, executor_option


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise BadInput(f"--seeds expects comma-separated integers, got '{text}'") from None
    if not seeds:
        raise BadInput("--seeds is empty")
    return list(dict.fromkeys(seeds))


def parse_strategy_options(pairs) -> dict:
    """``LABEL.KEY=VALUE`` pairs -> {label: {key: value}}."""
    out: dict[str, dict] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        label, dot, name = key.partition(".")
        if not sep or not dot or not label.strip() or not name.strip():
            raise BadInput(f"--option expects STRATEGY.KEY=VALUE, got '{pair}'")
        out.setdefault(label.strip(), {})[name.strip().replace("-", "_")] = coerce(value.strip())
    return out


@cli.command("compare")
@click.argument("modules", nargs=-1, type=click.Path(), metavar="MODULES...")
@click.option("--strategies", "-s", "strategy_list", default="random,greedy,optuna,nevergrad,ppo", show_default=True,
              help="Comma-separated strategies (see `autotune strategies`).")
@click.option("--budget", "-b", type=int, default=50, show_default=True,
              help="Sequence evaluations per run (every strategy, module and seed), cache hits included.")
@click.option("--seeds", default="0", show_default=True, help="Comma-separated seeds; every run is repeated per seed.")
@click.option("--time-limit", type=float, default=None, help="Stop each run after this many seconds.")
@click.option("--objective", default="final-ops", show_default=True,
              help="final-ops | ops | cost | runtime (see README: Objectives).")
@click.option("--max-length", type=int, default=DEFAULT_MAX_LENGTH, show_default=True, help="Longest pass sequence.")
@click.option("--split", type=click.Choice(["train", "test"]), default=None,
              help="For suite directories: only this side of the manifest's train/test split.")
@click.option("--option", "-O", "extra", multiple=True,
              help="Strategy option STRATEGY.KEY=VALUE (repeatable), e.g. ppo.policy=policy.zip.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="results/compare", show_default=True,
              help="Directory for report.md, report.html, comparison.json and the plots.")
@click.option("--no-validate", is_flag=True, help="Skip the validity check of each run's best sequence.")
@click.option("--no-screen", is_flag=True,
              help="runtime: skip the screen in every run (each strategy alone, as `autotune run --no-screen`); "
                   "the report says so.")
@db_option
@workers_option
@executor_option
@json_option
def compare_cmd(modules, strategy_list, budget, seeds, time_limit, objective, max_length, split, extra, out_dir,
                no_validate, no_screen, db, workers, as_json) -> None:
    """Compare search strategies on MODULES (.hlo files or directories) at equal budgets; write a report."""
    from autotune.core import objectives
    from autotune.reporting.compare import compare, resolve
    from autotune.cli.common import open_engine

    strategies = [s.strip() for s in strategy_list.split(",") if s.strip()]
    if not strategies:
        raise BadInput("--strategies is empty")
    check_budget(budget)
    check_max_length(max_length)
    if time_limit is not None and time_limit <= 0:
        raise BadInput("--time-limit must be positive")
    seed_list = parse_seeds(seeds)
    objectives.get(objective)
    options = parse_strategy_options(extra)
    resolve(strategies, options)  # unknown strategies or options fail before any work
    if not modules:
        raise BadInput("give MODULES to compare on (.hlo files or directories)")
    paths = module_paths(modules, split)
    out = Path(out_dir)
    check_writable(out, directory=True)
    loaded = [load_model(str(p)) for p in paths]  # BadInput names the bad file
    names = [m.name for m in loaded]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise BadInput(f"two modules are named '{dup}'; module names must be unique in a comparison")

    progress = None if as_json else RichCompareProgress()
    with open_engine(db, workers=workers) as ev:
        comp = compare(ev, loaded, strategies, budget=budget, seeds=seed_list, objective=objective,
                       time_limit=time_limit, max_length=max_length, options_per_strategy=options,
                       validate=not no_validate, screen=not no_screen, progress=progress)
    publish(comp, out, None, as_json)
    if comp.status == "interrupted":
        raise Interrupted()


def publish(comp, out: Path, title: str | None, as_json: bool) -> None:
    """Write ``comp``'s report files into ``out``, then print its JSON or a summary table."""
    from autotune.reporting.report import write_report
    from autotune.reporting.timing import measured, time_summaries

    try:
        files = write_report(comp, out, title=title or f"Strategy comparison: {', '.join(comp.strategies)}")
    except OSError as exc:
        raise BadInput(f"{out}: cannot write the report ({exc.strerror or exc})") from None
    if as_json:
        data = comp.to_dict()
        for r in data["runs"]:
            r.pop("history", None)
        data["report"] = {"markdown": str(files.markdown), "html": str(files.html), "json": str(files.json),
                          "images": [str(p) for p in files.images.values()]}
        if measured(comp):  # a measured objective's headline: time per strategy (``reporting/timing.py``)
            data["time"] = [t.to_dict() for t in time_summaries(comp)]
        print_json(data)
    else:
        _summary(comp, files)


class Interrupted(AutotuneError):
    exit_code = 130

    def __init__(self):
        super().__init__("interrupted; the report covers the runs that finished")


def _summary(comp, files) -> None:
    from rich.table import Table

    from autotune.reporting.metric import PAPER
    from autotune.reporting.report import metric_cell, pct
    from autotune.reporting.timing import measured, ratio_cell, seconds_cell, time_summaries

    out = console()
    timed = measured(comp)
    if timed:  # a measured objective leads with what was measured; op counts are in the report, lower
        confidence = next((t.confidence for t in time_summaries(comp)), 0.95)
        table = Table(title=f"{len(comp.modules)} modules x {len(comp.seeds)} seed(s), budget {comp.budget}, "
                            f"objective {comp.objective}: measured time against {comp.baseline} (tuned/default, "
                            "geometric mean over runs; below 1 is faster)")
        for col in ("strategy", f"time ratio [{confidence:.0%} CI]", "win/tie/loss", "s to first win", "invalid",
                    "evals", "time"):
            table.add_column(col, justify="left" if col == "strategy" else "right")
        by_label = {s.strategy: s for s in comp.summaries}
        for t in time_summaries(comp):
            s = by_label[t.strategy]
            table.add_row(t.strategy, ratio_cell(t), f"{t.wins}/{t.ties}/{t.losses}", seconds_cell(t),
                          str(s.validity_failures), str(s.evaluations), f"{s.seconds:.0f}s")
    else:
        table = Table(title=f"{len(comp.modules)} modules x {len(comp.seeds)} seed(s), budget {comp.budget}, "
                            f"objective {comp.objective}: improvement over the reduction of {comp.baseline} (geomean)")
        for col in ("strategy", "raw ops", "final-ops", "win/tie/loss", "invalid", "evals", "time", "cache hits"):
            table.add_column(col, justify="left" if col == "strategy" else "right")
        for s in comp.summaries:
            table.add_row(s.strategy, metric_cell(s.raw), metric_cell(s.final), f"{s.wins}/{s.ties}/{s.losses}",
                          str(s.validity_failures), str(s.evaluations), f"{s.seconds:.0f}s", f"{s.cache_hit_rate:.0%}")
    out.print(table)
    claims = [r for r in comp.runs if r.claim and r.claim.get("measured")]
    if claims:  # a measured objective: each run's confirmation, with its interval
        ct = Table(title=f"runtime claims (interleaved A/B against {comp.baseline}; tuned/default)")
        for col in ("module", "strategy", "seed", "ratio", "interval", "verdict"):
            ct.add_column(col, justify="right" if col in ("ratio", "interval", "seed") else "left")
        for r in claims:
            c = r.claim
            ct.add_row(r.module, r.strategy, str(r.seed), f"{c['ratio']:.3f}", f"[{c['low']:.3f}, {c['high']:.3f}]",
                       ("win" if c["win"] else "no significant difference" if r.outcome == "tie" else "slower")
                       + f" ({c['confidence']:.0%}, {c['rounds']} rounds)")
        out.print(ct)
    if not timed:
        out.print(f"paper (2023, raw ops, PPO + shaping): GPT-2 {pct(PAPER['gpt2'])}, mixed {pct(PAPER['mixed'])}")
    out.print(f"report: {files.markdown} (also report.html, comparison.json and the plots in {files.html.parent})")
