"""``autotune run``: the front door; tune one module with one strategy and report the best sequence."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import click

from autotune.core.options import SPACES, CompilerOptions, parse_assignments
from autotune.core.validation import REQUIREMENTS, verified
from autotune.errors import BadInput, CheckFailed
from autotune.cli import cli
from autotune.core.spec import DEFAULT_MAX_LENGTH, RunSpec
from autotune.cli.common import check_writable, console, db_option, json_option, load_model, parse_options, print_json, rejection_lines, workers_option, executor_option


@cli.command()
@click.argument("models", nargs=-1, type=click.Path(), metavar="[MODEL]...")
@click.option("--modules", "modules_dir", type=click.Path(file_okay=False), default=None,
              help="Fleet: tune ONE sequence for every .hlo in this directory (several MODELs do the same).")
@click.option("--allow-regressions", is_flag=True,
              help="Fleet: accept a sequence that makes some module worse than XLA's default (reported). "
                   "GPU target: offer an answer that adds kernel launches or roofline time over XLA's default "
                   "(set aside by default: docs/gpu.md).")
@click.option("--strategy", "-s", default="random", show_default=True, help="Search strategy (see `autotune strategies`).")
@click.option("--budget", "-b", type=int, default=200, show_default=True, help="Sequence evaluations, cache hits included.")
@click.option("--time-limit", type=float, default=None, help="Stop after this many seconds.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--max-length", type=int, default=DEFAULT_MAX_LENGTH, show_default=True, help="Longest pass sequence.")
@click.option("--objective", default="final-ops", show_default=True,
              help="final-ops | ops | cost | runtime (see README: Objectives).")
@click.option("--min-effect", type=float, default=None,
              help="runtime: smallest speed-up (percent) a confirmed win must prove [default: 2].")
@click.option("--confirm-rounds", type=int, default=None,
              help="runtime: interleaved A/B rounds of each independent measurement that confirms the best "
                   "candidate [default: 10; 4-12 measurements].")
@click.option("--space", type=click.Choice(SPACES), default=None,
              help="What to search: the pass order, XLA's compiler options (`autotune options`) or both "
                   "[default: both with --objective runtime, else passes]. Options are judged only by measured time.")
@click.option("--compiler-option", "compiler_options", multiple=True, metavar="NAME=VALUE",
              help="Fix an XLA compiler option for the whole run (repeatable; not -O, the strategy's options).")
@click.option("--allow-numerics-options", is_flag=True,
              help="Also search options that change numerics by design (fast math, fast min/max).")
@click.option("--sites", type=click.IntRange(min=0), default=None,
              help="Per-site decisions searched beside the options: the N hottest sites of the module (`autotune "
                   "sites`), e.g. a convolution run by YNNPACK or by XLA's own code; 0: none [default: 8 where "
                   "options are searched on the CPU].")
@click.option("--no-race", is_flag=True,
              help="runtime: time every candidate fully instead of stopping one once it provably cannot win.")
@click.option("--no-screen", is_flag=True,
              help="runtime: skip the screen (every single option value raced against XLA's default before the "
                   "strategy, the ones that paid combined; in the budget: docs/runtime.md).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Directory for best_sequence.json, tuned.hlo and summary.json.")
@click.option("--resume", default=None, help="Continue an interrupted run by its id.")
@click.option("--sampler", default=None, help="optuna: sampler (tpe, random, cmaes, qmc, gp, nsga2).")
@click.option("--optimizer", default=None, help="nevergrad: optimizer name (default DiscreteOnePlusOne).")
@click.option("--policy", default=None,
              help="ppo: a trained policy (.zip or a shipped name: llm, llm-spmd, llm-h100), a committee (a "
                   "directory of policies, or llm-committee: each rolled out, the best kept), or a,b,c (an ensemble).")
@click.option("--shaping", is_flag=True, default=None, help="ppo: potential-based shaping from flops/transcendentals.")
@click.option("--option", "-O", "extra", multiple=True, help="Strategy option key=value (repeatable).")
@click.option("--no-validate", is_flag=True, help="Skip the validity check of the best sequence.")
@click.option("--require", "require", type=click.Choice(REQUIREMENTS), default="none", show_default=True,
              help="Exit 1 unless the reported best reaches this validation level "
                   "(identical > executed > executed-with-stand-ins > executed-region > compiled > unverified; none accepts any).")
@click.option("--no-prune", is_flag=True, help="Report the best sequence as found, without dropping useless passes.")
@click.option("--no-surrogate", is_flag=True,
              help="Search the module as it is even when large constants (weights baked in) could be lifted to "
                   "parameters for the search (the default re-checks the best candidates on the real module).")
@click.option("--validate-seconds", type=float, default=None,
              help="Longest one execution of validation may take; a module estimated longer is compiled, not "
                   "executed (level compiled, with the estimate), and a run past it is stopped. Also the "
                   "validation phase's budget: no execution starts once it is spent or if it would end past "
                   "twice it (skipped, said why) [default: 30, or $AUTOTUNE_VALIDATE_SECONDS].")
@db_option
@workers_option
@executor_option
@json_option
def run(models, modules_dir, allow_regressions, strategy, budget, time_limit, seed, max_length, objective, min_effect,
        confirm_rounds, space, compiler_options, allow_numerics_options, sites, no_race, no_screen, out_dir, resume, sampler,
        optimizer,
        policy, shaping, extra, no_validate, require, no_prune, no_surrogate, validate_seconds, db, workers,
        as_json) -> None:
    """Tune MODEL's pass ordering with a search strategy and report the best sequence found
    (several MODELs or --modules: ONE sequence for the fleet)."""
    from autotune import strategy as strategy_mod
    from autotune.cli.common import module_paths
    from autotune.cli.common import open_engine
    from autotune.core.fleet import FleetResult
    from autotune.core.tuner import Interrupted, tune
    from autotune.reporting.progress import RichObserver

    # ONE RunSpec, built and checked here (a bad setting fails before anything is loaded), handed on.
    spec = RunSpec(strategy=strategy, budget=budget, objective=objective, seed=seed, max_length=max_length,
                   time_limit=time_limit,
                   options=parse_options(extra, sampler=sampler, optimizer=optimizer, policy=policy, shaping=shaping),
                   validate=not no_validate, prune=not no_prune, validate_seconds=validate_seconds,
                   surrogate=not no_surrogate,
                   objective_options=_objective_options(min_effect, confirm_rounds, no_race),
                   allow_regressions=allow_regressions, space=space,
                   compiler_options=parse_assignments(compiler_options).as_dict(),
                   numerics_options=allow_numerics_options, sites=sites, screen=not no_screen)
    paths = module_paths(list(models) + ([modules_dir] if modules_dir else [])) if (models or modules_dir) else []
    if resume and paths:
        raise BadInput("--resume takes no MODEL (the run knows its module)")
    if not resume and not paths:
        raise BadInput("give a MODEL to tune (or --resume RUN_ID)")
    if not resume:
        strategy_mod.load(strategy)  # unknown names fail before any compile
        spec.make_objective()
        spec.searched()  # options asked of an objective that cannot judge them: one line, before any compile
    if out_dir:
        check_writable(Path(out_dir), directory=True)
    loading = time.perf_counter()
    modules = [load_model(str(p)) for p in paths]
    loading = time.perf_counter() - loading
    target = modules if (len(paths) > 1 or modules_dir) else (modules[0] if modules else None)
    model_paths = {m.name: str(p) for m, p in zip(modules, paths)}
    with open_engine(db, workers=workers) as ev:
        try:
            result = tune(ev, target, spec=spec, resume=resume, observer=None if as_json else RichObserver())
        except Interrupted as exc:
            _publish(ev, exc.partial, as_json, out_dir, model_paths, explain=False)
            raise
        if not isinstance(result, FleetResult):
            result = replace(result, phases=(("load", loading), *result.phases))
        _publish(ev, result, as_json, out_dir, model_paths, explain=True)
    if isinstance(result, FleetResult):
        from autotune.cli.fleet import check_fleet_required

        check_fleet_required(result, require)
    else:
        check_required(result, require)


def _publish(ev, result, as_json: bool, out_dir, model_paths: dict, explain: bool) -> None:
    """Write ``--out`` and print the report of a run, one module or a fleet (partial when interrupted)."""
    from autotune.core.fleet import FleetResult

    if isinstance(result, FleetResult):
        from autotune.cli.fleet import publish_fleet

        publish_fleet(ev, result, as_json, out_dir, model_paths, explain)
        return
    if out_dir:
        _write_outputs(ev, result, Path(out_dir))
        if explain:
            _write_explain(ev, result, Path(out_dir), next(iter(model_paths.values()), None))
    _report(result, as_json, out_dir)


def check_required(result, require: str) -> None:
    """``--require LEVEL``: CheckFailed (exit 1) when the run's best candidate is below LEVEL.

    The best candidate is checked whether or not it beats XLA's default (a tie that reaches the
    same module is ``identical`` anyway). A run where every candidate was rejected reports none.
    """
    if require == "none" or result.best is None:
        return
    validation = result.validation
    if validation is None or not validation.meets(require):
        got = validation.describe() if validation else "not validated"
        raise CheckFailed(f"--require {require}: the best sequence reached {got}")


def _write_explain(ev, result, out: Path, model_path) -> None:
    """``explain.md`` next to the outputs when the run beat XLA's default (nothing to explain otherwise)."""
    if not (result.best and result.beats_default):
        return
    from autotune.reporting.explain import explain

    root = ev.module(result.fingerprint, result.module)
    try:
        ratio = result.claim.ratio if result.claim is not None and result.claim.measured else None
        text = explain(ev, root, result.best_sequence, run_id=result.run_id,
                       model_path=str(model_path) if model_path else None, options=result.best_options,
                       ratio=ratio).to_markdown()
    except Exception as exc:  # the run's results are written already; an explanation is a bonus
        text = f"# Explain: {result.module}\n\nNo explanation: {type(exc).__name__}: {exc}\n"
    try:
        (out / "explain.md").write_text(text)
    except OSError as exc:
        raise BadInput(f"{out}: cannot write explain.md ({exc.strerror or exc})") from None


def _objective_options(min_effect, rounds, no_race: bool = False) -> dict:
    """The runtime claim's settings when given (``RunSpec.make_objective`` checks them)."""
    options = {}
    if min_effect is not None:
        options["min_effect"] = min_effect / 100.0
    if rounds is not None:
        options["rounds"] = rounds
    if no_race:
        options["race"] = False
    return options


def _write_outputs(ev, result, out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        data = result.to_dict()
        (out / "summary.json").write_text(json.dumps(data, indent=2))
        (out / "best_sequence.json").write_text(json.dumps({
            "module": result.module, "fingerprint": result.fingerprint, "objective": result.objective,
            "sequence": list(result.best_sequence), "cost": result.best_cost, "default_cost": result.default_cost,
            "pipeline_version": ev.version, "run_id": result.run_id, "valid": verified(result.validation_level),
            "validation_level": result.validation_level,
            "beats_default": result.beats_default, "target": result.target.key,
        }, indent=2))
        if result.best is not None:  # nothing beats the default: the tuned module is the input as it is
            state = result.best.state if result.best_sequence else result.fingerprint
            (out / f"tuned{ev.pipeline.suffixes[0]}").write_text(ev.pipeline.to_text(ev.module(state, result.module)))
    except OSError as exc:
        raise BadInput(f"{out}: cannot write outputs ({exc.strerror or exc})") from None


def answer_lines(sequence, options, base: str, improvement_final: float | None,
                 improvement_raw: float | None, notes=()) -> list[str]:
    """What an answer changes, in words: its pass order and compiler options, and for an answer with an
    order the paper's op-count ratio (its reduction of the instruction count against ``base``'s).

    An answer of compiler options alone keeps XLA's pass order, so that ratio says nothing of it: the
    demo's ResNet-50 answer (options, no passes) read "final-ops +0.0%, raw ops -100.0%" (raw ops are
    the untouched input's, final-ops XLA's default's). It is said as what it is instead. ``notes``:
    lines that follow the answer's own (how it was pruned)."""
    if options and not sequence:
        return [f"options only: {options.describe()}; pass order: {base}", *notes]
    n = len(sequence)
    lines = [f"best sequence ({n} pass{'es' if n != 1 else ''}): {','.join(sequence)}"]
    if options:
        lines.append(f"compiler options: {options.describe()}")
    lines += notes

    def pct(x):
        return "n/a" if x is None else f"{x:+.1%}"

    if improvement_final is not None or improvement_raw is not None:  # undefined when the default adds
        lines.append(f"reduction vs the reduction of {base}: final-ops {pct(improvement_final)}, "
                     f"raw ops {pct(improvement_raw)}")
    return lines


def _report(result, as_json: bool, out_dir) -> None:
    if as_json:
        print_json(result.to_dict())
        return
    from rich.table import Table

    out = console()
    table = Table(title=f"{result.module}: {result.strategy}, {result.evaluations} evaluations, objective {result.objective}")
    for col in ("", "raw ops", "final-ops", result.objective if result.objective not in ("ops", "final-ops") else "cost",
                "validation"):
        table.add_column(col, justify="right" if col else "left")
    inp, default, base = result.input, result.default, result.target.baseline
    table.add_row("input", str(inp.instructions), str(default.instructions), "", "")
    table.add_row(base, str(default.instructions), str(default.instructions), f"{result.default_cost:g}", "")
    if result.best and result.beats_default:
        b = result.best
        valid = result.validation_level or "-"
        table.add_row("best found", str(b.raw.instructions), str(b.final.instructions) if b.final else "fails",
                      f"{b.cost:g}", valid)
    else:
        table.add_row("best found", "-", "-", "-", f"= {base}")
    out.print(table)
    out.print(f"target {result.target.key}: passes applied and judged by {result.target.judged_by()}"
              + ("; not timed on a GPU (timed on an H200, such answers ran within 0.1% of XLA's default on the "
                 "LLM steps and within noise on 14 smaller modules: docs/gpu.md)" if result.target.is_gpu and not (result.claim and result.claim.measured)
                 else ""))
    if result.input.collectives:
        devices = (result.input.structure_counts or {}).get("devices", 0)
        over = f" over {devices} devices" if devices > 1 else ""
        out.print(f"{result.input.collectives} collectives{over}: judged as one device's program of a partitioned "
                  "step, compiled for one partition (a proxy for the step's compile over all its devices, "
                  "docs/llm-family.md)")
    if result.best and result.beats_default:
        notes = []
        if result.best.found and result.best.found != result.best.sequence:
            found_cost = result.best.found_cost
            if found_cost is not None and found_cost > result.best.cost:
                notes.append(f"  (pruned from the {len(result.best.found)} passes found, {','.join(result.best.found)} "
                             f"at {found_cost:g}: dropping {','.join(_dropped(result.best.found, result.best.sequence))} "
                             f"lowered it to {result.best.cost:g})")
            else:
                notes.append(f"  (pruned from the {len(result.best.found)} passes found: the others changed nothing)")
        for line in answer_lines(result.best_sequence, result.best_options, base, result.improvement(True),
                                 result.improvement(False), notes):
            out.print(line)
    elif result.claim is not None and not result.claim.win and (result.claim.measured or result.claim.rounds == 0):
        out.print(f"[yellow]{result.objective}: {result.claim.message}.[/]")
    else:
        searched = {"options": "option set", "both": "sequence or option set"}.get(result.space, "sequence")
        out.print(f"[yellow]No {searched} beat {base}{' ordering' if searched == 'sequence' else ''} on "
                  f"{result.objective} in {result.evaluations} "
                  f"evaluations: keep {base}.[/]")
    if result.claim is not None and result.claim.measured and result.claim.win:
        out.print(f"[green]{result.objective}: {result.claim.message}[/]")
    if result.claim is not None and result.claim.measured:
        c = result.claim
        over = f"{c.instances} independent measurements, " if c.instances else ""
        out.print(f"confirmation ({over}{c.rounds} interleaved rounds of the best and {base}, extra to the "
                      f"budget): median {c.cost:g} vs {c.default_cost:g} us, ratio {c.ratio:.3f} "
                      f"[{c.low:.3f}, {c.high:.3f}] at {c.confidence:.0%} confidence")
        if c.compile_seconds is not None and c.default_compile_seconds is not None:
            out.print(f"compile time: {c.compile_seconds:.2f} s (the answer) vs {c.default_compile_seconds:.2f} s "
                      f"({base})")
    for line in search_lines(result):
        out.print(line)
    if result.surrogate:
        color = "green" if result.surrogate.get("agree") else "yellow"
        out.print(f"[{color}]{result.surrogate['message']}[/]")
    if result.validation is not None:
        out.print(f"validation: {validation_line(result.validation, dict(result.phases).get('validation'))}"
                      + ("" if result.beats_default else f" (of the best candidate, which does not beat {base})"))
        for skip in result.validation.skipped:
            out.print(f"  {skip.describe()}")
    if result.memory is not None:
        m = result.memory
        out.print(f"[yellow]{m.describe()}: the answer needs more memory than XLA's default, which final-ops does "
                  "not count (docs/guarantees.md)[/]" if m.grows else m.describe())
    for line in rejection_lines(result.invalid):
        out.print(line)
    out.print(f"run {result.run_id} ({result.status}): {result.seconds:.1f}s, steps compiled {result.steps_compiled}, "
                  f"cache hit rate {result.cache_hit_rate:.0%}" + (f"; outputs in {out_dir}" if out_dir else ""))
    if result.phases:
        out.print("time per phase: " + ", ".join(f"{name} {sec:.1f}s" for name, sec in result.phases))


def search_lines(result) -> list[str]:
    """What a run searched, how racing spent its timing, and the candidates that were faster but computed
    other outputs (never offered; what a compiler engineer most wants to hear about)."""
    lines = []
    if result.options_by:
        lines.append(f"searched: {result.space} (compiler options by {result.options_by})")
    notes = result.search_notes or {}
    if notes.get("timed"):
        how = "racing stopped" if notes.get("raced") else "no racing (--no-race):"
        lines.append(f"timing: {notes['timed']} executables timed against {result.target.baseline}, {how} "
                     f"{notes['stopped']} early; {notes['rounds']} of {notes['planned']} rounds, "
                     f"{notes['seconds']:.1f} s, ~{notes['saved_seconds']:.1f} s saved ({notes['saved_fraction']:.0%})")
    screened = notes.get("screen")
    if screened:
        lines.append(screen_line(screened))
    for wrong in result.faster_but_wrong:
        what = CompilerOptions.of(wrong.get("compiler_options")).describe()
        passes = f" after {','.join(wrong['sequence'])}" if wrong.get("sequence") else ""
        ratio = f" (measured {wrong['ratio']:.2f}x of the default's time in the search)" if wrong.get("ratio") else ""
        lines.append(f"[red]faster but wrong:[/] {what}{passes}{ratio}: {wrong['reason']}")
    return lines


def screen_line(screened: dict) -> str:
    """``screen: 20 of 51 single option values raced ...``: what the screen did (``core/screen.py``)."""
    left = f" ({screened['left_out']} not afforded by the budget)" if screened.get("left_out") else ""
    paid = f"{len(screened['paid'])} paid" + (f" ({'; '.join(screened['paid'][:3])})" if screened["paid"] else "")
    extended = (f", {screened['extended']} timed {screened['extra_rounds']} more rounds (straddling "
                f"{screened['bar']:.2f})" if screened.get("extended") else "")
    combined = f", {screened['combined']} combination(s) timed" if screened.get("combined") else ""
    best = screened.get("best")
    start = (f"; the strategy started from {CompilerOptions.of(best['options']).describe()}" if best
             else "; nothing paid: the strategy started from the default")
    return (f"screen: {screened['screened']} of {screened['singles']} single option values raced{left}, "
            f"{paid}{extended}{combined}, {screened['evaluations']} evaluations of the budget{start}")


def validation_line(validation, seconds: float | None) -> str:
    """``executed-region in 38.9 s (budget 30 s): <reason>``: the level, the validation phase's total
    beside its budget (``--validate-seconds`` bounds the phase as a whole), then why; the level and
    reason alone where the phase did not run here (no total, or no budget: a stored verdict)."""
    if seconds is None or validation.budget_seconds is None:
        return validation.describe()
    return (f"{validation.level} in {seconds:.1f} s (budget {validation.budget_seconds:g} s)"
            + (f": {validation.reason}" if validation.reason else ""))


def _dropped(found: tuple[str, ...], kept: tuple[str, ...]) -> list[str]:
    """The passes of ``found`` that pruning left out (``kept`` is a subsequence of it)."""
    out, j = [], 0
    for name in found:
        if j < len(kept) and kept[j] == name:
            j += 1
        else:
            out.append(name)
    return out
