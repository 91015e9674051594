"""``autotune sites``: where a module's code can be decided per instruction (``pipelines/xla/sites.py``)."""

from __future__ import annotations

import click

from autotune.cli import cli
from autotune.cli.common import console, db_option, json_option, load_model, print_json, workers_option, executor_option


@cli.command()
@click.argument("model", type=click.Path())
@click.option("--compiler-option", "compiler_options", multiple=True, metavar="NAME=VALUE",
              help="Read the sites of the module XLA optimises with these options (repeatable).")
@db_option
@workers_option
@executor_option
@json_option
def sites(model, compiler_options, db, workers, as_json) -> None:
    """List MODEL's sites: each counted while loop (may be unrolled: by a factor or fully) and each
    convolution, dot or reduce whose code XLA hands to a library (YNNPACK) or generates itself, what XLA
    chose and what may be chosen instead. A runtime search decides the loops and the hottest library sites
    one by one (`autotune run --sites N`); `--compiler-option site:library:NAME=xla|ynn` or
    `site:unroll:NAME=full|2|4` fixes one."""
    from autotune.cli.common import open_engine
    from autotune.core.backend import supports
    from autotune.core.options import parse_assignments
    from autotune.errors import BadInput

    module = load_model(model)
    fixed = parse_assignments(compiler_options)
    with open_engine(db, workers=workers or 1) as ev:
        backend = ev.pipeline
        if not supports(backend, "sites"):
            raise BadInput(f"per-site decisions are made on the CPU pipeline, not for {backend.target.name}")
        root = ev.prepare(module)
        if fixed:
            backend.check_options(fixed)
            root = root.with_options(fixed)
        found = backend.sites(root)
    from autotune.pipelines.xla import sites as xla_sites, versions

    dropped = xla_sites.drops_donation(root.proto)
    rows = [{"site": s.id, "kind": s.kind, "instruction": s.name, "opcode": s.opcode, "shape": s.shape,
             "default": s.default, "choices": list(s.choices), "option": s.option} for s in found]
    if as_json:
        print_json({"module": module.name, "target": backend.target.key, "count": len(rows), "sites": rows,
                    "decisions_drop_donation": dropped})
        return
    from rich.table import Table

    table = Table(title=f"{module.name}: {len(rows)} sites on {backend.target.name}")
    for col in ("instruction", "op", "shape", "XLA's choice", "may be", "option"):
        table.add_column(col, no_wrap=col in ("instruction", "option"))
    for r in rows:
        table.add_row(r["instruction"], r["opcode"], r["shape"], r["default"],
                      ", ".join(c for c in r["choices"] if c != r["default"]), r["option"])
    console().print(table)
    console().print("while: 1 runs the loop as written, 2/4 unroll it by that factor, full removes it; "
                    "ynn: a YNNPACK library fusion; xla: XLA's own code (an Eigen call or a loop fusion); "
                    "split: a library fusion of several convolutions or dots taken apart, each its own library "
                    "fusion and the work between them XLA's. "
                    "Fix one with --compiler-option OPTION=CHOICE; `autotune run --objective runtime --sites N` "
                    "decides the N hottest by measured time.")
    if dropped:
        console().print(f"Note: this module donates buffers (input/output aliasing) and jaxlib {versions.installed()} "
                        "drops that when a library or split decision is applied: each step then copies them, "
                        "a cost a measured decision pays (jax >= 0.11 keeps the aliasing).")
