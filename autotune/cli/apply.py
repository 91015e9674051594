"""``autotune apply``: one pass sequence applied to a module, metrics before and after."""

from __future__ import annotations

from pathlib import Path

import click

from autotune.errors import BadInput
from autotune.cli import cli
from autotune.cli.common import check_writable, db_option, die, json_option, load_model, metrics_row, metrics_table, print_json, target_specific_option, workers_option, executor_option, write_module


@cli.command()
@click.argument("model", type=click.Path())
@click.option("--passes", "pass_list", required=True, help="Comma-separated actions, applied in this order.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the resulting module (HLO text; .pb for a serialized proto).")
@db_option
@workers_option
@executor_option
@target_specific_option
@json_option
def apply(model, pass_list, output, db, workers, include_target_specific, as_json) -> None:
    """Apply a pass sequence to MODEL and print the metrics before and after."""
    from autotune.cli.common import open_engine

    sequence = [p.strip() for p in pass_list.split(",") if p.strip()]
    if not sequence:
        raise BadInput("--passes is empty")
    if output:
        check_writable(Path(output))
    module = load_model(model)
    with open_engine(db, workers=workers or 1, include_target_specific=include_target_specific) as ev:
        ev.pipeline.check_passes(sequence)
        root = ev.prepare(module)
        before = ev.metrics(root.fingerprint)
        result = ev.evaluate(root, sequence)
        if not result.ok:
            if as_json:
                print_json({"module": module.name, "sequence": sequence, "status": result.status,
                             "failed_at": result.failed_at, "message": result.message})
            die(f"pass '{sequence[result.failed_at]}' (step {result.failed_at + 1}) failed "
                 f"[{result.status}]: {result.message}", 1)
        tuned = ev.module(result.state, module.name)
        if output:
            write_module(tuned, Path(output), ev.pipeline)
        out = {
            "module": module.name,
            "sequence": sequence,
            "status": "ok",
            "before": metrics_row(before),
            "after": metrics_row(result.metrics),
            "steps_compiled": result.compiled,
            "steps_cached": result.cached,
            "output": output,
        }
    if as_json:
        print_json(out)
        return
    metrics_table(f"{module.name}: {','.join(sequence)}", [("before", before), ("after", result.metrics)])
    click.echo(f"steps compiled: {result.compiled}, from cache: {result.cached}" + (f"; wrote {output}" if output else ""))


