#!/usr/bin/env python
"""Real-scale benchmark: writes results/realscale.md and results/realscale.json.

Measures what tuning costs on modules the size of real models, without executing any of them:

  (a) constants vs parameters: the same function with bf16[56945,50] + bf16[50,128] weights baked
      in as constants, and with those weights as parameters, generated side by side: load,
      normalise and uncached step cost, and their ratio (goal: a step within 1.5x);
  (b) step cost against instruction count: LLaMA-like training steps lowered from abstract shapes
      (inputs need tens of GiB) at about 1k, 5k, 10k and 20k instructions, with XLA's own floors
      measured side by side (the StableHLO import alone; the HLO pipeline with every pass disabled)
      and where the rest of a step goes (parse, fingerprint, metrics, cost analysis, transfer);
  (c) the three LLM modules of tests/data/real-llm (load, normalise, step);
  (d) every real module (tests/data/real, tests/data/real-llm) plus a generated LLM-shaped step through the CLI:
      ``autotune baseline`` and ``autotune run --no-validate --budget 20 --strategy random``.

Step timings reuse bench/perf.py (``step_latency``: every action applied alone, uncached then
cached, through the real Evaluator). Default run: under 10 minutes on 2 cores.

    python bench/realscale.py [--quick] [--skip-cli]
    python bench/realscale.py --timings A.hlo B.hlo ...   # load/normalise/step only, JSON to stdout
    python bench/realscale.py --before-after OLD_TREE      # results/realscale-before-after.{md,json}
    python bench/realscale.py --search-pair [--rounds 3]   # results/realscale-search.{md,json}

``--before-after`` times the constants module and the three LLM modules with an older checkout
(``OLD_TREE``, e.g. ``git worktree add /tmp/old 78b4e36``) and with this one, alternating for
``--rounds`` rounds so that both share the machine's noise, and reports the median of the rounds.
The old tree is imported through ``PYTHONPATH``; because the package maps ``autotune.pipelines``
to ``pipelines/``, it needs ``ln -s ../pipelines OLD_TREE/autotune/pipelines`` (and the same for
``strategies``) first, plus a copy of this script and ``realscale_models.py`` in ``OLD_TREE/bench``.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import sys
import tempfile
import time
from pathlib import Path

from harness import LLM_STEPS as LLM_MODULES, REAL_LLM, ROOT, Provenance, write, write_markdown  # first: the repository on the path

from autotune.core.engine import open_engine
from autotune.core.module import load
from perf import median_ms, step_latency
from realscale_parts.report import ENGINE_PARTS, render
from realscale_parts.search import before_after, cli_checks, search_pair


def _ms(seconds: float) -> float:
    return round(1e3 * seconds, 2)


def timings(path: Path, tmp: Path, actions: int) -> dict:
    """Load, normalise (first ``prepare``, a cold cache) and ``perf.step_latency`` for one module."""
    t0 = time.perf_counter()
    module = load(path)
    load_s = time.perf_counter() - t0
    with open_engine(tmp / f"norm-{path.stem}.db", workers=1) as ev:
        ev.pipeline.pool.warm(1)
        t0 = time.perf_counter()
        ev.prepare(module)
        normalise_s = time.perf_counter() - t0
    steps = step_latency(path, tmp, actions)
    return {"module": path.name, "file_bytes": path.stat().st_size, "proto_bytes": len(module.proto),
            "load_ms": _ms(load_s), "normalise_ms": _ms(normalise_s), **steps}


def parts(path: Path, repeats: int) -> dict:
    """Where a step's time goes, component by component, in-process on a warm XLA client.

    ``import_ms`` is XLA's StableHLO -> HLO import alone and ``pipeline_floor_ms`` a capture compile
    with every pass disabled (import + HLO pipeline fixed cost): the floors no step can go below
    through jaxlib. The rest is what the engine adds: converting a changed module to MLIR, parsing
    the captured bytes, fingerprinting, counting, XLA's cost analysis, and the transfer of the step's
    result between processes (pickling and unpickling it with the module bytes).
    """
    from jax._src.lib import _jax

    from autotune.core.backend import StepOut
    from autotune.pipelines.xla import hlo
    from autotune.pipelines.xla import XlaPipeline
    from autotune.pipelines.xla.worker import XlaWorker

    inv = XlaPipeline(cache=None).inventory
    w = XlaWorker(inv.to_json())
    proto = list(w.run_steps(load(path).proto, None, ["<identity>"]))[-1].proto  # normalised
    mlir = w.to_mlir(proto, None)

    def med(fn):
        return round(median_ms(fn, repeats), 2)

    out = w.capture(mlir, w.flags("cse"))
    parsed = hlo.parse_proto(out)
    metrics = w.metrics_of(parsed)
    step = StepOut("cse", "ok", hlo.fingerprint(parsed, out), out, metrics)
    return {
        "instructions": hlo.instruction_count(parsed),
        "hlo_to_mlir_ms": med(lambda: _jax.mlir.hlo_to_stablehlo(proto)),
        "import_ms": med(lambda: _jax.mlir.mlir_module_to_xla_computation(mlir, use_tuple_args=False,
                                                                            return_tuple=False)),
        "pipeline_floor_ms": med(lambda: w.capture(mlir, w.flags("<identity>"))),
        "capture_cse_ms": med(lambda: w.capture(mlir, w.flags("cse"))),
        "parse_ms": med(lambda: hlo.parse_proto(out)),
        "fingerprint_ms": med(lambda: hlo.fingerprint(parsed, out)),
        "metrics_ms": med(lambda: (hlo.instruction_count(parsed), hlo.opcode_histogram(parsed))),
        "cost_analysis_ms": med(lambda: _jax.hlo_module_cost_analysis(w.backend, parsed)),
        "transfer_ms": med(lambda: pickle.loads(pickle.dumps(step))),
    }


def constants_vs_parameters(tmp: Path, actions: int, repeats: int) -> dict:
    from realscale_models import embedded_weights

    out = {}
    for label, constants in (("parameters", False), ("constants", True)):
        path = tmp / f"embedded_{label}.hlo"
        path.write_text(embedded_weights(constants))
        print(f"[constants] {label}: {path.stat().st_size / 2**20:.1f} MiB of HLO text", file=sys.stderr)
        out[label] = {**timings(path, tmp, actions), "parts": parts(path, repeats)}
    c, p = out["constants"], out["parameters"]
    out["step_ratio"] = c["uncached_ms"]["median"] / p["uncached_ms"]["median"]
    out["import_floor_ratio"] = c["parts"]["import_ms"] / p["parts"]["import_ms"]
    out["engine_ms"] = {k: round(sum(out[k]["parts"][x] for x in ENGINE_PARTS), 2) for k in ("constants", "parameters")}
    return out


def scale(tmp: Path, sizes: list[str], actions: int, repeats: int) -> dict:
    from realscale_models import SCALE_LAYERS, llama_train_step

    out = {}
    for size in sizes:
        layers = SCALE_LAYERS[size]
        path = tmp / f"llama_train_{layers}l.hlo"
        t0 = time.perf_counter()
        path.write_text(llama_train_step(layers))
        print(f"[scale] {size}: {layers} layers lowered in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        out[size] = {"layers": layers, **timings(path, tmp, actions), "parts": parts(path, repeats)}
    return out


def real_llms(tmp: Path, actions: int, repeats: int) -> dict:
    out = {}
    for name in LLM_MODULES:
        path = REAL_LLM / name
        if not path.exists():
            print(f"skip {path}: missing", file=sys.stderr)
            continue
        print(f"[real] {name}", file=sys.stderr)
        out[name] = {**timings(path, tmp, actions), "parts": parts(path, repeats)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1k and 5k only, fewer steps (smoke run)")
    ap.add_argument("--skip-cli", action="store_true", help="skip the CLI pass over every module")
    ap.add_argument("--out", default=str(ROOT / "results"))
    ap.add_argument("--timings", nargs="+", metavar="MODULE", help="load/normalise/step of these modules as JSON")
    ap.add_argument("--render-only", action="store_true", help="re-render realscale.md from realscale.json")
    ap.add_argument("--before-after", metavar="OLD_TREE", help="time an older checkout against this one")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--search-pair", action="store_true",
                    help="only the same search end to end on the constants and parameters modules "
                         "(results/realscale-search.md)")
    ap.add_argument("--budget", type=int, default=40, help="--search-pair: the search's budget")
    args = ap.parse_args()
    out = Path(args.out)
    if args.search_pair:
        search_pair(args.rounds, args.budget, out)
        return
    if args.before_after:
        before_after(Path(args.before_after).resolve(), args.rounds, out)
        return
    if args.render_only:
        data = json.loads((out / "realscale.json").read_text())
        write_markdown(out / "realscale.md", render(data), Provenance.of(data))
        return
    actions = 4 if args.quick else 8
    repeats = 3 if args.quick else 5
    with tempfile.TemporaryDirectory(prefix="autotune-realscale-") as tmpdir:
        tmp = Path(tmpdir)
        if args.timings:
            print(json.dumps({Path(p).name: timings(Path(p), tmp, actions) for p in args.timings}, indent=2))
            return
        t_start = time.perf_counter()
        command = "python bench/realscale.py" + (" --quick" if args.quick else "") + (" --skip-cli" if args.skip_cli else "")
        report = {"command": command,
                  "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()}}
        report["constants"] = constants_vs_parameters(tmp, actions, repeats)
        report["scale"] = scale(tmp, ["1k", "5k"] if args.quick else ["1k", "5k", "10k", "20k"], actions, repeats)
        report["real_llms"] = real_llms(tmp, actions, repeats)
        if not args.skip_cli:
            report["cli"] = cli_checks(tmp)
        report["seconds"] = round(time.perf_counter() - t_start, 1)
    print(write(out, "realscale", report, render(report), Provenance.now()).read_text())


if __name__ == "__main__":
    main()
