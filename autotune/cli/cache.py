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
@click.option("--dry-run", is_flag=True, help="Say what would be deleted and removed; change nothing.")
@db_option
@json_option
def cache_prune(failures, other_versions, dry_run, db, as_json) -> None:
    """Shrink the cache: failed steps, other versions' results, module blobs nothing refers to, and this
    machine's pass inventories of compilers that are no longer installed."""
    from autotune.core.cache import Cache
    from autotune.pipelines.xla import machine_inventory

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
        deleted = c.prune(failures=failures, other_versions_than=version, dry_run=dry_run)
        after = c.stats()["file_bytes"]
    finally:
        c.close()
    inventories = machine_inventory.prune(dry_run=dry_run)
    if as_json:
        print_json({"deleted": deleted, "file_bytes_before": before, "file_bytes_after": after, "dry_run": dry_run,
                    "inventories": {"files": [str(p) for p in inventories.files], "bytes": inventories.bytes,
                                    "compilers": list(inventories.compilers)}})
        return
    verb = "would be deleted" if dry_run else "deleted"
    click.echo(", ".join(f"{n} {what}" for what, n in deleted.items()) + f" {verb}; "
               + (f"{before} bytes now" if dry_run else f"{before} -> {after} bytes"))
    if inventories.files:
        click.echo(f"machine inventories: {len(inventories.files)} files ({inventories.bytes} bytes) of compilers no "
                   f"longer installed {'would be removed' if dry_run else 'removed'}: " + "; ".join(inventories.compilers))
    else:
        click.echo("machine inventories: none of a compiler no longer installed")
