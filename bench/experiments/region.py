#!/usr/bin/env python
"""The region check (level ``executed-region``) on the modules too big to run, and its agreement
with the whole-module check on every module that can be run whole.

Part 1, the three LLM steps of ``tests/data/real-llm`` (inputs 30-78 GiB): the win is found the way
a user finds it (``autotune run --strategy random --budget 20 MODULE`` through the API, seed 0;
``--quick`` applies the sequences that search finds instead of searching), then its validation
level is established on this machine and timed: the whole module is declined for memory, the tuned
module is compiled, and the changed regions are cut and executed.

Part 2, agreement: on every module of ``tests/data`` (``real-llm`` included) whose inputs fit
the execution limit, take the first of a few short sequences that changes XLA's default final
module, then judge it with both checks (whole-module execution, and the region check forced as if
whole execution had been declined); then inject a miscompile into the tuned final module (swap the
operands of a changed subtract/divide/compare, or scale a scalar constant the region computes) and
judge that with both. Agreement: the same verdict (ok / invalid); a region check that declines
(no sound cut, outputs not finite) is listed as such.

    python bench/experiments/region.py [--quick]

Writes ``results/region.md`` and ``results/region.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: the harness
from harness import REAL_LLM as SHARED, ROOT, Provenance, all_real, rel, require, write  # noqa: E402
LLMS = ("rocm_llama3_8b_generate", "rocm_gpt_oss_20b_prefill", "rocm_deepseek2_16b_generate")
#: What ``autotune run --strategy random --budget 20`` finds on each (README, results/real_models.md).
FOUND = {
    "rocm_llama3_8b_generate": ["post_scatter_expansion_simplification", "cse"],
    "rocm_gpt_oss_20b_prefill": ["flatten-call-graph", "algsimp", "call-inliner"],
    "rocm_deepseek2_16b_generate": ["dot_decomposer", "cse"],
}
#: Short sequences tried in order until one changes XLA's default final module (agreement part).
CANDIDATES = (["tree_reduction_rewriter"], ["call-inliner", "algsimp", "reshape-mover"], ["dot_decomposer", "cse"],
              ["reshape-mover"], ["cse", "dce", "simplification"], ["algsimp"], ["dot_decomposer"],
              ["post_scatter_expansion_simplification", "cse"])


# ---- part 1 ------------------------------------------------------------------------------------------
def llm_row(ev, path: Path, quick: bool) -> dict:
    from autotune.core import tuner
    from autotune.core.module import load
    from autotune.core.validation import establish
    from autotune.pipelines.xla import region

    t0 = time.perf_counter()
    root = ev.prepare(load(path))
    default = ev.default(root)
    if quick:
        sequence = FOUND[path.stem]
    else:
        result = tuner.tune(ev, root, strategy="random", budget=20, seed=0, validate=False)
        sequence = list(result.best.sequence) if result.best else []
    tuned = ev.evaluate(root, sequence)
    final = ev.final(tuned.state)
    search_s = time.perf_counter() - t0
    d_final, t_final = ev.module(default.state), ev.module(final.state)
    t1 = time.perf_counter()
    cut = region.cut(d_final.proto, t_final.proto)
    cut_s = time.perf_counter() - t1
    t2 = time.perf_counter()
    ev.pipeline.compiles(ev.module(tuned.state))  # the full compile every level above `unverified` needs
    compile_s = time.perf_counter() - t2  # (cached in the worker: establish below does not repeat it)
    t2 = time.perf_counter()
    v = establish(ev.pipeline, root, ev.module(tuned.state), finals=(d_final, t_final))
    validate_s = time.perf_counter() - t2
    whole = sum(s.nbytes for s in ev.pipeline.parameter_specs(root))
    return {
        "module": path.stem, "path": rel(path), "sequence": sequence, "default_final_ops": default.metrics.instructions,
        "tuned_final_ops": final.metrics.instructions, "search_seconds": round(search_s, 1),
        "regions": [{"index": r.index, "default_instructions": r.default_instructions,
                     "tuned_instructions": r.tuned_instructions, "inputs": r.inputs, "input_bytes": r.input_bytes,
                     "outputs": list(r.outputs)} for r in cut.regions],
        "cut_seconds": round(cut_s, 2), "matched_instructions": cut.matched, "default_instructions": cut.default_total,
        "whole_input_bytes": whole, "level": v.level, "reason": v.reason, "validation_seconds": round(validate_s, 1),
        "full_compile_seconds": round(compile_s, 1),
    }


# ---- part 2 ------------------------------------------------------------------------------------------
def executable_modules() -> list[Path]:
    data = ROOT / "tests" / "data"
    paths = sorted(data.glob("*.hlo")) + sorted((data / "real").glob("*.hlo")) + sorted((data / "gen").glob("*.hlo"))
    paths += sorted(p for p in all_real() if p.stem not in LLMS and p not in paths)
    return paths


def verdict(v) -> str:
    from autotune.core.validation import EXECUTED, EXECUTED_REGION, EXECUTED_WITH_STAND_INS, INVALID, Validation

    if not isinstance(v, Validation):
        return "declined"
    if v.level in (EXECUTED, EXECUTED_WITH_STAND_INS, EXECUTED_REGION):
        return "ok"
    return "invalid" if v.level == INVALID else v.level


def mutate(module_text: str, members, table) -> tuple[str, str] | None:
    """The tuned final module with one wrong rewrite inside the region, and what it was."""
    from autotune.pipelines.xla.mutate import mutate as mutate_instruction

    pick = None
    for comp, name in members:
        text = table[(comp, name)]
        if re.search(r" (subtract|divide)\(", text) or re.search(r" compare\(.*direction=(LT|GT|LE|GE)", text):
            pick = (name, "swap")
            break
    if pick is None:
        for comp, name in members:
            if re.search(r"= f(16|32|64)\[\] constant\(", table[(comp, name)]):
                pick = (name, "constant")
                break
    if pick is None:
        return None
    name, how = pick
    text = mutate_instruction(module_text, name, how)
    return (text, f"{how} in `{name}`") if text is not None else None


def agreement_row(ev, path: Path) -> dict:
    from autotune.pipelines.xla import hlo
    from autotune.pipelines.xla.loader import hlo_module, module_from_proto
    from autotune.core.limits import execution_limit
    from autotune.core.module import load
    from autotune.core.validation import establish, establish_region
    from autotune.errors import AutotuneError
    from autotune.pipelines.xla import region

    row = {"module": path.stem, "path": rel(path)}
    try:
        root = ev.prepare(load(path))
        need = sum(s.nbytes for s in ev.pipeline.parameter_specs(root))
    except AutotuneError as exc:
        return {**row, "skipped": f"cannot be loaded or run: {exc}"}
    if need > execution_limit()[0]:
        return {**row, "skipped": "cannot be executed whole here (inputs exceed the execution limit)"}
    default = ev.default(root)
    for seq in CANDIDATES:
        try:
            tuned = ev.evaluate(root, seq)
        except AutotuneError:
            continue
        if not tuned.ok:
            continue
        final = ev.final(tuned.state)
        if final.ok and final.state != default.state:
            break
    else:
        return {**row, "skipped": "no candidate sequence changes XLA's default final module"}
    d_final, t_final = ev.module(default.state), ev.module(final.state)
    row.update(sequence=seq, default_final_ops=default.metrics.instructions, tuned_final_ops=final.metrics.instructions)
    t0 = time.perf_counter()
    whole = establish(ev.pipeline, root, ev.module(tuned.state))
    row["whole"], row["whole_seconds"] = verdict(whole), round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    reg = establish_region(ev.pipeline, root, ev.module(tuned.state), 0, "forced for comparison", (d_final, t_final))
    row["region"], row["region_seconds"] = verdict(reg), round(time.perf_counter() - t0, 1)
    row["region_reason"] = reg.reason if not isinstance(reg, str) else reg.lstrip("; ")
    # a miscompile inside the region
    try:
        cut = region.cut(d_final.proto, t_final.proto)
    except region.CannotCut as exc:
        row["mutant"] = f"no cut: {exc}"
        return row
    if not cut.regions:
        row["mutant"] = "no region to mutate"
        return row
    module = hlo_module(t_final)
    table = {(c.name, i.name): i.to_string() for c in module.computations() for i in c.instructions()}
    members = [m for r in cut.regions for m in r.tuned_members]
    mutated = mutate(hlo.to_text(module), members, table)
    if mutated is None:
        row["mutant"] = "no subtract/divide/compare or scalar constant in the region"
        return row
    text, what = mutated
    try:
        broken = module_from_proto(hlo.parse_text(text).as_serialized_hlo_module_proto(), "broken")
    except AutotuneError as exc:
        row["mutant"] = f"mutation does not parse: {exc}"
        return row
    row["mutant"] = what
    row["mutant_whole"] = verdict(establish(ev.pipeline, root, broken))
    mreg = establish_region(ev.pipeline, root, broken, 0, "forced for comparison", (d_final, broken))
    row["mutant_region"] = verdict(mreg)
    return row


# ---- report ------------------------------------------------------------------------------------------
def gib(n) -> str:
    from autotune.core.limits import gib as g

    return g(n)


def markdown(llm: list[dict], agree: list[dict], command: str) -> str:
    lines = ["# The region check: executing only what changed", "",
             f"Regenerate: `{command}` (2-core machine shared with other jobs; times are wall-clock).", "",
             "## LLM steps too large to execute (`tests/data/real-llm`)", "",
             "| module | sequence | final-ops default -> tuned | regions (default + tuned instructions) | "
             "bytes executed / whole module | level | cut | full compile | region check |",
             "|---|---|---:|---|---:|---|---:|---:|---:|"]
    for r in llm:
        regs = ", ".join(f"{x['default_instructions']}+{x['tuned_instructions']}" for x in r["regions"]) or "none"
        executed = sum(x["input_bytes"] for x in r["regions"])
        lines.append(f"| {r['module']} | `{','.join(r['sequence'])}` | {r['default_final_ops']} -> {r['tuned_final_ops']} | "
                     f"{len(r['regions'])}: {regs} | {gib(executed)} / {gib(r['whole_input_bytes'])} | `{r['level']}` | "
                     f"{r['cut_seconds']} s | {r['full_compile_seconds']} s | {r['validation_seconds']} s |")
    lines += ["", "Reasons, as `run` prints them:", ""]
    lines += [f"* **{r['module']}**: `{r['level']}` ({r['reason']})" for r in llm]
    lines += ["", "## Agreement with the whole-module check", "",
              "Every module of `tests/data` (`real-llm` included) that can be executed whole, with the first short "
              "sequence that changes XLA's default final module: the whole-module check and the region check (forced), "
              "then both on the tuned final module with one wrong rewrite injected inside the region.", "",
              "| module | sequence | whole | region | agree | miscompile | whole | region | agree |",
              "|---|---|---|---|---|---|---|---|---|"]
    n_agree = n_cmp = 0
    for r in agree:
        if "skipped" in r:
            lines.append(f"| {r['module']} | {r['skipped']} | | | | | | | |")
            continue
        ok = r["whole"] == r["region"] if r["region"] != "declined" else None
        mok = (r.get("mutant_whole") == r.get("mutant_region")) if r.get("mutant_region") not in (None, "declined") else None
        for x in (ok, mok):
            if x is not None:
                n_cmp += 1
                n_agree += int(x)
        fmt = {True: "yes", False: "**no**", None: "-"}
        lines.append(f"| {r['module']} | `{','.join(r['sequence'])}` | {r['whole']} | {r['region']} | {fmt[ok]} | "
                     f"{r.get('mutant', '-')} | {r.get('mutant_whole', '-')} | {r.get('mutant_region', '-')} | {fmt[mok]} |")
    lines += ["", f"Same verdict in {n_agree} of {n_cmp} comparisons where both checks gave one.", ""]
    declined = [r for r in agree if r.get("region") == "declined"]
    if declined:
        lines += ["Region check declined (level stays `compiled` in real use):", ""]
        lines += [f"* {r['module']}: {r['region_reason']}" for r in declined]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="apply the sequences the search finds instead of searching; "
                                                          "agreement on tests/data/real only")
    ap.add_argument("--db", help="cache database (default: a fresh temporary one)")
    ap.add_argument("--out", default=str(ROOT / "results"))
    args = ap.parse_args()
    require([SHARED / f"{name}.hlo" for name in LLMS] + executable_modules(), "module")
    from autotune.core.engine import open_engine

    command = "python bench/experiments/region.py" + (" --quick" if args.quick else "")
    with tempfile.TemporaryDirectory() as tmp, open_engine(args.db or Path(tmp) / "cache.db", workers=1) as ev:
        llm = []
        for name in LLMS:
            row = llm_row(ev, SHARED / f"{name}.hlo", args.quick)
            print(json.dumps({k: row[k] for k in ("module", "level", "validation_seconds", "reason")}), flush=True)
            llm.append(row)
        modules = executable_modules()
        if args.quick:
            modules = [p for p in modules if p.parent.name == "real" or p.name == "mlp_train_step.hlo"]
        agree = []
        for path in modules:
            row = agreement_row(ev, path)
            print(json.dumps(row), flush=True)
            agree.append(row)
    data = {"command": command, "llm": llm, "agreement": agree}
    print(f"wrote {rel(write(Path(args.out), 'region', data, markdown(llm, agree, command), Provenance.now()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
