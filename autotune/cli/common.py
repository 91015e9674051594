"""Options and helpers shared by the CLI commands (public: every command file imports them)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from autotune.errors import BadInput

def die(message: str, code: int = 2) -> None:
    click.echo(f"autotune: error: {message}", err=True)
    sys.exit(code)


def db_option(f):
    return click.option("--db", type=click.Path(dir_okay=False), default=None, envvar="AUTOTUNE_DB",
                        help="Cache database (SQLite). Default: .autotune/cache.db or $AUTOTUNE_DB.")(f)


def workers_option(f):
    return click.option("--workers", type=click.IntRange(1, 64), default=None,
                        help="Compiler worker processes (default: cores, at most 4).")(f)


def _set_env(name: str):
    def callback(ctx, param, value):
        if value:
            os.environ[name] = str(value)  # read by autotune.core.executors when the engine opens
        return value

    return callback


def _choose_executor(ctx, param, value):
    if value:
        from autotune.core import executors
        from autotune.errors import UnknownName

        known = executors.available()
        if value.strip().lower() not in known:
            raise UnknownName("executor", value, list(known))
        os.environ[executors.EXECUTOR_ENV] = value.strip().lower()  # read when the engine opens
    return value


def executor_option(f):
    """``--executor local|ray`` and ``--ray-address``: where the compiler workers run (docs/cluster.md)."""
    f = click.option("--ray-address", default=None, expose_value=False, callback=_set_env("AUTOTUNE_RAY_ADDRESS"),
                     help="Ray cluster for --executor ray: auto, HOST:PORT or ray://HOST:10001 "
                          "(default: start a local Ray instance; or $AUTOTUNE_RAY_ADDRESS).")(f)
    return click.option("--executor", default=None, expose_value=False, callback=_choose_executor,
                        help="Where compiler workers run: local processes (default), Ray actors (ray) or a "
                             "registered executor (or $AUTOTUNE_EXECUTOR).")(f)


def _choose_backend(ctx, param, value):
    if value:
        from autotune.core import backend as backends
        from autotune.errors import UnknownName

        known = backends.available()
        if value not in known:
            raise UnknownName("backend", value, list(known))
        os.environ[backends.BACKEND_ENV] = value  # read by load and open_engine (backends.default_name)
    return value


def backend_option(f):
    """``--backend NAME``: the compiler backend (``xla`` by default; or ``$AUTOTUNE_BACKEND``).

    A click ``Command`` gets the option appended (the CLI adds it to every command this way); a
    function gets it as a decorator would.
    """
    settings = dict(default=None, expose_value=False, is_eager=True, callback=_choose_backend,
                    help="Compiler backend: xla (default), toy or a registered plugin (or $AUTOTUNE_BACKEND).")
    if isinstance(f, click.Command):
        f.params.append(click.Option(["--backend"], **settings))
        return f
    return click.option("--backend", **settings)(f)


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")(f)


def target_option(f):
    return click.option("--include-target-specific", is_flag=True,
                        help="Also offer target-specific passes (layout, fusion, ...) as actions.")(f)


def print_json(data) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def console():
    from rich.console import Console

    return Console()


def load_model(path: str):
    from autotune.core.module import load_path

    return load_path(Path(path))


def _backend(backend=None):
    """The backend given, else a fresh (unstarted) instance of the chosen one (``--backend``)."""
    if backend is not None:
        return backend
    from autotune.core import backend as backends

    return backends.get()


def module_paths(values, split: str | None = None) -> list[Path]:
    """Files as given; for a directory every module file in it (the backend's own extension, e.g.
    ``.hlo``; sorted), or with ``split`` the modules of that side of its suite manifest. Duplicates
    are kept once."""
    suffix = _backend().suffixes[0]
    paths: list[Path] = []
    for value in values:
        p = Path(value)
        if p.is_dir():
            if split is not None:
                if not (p / "manifest.json").is_file():
                    raise BadInput(f"{p}: --split needs a suite directory with manifest.json (autotune suite generate)")
                from autotune.zoo.suite import modules as suite_modules

                try:
                    found = suite_modules(p, split)
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    raise BadInput(f"{p}/manifest.json: unreadable ({exc})") from None
                missing = [f for f in found if not f.is_file()]
                if missing:
                    raise BadInput(f"{missing[0]}: listed in {p}/manifest.json but missing")
                if not found:
                    raise BadInput(f"{p}: no {split} modules in its manifest")
            else:
                found = sorted(f for f in p.iterdir() if f.suffix.lower() == suffix and f.is_file())
                if not found:
                    raise BadInput(f"{p}: no {suffix} modules in this directory")
            paths.extend(found)
        elif p.exists():
            if split is not None:
                raise BadInput(f"{p}: --split applies to suite directories, not to single files")
            paths.append(p)
        else:
            raise BadInput(f"{p}: no such file or directory")
    return list(dict.fromkeys(paths))


def metrics_row(metrics) -> dict:
    return metrics.to_dict() if metrics is not None else None



def metrics_table(title: str, rows) -> None:
    from rich.table import Table

    table = Table(title=title)
    for col in ("", "instructions", "flops", "transcendentals", "bytes accessed"):
        table.add_column(col, justify="right" if col else "left")
    first = rows[0][1]
    for label, m in rows:
        delta = "" if m is first else f" ({m.instructions - first.instructions:+d})"
        table.add_row(label, f"{m.instructions}{delta}", f"{m.flops:.4g}", f"{m.transcendentals:.4g}", f"{m.bytes_accessed:.4g}")
    console().print(table)




def check_writable(path: Path, directory: bool = False) -> None:
    """Refuse an output location before any work is done, so a typo costs nothing."""
    if not directory and path.is_dir():
        raise BadInput(f"{path}: is a directory, expected a file name")
    if directory and path.exists() and not path.is_dir():
        raise BadInput(f"{path}: exists and is not a directory")
    parent = path if directory else path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"{path}: cannot create {parent} ({exc.strerror or exc})") from None
    if not os.access(parent, os.W_OK):
        raise BadInput(f"{path}: {parent} is not writable")


def write_module(module, path: Path, backend=None) -> None:
    """``module`` as the backend prints it, or its serialized bytes as they are for a ``.pb`` path."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".pb":
            path.write_bytes(module.proto)
        else:
            path.write_text(_backend(backend).to_text(module))
    except OSError as exc:
        raise BadInput(f"{path}: cannot write ({exc.strerror or exc})") from None




def parse_options(pairs, **named) -> dict:
    options = {k: v for k, v in named.items() if v is not None}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise BadInput(f"--option expects key=value, got '{pair}'")
        options[key.strip().replace("-", "_")] = coerce(value.strip())
    return options


def coerce(value: str):
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(value.lower(), value)


