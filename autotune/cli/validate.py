"""``autotune validate ORIGINAL TUNED``: same outputs on the same random inputs?"""

from __future__ import annotations

import sys

import click

from autotune.cli import cli
from autotune.cli.common import console, db_option, engine_options, json_option, load_model, print_json


@cli.command()
@click.argument("original", type=click.Path())
@click.argument("tuned", type=click.Path())
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--all-outputs", is_flag=True, help="List every output, not only the ones that differ.")
@click.option("--validate-seconds", type=float, default=None,
              help="Longest one execution may take; a longer one is declined (estimated first) or stopped "
                   "(default 30, or $AUTOTUNE_VALIDATE_SECONDS).")
@db_option
@json_option
def validate(original, tuned, seed, all_outputs, validate_seconds, db, as_json) -> None:
    """Establish the strongest check this machine can make that TUNED computes what ORIGINAL computes:
    compile both with XLA's full CPU pipeline and run them on the same seeded random inputs (dtype-aware:
    valid integer indices, finite floats), comparing every output with dtype-aware tolerances; where
    the whole modules cannot run here (memory, or longer than --validate-seconds), only the regions
    that differ, or compile only. With a GPU --target, TUNED must first pass that GPU's whole
    pipeline (compiled without a GPU); the outputs are still compared on this host's CPU. Prints
    the level (identical, executed, executed-region, compiled, ...). Exit 0 when nothing was found
    wrong, 1 when outputs differ or TUNED does not compile."""
    from autotune.api import Session
    from autotune.core.limits import validate_seconds as bound

    original_module, tuned_module = load_model(original), load_model(tuned)
    seconds = bound(validate_seconds)  # a bad value is one line and exit 2, before anything runs
    with Session(db, workers=1, **engine_options()) as session:
        result = session.validation(original_module, tuned_module, seed=seed, validate_seconds=seconds)
    if as_json:
        print_json(result.to_dict())
        sys.exit(0 if result.ok else 1)
    report = result.report
    if report is not None:
        from rich.table import Table

        rows = [o for o in report.outputs if all_outputs or not o.ok]
        if rows:
            table = Table(title=f"{len(report.outputs)} outputs, inputs {report.inputs}, seed {report.seed}")
            for col in ("output", "shape", "dtype", "max |diff|", "max rel diff", "mismatches", "ok"):
                table.add_column(col, justify="right")
            for o in rows:
                table.add_row(str(o.index), "x".join(map(str, o.shape)) or "scalar", o.dtype, f"{o.max_abs_diff:.3g}",
                              f"{o.max_rel_diff:.3g}", str(o.mismatches), "yes" if o.ok else "NO")
            console().print(table)
    if result.ok:
        click.echo(f"OK: {result.describe()}")
    else:
        click.echo(f"MISMATCH: {result.reason or 'outputs differ'}")
    sys.exit(0 if result.ok else 1)
