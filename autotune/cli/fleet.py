"""``autotune run a.hlo b.hlo ...`` / ``--modules DIR``: how a fleet run is reported (see ``core.fleet``).

Not a command of its own: ``run`` builds the one ``RunSpec`` and runs a fleet like any run (resume,
Ctrl-C and all); only the outputs and the report of a fleet's result are written here.
"""

from __future__ import annotations

import json
from pathlib import Path

from autotune.cli.common import console, print_json, rejection_lines
from autotune.errors import BadInput


def publish_fleet(ev, result, as_json: bool, out_dir, paths: dict, explain: bool = True) -> None:
    """Write ``--out`` and print a fleet run's report (partial when it was interrupted)."""
    if out_dir:
        _write_outputs(ev, result, Path(out_dir), paths, explain)
    if as_json:
        print_json(result.to_dict())
    else:
        _report(result, out_dir)


def check_fleet_required(result, require: str) -> None:
    """``--require LEVEL``: CheckFailed (exit 1) when the fleet's weakest member is below LEVEL."""
    if require == "none" or not result.best_sequence:
        return
    from autotune.core.validation import meets
    from autotune.errors import CheckFailed

    if result.validation_level is None or not meets(result.validation_level, require):
        weakest = [m.name for m in result.members
                   if m.validation is not None and m.validation.level == result.validation_level]
        raise CheckFailed(f"--require {require}: the fleet's weakest member reached "
                          f"{result.validation_level or 'no validation'} ({', '.join(weakest) or 'not validated'})")


def biggest_win(result):
    """The member with the largest relative gain (None when no member gained)."""
    gains = [m for m in result.members if m.ratio is not None and m.ratio < 1.0]
    return min(gains, key=lambda m: m.ratio) if gains else None


def _write_outputs(ev, result, out: Path, paths: dict, explain: bool = True) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps(result.to_dict(), indent=2))
        (out / "best_sequence.json").write_text(json.dumps({
            "modules": list(result.modules), "fingerprints": [m.fingerprint for m in result.members],
            "objective": result.objective, "sequence": list(result.best_sequence), "cost": result.best_cost,
            "default_cost": result.default_cost, "pipeline_version": ev.version, "run_id": result.run_id,
            "beats_default": result.beats_default, "regressions": list(result.regressions),
            "target": result.target.key,
        }, indent=2))
        win = biggest_win(result) if explain and result.beats_default else None
        if win is not None:
            from autotune.reporting.explain import explain

            text = explain(ev, ev.module(win.fingerprint, win.name), result.best_sequence, run_id=result.run_id,
                           model_path=paths.get(win.name)).to_markdown()
            (out / "explain.md").write_text(text)
    except OSError as exc:
        raise BadInput(f"{out}: cannot write outputs ({exc.strerror or exc})") from None


def _report(result, out_dir) -> None:
    from rich.table import Table

    con = console()
    table = Table(title=f"fleet of {len(result.members)}: {result.strategy}, {result.evaluations} fleet evaluations, "
                        f"objective {result.objective}")
    base = result.target.baseline
    for col in ("module", "input", base, "tuned", "change", "valid"):
        table.add_column(col, justify="left" if col == "module" else "right")
    for m in result.members:
        change = "fails" if m.ratio is None else f"{m.ratio - 1.0:+.2%}"
        if m.regressed:
            change += " WORSE"
        valid = "-" if m.validation is None else m.validation.level
        tuned = m.tuned.instructions if m.tuned is not None else (m.cost if m.cost is not None else "-")
        table.add_row(m.name, str(m.input.instructions), str(m.default.instructions), str(tuned), change, valid)
    con.print(table)
    con.print(f"target {result.target.key}: passes applied and judged by {result.target.judged_by()}")
    if result.beats_default:
        con.print(f"fleet sequence ({len(result.best_sequence)} passes): {','.join(result.best_sequence)}")
        con.print(f"mean relative change vs {base}: {result.best_cost - 1.0:+.3%}"
                  + (f"; worse than the default on: {', '.join(result.regressions)}" if result.regressions else
                     "; no module worse than its default"))
    else:
        con.print(f"[yellow]No sequence beat {base} ordering on the fleet in {result.evaluations} "
                  f"evaluations: keep {base}.[/]")
    for line in rejection_lines(result.invalid):
        con.print(line)
    con.print(f"run {result.run_id} ({result.status}): {result.seconds:.1f}s, steps compiled {result.steps_compiled}"
              + (f"; outputs in {out_dir}" if out_dir else ""))
