#!/usr/bin/env python
"""Fleet tuning (one sequence for many modules) against per-module tuning, and the biggest win explained.

    python bench/fleet.py [--budget 114] [--suite-budget 57] [--db PATH]

1. **Real fleet**: every real module of ``tests/data/real`` and ``tests/data/real-llm`` (8 third-party models, three of them LLM
   steps too large to execute here), ``greedy`` searching ONE sequence with a budget of ``--budget``
   fleet evaluations (each = the sequence on all 8 modules), against ``greedy`` on each module alone
   with the same budget per module: equal total work (fleet evaluations x modules = runs x budget).
   Validation: every result gets its level (``docs/validation-levels.md``): ``executed`` (full compile
   and the same outputs on random inputs) where this machine can run the module, ``compiled`` for the
   three LLM steps, whose inputs need 30-78 GiB.
2. **Suite sample**: 6 generated modules (2 GPT-2, 2 BERT, 2 ResNet from ``autotune.zoo``), fleet vs
   per-module at ``--suite-budget``.
3. **Explain** the biggest known win (DLRM training step, ``call-inliner,algsimp,reshape-mover``,
   929 -> 913 final-ops): ``results/explain_dlrm.md``.

Writes ``results/fleet.md``, ``results/fleet.json`` and ``results/explain_dlrm.md``: 7.2 min measured on 2
shared cores with a cold cache.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from harness import ROOT, Provenance, all_real, log, require, write, write_markdown  # first: the repository on the path

from autotune.core.engine import open_engine
from autotune.core.module import load
from autotune.core.tuner import tune, tune_fleet
from autotune.reporting.explain import explain
DLRM = ROOT / "tests/data/real/xla_dlrm_train_step.hlo"
DLRM_WIN = ("call-inliner", "algsimp", "reshape-mover")
#: (family, index into that family's suite entries): small, varied modules of the generated suite.
SUITE_PICKS = (("gpt2", 0), ("gpt2", 3), ("bert", 0), ("bert", 7), ("resnet", 0), ("resnet", 6))


def suite_sample(out: Path) -> list[Path]:
    from autotune.zoo.suite import configs, lower_entry

    by_family: dict[str, list] = {}
    for e in configs():
        by_family.setdefault(e.family, []).append(e)
    paths = []
    for family, k in SUITE_PICKS:
        e = by_family[family][k]
        path = out / f"{e.name}.hlo"
        if not path.exists():
            path.write_text(lower_entry(e.family, e.kind, e.config_dict()))
        paths.append(path)
    return paths


def compare(ev, paths: list[Path], budget: int, max_length: int, label: str) -> dict:
    """Fleet (one sequence) vs per-module greedy at equal total budget."""
    modules = [load(p) for p in paths]
    t0 = time.perf_counter()
    fleet = tune_fleet(ev, modules, strategy="greedy", budget=budget, max_length=max_length, validate=True)
    fleet_seconds = time.perf_counter() - t0
    log(f"{label}: fleet {','.join(fleet.best_sequence) or '(default)'} mean {fleet.best_cost - 1:+.3%} "
        f"in {fleet_seconds:.0f}s")
    rows = []
    for m in fleet.members:
        row = {"module": m.name, "input": m.input.instructions, "default": m.default.instructions,
               "fleet": m.tuned.instructions if m.tuned else None, "fleet_regressed": m.regressed,
               "fleet_valid": m.validation.level if fleet.best_sequence and m.validation else None}
        t1 = time.perf_counter()
        single = tune(ev, modules[[x.name for x in modules].index(m.name)], strategy="greedy", budget=budget,
                      max_length=max_length, validate=True)
        best = single.best.final.instructions if single.best and single.beats_default and single.best.final \
            else m.default.instructions
        row.update(single=best, single_sequence=list(single.best_sequence) if single.beats_default else [],
                   single_valid=single.validation_level if single.beats_default else None,
                   single_evaluations=single.evaluations, single_seconds=time.perf_counter() - t1,
                   single_run=single.run_id)
        rows.append(row)
        log(f"{label}: {m.name}: default {m.default.instructions}, fleet {row['fleet']}, per-module {best} "
            f"{','.join(row['single_sequence'])}")
    return {"label": label, "budget": budget, "max_length": max_length, "modules": len(paths),
            "fleet_run": fleet.run_id, "fleet_sequence": list(fleet.best_sequence),
            "fleet_found": list(fleet.found_sequence), "fleet_cost": fleet.best_cost,
            "fleet_evaluations": fleet.evaluations, "fleet_seconds": fleet_seconds,
            "fleet_regressions": list(fleet.regressions), "fleet_disqualified": fleet.disqualified,
            "fleet_failed": fleet.failed, "rows": rows,
            "per_module_seconds": sum(r["single_seconds"] for r in rows)}


def _pct(a, b) -> str:
    return "n/a" if a is None or b in (None, 0) else f"{a / b - 1:+.2%}"


def markdown(data: dict) -> str:
    lines = ["# Fleet tuning: one ordering for many modules", "",
             f"Made by `{data['command']}` in {data['seconds'] / 60:.1f} min on {os.cpu_count()} CPUs with "
             f"`{data['version']}`.", "",
             "A fleet run searches ONE pass sequence for all modules: its cost is the mean over modules of "
             "final-ops / XLA default's final-ops, and a sequence that makes any module worse than its default is "
             "disqualified (`autotune run --strategy greedy a.hlo b.hlo ...` or `--modules DIR`). Per-module tuning "
             "runs the same strategy on each module alone with the same budget per module, so both spend the same "
             "number of module evaluations. Final-ops: instructions after the sequence followed by XLA's default "
             "pipeline. Validation: the level each result reached (`identical`: the same final module as XLA's default; "
             "`executed`: full compile and the same outputs on random inputs; `executed-region`: the inputs do not fit "
             "this machine, the regions where the tuned final module differs from XLA's default one were executed; "
             "`compiled`: full compile only), see `docs/validation-levels.md`.", ""]
    for part in data["parts"]:
        seq = ",".join(part["fleet_sequence"]) or "(none: XLA's default)"
        lines += [f"## {part['label']}", "",
                  f"{part['modules']} modules, `greedy`, budget {part['budget']} (fleet: fleet evaluations; per module: "
                  f"evaluations per module), max length {part['max_length']}. Fleet sequence: `{seq}` "
                  f"(mean change {part['fleet_cost'] - 1:+.3%}"
                  + (f"; found as `{','.join(part['fleet_found'])}`, shortened by pruning (the run loop's backward sweep)" if part["fleet_found"] else "")
                  + "); modules made worse than their default: "
                  f"{', '.join(part['fleet_regressions']) or 'none'} ({part['fleet_disqualified']} of the "
                  f"{part['fleet_evaluations']} sequences tried were disqualified for making some module worse, "
                  f"{part['fleet_failed']} failed on some module). Time: fleet {part['fleet_seconds']:.0f}s, "
                  f"per-module runs {part['per_module_seconds']:.0f}s (sharing the fleet's cache).", "",
                  "| module | input | XLA default | fleet | change | validation | per-module best | change | its sequence | validation |",
                  "|---|---:|---:|---:|---:|---|---:|---:|---|---|"]
        for r in part["rows"]:
            fv, sv = r["fleet_valid"] or "-", r["single_valid"] or "-"
            lines.append(f"| {r['module']} | {r['input']} | {r['default']} | {r['fleet']} | "
                         f"{_pct(r['fleet'], r['default'])}{' WORSE' if r['fleet_regressed'] else ''} | {fv} | "
                         f"{r['single']} | {_pct(r['single'], r['default'])} | "
                         f"{','.join(r['single_sequence']) or '-'} | {sv} |")
        fleet_mean = sum(r["fleet"] / r["default"] for r in part["rows"]) / len(part["rows"]) - 1
        single_mean = sum(r["single"] / r["default"] for r in part["rows"]) / len(part["rows"]) - 1
        lines += ["", f"Mean change vs XLA's default: fleet {fleet_mean:+.3%} (one sequence), per-module "
                      f"{single_mean:+.3%} ({len({tuple(r['single_sequence']) for r in part['rows']})} distinct "
                      "sequences).", ""]
    e = data["explain"]
    lines += ["## The biggest win, explained", "",
              f"`autotune explain tests/data/real/xla_dlrm_train_step.hlo --passes {','.join(DLRM_WIN)}` "
              f"(full report: [`explain_dlrm.md`](explain_dlrm.md)): XLA default {e['default']['instructions']} -> "
              f"{e['tuned']['instructions']} final-ops; minimal sequence (ddmin, same final module): "
              f"`{','.join(e['minimal_sequence'])}`; {e['diff']['vanished_total']} instructions vanish and "
              f"{e['diff']['appeared_total']} appear ({e['diff']['rewired']} more read different inputs, "
              f"{e['diff']['matched']} identical).", "",
              "Final-ops after each prefix: " + ", ".join(
                  f"{s['action'] or 'none'} {s['final_instructions']}" for s in e["steps"]) + ".", "",
              "| opcode | default | tuned | delta |", "|---|---:|---:|---:|"]
    lines += [f"| {o['opcode']} | {o['before']} | {o['after']} | {o['delta']:+d} |" for o in e["diff"]["opcodes"]]
    lines += ["", "Vanished (first listed: where the difference starts):", "", "```"]
    lines += [f"{i['computation']}: {i['text']}" for i in e["diff"]["vanished"][:20]]
    lines += ["```", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--budget", type=int, default=114, help="real fleet: fleet evaluations (57 = one greedy position)")
    ap.add_argument("--suite-budget", type=int, default=57)
    ap.add_argument("--max-length", type=int, default=3)
    ap.add_argument("--db", default=None, help="cache (default: a fresh temporary one)")
    ap.add_argument("--out", default=str(ROOT / "results"))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    tmp = tempfile.TemporaryDirectory(prefix="autotune-fleet-")
    db = args.db or os.path.join(tmp.name, "cache.db")
    out = Path(args.out)
    command = "python bench/fleet.py" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    suite_dir = Path(tmp.name) / "suite"
    suite_dir.mkdir()
    real = sorted(all_real(), key=lambda p: p.name)  # the order of the fleet as it always was (by file name)
    require(real + [DLRM], "real module")
    with open_engine(db, workers=2) as ev:
        log("explain: DLRM")
        e = explain(ev, ev.prepare(load(DLRM)), DLRM_WIN, model_path="tests/data/real/xla_dlrm_train_step.hlo")
        prov = Provenance.now()
        write_markdown(out / "explain_dlrm.md", e.to_markdown(), prov)
        parts = [compare(ev, real, args.budget, args.max_length,
                         "Real third-party modules (tests/data/real, tests/data/real-llm)")]
        log("suite sample: lowering 6 modules")
        parts.append(compare(ev, suite_sample(suite_dir), args.suite_budget, args.max_length,
                             "Suite sample (6 generated modules)"))
        data = {"command": command, "version": ev.version, "seconds": time.perf_counter() - t0, "parts": parts,
                "explain": e.to_dict()}
    log(f"wrote {write(out, 'fleet', data, markdown(data), prov)} in {(time.perf_counter() - t0) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
