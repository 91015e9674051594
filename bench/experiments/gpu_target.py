#!/usr/bin/env python
"""What a deviceless GPU step costs against a CPU step, and whether stopping the GPU compile early
judges like compiling it whole.

1. **Step cost.** On each module, the same passes applied one at a time (a fresh compile each, no
   cache) for the CPU target and for ``--target`` (h100), plus XLA's default pipeline (the step that
   judges a sequence): median seconds per step, and the ratio GPU / CPU, measured side by side in
   one run (the machine is shared: ratios, not absolute times).
2. **Stopping early.** The GPU worker reads a final module where XLA's GPU pipeline enters its
   autotuning stage (after fusion; before copy insertion, scheduling and codegen) instead of compiling
   it whole. For ``--pairs`` (module, random sequence) pairs, the figures at that point (instructions,
   kernels, roofline) against the same figures of the module the whole deviceless compile leaves:
   Spearman over their ratios to the default, and how often the two agree on "better than the
   default" / "worse".

    python bench/experiments/gpu_target.py [--quick] [--target h100]

Writes ``results/gpu_target.md`` and ``results/gpu_target.json``. Nothing here runs on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: the harness
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from harness import REAL, ROOT, Provenance, llm_steps, require, write  # noqa: E402

PASSES = ("algsimp", "cse", "reshape-mover", "dce", "simplification", "dot_decomposer", "call-inliner",
          "constant_folding")


def modules(quick: bool) -> list[Path]:
    small = [ROOT / "tests" / "data" / "small_redundant.hlo", ROOT / "examples" / "llm_decode_step.hlo",
             ROOT / "examples" / "gpt2_train_step.hlo", REAL / "xla_dlrm_train_step.hlo"]
    return small if quick else small + [REAL / "rocm_vit_predict.hlo", *llm_steps()]


def step_seconds(backend, module, actions) -> list[float]:
    """Seconds of each step as the worker timed it (a fresh compile each: no cache involved)."""
    out = []
    for action in actions:
        for _, item in backend.run_steps_many([(module.proto, module.fingerprint, [action])]):
            if getattr(item, "status", None) == "ok":
                out.append(item.seconds)
    return out


def cost_row(cpu, gpu, path: Path, repeats: int) -> dict:
    from autotune.core.backend import DEFAULT
    from autotune.core.module import load

    module = load(path)
    row = {"module": path.stem}
    for label, backend in (("cpu", cpu), ("gpu", gpu)):
        root = backend.normalize(module)
        actions = [a for a in PASSES if a in backend.passes()]
        steps = [s for _ in range(repeats) for s in step_seconds(backend, root, actions)]
        judge = [s for _ in range(repeats) for s in step_seconds(backend, root, [DEFAULT])]
        row[f"{label}_step_ms"] = round(1e3 * statistics.median(steps), 1)
        row[f"{label}_default_ms"] = round(1e3 * statistics.median(judge), 1)
        row["instructions"] = backend.measure(root).instructions
    row["step_ratio"] = round(row["gpu_step_ms"] / row["cpu_step_ms"], 2)
    row["default_ratio"] = round(row["gpu_default_ms"] / row["cpu_default_ms"], 2)
    return row


def figures_of(metrics) -> dict:
    return {"instructions": metrics.instructions, "kernels": metrics.figure("kernels"),
            "estimate_us": metrics.figure("estimate_us")}


def whole_figures(ev, state: str) -> dict:
    """The same figures of the module XLA's whole deviceless GPU compile leaves (scheduled, copies in)."""
    from autotune.pipelines.xla import gpu_cost, hlo

    proto = ev.pipeline.remote(600).gpu_module(ev.module(state).proto)
    module = hlo.parse_proto(hlo.unwrap_hlo_proto(proto))
    cost = gpu_cost.analyse(hlo.elided_text(module), ev.pipeline.gpu)
    return {"instructions": hlo.instruction_count(module), "kernels": cost.kernels, "estimate_us": cost.estimate_us}


def agreement(ev, paths: list[Path], pairs: int, seed: int) -> dict:
    from scipy.stats import spearmanr

    from autotune.core.module import load
    from autotune.errors import PassFailed

    rng = random.Random(seed)
    rows = []
    per_module = max(2, pairs // len(paths))
    failed = []
    for path in paths:
        root = ev.prepare(load(path))
        base = ev.default(root)
        try:
            base_whole = whole_figures(ev, root.fingerprint)
        except PassFailed as exc:  # XLA's whole deviceless compile refuses the module itself
            failed.append({"module": path.stem, "sequence": [], "error": str(exc).splitlines()[0][:200]})
            continue
        base_stop = figures_of(base.metrics)
        for _ in range(per_module):
            seq = rng.sample(ev.pipeline.passes(), rng.randint(1, 4))
            r = ev.evaluate(root, seq)
            final = ev.final(r.state) if r.ok else None
            if final is None or not final.ok:
                continue
            try:
                whole = whole_figures(ev, r.state)
            except PassFailed as exc:
                failed.append({"module": path.stem, "sequence": seq, "error": str(exc).splitlines()[0][:200]})
                continue
            stop = figures_of(final.metrics)
            rows.append({"module": path.stem, "sequence": seq,
                         **{f"stop_{k}": stop[k] / base_stop[k] for k in stop if base_stop[k]},
                         **{f"whole_{k}": whole[k] / base_whole[k] for k in whole if base_whole[k]}})
    out = {"pairs": len(rows), "rows": rows, "whole_compile_failed": failed}
    for k in ("instructions", "kernels", "estimate_us"):
        xs = [r[f"stop_{k}"] for r in rows if f"stop_{k}" in r and f"whole_{k}" in r]
        ys = [r[f"whole_{k}"] for r in rows if f"stop_{k}" in r and f"whole_{k}" in r]
        rho = spearmanr(xs, ys).statistic if len(xs) > 2 else float("nan")
        agree = sum((x < 1) == (y < 1) and (x > 1) == (y > 1) for x, y in zip(xs, ys))
        out[k] = {"spearman": None if rho != rho else round(float(rho), 3), "same_verdict": agree, "of": len(xs)}
    return out


def markdown(data: dict) -> str:
    lines = ["# A deviceless GPU step against a CPU step, and stopping the GPU compile early", "",
             f"Made by `{data['command']}` on {data['cpus']} CPUs (a shared machine: ratios of runs side by side, "
             f"not absolute times), {data['date']}; target `{data['target']}` (XLA's GPU pipeline compiled without a "
             "GPU; nothing here ran on a GPU).", "",
             "## 1. What one step costs", "",
             f"Median seconds of one step (a fresh compile each: {', '.join(PASSES)}, {data['repeats']} times) and "
             "of XLA's default pipeline (the step that judges a sequence), each target in its own workers:", "",
             "| module | instructions | CPU step ms | GPU step ms | GPU / CPU | CPU default ms | GPU default ms | GPU / CPU |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in data["cost"]:
        lines.append(f"| {r['module']} | {r['instructions']} | {r['cpu_step_ms']} | {r['gpu_step_ms']} | "
                     f"{r['step_ratio']} | {r['cpu_default_ms']} | {r['gpu_default_ms']} | {r['default_ratio']} |")
    steps = [r["step_ratio"] for r in data["cost"]]
    lines += ["", f"Median GPU / CPU step ratio: **{statistics.median(steps):.2f}** (goal <= 1.5; a cached step is "
                  "free for either).", "", "## 2. Stopping the GPU compile early", ""]
    a = data["agreement"]
    lines += [f"{a['pairs']} (module, random sequence of 1-4 passes) pairs. Each figure as a ratio to the module's own "
              "XLA default, read where the worker stops the compile (entering autotuning) and on the module the "
              "whole deviceless compile leaves:", "",
              "| figure | Spearman (stop vs whole) | same verdict vs the default | moved at the stop | moved whole |",
              "|---|---:|---:|---:|---:|"]
    for k in ("instructions", "kernels", "estimate_us"):
        moved = [sum(r.get(f"{side}_{k}", 1) != 1 for r in a["rows"]) for side in ("stop", "whole")]
        lines.append(f"| {k} | {a[k]['spearman']} | {a[k]['same_verdict']} of {a[k]['of']} | {moved[0]} | {moved[1]} |")
    lines += ["", "A random sequence rarely changes a module: Spearman is over the pairs, most of them ties at 1 "
                  "(the default's figure); it is undefined where one side never moved."]
    if a["whole_compile_failed"]:
        lines += ["", "Where XLA's whole deviceless compile failed (no GPU to autotune on), so there is nothing to "
                      "compare the stop point with:", ""]
        lines += [f"* {f['module']} `{','.join(f['sequence']) or '(XLA default)'}`: {f['error']}"
                  for f in a["whole_compile_failed"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="four small modules, fewer pairs")
    ap.add_argument("--target", default="h100")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "results"))
    args = ap.parse_args()
    paths = modules(args.quick)
    require(paths, "module")
    from autotune.core.cache import Cache
    from autotune.core.evaluator import Evaluator
    from autotune.pipelines.xla import XlaPipeline

    command = "python bench/experiments/gpu_target.py" + "".join(f" {a}" for a in sys.argv[1:])
    with tempfile.TemporaryDirectory() as tmp:
        cache = Cache(Path(tmp) / "cache.db")
        with XlaPipeline(workers=1, cache=cache) as cpu, XlaPipeline(workers=1, cache=cache, target=args.target) as gpu:
            cost = []
            for path in paths:
                cost.append(cost_row(cpu, gpu, path, args.repeats))
                print(json.dumps(cost[-1]), flush=True)
            agree = agreement(Evaluator(gpu, cache), paths, args.pairs or (24 if args.quick else 60), args.seed)
            target = gpu.target.key
        cache.close()
    data = {"command": command, "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"), "target": target,
            "repeats": args.repeats, "cost": cost, "agreement": agree}
    write(Path(args.out), "gpu_target", data, markdown(data), Provenance.now(target=target), indent=1)
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
