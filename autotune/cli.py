"""The ``autotune`` command line (click).

Every command prints a table for people or JSON for machines (``--json``), exits 0 on success, 1
when a check it ran says no, and 2 for bad usage or bad input, which always gets exactly one line
on stderr and never a traceback.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from autotune.errors import AutotuneError, BadInput

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _die(message: str, code: int = 2) -> None:
    click.echo(f"autotune: error: {message}", err=True)
    sys.exit(code)


def db_option(f):
    return click.option("--db", type=click.Path(dir_okay=False), default=None, envvar="AUTOTUNE_DB",
                        help="Cache database (SQLite). Default: .autotune/cache.db or $AUTOTUNE_DB.")(f)


def workers_option(f):
    return click.option("--workers", type=click.IntRange(1, 64), default=None,
                        help="Compiler worker processes (default: cores, at most 4).")(f)


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")(f)


def target_option(f):
    return click.option("--include-target-specific", is_flag=True,
                        help="Also offer target-specific passes (layout, fusion, ...) as actions.")(f)


def _print_json(data) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def _console():
    from rich.console import Console

    return Console()


def _load(path: str):
    from autotune.module import load_path

    return load_path(Path(path))


MODULE_SUFFIXES = (".hlo",)


def module_paths(values, split: str | None = None) -> list[Path]:
    """Files as given; for a directory every ``.hlo`` in it (sorted), or with ``split`` the modules of
    that side of its suite manifest. Duplicates are kept once."""
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
                found = sorted(f for f in p.iterdir() if f.suffix.lower() in MODULE_SUFFIXES and f.is_file())
                if not found:
                    raise BadInput(f"{p}: no .hlo modules in this directory")
            paths.extend(found)
        elif p.exists():
            if split is not None:
                raise BadInput(f"{p}: --split applies to suite directories, not to single files")
            paths.append(p)
        else:
            raise BadInput(f"{p}: no such file or directory")
    return list(dict.fromkeys(paths))


def _metrics_row(metrics) -> dict:
    return metrics.to_dict() if metrics is not None else None


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="autotune")
def cli() -> None:
    """Autotune XLA's HLO pass ordering: search for the pass sequence that gives the best module."""


# ---- passes -----------------------------------------------------------------------------------------
@cli.command()
@db_option
@target_option
@json_option
def passes(db, include_target_specific, as_json) -> None:
    """List the action vocabulary discovered from the installed XLA."""
    from autotune import pipelines
    from autotune.cache import Cache

    cache = Cache(db)
    try:
        backend = pipelines.get("xla", cache=cache, include_target_specific=include_target_specific)
        inv = backend.inventory
        rows = [
            {
                "name": a.name,
                "order": a.order,
                "pipeline": " > ".join(reversed((inv.main_pipeline,) + a.path)) if not a.target_specific else "",
                "macro": a.macro,
                "target_specific": a.target_specific,
            }
            for a in inv.actions.values()
        ]
        if as_json:
            _print_json({"xla_version": inv.xla_version, "pipeline_version": backend.version, "count": len(rows), "actions": rows})
            return
        from rich.table import Table

        table = Table(title=f"{len(rows)} actions discovered from {inv.xla_version}")
        table.add_column("#", justify="right")
        table.add_column("action")
        table.add_column("runs inside")
        table.add_column("kind")
        for i, r in enumerate(rows):
            table.add_row(str(i), r["name"], r["pipeline"], "sub-pipeline" if r["macro"] else (r["target_specific"] or "pass"))
        _console().print(table)
    finally:
        cache.close()


# ---- baseline -------------------------------------------------------------------------------------------
@cli.command()
@click.argument("model", type=click.Path())
@db_option
@workers_option
@json_option
def baseline(model, db, workers, as_json) -> None:
    """Measure MODEL as loaded and after XLA's default ordering of the same action set."""
    from autotune.engine import open_engine

    module = _load(model)
    with open_engine(db, workers=workers or 1) as ev:
        root = ev.prepare(module)
        base = ev.metrics(root.fingerprint)
        default = ev.default(root)
        if not default.ok:
            raise AutotuneError(f"XLA's default pipeline failed on {model}: {default.message}")
        out = {
            "module": module.name,
            "fingerprint": root.fingerprint,
            "pipeline_version": ev.version,
            "input": _metrics_row(base),
            "default": _metrics_row(default.metrics),
            "default_reduction": base.instructions - default.metrics.instructions,
        }
    if as_json:
        _print_json(out)
        return
    _metrics_table(f"{module.name}: XLA default ordering", [("input", base), ("XLA default", default.metrics)])


def _metrics_table(title: str, rows) -> None:
    from rich.table import Table

    table = Table(title=title)
    for col in ("", "instructions", "flops", "transcendentals", "bytes accessed"):
        table.add_column(col, justify="right" if col else "left")
    first = rows[0][1]
    for label, m in rows:
        delta = "" if m is first else f" ({m.instructions - first.instructions:+d})"
        table.add_row(label, f"{m.instructions}{delta}", f"{m.flops:.4g}", f"{m.transcendentals:.4g}", f"{m.bytes_accessed:.4g}")
    _console().print(table)


# ---- apply ------------------------------------------------------------------------------------------------
@cli.command()
@click.argument("model", type=click.Path())
@click.option("--passes", "pass_list", required=True, help="Comma-separated actions, applied in this order.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the resulting module (HLO text; .pb for a serialized proto).")
@db_option
@workers_option
@target_option
@json_option
def apply(model, pass_list, output, db, workers, include_target_specific, as_json) -> None:
    """Apply a pass sequence to MODEL and print the metrics before and after."""
    from autotune.engine import open_engine

    sequence = [p.strip() for p in pass_list.split(",") if p.strip()]
    if not sequence:
        raise BadInput("--passes is empty")
    if output:
        _check_writable(Path(output))
    module = _load(model)
    with open_engine(db, workers=workers or 1, include_target_specific=include_target_specific) as ev:
        ev.pipeline.check_passes(sequence)
        root = ev.prepare(module)
        before = ev.metrics(root.fingerprint)
        result = ev.evaluate(root, sequence)
        if not result.ok:
            if as_json:
                _print_json({"module": module.name, "sequence": sequence, "status": result.status,
                             "failed_at": result.failed_at, "message": result.message})
            _die(f"pass '{sequence[result.failed_at]}' (step {result.failed_at + 1}) failed "
                 f"[{result.status}]: {result.message}", 1)
        tuned = ev.module(result.state, module.name)
        if output:
            _write_module(tuned, Path(output))
        out = {
            "module": module.name,
            "sequence": sequence,
            "status": "ok",
            "before": _metrics_row(before),
            "after": _metrics_row(result.metrics),
            "steps_compiled": result.compiled,
            "steps_cached": result.cached,
            "output": output,
        }
    if as_json:
        _print_json(out)
        return
    _metrics_table(f"{module.name}: {','.join(sequence)}", [("before", before), ("after", result.metrics)])
    click.echo(f"steps compiled: {result.compiled}, from cache: {result.cached}" + (f"; wrote {output}" if output else ""))


def _check_writable(path: Path, directory: bool = False) -> None:
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


def _write_module(module, path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".pb":
            path.write_bytes(module.proto)
        else:
            path.write_text(module.text())
    except OSError as exc:
        raise BadInput(f"{path}: cannot write ({exc.strerror or exc})") from None


# ---- strategies / run ------------------------------------------------------------------------------
@cli.command()
@json_option
def strategies(as_json) -> None:
    """List the available search strategies (without importing them)."""
    from autotune.strategy import available

    infos = available()
    if as_json:
        _print_json([{"name": i.name, "target": i.target, "description": i.description, "source": i.source}
                     for i in infos.values()])
        return
    for info in infos.values():
        click.echo(f"{info.name:12s} {info.description}" + ("" if info.source == "builtin" else f"  [{info.source}]"))


def _parse_options(pairs, **named) -> dict:
    options = {k: v for k, v in named.items() if v is not None}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise BadInput(f"--option expects key=value, got '{pair}'")
        options[key.strip().replace("-", "_")] = _coerce(value.strip())
    return options


def _coerce(value: str):
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(value.lower(), value)


@cli.command()
@click.argument("model", type=click.Path(), required=False)
@click.option("--strategy", "-s", default="random", show_default=True, help="Search strategy (see `autotune strategies`).")
@click.option("--budget", "-b", type=int, default=200, show_default=True, help="Sequence evaluations, cache hits included.")
@click.option("--time-limit", type=float, default=None, help="Stop after this many seconds.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--max-length", type=int, default=16, show_default=True, help="Longest pass sequence.")
@click.option("--objective", default="final-ops", show_default=True,
              help="final-ops | ops | cost | runtime (see README: Objectives).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Directory for best_sequence.json, tuned.hlo and summary.json.")
@click.option("--resume", default=None, help="Continue an interrupted run by its id.")
@click.option("--sampler", default=None, help="optuna: sampler (tpe, random, cmaes, qmc, gp, nsga2).")
@click.option("--optimizer", default=None, help="nevergrad: optimizer name (default DiscreteOnePlusOne).")
@click.option("--policy", type=click.Path(dir_okay=False), default=None, help="ppo: a trained policy .zip.")
@click.option("--shaping", is_flag=True, default=None, help="ppo: potential-based shaping from flops/transcendentals.")
@click.option("--option", "-O", "extra", multiple=True, help="Strategy option key=value (repeatable).")
@click.option("--no-validate", is_flag=True, help="Skip the validity check of the best sequence.")
@click.option("--no-prune", is_flag=True, help="Report the best sequence as found, without dropping useless passes.")
@db_option
@workers_option
@json_option
def run(model, strategy, budget, time_limit, seed, max_length, objective, out_dir, resume, sampler, optimizer,
        policy, shaping, extra, no_validate, no_prune, db, workers, as_json) -> None:
    """Tune MODEL's pass ordering with a search strategy and report the best sequence found."""
    from autotune import objectives, strategy as strategy_mod
    from autotune.engine import open_engine
    from autotune.tuner import Interrupted, RichProgress, tune

    if not resume and not model:
        raise BadInput("give a MODEL to tune (or --resume RUN_ID)")
    if out_dir:
        _check_writable(Path(out_dir), directory=True)
    module = None if resume else _load(model)
    options = _parse_options(extra, sampler=sampler, optimizer=optimizer, policy=policy, shaping=shaping)
    if not resume:
        strategy_mod.load(strategy)  # unknown names fail before any compile
        objectives.get(objective)
        if budget < 1:
            raise BadInput(f"--budget must be a positive number of evaluations, not {budget}")
        if max_length < 1:
            raise BadInput("--max-length must be at least 1")
    with open_engine(db, workers=workers) as ev:
        progress = None if as_json else RichProgress()
        try:
            result = tune(ev, module, strategy=strategy, budget=budget, objective=objective, seed=seed,
                          max_length=max_length, time_limit=time_limit, options=options, progress=progress,
                          resume=resume, validate=not no_validate, prune=not no_prune)
        except Interrupted as exc:
            if out_dir:
                _write_outputs(ev, exc.partial, Path(out_dir))
            _report(exc.partial, as_json, out_dir)
            raise
        if out_dir:
            _write_outputs(ev, result, Path(out_dir))
    _report(result, as_json, out_dir)


def _write_outputs(ev, result, out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        data = result.to_dict()
        (out / "summary.json").write_text(json.dumps(data, indent=2))
        (out / "best_sequence.json").write_text(json.dumps({
            "module": result.module, "fingerprint": result.fingerprint, "objective": result.objective,
            "sequence": list(result.best_sequence), "cost": result.best_cost, "default_cost": result.default_cost,
            "pipeline_version": ev.version, "run_id": result.run_id, "valid": bool(result.validity and result.validity.get("ok")),
            "beats_default": result.beats_default,
        }, indent=2))
        if result.best is not None:
            (out / "tuned.hlo").write_text(ev.module(result.best.state, result.module).text())
    except OSError as exc:
        raise BadInput(f"{out}: cannot write outputs ({exc.strerror or exc})") from None


def _report(result, as_json: bool, out_dir) -> None:
    if as_json:
        _print_json(result.to_dict())
        return
    from rich.table import Table

    console = _console()
    table = Table(title=f"{result.module}: {result.strategy}, {result.evaluations} evaluations, objective {result.objective}")
    for col in ("", "raw ops", "final-ops", result.objective if result.objective not in ("ops", "final-ops") else "cost", "valid"):
        table.add_column(col, justify="right" if col else "left")
    inp, default = result.input, result.default
    table.add_row("input", str(inp.instructions), str(default.instructions), "", "")
    table.add_row("XLA default", str(default.instructions), str(default.instructions), f"{result.default_cost:g}", "yes")
    if result.best and result.beats_default:
        b = result.best
        valid = "-" if result.validity is None else ("yes" if result.validity.get("ok") else "NO")
        table.add_row("best found", str(b.raw.instructions), str(b.final.instructions) if b.final else "fails",
                      f"{b.cost:g}", valid)
    else:
        table.add_row("best found", "-", "-", "-", "= XLA default")
    console.print(table)
    if result.best and result.beats_default:
        n = len(result.best_sequence)
        console.print(f"best sequence ({n} pass{'es' if n != 1 else ''}): {','.join(result.best_sequence)}")
        if result.best.found and result.best.found != result.best.sequence:
            console.print(f"  (pruned from the {len(result.best.found)} passes found: the others changed nothing)")
        imp_final, imp_raw = result.improvement(True), result.improvement(False)

        def pct(x):
            return "n/a" if x is None else f"{x:+.1%}"

        console.print(f"reduction vs XLA default's reduction: final-ops {pct(imp_final)}, raw ops {pct(imp_raw)}")
    else:
        console.print(f"[yellow]No sequence beat XLA's default ordering on {result.objective} in {result.evaluations} "
                      "evaluations: keep XLA's default.[/]")
    for seq, reason in result.invalid:
        console.print(f"[yellow]rejected (invalid):[/] {','.join(seq)}: {reason}")
    console.print(f"run {result.run_id} ({result.status}): {result.seconds:.1f}s, steps compiled {result.steps_compiled}, "
                  f"cache hit rate {result.cache_hit_rate:.0%}" + (f"; outputs in {out_dir}" if out_dir else ""))


# ---- cache -------------------------------------------------------------------------------------------------
@cli.group()
def cache() -> None:
    """Inspect the result cache."""


@cache.command("stats")
@db_option
@json_option
def cache_stats(db, as_json) -> None:
    """Rows, sizes and failures stored in the cache database."""
    from autotune.cache import Cache

    c = Cache(db)
    try:
        stats = c.stats()
    finally:
        c.close()
    stats.pop("session", None)
    if as_json:
        _print_json(stats)
        return
    from rich.table import Table

    table = Table(title=f"cache {stats['path']}")
    table.add_column("what")
    table.add_column("value", justify="right")
    for key, value in stats.items():
        if key != "path":
            table.add_row(key, str(value))
    _console().print(table)


def _register_commands() -> None:
    """Import every module in ``autotune.commands``; each adds its command(s) to ``cli``."""
    import importlib
    import pkgutil

    import autotune.commands as commands

    for info in pkgutil.iter_modules(commands.__path__):
        importlib.import_module(f"autotune.commands.{info.name}")


_register_commands()


@cache.command("prune")
@click.option("--failures", is_flag=True, help="Forget failed steps (crashes, timeouts, errors) so they are retried.")
@click.option("--other-versions", is_flag=True, help="Delete results of other XLA/pipeline versions.")
@db_option
@json_option
def cache_prune(failures, other_versions, db, as_json) -> None:
    """Shrink the cache: failed steps, other versions' results, and module blobs nothing refers to."""
    from autotune.cache import Cache

    version = None
    if other_versions:
        from autotune import pipelines

        c = Cache(db)
        try:
            version = pipelines.get("xla", cache=c).version
        finally:
            c.close()
    c = Cache(db)
    try:
        before = c.stats()["file_bytes"]
        deleted = c.prune(failures=failures, other_versions_than=version)
        after = c.stats()["file_bytes"]
    finally:
        c.close()
    if as_json:
        _print_json({"deleted": deleted, "file_bytes_before": before, "file_bytes_after": after})
    else:
        click.echo(", ".join(f"{n} {what}" for what, n in deleted.items()) + f" deleted; {before} -> {after} bytes")


def main(argv=None) -> None:
    """Entry point: click in non-standalone mode so every error becomes one line and a code."""
    try:
        rv = cli.main(args=argv, prog_name="autotune", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else "autotune --help")
        sys.exit(0)
    except click.UsageError as exc:
        _die(exc.format_message().splitlines()[0] if exc.format_message() else "bad usage", 2)
    except click.exceptions.Abort:
        _die("aborted", 130)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        _die(exc.format_message().splitlines()[0], exc.exit_code or 2)
    except AutotuneError as exc:
        _die(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, exc.exit_code)
    except KeyboardInterrupt:
        _die("interrupted", 130)
    except BrokenPipeError:
        sys.exit(0)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    # Run the imported module's main, not this __main__ copy: commands in autotune.commands register
    # themselves on ``autotune.cli.cli``, which is a different object from ``__main__.cli``.
    import autotune.cli

    autotune.cli.main()
