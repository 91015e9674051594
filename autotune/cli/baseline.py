"""``autotune baseline``: a module as loaded and after XLA's default ordering."""

from __future__ import annotations

import click

from autotune.errors import AutotuneError
from autotune.cli import cli
from autotune.cli.common import db_option, json_option, load_model, metrics_row, metrics_table, print_json, workers_option, executor_option


@cli.command()
@click.argument("model", type=click.Path())
@db_option
@workers_option
@executor_option
@json_option
def baseline(model, db, workers, as_json) -> None:
    """Measure MODEL as loaded and after XLA's default ordering of the same action set."""
    from autotune.cli.common import open_engine

    module = load_model(model)
    with open_engine(db, workers=workers or 1) as ev:
        root = ev.prepare(module)
        metrics = ev.metrics(root.fingerprint)
        default = ev.default(root)
        if not default.ok:
            raise AutotuneError(f"{ev.pipeline.baseline} pipeline failed on {model}: {default.message}")
        base = ev.pipeline.baseline
        out = {
            "module": module.name,
            "fingerprint": root.fingerprint,
            "pipeline_version": ev.version,
            "input": metrics_row(metrics),
            "default": metrics_row(default.metrics),
            "default_reduction": metrics.instructions - default.metrics.instructions,
        }
    if as_json:
        print_json(out)
        return
    metrics_table(f"{module.name}: {base} ordering", [("input", metrics), (base, default.metrics)])


