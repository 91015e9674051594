"""``autotune export`` and ``autotune check``: tuning records as a CI gate."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from autotune.cli import cli
from autotune.cli.common import check_writable, console, db_option, json_option, load_model, print_json, workers_option


@cli.command()
@click.argument("run_id")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True, help="Record file to write (JSON).")
@db_option
@json_option
def export(run_id, output, db, as_json) -> None:
    """Write the tuning record (lockfile) of a finished run."""
    from autotune.cli.common import open_engine
    from autotune.core.record import from_run

    check_writable(Path(output))
    with open_engine(db, workers=1) as ev:
        record = from_run(ev, run_id)
    record.save(Path(output))
    if as_json:
        print_json(record.to_dict())
    else:
        opts = f" and {len(record.compiler_options)} compiler option(s)" if record.compiler_options else ""
        click.echo(f"wrote {output}: {record.module} ({record.fingerprint[:12]}), {len(record.sequence)} passes{opts}, "
                   f"{record.objective} {record.metrics['cost']:g} vs default {record.metrics['default_cost']:g}"
                   + f"; validation {record.validation or 'none'}" + ("" if record.valid else "  [NOT validated]"))


@cli.command()
@click.argument("model", type=click.Path())
@click.option("--record", "record_path", type=click.Path(dir_okay=False), required=True, help="Tuning record (JSON).")
@click.option("--max-regression", type=click.FloatRange(min=0), default=None,
              help="Allowed worsening of the recorded metric, in percent (default 0). Runtime: of the tuned/default "
                   "ratio; without it a record that is still a confirmed win passes, and otherwise it fails only when "
                   "the win is gone or today's interval lies wholly above the recorded one; with it, that interval "
                   "test (the recorded slow end raised this much) decides alone. A record made by another XLA is judged "
                   "by what it saves over each version's own default: at least the lesser of the same count and "
                   "the same share, this much more cost allowed.")
@click.option("--no-validate", is_flag=True, help="Skip the output comparison.")
@click.option("--confirm-rounds", type=int, default=None,
              help="runtime records: interleaved A/B rounds of each of the re-timing's independent measurements "
                   "[default: 10, as run's confirmation].")
@db_option
@workers_option
@json_option
def check(model, record_path, max_regression, no_validate, confirm_rounds, db, workers, as_json) -> None:
    """Re-apply a recorded sequence to MODEL with the installed XLA; exit 1 if it no longer holds."""
    from autotune.cli.common import open_engine
    from autotune.core.record import TuningRecord, check as run_check

    record = TuningRecord.load(record_path)
    module = load_model(model)
    with open_engine(db, workers=workers or 1) as ev:
        result = run_check(ev, module, record, max_regression=max_regression, validate=not no_validate,
                           confirm_rounds=confirm_rounds)
    if as_json:
        print_json(result.to_dict())
    else:
        from rich.table import Table

        table = Table(title=f"check {result.module} against {record_path}")
        table.add_column("")
        table.add_column("value")
        table.add_row("fingerprint", "matches" if result.fingerprint == result.record_fingerprint else "CHANGED")
        if record.compiler_options:
            table.add_row("compiler options", ", ".join(f"{k}={v!r}" if v == "" else f"{k}={v}"
                                                        for k, v in sorted(result.compiler_options.items())) or "none")
            if result.options_note:
                table.add_row("options note", result.options_note)
        table.add_row(f"{record.objective} (recorded)", f"{result.recorded_cost:g}")
        table.add_row(f"{record.objective} (now)", "-" if result.cost is None else f"{result.cost:g}")
        table.add_row(f"{ev.pipeline.baseline} (now)", "-" if result.default_cost is None else f"{result.default_cost:g}")
        table.add_row("regression", "-" if result.regression is None else f"{result.regression:+.2%}")
        if result.claim and result.claim.get("measured"):
            c = result.claim
            table.add_row("tuned/default (recorded)", "-" if record.metrics.get("ratio") is None
                          else f"{record.metrics['ratio']:.3f}")
            table.add_row("tuned/default (now)", f"{c['ratio']:.3f} [{c['low']:.3f}, {c['high']:.3f}] "
                          f"({c['confidence']:.0%} CI, "
                          + (f"{c['instances']} independent measurements, " if c.get("instances") else "")
                          + f"{c['rounds']} interleaved rounds)")
        table.add_row("validation (recorded)", result.recorded_validation or "-")
        table.add_row("validation (now)", "-" if result.validation is None else
                      result.validation + (f" ({result.validation_reason})" if result.validation_reason else ""))
        if not result.judged_note and result.pipeline_version != result.record_pipeline_version:
            table.add_row("note", "recorded with another XLA/pipeline version")
        console().print(table)
        if result.rule:  # which rule decided a measured record
            click.echo(f"rule: {result.rule}")
        if result.judged_note:  # a line of its own: how a record of another XLA was judged, never cut by the table
            click.echo(f"judged: {result.judged_note}")
        click.echo("OK: the record holds" if result.ok else "FAILED: " + "; ".join(result.reasons))
    sys.exit(0 if result.ok else 1)
