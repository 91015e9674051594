"""``autotune explore MODEL --depth N``: every sequence of up to N passes, walked over distinct states."""

from __future__ import annotations

import click

from autotune.cli import cli
from autotune.cli.common import console, db_option, json_option, load_model, print_json, workers_option, executor_option


@cli.command()
@click.argument("model", type=click.Path())
@click.option("--depth", type=click.IntRange(1, 6), default=2, show_default=True,
              help="Longest sequence enumerated (3 takes minutes on a ~1,000-instruction module).")
@click.option("--no-validate", is_flag=True, help="Skip the validity check of the best sequence.")
@db_option
@workers_option
@executor_option
@json_option
def explore(model, depth, no_validate, db, workers, as_json) -> None:
    """Exhaustive search: every sequence of up to DEPTH passes, each followed by XLA's default
    pipeline (objective final-ops). Sequences that reach the same module share all later work, so
    each distinct module is expanded once. Says whether anything within DEPTH passes beats XLA's
    default ordering, and the shortest sequence that does best."""
    from autotune.cli.common import open_engine
    from autotune.core.explore import explore as walk
    from autotune.core.observer import Observer
    from autotune.reporting.progress import RichObserver

    module = load_model(model)
    with open_engine(db, workers=workers) as ev:
        out = walk(ev, module, depth, observer=Observer() if as_json else RichObserver(), validate=not no_validate)
        base = ev.pipeline.baseline
    if as_json:
        print_json(out.to_dict())
        return
    from rich.table import Table

    table = Table(title=out.module, caption=f"every sequence of up to {depth} passes: {out.sequences_covered:,} sequences, "
                                            f"{out.distinct_states} distinct modules, {out.steps_compiled} steps "
                                            f"compiled, {out.seconds:.0f}s")
    for col in ("", "instructions"):
        table.add_column(col, justify="left" if not col else "right")
    table.add_row("input", str(out.input_ops))
    table.add_row(f"{base} (final-ops)", str(out.default_final_ops))
    table.add_row("best within depth (final-ops)", str(out.best_final_ops))
    console().print(table)
    if not out.improved:
        click.echo(f"Nothing within {depth} passes beats {base} ordering on final-ops.")
        return
    fewer = (out.default_final_ops - out.best_final_ops) / out.default_final_ops
    ours, xla = out.input_ops - out.best_final_ops, out.input_ops - out.default_final_ops
    more = f", {ours / xla - 1:+.1%} more reduction from the input" if xla > 0 else ""
    click.echo(f"best sequence: {','.join(out.best_sequence)} ({fewer:.1%} fewer instructions than {base}{more})")
    if out.valid is None:
        click.echo("validity: not checked (--no-validate)")
    elif out.valid:
        click.echo("validity: ok (full compile, same outputs on seeded random inputs)")
    else:
        click.echo(f"validity: FAILED: {out.validity_message}")
