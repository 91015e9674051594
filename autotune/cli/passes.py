"""``autotune passes``: the action vocabulary discovered from the installed compiler."""

from __future__ import annotations

from autotune.cli import cli
from autotune.cli.common import backend_options, console, db_option, json_option, print_json, target_specific_option


@cli.command()
@db_option
@target_specific_option
@json_option
def passes(db, include_target_specific, as_json) -> None:
    """List the action vocabulary discovered from the installed compiler."""
    from autotune.core import backend as backends
    from autotune.core.cache import Cache

    cache = Cache(db)
    try:
        options = {"include_target_specific": True} if include_target_specific else {}
        options.update(backend_options())
        backend = backends.get(options.pop("name"), cache=cache, **options)
        rows = [{"name": p.name, "order": i, "pipeline": p.runs_inside, "kind": p.kind}
                for i, p in enumerate(backend.describe())]
        if as_json:
            print_json({"backend": backend.name, "target": backend.target.key, "compiler_version": backend.compiler_version,
                        "pipeline_version": backend.version, "count": len(rows), "actions": rows})
            return
        from rich.table import Table

        table = Table(title=f"{len(rows)} actions discovered from {backend.compiler_version}"
                            + (f" ({backend.target.judged_by()})" if backend.target.is_gpu else ""))
        table.add_column("#", justify="right")
        table.add_column("action")
        table.add_column("runs inside")
        table.add_column("kind")
        for i, r in enumerate(rows):
            table.add_row(str(i), r["name"], r["pipeline"], r["kind"])
        console().print(table)
    finally:
        cache.close()


