"""``autotune validate ORIGINAL TUNED``: same outputs on the same random inputs?"""

from __future__ import annotations

import sys

import click

from autotune.cli import cli
from autotune.cli.common import console, db_option, json_option, load_model, print_json


@cli.command()
@click.argument("original", type=click.Path())
@click.argument("tuned", type=click.Path())
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--all-outputs", is_flag=True, help="List every output, not only the ones that differ.")
@db_option
@json_option
def validate(original, tuned, seed, all_outputs, db, as_json) -> None:
    """Compile both modules with XLA's full CPU pipeline, run them on the same seeded random inputs
    (dtype-aware: valid integer indices, finite floats) and compare every output with dtype-aware
    tolerances. Exit 0 when they match, 1 when they differ or TUNED does not compile."""
    from autotune.api import Session

    original_module, tuned_module = load_model(original), load_model(tuned)
    with Session(db, workers=1) as session:
        report = session.validate(original_module, tuned_module, seed=seed)
    if as_json:
        print_json(report.to_dict())
    else:
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
        worst = max(report.outputs, key=lambda o: (o.max_abs_diff if o.max_abs_diff == o.max_abs_diff else -1.0),
                    default=None)
        if report.ok:
            click.echo(f"OK: all {len(report.outputs)} outputs match"
                       + (f" (largest difference {worst.max_abs_diff:.3g} in output {worst.index})" if worst else ""))
        else:
            click.echo(f"MISMATCH: {report.reason}")
    sys.exit(0 if report.ok else 1)
