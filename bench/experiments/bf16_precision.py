#!/usr/bin/env python
"""bf16 validation against an f32 reference: the win it lets through, the miscompiles it still stops.

Why: on the llm family's default decode step (``LLMConfig()``: 4 GQA layers under ``lax.scan``,
RoPE, bf16) the win ``algsimp,reshape-mover,cse`` (294 -> 287 final-ops) changes which bf16
roundings XLA's excess precision removes, and the strict elementwise comparison rejected it on
most input draws. ``autotune/core/precision.py`` judges such results against the original module
run in f32. This measures, per input draw, the strict verdict, the tuned/default error ratios
against the reference (one draw), and the final verdict (``validate``, extra draws included), for
the win and for three miscompiles injected into the same tuned module.

    python bench/experiments/bf16_precision.py [--quick]

``--quick``: seeds 0-3 (about 1 min on 2 cores); default: seeds 0-7. Writes
``results/bf16_precision.md`` and ``results/bf16_precision.json``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: the harness
from harness import RESULTS, Provenance, write  # noqa: E402

from autotune.core.module import load  # noqa: E402
from autotune.core.precision import reference_errors  # noqa: E402
from autotune.core.validation import compare_outputs, validate  # noqa: E402
from autotune.pipelines.xla import XlaPipeline  # noqa: E402
from autotune.zoo import LLMConfig, lower  # noqa: E402

SEQUENCE = ["algsimp", "reshape-mover", "cse"]
#: Wrong rewrites injected into the tuned module's text: (label, constant as printed, wrong one).
MISCOMPILES = (
    ("attention scale 1.25x", "f32[] constant(0.25)", "f32[] constant(0.3125)"),
    ("RMSNorm mean over 60, not 64", "f32[] constant(0.015625)", "f32[] constant(0.0166666)"),
    ("RoPE frequency base 4% off", "f32[] constant(-1.15129256)", "f32[] constant(-1.2)"),
)


def worst_ratio(default, tuned, ref) -> float:
    """The largest tuned/default error ratio (max and RMS) over the float outputs."""
    worst = 0.0
    for i, r in enumerate(ref):
        if r.dtype.kind != "f":
            continue
        e = reference_errors(i, default[i], tuned[i], r)
        worst = max(worst, e.tuned_max / max(e.default_max, 1e-30), e.tuned_rms / max(e.default_rms, 1e-30))
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="seeds 0-3 instead of 0-7")
    args = ap.parse_args()
    seeds = range(4 if args.quick else 8)
    pipeline = XlaPipeline(workers=1)
    try:
        root = pipeline.normalize(load(lower("llm", "decode", LLMConfig())))
        tuned = pipeline.apply(root, SEQUENCE)
        text = pipeline.to_text(tuned)
        candidates = {"win: " + ",".join(SEQUENCE): tuned}
        for label, right, wrong in MISCOMPILES:
            assert right in text, right
            candidates["miscompile: " + label] = load(text.replace(right, wrong, 1))
        rows = []
        for seed in seeds:
            default = pipeline.execute(root, seed=seed)
            ref = pipeline.execute_reference(root, seed=seed)
            for name, module in candidates.items():
                out = pipeline.execute(module, seed=seed)
                strict = compare_outputs(default, out)
                report = validate(pipeline, root, module, seed=seed)
                rows.append({"seed": seed, "candidate": name, "strict_ok": strict.ok,
                             "strict_mismatches": sum(o.mismatches for o in strict.outputs),
                             "worst_error_ratio": round(worst_ratio(default, out, ref), 3),
                             "accepted": report.ok})
                print(rows[-1], flush=True)
    finally:
        pipeline.close()
    cmd = "python bench/experiments/bf16_precision.py" + (" --quick" if args.quick else "")
    lines = ["# bf16 results judged against an f32 reference", "", f"Regenerate: `{cmd}`", "",
             "Module: `lower('llm', 'decode', LLMConfig())` (4 layers, bf16). `strict`: the elementwise "
             "comparison with XLA's default (bf16 rtol 0.05, atol 0.01); `ratio`: the tuned module's "
             "error against the f32 reference over XLA's default's (worst of max and RMS, float outputs, "
             "this draw only; accepted up to 2); `verdict`: `validate` (the reference judgement, which "
             "must also hold on the next two draws).", "",
             "| seed | candidate | strict | mismatches | ratio | verdict |", "|---:|---|---|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['seed']} | {r['candidate']} | {'ok' if r['strict_ok'] else 'fails'} | "
                     f"{r['strict_mismatches']} | {r['worst_error_ratio']:.2f} | "
                     f"{'accepted' if r['accepted'] else 'rejected'} |")
    write(RESULTS, "bf16_precision", {"command": cmd, "rows": rows}, "\n".join(lines), Provenance.now(), indent=1)


if __name__ == "__main__":
    main()
