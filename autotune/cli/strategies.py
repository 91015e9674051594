"""``autotune strategies``: the search strategies available (listed without importing them)."""

from __future__ import annotations

import click


from autotune.cli import cli
from autotune.cli.common import json_option, print_json


@cli.command()
@json_option
def strategies(as_json) -> None:
    """List the available search strategies (without importing them)."""
    from autotune.strategy import available

    infos = available()
    if as_json:
        print_json([{"name": i.name, "target": i.target, "description": i.description, "source": i.source}
                     for i in infos.values()])
        return
    for info in infos.values():
        click.echo(f"{info.name:12s} {info.description}" + ("" if info.source == "builtin" else f"  [{info.source}]"))


