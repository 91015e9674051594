"""``autotune explain``: what a tuned sequence changes against XLA's default, and how to reproduce it.

``autotune explain RUN_ID`` explains a finished run's best sequence; ``autotune explain MODEL
--passes a,b,c`` any sequence on a module. Everything comes from the cache where it can (a run's
own transitions); see ``autotune.reporting.explain``.
"""

from __future__ import annotations

from pathlib import Path

import click

from autotune.cli import cli
from autotune.cli.common import check_writable, db_option, json_option, print_json, workers_option
from autotune.errors import BadInput


@cli.command()
@click.argument("run_or_model", metavar="RUN_ID|MODEL")
@click.option("--passes", "pass_list", default=None, help="With a MODEL: the sequence to explain (comma-separated).")
@click.option("--module", "member", default=None, help="A fleet run: explain this member (name or fingerprint).")
@click.option("--compiler-option", "compiler_options", multiple=True, metavar="NAME=VALUE",
              help="With a MODEL: compiler options of the win to explain by measurement (repeatable).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Also write the report here (.md: Markdown, .json: JSON).")
@click.option("--missed", is_flag=True, help="Print only the self-contained 'missed optimization' report.")
@click.option("--no-minimize", is_flag=True, help="Skip the ddmin minimisation of the sequence.")
@click.option("--limit", type=click.IntRange(min=1), default=40, show_default=True,
              help="Differing instructions listed per side.")
@db_option
@workers_option
@json_option
def explain(run_or_model, pass_list, member, compiler_options, output, missed, no_minimize, limit, db, workers,
            as_json) -> None:
    """Explain a win: XLA's default final module against the tuned one (opcode, flops and bytes
    deltas; the instructions that vanish or appear, matched structurally), which pass of the
    sequence made the difference, a minimal (ddmin) sequence, and the commands that reproduce it."""
    from autotune.cli.common import open_engine
    from autotune.reporting.explain import explain as explain_seq, explain_run

    if output:
        check_writable(Path(output))
    from autotune.core.options import parse_assignments

    options = parse_assignments(compiler_options)
    is_model = pass_list is not None or Path(run_or_model).is_file()
    if is_model and pass_list is None and not options:
        raise BadInput(f"{run_or_model}: explaining a module needs --passes or --compiler-option (or give a RUN_ID)")
    if options and not is_model:
        raise BadInput("--compiler-option explains a MODEL's options; a run's own are read from the run")
    with open_engine(db, workers=workers) as ev:
        if is_model:
            from autotune.cli.common import load_model

            sequence = [p.strip() for p in (pass_list or "").split(",") if p.strip()]
            if not sequence and not options:
                raise BadInput("--passes is empty")
            ev.pipeline.check_passes(sequence)
            if options:
                from autotune.core.backend import supports

                if not supports(ev.pipeline, "options"):
                    raise BadInput(f"the {ev.pipeline.name} backend has no compiler options")
                ev.pipeline.check_options(options)
            root = ev.prepare(load_model(run_or_model))
            result = explain_seq(ev, root, sequence, model_path=run_or_model, minimize=not no_minimize, cap=limit,
                                 options=options)
        else:
            result = explain_run(ev, run_or_model, member=member, minimize=not no_minimize, cap=limit)
    text = result.missed_optimization() if missed else result.to_markdown()
    if output:
        try:
            Path(output).write_text(result.to_json() + "\n" if output.endswith(".json") else text)
        except OSError as exc:
            raise BadInput(f"{output}: cannot write ({exc.strerror or exc})") from None
    if as_json:
        print_json(result.to_dict())
    else:
        click.echo(text, nl=False)
