"""``autotune options``: the compiler options a runtime search may change, checked against the installed compiler."""

from __future__ import annotations

from autotune.cli import cli
from autotune.cli.common import backend_options, console, db_option, json_option, print_json


@cli.command()
@db_option
@json_option
def options(db, as_json) -> None:
    """List the compiler options of the target's catalogue: the values the installed compiler accepts (the
    search space of `autotune run --space options|both`) and what it refused. Numerics-changing options are
    searched only with --allow-numerics-options; collective thresholds only for a partitioned step."""
    from autotune.core import backend as backends
    from autotune.core.backend import supports
    from autotune.core.cache import Cache
    from autotune.errors import BadInput

    cache = Cache(db)
    try:
        chosen = backend_options()
        backend = backends.get(chosen.pop("name"), cache=cache, **chosen)
        if not supports(backend, "options"):
            raise BadInput(f"the {backend.name} backend has no compiler options")
        with backend:  # its workers (the probe, when this compiler has not been probed yet) end here
            rows = backend.option_report()
        searched = sum(1 for r in rows if r["values"] and not r["numerics"] and not r["partitioned"])
        if as_json:
            print_json({"backend": backend.name, "target": backend.target.key,
                        "compiler_version": backend.compiler_version, "count": len(rows), "searched": searched,
                        "options": rows})
            return
        _table(rows, backend, searched)
    finally:
        cache.close()


def _table(rows: list[dict], backend, searched: int) -> None:
    from rich.table import Table

    table = Table(title=f"{len(rows)} compiler options catalogued for {backend.target.name} ({backend.compiler_version}); "
                        f"{searched} searched by default")
    table.add_column("option", no_wrap=True)
    table.add_column("values the compiler accepts")
    table.add_column("what it does")
    for r in rows:
        prefix = _prefix([v for v in r["values"] if v])
        values = ", ".join(repr(v) if v == "" else v[len(prefix):] for v in r["values"]) or "[red]none[/]"
        note = " [yellow](numerics: --allow-numerics-options)[/]" if r["numerics"] else (
            " (partitioned steps only)" if r["partitioned"] else "")
        refused = "; ".join(f"{v or repr('')}: {why}" for v, why in r["refused"][:2])
        what = (f"[dim]{r['group']}:[/] {r['what']}" + (f" (values: {prefix}...)" if prefix else "") + note
                + (f" [dim]refused: {refused}[/]" if refused else ""))
        table.add_row(r["name"].removeprefix("xla_"), values, what)
    console().print(table)
    console().print("names without their xla_ prefix; `autotune run --compiler-option NAME=VALUE` takes the full name")


def _prefix(values: list[str]) -> str:
    """The enum prefix the values share (``LIBRARY_FUSION_TYPE_``), cut at an underscore; '' for one value."""
    import os

    if len(values) < 2:
        return ""
    common = os.path.commonprefix(values)
    return common[: common.rfind("_") + 1] if "_" in common else ""
