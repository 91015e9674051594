"""``autotune suite generate DIR``: the benchmark suite, regenerated from the model zoo in the repo."""

from __future__ import annotations

import click

from autotune.errors import BadInput
from autotune.cli import cli
from autotune.cli.common import json_option, print_json


@cli.group()
def suite() -> None:
    """The benchmark suite of GPT-2, BERT, ResNet and LLM step modules, single-device and partitioned
    (generated, never downloaded)."""


@suite.command("generate")
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N modules.")
@click.option("--family", "families", multiple=True, help="Only these families (gpt2, bert, resnet, llm, llm_spmd, t5, vit, diffusion); repeatable.")
@click.option("--jobs", type=click.IntRange(min=1), default=None, help="Parallel lowering processes.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the train/test split.")
@click.option("--devices", type=int, default=None,
              help="Partition the llm_spmd family's steps over this many devices instead of the grid's 2, 4 and 8.")
@json_option
def generate(out_dir, limit, families, jobs, seed, devices, as_json) -> None:
    """Lower every suite configuration to DIR/<name>.hlo and write DIR/manifest.json with the split."""
    from rich.progress import Progress

    from autotune.zoo import suite as zoo_suite

    with Progress(transient=as_json) as progress:
        task = progress.add_task("lowering", total=None)

        def tick(done: int, total: int, name: str) -> None:
            progress.update(task, completed=done, total=total, description=name[:40])

        try:
            manifest = zoo_suite.generate(out_dir, limit=limit, families=families or None, progress=tick, jobs=jobs,
                                          seed=seed, devices=devices)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
    data = manifest.to_json()
    if as_json:
        print_json({k: v for k, v in data.items() if k != "entries"} | {"written": len(manifest.entries)})
        return
    sides = {}
    for e in manifest.entries:
        sides[e.split] = sides.get(e.split, 0) + 1
    counts = [e.instructions for e in manifest.entries]
    click.echo(f"wrote {len(manifest.entries)} modules to {out_dir} ({', '.join(f'{k} {v}' for k, v in sorted(sides.items()))}); "
               f"{min(counts) if counts else 0}..{max(counts) if counts else 0} instructions; "
               f"{len(manifest.skipped)} skipped; {manifest.seconds:.0f}s")
