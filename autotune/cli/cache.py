"""``autotune cache stats|prune``: inspect and shrink the result cache."""

from __future__ import annotations

import click


from autotune.cli import cli
from autotune.cli.common import console, db_option, json_option, print_json


@cli.group()
def cache() -> None:
    """Inspect the result cache."""


@cache.command("stats")
@db_option
@json_option
def cache_stats(db, as_json) -> None:
    """Rows, sizes and failures stored in the cache database."""
    from autotune.core.cache import Cache

    c = Cache(db)
    try:
        stats = c.stats()
    finally:
        c.close()
    stats.pop("session", None)
    if as_json:
        print_json(stats)
        return
    from rich.table import Table

    table = Table(title=f"cache {stats['path']}")
    table.add_column("what")
    table.add_column("value", justify="right")
    for key, value in stats.items():
        if key != "path":
            table.add_row(key, str(value))
    console().print(table)



@cache.command("prune")
@click.option("--failures", is_flag=True, help="Forget failed steps (crashes, timeouts, errors) so they are retried.")
@click.option("--other-versions", is_flag=True, help="Delete results of other XLA/pipeline versions, other targets included (keep those of --target).")
@db_option
@json_option
def cache_prune(failures, other_versions, db, as_json) -> None:
    """Shrink the cache: failed steps, other versions' results, and module blobs nothing refers to."""
    from autotune.core.cache import Cache

    version = None
    if other_versions:
        from autotune.cli.common import backend_options
        from autotune.core import backend as backends

        c = Cache(db)
        try:
            options = backend_options()
            version = backends.get(options.pop("name"), cache=c, **options).version
        finally:
            c.close()
    c = Cache(db)
    try:
        before = c.stats()["file_bytes"]
        deleted = c.prune(failures=failures, other_versions_than=version)
        after = c.stats()["file_bytes"]
    finally:
        c.close()
    if as_json:
        print_json({"deleted": deleted, "file_bytes_before": before, "file_bytes_after": after})
    else:
        click.echo(", ".join(f"{n} {what}" for what, n in deleted.items()) + f" deleted; {before} -> {after} bytes")


