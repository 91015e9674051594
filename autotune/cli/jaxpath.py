"""A jax program tuned without changing it: ``autotune capture``, ``autotune tune``, ``autotune exec``, and
``autotune store`` to manage the per-user tuning store they share with ``autotune.jax.tune``.

    autotune capture -o cap -- python train.py      # every module jax compiles, with its run time
    autotune tune cap                                # tuned by measured time, most time first, into the store
    autotune exec -- python train.py                 # the program as it is, the store applied

The program is started with jax's plugin discovery pointed at autotune's hook (``autotune.jax.process``:
``PYTHONPATH`` gains ``autotune/jax/bootstrap``, the environment says what to do); its exit code is this
command's. It must run on a Python where autotune is importable.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

from autotune.cli import cli
from autotune.cli.common import console, db_option, json_option, print_json, workers_option
from autotune.errors import BadInput

PROGRAM = {"ignore_unknown_options": True, "allow_interspersed_args": False}


def store_option(f):
    return click.option("--store", "store_dir", type=click.Path(), default=None, envvar="AUTOTUNE_STORE",
                        help="The tuning store (a folder) [default: $AUTOTUNE_STORE or ~/.cache/autotune/store].")(f)


def _store(store_dir):
    from autotune.core.store import Store

    return Store(store_dir)


def _run_program(program: tuple[str, ...], env_extra: dict) -> int:
    """Run the program with autotune's hook discoverable by jax; its exit code."""
    from autotune import cli as cli_pkg
    from autotune.jax.process import BOOTSTRAP

    if not program:
        raise BadInput("give the program to run after --, e.g. -- python train.py")
    env = dict(os.environ)
    if cli_pkg.USER_JAX_PLATFORMS is None:  # set by autotune's own main for itself, not the program's
        env.pop("JAX_PLATFORMS", None)
    else:
        env["JAX_PLATFORMS"] = cli_pkg.USER_JAX_PLATFORMS
    env["PYTHONPATH"] = os.pathsep.join([str(BOOTSTRAP)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update(env_extra)
    try:
        return subprocess.call(list(program), env=env)
    except FileNotFoundError:
        raise BadInput(f"{program[0]}: no such program") from None
    except PermissionError:
        raise BadInput(f"{program[0]}: not executable") from None


@cli.command(context_settings=PROGRAM)
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False), required=True,
              help="Folder for the captured modules (HLO text) and index.json.")
@click.argument("program", nargs=-1, type=click.UNPROCESSED, metavar="-- PROGRAM [ARGS]...")
def capture(out_dir, program) -> None:
    """Run PROGRAM once and write every module jax compiles (HLO, argument shapes, compiles, runs, time)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise BadInput(f"{out}: exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"{out}: cannot create ({exc.strerror or exc})") from None
    sys.exit(_run_program(program, {"AUTOTUNE_CAPTURE": str(out.resolve())}))


@cli.command(name="exec", context_settings=PROGRAM)
@store_option
@click.option("--report", type=click.Path(dir_okay=False), default=None,
              help="Also write what was applied as JSON to this file.")
@click.argument("program", nargs=-1, type=click.UNPROCESSED, metavar="-- PROGRAM [ARGS]...")
def exec_(store_dir, report, program) -> None:
    """Run PROGRAM unmodified with the tuning store applied to its jax compiles (AUTOTUNE=1 does the same)."""
    store = _store(store_dir)  # a store that is a file: one line before the program starts
    extra = {"AUTOTUNE": "1", "AUTOTUNE_STORE": str(store.root.resolve())}
    if report:
        extra["AUTOTUNE_REPORT"] = str(Path(report).resolve())
    sys.exit(_run_program(program, extra))


@cli.command(name="tune")
@click.argument("folder", type=click.Path())
@click.option("--strategy", "-s", default="random", show_default=True, help="Search strategy (see `autotune strategies`).")
@click.option("--budget", "-b", type=int, default=30, show_default=True, help="Evaluations per module.")
@click.option("--time-limit", type=float, default=None, help="Stop each module's search after this many seconds.")
@click.option("--space", type=click.Choice(("options", "both")), default="both", show_default=True)
@click.option("--min-effect", type=float, default=None,
              help="Smallest speed-up (percent) a confirmed win must prove [default: 2].")
@click.option("--confirm-rounds", type=int, default=None,
              help="Interleaved A/B rounds of each independent measurement that confirms the best candidate "
                   "[default: 10; 4-12 measurements].")
@click.option("--top", type=click.IntRange(min=1), default=None, help="Only the N modules the program spent most time in.")
@click.option("--min-share", type=click.FloatRange(0, 100), default=1.0, show_default=True,
              help="Skip modules the program spent less than this percent of its run time in (0: tune every one).")
@click.option("--retune", is_flag=True, help="Tune modules the store already holds an entry for.")
@store_option
@db_option
@workers_option
@json_option
def tune_dir(folder, strategy, budget, time_limit, space, min_effect, confirm_rounds, top, min_share, retune, store_dir, db, workers, as_json) -> None:
    """Tune the modules `autotune capture` wrote to FOLDER by measured time, most time first, into the store."""
    from autotune import strategy as strategy_mod
    from autotune.cli.common import load_model, open_engine
    from autotune.core.spec import RunSpec
    from autotune.core.tuner import tune
    from autotune.jax.process import read_index
    from autotune.jax.tuning import decide, objective_options
    from autotune.reporting.progress import RichObserver

    modules = read_index(Path(folder))
    store = _store(store_dir)
    spec = RunSpec(strategy=strategy, budget=budget, objective="runtime", time_limit=time_limit, space=space,
                   objective_options=objective_options(None if min_effect is None else min_effect / 100.0,
                                                       confirm_rounds))
    strategy_mod.load(strategy)
    spec.make_objective()
    spec.searched()
    total = sum(float(m.get("run_seconds", 0.0)) for m in modules)
    small = [m for m in modules if total > 0 and float(m.get("run_seconds", 0.0)) < total * min_share / 100.0]
    modules = [m for m in modules if m not in small]
    modules = modules[:top] if top else modules
    if small and not as_json:
        click.echo(f"skipping {len(small)} module(s) under {min_share:g}% of the program's run time (--min-share)",
                   err=True)
    rows = []
    with open_engine(db, workers=workers) as ev:
        entries = store.entries()
        for m in modules:
            path = Path(folder) / m["file"]
            if not path.is_file():
                raise BadInput(f"{path}: listed in the capture index but missing")
            root = ev.prepare(load_model(str(path)))
            hit = store.lookup(root.fingerprint, ev.pipeline.target.key, ev.pipeline.compiler_version, entries=entries)
            if hit.entry is not None and not retune:
                rows.append({"module": m["name"], "file": m["file"], "run_seconds": m.get("run_seconds", 0.0),
                             "answer": "in the store: " + hit.entry.describe(), "entry": str(hit.entry.path)})
                continue
            if not as_json:
                click.echo(f"tuning {m['file']} ({m.get('runs', 0)} runs, {m.get('run_seconds', 0.0):.2f} s in the program)",
                           err=True)
            result = tune(ev, root, spec=spec, observer=None if as_json else RichObserver())
            record, reason = decide(ev, result)
            entry = store.put(record)
            rows.append({"module": m["name"], "file": m["file"], "run_seconds": m.get("run_seconds", 0.0),
                         "answer": entry.describe(), "entry": str(entry.path), "run_id": result.run_id,
                         "kept_default_because": reason})
    if as_json:
        print_json({"store": str(store.root), "modules": rows})
        return
    for row in rows:
        click.echo(f"{row['file']}: {row['answer']}")
    click.echo(f"{len(rows)} module(s) in the store {store.root}; run the program with `autotune exec -- ...`")


# ---- autotune store -------------------------------------------------------------------------------------
@cli.group()
def store() -> None:
    """The tuning store: what `autotune.jax.tune` and `autotune tune` found, applied by `autotune exec`."""


def _here():
    from autotune.core.store import Host
    from autotune.pipelines.xla import xla_version

    return Host.here(), xla_version()


@store.command(name="list")
@store_option
@json_option
def store_list(store_dir, as_json) -> None:
    """Every entry: its module, answer, claim, validation, and whether it applies on this host."""
    st = _store(store_dir)
    entries, bad = st.scan()
    host, xla = _here()
    if as_json:
        print_json({"store": str(st.root), "entries": [
            {"id": e.id, "applies_here": e.foreign_because(host, xla) is None, "not_here": e.foreign_because(host, xla),
             "keeps_default": e.keeps_default, "record": e.record.to_dict()} for e in entries],
            "unreadable": [{"path": str(p), "why": why} for p, why in bad]})
        return
    from rich.table import Table

    table = Table(title=f"tuning store {st.root}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}")
    for col in ("id", "module", "answer", "ratio [interval]", "validation", "here"):
        table.add_column(col)
    for e in entries:
        r = e.record
        answer = "keep XLA's default" if e.keeps_default else (
            f"{len(r.sequence)} passes" if r.sequence else "") + (
            (" + " if r.sequence else "") + ", ".join(f"{k}={v}" for k, v in sorted(r.compiler_options.items()))
            if r.compiler_options else "")
        m = r.metrics
        ratio = (f"{m['ratio']:.3f} [{m.get('ratio_low', float('nan')):.3f}, {m.get('ratio_high', float('nan')):.3f}]"
                 if isinstance(m.get("ratio"), (int, float)) else "-")
        why = e.foreign_because(host, xla)
        table.add_row(e.id[:20], r.module, answer, ratio, r.validation or "-", "yes" if why is None else f"no: {why}")
    console().print(table)
    for path, why in bad:
        click.echo(f"unreadable: {why}", err=True)


@store.command(name="show")
@click.argument("ident")
@store_option
def store_show(ident, store_dir) -> None:
    """One entry (by its id or a prefix of it), as the record JSON `autotune check --record` reads."""
    entry = _store(store_dir).find(ident)
    host, xla = _here()
    click.echo(entry.path.read_text().rstrip())
    why = entry.foreign_because(host, xla)
    click.echo(f"# {entry.describe()}; " + ("applied on this host" if why is None else
                                             f"NOT applied here: {why} (`autotune check` judges it)"), err=True)


@store.command(name="prune")
@click.option("--all", "everything", is_flag=True, help="Remove every entry.")
@click.option("--defaults", is_flag=True, help="Also remove the 'keep XLA's default' entries (their modules get tuned again).")
@click.option("--dry-run", is_flag=True, help="Say what would be removed, remove nothing.")
@store_option
def store_prune(everything, defaults, dry_run, store_dir) -> None:
    """Remove entries that cannot apply here (another host or XLA) and unreadable files."""
    st = _store(store_dir)
    entries, bad = st.scan()
    host, xla = _here()
    gone = [e for e in entries if everything or e.foreign_because(host, xla) or (defaults and e.keeps_default)]
    for e in gone:
        if not dry_run:
            st.remove(e)
    for path, _ in bad:
        if not dry_run:
            path.unlink(missing_ok=True)
    verb = "would remove" if dry_run else "removed"
    click.echo(f"{verb} {len(gone)} entr{'y' if len(gone) == 1 else 'ies'} and {len(bad)} unreadable file(s); "
               f"{len(entries) - len(gone)} left in {st.root}")


@store.command(name="export")
@click.argument("idents", nargs=-1)
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False), required=True,
              help="Folder to write the records to (one JSON file each).")
@store_option
def store_export(idents, out_dir, store_dir) -> None:
    """Write entries (all, or those named) as record files: for a team's store or `autotune check --record`."""
    st = _store(store_dir)
    entries = [st.find(i) for i in idents] if idents else st.entries()
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise BadInput(f"{out}: exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    for e in entries:
        (out / e.path.name).write_text(e.path.read_text())
    click.echo(f"wrote {len(entries)} record(s) to {out}")


@store.command(name="import")
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--here", is_flag=True,
              help="Adopt the records as made on this host by this XLA (after `autotune check` passed here): "
                   "they are then applied. Without it a record keeps its origin and applies only there.")
@store_option
def store_import(files, here, store_dir) -> None:
    """Put record files (`autotune export`, `autotune store export`) into the store."""
    from dataclasses import replace

    from autotune.core.store import Host
    from autotune.pipelines.xla.versions import installed

    st = _store(store_dir)
    host, xla = _here()
    done = []
    for f in files:
        entry = st.read(Path(f))  # a bad file: one line naming it, before anything is written
        done.append(entry)
    for entry in done:
        record = replace(entry.record, xla_version=xla) if here else entry.record
        origin = host if here else entry.host
        new = st.put(record, host=origin if isinstance(origin, Host) else None,
                     jaxlib=installed() if here else entry.jaxlib, source="import")
        why = new.foreign_because(host, xla)
        click.echo(f"imported {new.id}: {new.describe()}" + ("" if why is None else f" (not applied here: {why})"))
