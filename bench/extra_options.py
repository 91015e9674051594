#!/usr/bin/env python
"""CPU compiler options the catalogue leaves out, timed on the small steps: results/extra-options/.

The options catalogue (``pipelines/xla/options.py``) holds the CPU debug options that change generated code
and that a search may set. The CPU backend's ``DebugOptions`` (openxla/xla's ``xla.proto``) name a few more
that bear on speed: Eigen's intra-op threads, multi-output fusion, the tiled emitter and its tiling
propagation, the thunk runtime, optimising for size. Would one of them pay where the catalogue finds
nothing, on the 1-30 ms steps where issue 64's median goal is lost? Each candidate is first compiled on the
module (an option this XLA does not know is said and skipped), then timed against XLA's default in
``--instances`` independent A/B measurements (the effect stage's protocol: each its own inputs, 10 interleaved
rounds of 50 ms samples; the geometric mean of their medians with a t interval). Nothing here is a claim, and
nothing is executed and compared: a candidate that paid would enter the catalogue and be judged there.

    python bench/extra_options.py [--instances 6] [MODULE|zoo:FAMILY:KIND ...]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from harness import RESULTS, Provenance, log, write
from options import module_file
from options_parts.effect import ROUNDS, estimate, log_ratio

from autotune.core.objectives.runtime import CONFIRM_MIN_SECONDS
from autotune.core.options import CompilerOptions
from autotune.errors import PassFailed

MODULES = ["examples/gpt2_train_step.hlo", "examples/bert_encoder_step.hlo", "examples/resnet_train_step.hlo",
           "tests/data/real/hloenv_jaxrl_td_target.hlo", "tests/data/real/xla_dlrm_train_step.hlo",
           "zoo:t5:train", "zoo:vit:train", "zoo:diffusion:train"]
#: (name, the value other than XLA's default) of CPU debug options outside the catalogue.
CANDIDATES = [("xla_cpu_multi_thread_eigen", "False"), ("xla_cpu_experimental_enable_tiling_propagation", "True"),
              ("xla_cpu_use_multi_output_fusion", "False"), ("xla_cpu_disable_tiled_emitter", "True"),
              ("xla_cpu_use_thunk_runtime", "False"), ("xla_cpu_optimize_for_size", "True")]


def markdown(data: dict) -> str:
    accepted = data["accepted"]
    lines = ["# CPU compiler options outside the catalogue, timed on the small steps", "",
             f"Each option this XLA accepts, against XLA's default: {data['instances']} independent A/B "
             f"measurements of {ROUNDS} interleaved rounds (50 ms samples), the geometric mean of their medians "
             "with a 95% t interval. Not claims, not executed and compared: a probe of whether any would pay.", "",
             "Refused by this XLA (`No such compile option`): "
             + (", ".join(f"`{n}`" for n in data["refused"]) or "none") + ".", "",
             "| module | step (ms) | " + " | ".join(f"`{o}`" for o in accepted) + " |",
             "|---|---|" + "---|" * len(accepted)]
    for m in data["modules"]:
        cells = []
        for o in accepted:
            e = m["effects"].get(o)
            cells.append(f"{e['ratio']:.3f} [{e['low']:.3f}, {e['high']:.3f}]" if e else "-")
        lines.append(f"| {m['module']} | {m['step_ms']:.2f} | " + " | ".join(cells) + " |")
    paid = [f"{m['module']} `{o}` {e['ratio']:.3f}" for m in data["modules"] for o, e in m["effects"].items()
            if e["high"] < 0.95]
    lines += ["", "Paid 5% or more (interval wholly below 0.95): " + ("; ".join(paid) if paid else "none") + ".", "",
              f"Load average {data['load'][0]:.1f} before, {data['load'][1]:.1f} after; {data['seconds'] / 60:.1f} min."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", default=MODULES)
    parser.add_argument("--instances", type=int, default=6)
    parser.add_argument("--out", type=Path, default=RESULTS / "extra-options")
    args = parser.parse_args()
    from autotune.core.engine import open_engine
    from autotune.core.module import load

    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    rows, refused = [], set()
    with tempfile.TemporaryDirectory() as tmp, open_engine(Path(tmp) / "cache.db", workers=1) as ev:
        for path in args.modules:
            root = ev.prepare(load(module_file(path, Path(tmp))))
            effects, step = {}, None
            for name, value in CANDIDATES:
                if name in refused:
                    continue
                option = root.with_options(CompilerOptions.of({name: value}))
                logs = []
                try:
                    for k in range(args.instances):
                        t = ev.pipeline.time_ab(root, option, seed=k, rounds=ROUNDS, min_seconds=CONFIRM_MIN_SECONDS)
                        logs.append(log_ratio(t))
                        step = step or float(np.median(t["a"]))
                except PassFailed as exc:
                    if "No such compile option" not in str(exc):
                        raise
                    refused.add(name)
                    continue
                effects[f"{name}={value}"] = estimate(logs)
                e = effects[f"{name}={value}"]
                log(f"{path} {name}={value}: {e['ratio']:.3f} [{e['low']:.3f}, {e['high']:.3f}]")
            rows.append({"module": path.split("/")[-1].removesuffix(".hlo"), "path": path,
                         "step_ms": 1e3 * (step or 0.0), "effects": effects})
    accepted = [f"{n}={v}" for n, v in CANDIDATES if n not in refused]
    data = {"instances": args.instances, "rounds": ROUNDS, "candidates": [f"{n}={v}" for n, v in CANDIDATES],
            "accepted": accepted, "refused": sorted(refused), "modules": rows,
            "load": [load0, os.getloadavg()[0]], "seconds": time.perf_counter() - t0}
    print(write(args.out, "extra_options", data, markdown(data), Provenance.now()))


if __name__ == "__main__":
    main()
