"""``autotune report RUN_ID...``: a comparison report from runs already in the cache.

Runs made one by one (``autotune run``), on several machines sharing a cache file, or by an
interrupted ``compare`` get the same report ``compare`` writes, without compiling anything again.
"""

from __future__ import annotations

from pathlib import Path

import click

from autotune.cli import cli
from autotune.cli.common import check_writable, db_option, json_option


@cli.command()
@click.argument("run_ids", nargs=-1, metavar="RUN_ID...")
@click.option("--module", default=None, help="Instead of ids: every finished run on this module (name or fingerprint).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="results/report", show_default=True,
              help="Directory for report.md, report.html, comparison.json and the plots.")
@click.option("--title", default=None, help="Report title (default: the strategies compared).")
@db_option
@json_option
def report(run_ids, module, out_dir, title, db, as_json) -> None:
    """Write a strategy-comparison report (Markdown, HTML, JSON, plots) from finished runs in the
    cache, grouped by strategy: the same report `compare` writes, with nothing compiled again.
    `autotune runs` lists the ids."""
    from autotune.core.cache import Cache
    from autotune.cli.compare import publish
    from autotune.cli.runs import list_runs
    from autotune.reporting.comparison import comparison_of_runs
    from autotune.errors import BadInput

    out = Path(out_dir)
    check_writable(out, directory=True)
    cache = Cache(db)
    try:
        ids = list(run_ids)
        if module is not None:
            finished = [r for r in list_runs(cache, None, module) if r["default_cost"] is not None]
            ids += [r["run_id"] for r in finished]
            if not ids:
                raise BadInput(f"no finished runs on module '{module}' in {cache.path}")
        comp = comparison_of_runs(cache, ids)
    finally:
        cache.close()
    publish(comp, out, title, as_json)
