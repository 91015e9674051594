"""``autotune passes``: the action vocabulary discovered from the installed compiler."""

from __future__ import annotations


import click


from autotune.cli import cli
from autotune.cli.common import console, db_option, json_option, print_json, target_option


@cli.command()
@db_option
@target_option
@json_option
def passes(db, include_target_specific, as_json) -> None:
    """List the action vocabulary discovered from the installed XLA."""
    from autotune import pipelines
    from autotune.core.cache import Cache

    cache = Cache(db)
    try:
        backend = pipelines.get("xla", cache=cache, include_target_specific=include_target_specific)
        inv = backend.inventory
        rows = [
            {
                "name": a.name,
                "order": a.order,
                "pipeline": " > ".join(reversed((inv.main_pipeline,) + a.path)) if not a.target_specific else "",
                "macro": a.macro,
                "target_specific": a.target_specific,
            }
            for a in inv.actions.values()
        ]
        if as_json:
            print_json({"xla_version": inv.xla_version, "pipeline_version": backend.version, "count": len(rows), "actions": rows})
            return
        from rich.table import Table

        table = Table(title=f"{len(rows)} actions discovered from {inv.xla_version}")
        table.add_column("#", justify="right")
        table.add_column("action")
        table.add_column("runs inside")
        table.add_column("kind")
        for i, r in enumerate(rows):
            table.add_row(str(i), r["name"], r["pipeline"], "sub-pipeline" if r["macro"] else (r["target_specific"] or "pass"))
        console().print(table)
    finally:
        cache.close()


