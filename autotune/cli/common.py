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
    return click.option("--workers", type=click.IntRange(1, 64), default=None, envvar="AUTOTUNE_WORKERS",
                        help="Compiler worker processes (default: cores, at most 4, or $AUTOTUNE_WORKERS).")(f)


#: Where the engine choices of one command line live while it is parsed (``click.Context.meta`` is
#: shared by a group and its command): ``backend``, ``target``, ``executor``, ``ray_address``.
#: Options are values end to end: nothing here writes ``os.environ``; the environment variables
#: named below are only the options' defaults, read once by click at this edge.
ENGINE_META = "autotune.engine"
ENGINE_ENV = {"backend": "AUTOTUNE_BACKEND", "target": "AUTOTUNE_TARGET", "executor": "AUTOTUNE_EXECUTOR",
              "ray_address": "AUTOTUNE_RAY_ADDRESS"}


def engine_choices(ctx: click.Context | None = None) -> dict:
    """The engine choices given on this command line (or by their environment defaults)."""
    ctx = ctx or click.get_current_context(silent=True)
    return dict(ctx.meta.get(ENGINE_META, {})) if ctx is not None else {}


def _remember(key: str, check=None):
    def callback(ctx, param, value):
        if value not in (None, ""):
            ctx.meta.setdefault(ENGINE_META, {})[key] = check(value) if check else value
        return value

    return callback


def _check_executor(value: str) -> str:
    from autotune.core import executors
    from autotune.errors import UnknownName

    known = executors.available()
    if value.strip().lower() not in known:
        raise UnknownName("executor", value, list(known))
    return value.strip().lower()


def executor_option(f):
    """``--executor local|ray`` and ``--ray-address``: where the compiler workers run (docs/cluster.md)."""
    f = click.option("--ray-address", default=None, expose_value=False, envvar=ENGINE_ENV["ray_address"],
                     callback=_remember("ray_address"),
                     help="Ray cluster for --executor ray: auto, HOST:PORT or ray://HOST:10001 "
                          "(default: start a local Ray instance; or $AUTOTUNE_RAY_ADDRESS).")(f)
    return click.option("--executor", default=None, expose_value=False, envvar=ENGINE_ENV["executor"],
                        callback=_remember("executor", _check_executor),
                        help="Where compiler workers run: local processes (default), Ray actors (ray) or a "
                             "registered executor (or $AUTOTUNE_EXECUTOR).")(f)


def _check_backend(value: str) -> str:
    from autotune.core import backend as backends
    from autotune.errors import UnknownName

    known = backends.available()
    if value not in known:
        raise UnknownName("backend", value, list(known))
    return value


def _append_or_decorate(f, names: list[str], settings: dict):
    if isinstance(f, click.Command):
        f.params.append(click.Option(names, **settings))
        return f
    return click.option(*names, **settings)(f)


def backend_option(f):
    """``--backend NAME``: the compiler backend (``xla`` by default; or ``$AUTOTUNE_BACKEND``).

    A click ``Command`` gets the option appended (the CLI adds it to every command this way); a
    function gets it as a decorator would.
    """
    settings = dict(default=None, expose_value=False, is_eager=True, envvar=ENGINE_ENV["backend"],
                    callback=_remember("backend", _check_backend),
                    help="Compiler backend: xla (default), toy or a registered plugin (or $AUTOTUNE_BACKEND).")
    return _append_or_decorate(f, ["--backend"], settings)


def gpu_target_option(f):
    """``--target cpu|a100|h100|h200|b200|CONFIG.txtpb``: the machine the module will run on, whose
    pipeline applies and judges the passes (``cpu`` by default; or ``$AUTOTUNE_TARGET``). Added to
    every command like ``--backend``."""
    settings = dict(default=None, expose_value=False, is_eager=True, envvar=ENGINE_ENV["target"],
                    callback=_remember("target"), metavar="TARGET",
                    help="The machine the module runs on: cpu (default), a100, h100, h200, b200 or a "
                         "GpuTargetConfig file; a GPU is compiled for without one (needs xla-autotune[gpu]; "
                         "or $AUTOTUNE_TARGET).")
    return _append_or_decorate(f, ["--target"], settings)


def backend_options(ctx: click.Context | None = None) -> dict:
    """``name`` and ``target`` of the chosen backend, as ``core.backend.get`` takes them."""
    choices = engine_choices(ctx)
    out = {"name": choices.get("backend")}
    if choices.get("target"):
        out["target"] = choices["target"]
    return out


def engine_options(**options) -> dict:
    """``options`` plus this command line's backend, target, executor and Ray address, as
    ``core.engine.open_engine`` and ``autotune.Session`` take them."""
    choices = engine_choices()
    if choices.get("ray_address"):
        options.setdefault("executor_options", {"address": choices["ray_address"]})
    return dict(options, backend=choices.get("backend"), executor=choices.get("executor"), target=choices.get("target"))


def open_engine(db=None, workers: int | None = None, **options):
    """``core.engine.open_engine`` with this command line's backend, target, executor and Ray address."""
    from autotune.core.engine import open_engine as _open_engine

    return _open_engine(db, workers=workers, **engine_options(**options))


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")(f)


def target_specific_option(f):
    return click.option("--include-target-specific", is_flag=True,
                        help="Also offer target-specific passes (layout, fusion, ...) as actions.")(f)


def print_json(data) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def console():
    from rich.console import Console

    return Console()


def load_model(path: str):
    from autotune.core.module import load_path

    return load_path(Path(path), backend=_backend())


def _backend(backend=None):
    """The backend given, else a fresh (unstarted) instance of the chosen one (``--backend``,
    ``--target``): constructing one starts nothing, and checks the target (one line, exit 2)."""
    if backend is not None:
        return backend
    from autotune.core import backend as backends

    options = backend_options()
    return backends.get(options.pop("name"), **options)


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




def rejection_lines(rejected) -> list[str]:
    """Lines for the candidates a run did not offer: each invalid one (validation), and the best one the
    GPU guard set aside with how many more it did (they are alike: the same figure rose)."""
    from autotune.core.gpu_guard import is_guard_reason as guarded

    aside = [(seq, reason) for seq, reason in rejected if guarded(reason)]
    lines = [f"[yellow]rejected (invalid):[/] {','.join(seq) or '(no passes)'}: {reason}" for seq, reason in rejected
             if not guarded(reason)]
    if aside:
        more = f" (and {len(aside) - 1} more that rank above the answer)" if len(aside) > 1 else ""
        seq, reason = aside[0]
        lines.insert(0, f"[yellow]set aside{more}:[/] {','.join(seq)}: {reason}")
    return lines
