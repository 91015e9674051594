"""``autotune partition``: a step's per-device program on a mesh of N devices, from a dump made on one."""

from __future__ import annotations

from pathlib import Path

import click

from autotune.cli import cli
from autotune.cli.common import console, die


@cli.command()
@click.argument("model", type=click.Path())
@click.option("--mesh", "mesh_spec", required=True, metavar="AXIS=N[,AXIS=N]",
              help="Sizes of the step's own mesh axes, e.g. tensor=4 or tensor=2,fsdp=2 (the rest keep theirs).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True,
              help="Where to write the per-device program (HLO text).")
def partition(model, mesh_spec, output) -> None:
    """Partition MODEL over a mesh by the shardings it carries: the per-device program to tune.

    MODEL is HLO text of a jax step dumped with its shardings (MaxText and any jit with in_shardings
    keep them, even when the step ran on one device). Its mesh's axes are resized as --mesh says and
    XLA's SPMD partitioner (Shardy) writes the program each device runs, collectives included: what
    a dump of the same job on that many devices holds. Then `autotune run OUTPUT` tunes it
    (docs/llm-family.md, "Real steps on another mesh").
    """
    from autotune import zoo
    from autotune.zoo import reshard

    path = Path(model)
    if not path.is_file():
        die(f"no such file: {model}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        die(f"{model}: not HLO text ({type(exc).__name__}); `autotune partition` reads the text form")
    try:
        sizes = reshard.parse_mesh(mesh_spec)
        axes = reshard.mesh_axes(text)
        out = zoo.remesh(text, sizes)
    except ValueError as exc:
        die(f"{model}: {str(exc).splitlines()[0]}")
    except RuntimeError as exc:  # the partitioning process died (XLA aborted): this module, not the run
        die(f"{model}: {str(exc).splitlines()[0] if str(exc) else 'the partitioner failed'}")
    Path(output).write_text(out, encoding="utf-8")
    devices = reshard.devices_of({**axes, **sizes})
    collectives = reshard.collective_count(out)
    console().print(f"{output}: the per-device program of {path.name} over {devices} devices "
                    f"({', '.join(f'{a}={n}' for a, n in {**axes, **sizes}.items() if n > 1)}), "
                    f"{collectives} collectives")
