"""``autotune runs``: the tuning runs a cache holds, newest first (ids for --resume and export).

A run id starts with its start time (``YYYYMMDD-HHMMSS-``), so the table needs no date column."""

from __future__ import annotations

import click

from autotune.cli import cli
from autotune.cli.common import console, db_option, json_option, print_json



def list_runs(cache, limit: int | None = None, module: str | None = None) -> list[dict]:
    """One dict per run (newest first): id, when, status, module, strategy, objective, budget,
    evaluations recorded, best cost, XLA default's cost, whether it beat the default and was valid."""
    from autotune.core.runs import RunStore

    out = []
    for r in RunStore(cache).list(limit, module):
        s, v = r.summary or {}, r.validation
        out.append({
            "run_id": r.id, "created": r.created, "updated": r.updated, "status": r.status, "module": r.module_name,
            "fingerprint": r.module, "strategy": r.strategy, "objective": r.objective, "budget": r.budget,
            "seed": r.seed, "evaluations": r.evaluations, "best_cost": r.best_cost,
            "default_cost": s.get("default_cost"), "beats_default": s.get("beats_default"),
            "valid": v.ok if v else None, "validation": v.level if v else None,
        })
    return out


@cli.command()
@click.option("--limit", "-n", type=click.IntRange(min=1), default=20, show_default=True, help="Newest N runs.")
@click.option("--all", "show_all", is_flag=True, help="Every run (overrides --limit).")
@click.option("--module", default=None, help="Only runs on this module (name or fingerprint).")
@db_option
@json_option
def runs(limit, show_all, module, db, as_json) -> None:
    """List the tuning runs recorded in the cache, newest first: the ids that `run --resume`,
    `export` and `check` take, with each run's status, budget spent and best result."""
    from autotune.core.cache import Cache

    cache = Cache(db)
    try:
        rows = list_runs(cache, None if show_all else limit, module)
    finally:
        cache.close()
    if as_json:
        print_json(rows)
        return
    if not rows:
        click.echo(f"no runs in {cache.path}" + (f" for module {module}" if module else ""))
        return
    from rich import box
    from rich.table import Table

    table = Table(
        box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, padding=(0, 1), title=f"runs in {cache.path}",
        caption="best and XLA's default in the run's objective (final-ops unless named); (=) nothing beat the "
                "default; status blank = finished",
    )
    table.add_column("run id", no_wrap=True)
    for col, width in (("module", 10), ("strategy", 8)):
        table.add_column(col, overflow="fold", min_width=width)
    for col in ("evals", "best", "default"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("validation", overflow="fold", min_width=8)
    table.add_column("status", overflow="fold", min_width=4)
    for r in rows:
        best = "-" if r["best_cost"] is None else f"{r['best_cost']:g}"
        if r["objective"] != "final-ops":
            best += f" {r['objective']}"
        if r["beats_default"] is False:
            best += " (=)"
        elif r["valid"] is False:
            best += " (invalid)"
        table.add_row(r["run_id"], r["module"], r["strategy"], f"{r['evaluations']}/{r['budget']}", best,
                      "-" if r["default_cost"] is None else f"{r['default_cost']:g}", r["validation"] or "-",
                      "" if r["status"] == "finished" else r["status"])
    console().print(table)
