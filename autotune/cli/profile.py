"""``autotune profile``: where a module's time goes under XLA's default, and under an answer.

``autotune profile MODEL`` compiles MODEL as XLA's default does on this machine, times its step,
traces a few runs and prints each op that ran (fusion, library call, copy, loop) with its share of
the step, traced back to the input instruction it stands for (``core/profile.py``, XLA's side in
``pipelines/xla/profiling.py``). ``--record R`` / ``--run RUN_ID`` profile that answer beside the
default and say which ops got faster. See docs/profile.md.
"""

from __future__ import annotations

import click

from autotune.cli import cli
from autotune.cli.common import db_option, json_option, print_json
from autotune.errors import BadInput


@cli.command()
@click.argument("model", required=False, type=click.Path())
@click.option("--compiler-option", "compiler_options", multiple=True, metavar="NAME=VALUE",
              help="Compile with this XLA option (repeatable); XLA's default otherwise.")
@click.option("--record", "record_path", type=click.Path(), default=None,
              help="Also profile this record's answer (its passes and options) on MODEL, beside the default.")
@click.option("--run", "run_id", default=None, help="Also profile this finished run's answer beside the default.")
@click.option("--top", type=click.IntRange(min=1), default=15, show_default=True, help="Ops listed.")
@click.option("--rounds", type=click.IntRange(min=1, max=200), default=5, show_default=True,
              help="Runs traced (each beside one untraced run).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs.")
@db_option
@json_option
def profile(model, compiler_options, record_path, run_id, top, rounds, seed, db, as_json) -> None:
    """Where MODEL's time goes: each op that runs under XLA's default compile, its share of the
    measured step, the input instruction it stands for (opcode, shape, layout), how much of the step
    is unattributed, and whether the shares add up to the step."""
    from autotune.cli.common import open_engine
    from autotune.core.options import parse_assignments

    if record_path and run_id:
        raise BadInput("give --record or --run, not both")
    if model is None and run_id is None:
        raise BadInput("profile needs a MODEL (or --run RUN_ID)")
    options = parse_assignments(compiler_options)
    from autotune.cli.common import load_model

    loaded = load_model(model) if model is not None else None  # a bad file fails before any worker starts
    record = None
    if record_path is not None:
        from autotune.core.record import TuningRecord

        record = TuningRecord.load(record_path)
    with open_engine(db, workers=1) as ev:
        root, answer = _modules(ev, loaded, record, run_id, options)
        default = _profile(ev, root, rounds, seed, "XLA's default" if not options else options.describe())
        other = _profile(ev, answer[0], rounds, seed, answer[1]) if answer else None
    if as_json:
        out = default.to_dict(top)
        if other is not None:
            from autotune.core.profile import compare

            out = {"default": out, "answer": other.to_dict(top),
                   "faster": [{"site": c.site, "before": c.before, "after": c.after, "ratio": c.ratio}
                              for c in compare(default, other)]}
        print_json(out)
        return
    from autotune.reporting.profile import print_profile, print_comparison

    print_profile(default, top)
    if other is not None:
        print_profile(other, top)
        print_comparison(default, other, top)


def _profile(ev, module, rounds: int, seed: int, label: str):
    """The backend's profile of ``module`` as a ``core.profile.Profile``."""
    from autotune.core.backend import supports
    from autotune.core.profile import Profile

    backend = ev.pipeline
    if not supports(backend, "profile"):
        raise BadInput(f"the {backend.name} backend cannot profile for target {backend.target.name} "
                       "(a profile traces this host's CPU run)")
    data = backend.profile(module, rounds=rounds, seed=seed)
    options = module.options.items if getattr(module, "options", None) else ()
    return Profile.from_backend(module.name, data, options, label)


def _modules(ev, model, record, run_id, options):
    """(the module to profile as the default, (the answer's module, its label) or None)."""
    if options:
        from autotune.core.backend import supports

        if not supports(ev.pipeline, "options"):
            raise BadInput(f"the {ev.pipeline.name} backend has no compiler options")
        ev.pipeline.check_options(options)
    if run_id is not None:
        return _from_run(ev, model, run_id)
    root = ev.prepare(model)
    if options:
        root = root.with_options(options)
    if record is None:
        return root, None
    from autotune.core.options import CompilerOptions

    if root.fingerprint not in record.applies_to:
        raise BadInput(f"the record is for another module (fingerprint {record.fingerprint[:12]}, "
                       f"made for {record.module}), not {model.name}")
    return root, (ev.answer(root, record.sequence, CompilerOptions.of(record.compiler_options)), "the record's answer")


def _from_run(ev, model, run_id):
    from autotune.core.runs import RunStore

    from autotune.core.results import FleetResult

    run = RunStore(ev.cache).get(run_id)
    result = run.result
    if result is None:
        raise BadInput(f"run '{run_id}' has not finished (status {run.status})")
    if isinstance(result, FleetResult):
        raise BadInput(f"run '{run_id}' is a fleet run: profile one module of it with --record")
    try:
        root = ev.module(run.module, run.module_name)
    except KeyError:
        if model is None:
            raise BadInput(f"run '{run_id}': its module is not in the cache; give the MODEL") from None
        root = ev.prepare(model)
    if not result.best_sequence and not result.best_options:
        raise BadInput(f"run '{run_id}' found nothing better than XLA's default: nothing to profile beside it")
    return root, (ev.answer(root, result.best_sequence, result.best_options), f"run {run_id}'s answer")
