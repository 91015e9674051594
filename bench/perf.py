#!/usr/bin/env python
"""Engine speed benchmark: writes results/perf.md and results/perf.json.

Measures, on a small, a medium (the GPT-2-style example) and a large module:
  * uncached single-step latency (median, p90) through the real Evaluator (worker pool + SQLite),
  * cache-hit latency per step,
  * where an uncached step's time goes (measured in-process, component by component),
  * one full default XLA CPU compile of the same module, side by side, for scale,
and on the medium module: sequence evaluations/s of a 200-sequence random search with a cold and a
warm cache, the cache hit rate, the speed-up of 2 workers over 1, and peak memory (RSS high-water
mark) of the evaluator and its workers.

Timings are noisy on shared machines: every figure is a median over repetitions, and the headline
numbers are ratios against a baseline measured in the same run.

    python bench/perf.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from harness import RESULTS, ROOT, Provenance, write, write_markdown  # first: the repository on the path

from autotune.core.engine import open_engine
from autotune.core.module import load
from autotune.core.tuner import tune

MODULES = {
    "small": ROOT / "tests/data/real/hloenv_maml_train_step.hlo",
    "medium": ROOT / "examples/gpt2_train_step.hlo",
    "large": None,  # lowered from the model zoo at run time (~10,000 instructions), not committed
}
LARGE_SUITE_ENTRY = "gpt2_train_l16_d64_h2_s32_b2_f32"


def large_module(tmp: Path) -> Path:
    from autotune.zoo import lower, suite

    entry = {e.name: e for e in suite.configs()}[LARGE_SUITE_ENTRY]
    path = tmp / f"{LARGE_SUITE_ENTRY}.hlo"
    path.write_text(lower(entry.family, entry.kind, entry.config))
    return path


def median_ms(fn, repeats: int) -> float:
    """Median wall time of ``fn()`` in milliseconds over ``repeats`` calls after one untimed call."""
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(ts)


def pct(values, q):
    values = sorted(values)
    if not values:
        return float("nan")
    k = min(len(values) - 1, max(0, int(round(q * (len(values) - 1)))))
    return values[k]


def rss_peak_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def step_latency(path: Path, tmp: Path, actions_limit: int | None) -> dict:
    """Every action applied alone to the module, uncached then cached, through the Evaluator."""
    with open_engine(tmp / f"steps-{path.stem}.db", workers=1) as ev:
        root = ev.prepare(load(path))
        ev.pipeline.pool.warm(1)
        actions = list(ev.pipeline.passes())[:actions_limit]
        cold, warm, worker = [], [], []
        for a in actions:
            t0 = time.perf_counter()
            r = ev.evaluate(root, [a])
            cold.append(time.perf_counter() - t0)
            assert r.compiled == 1
        for a in actions:
            t0 = time.perf_counter()
            r = ev.evaluate(root, [a])
            warm.append(time.perf_counter() - t0)
            assert r.compiled == 0
        worker = ev.cache.step_seconds(ev.version)
        instructions = ev.metrics(root.fingerprint).instructions
    return {
        "module": path.name, "instructions": instructions, "steps": len(actions),
        "uncached_ms": {"median": 1e3 * statistics.median(cold), "p90": 1e3 * pct(cold, 0.9)},
        "worker_step_ms": {"median": 1e3 * statistics.median(worker), "p90": 1e3 * pct(worker, 0.9)},
        "cache_hit_ms": {"median": 1e3 * statistics.median(warm), "p90": 1e3 * pct(warm, 0.9)},
    }


def breakdown(path: Path, repeats: int) -> dict:
    """Where an uncached step's time goes, measured in-process on a warm XLA client."""
    from autotune.pipelines.xla import hlo
    from autotune.pipelines.xla import XlaPipeline
    from autotune.pipelines.xla.worker import XlaWorker

    inv = XlaPipeline(cache=None).inventory
    w = XlaWorker(inv.to_json())
    module = load(path)
    proto = list(w.run_steps(module.proto, None, ["<identity>"]))[-1].proto  # normalised
    mlir = w.to_mlir(proto, None)
    from jax._src.lib import _jax

    def med(fn):
        return median_ms(fn, repeats)

    cse = w.flags("cse")
    out = w.capture(mlir, cse)
    parsed = hlo.parse_proto(out)
    text = hlo.to_text(hlo.parse_proto(proto))

    def straightforward_step():
        """The method the engine replaces: HLO text in, one capture compile, HLO text out."""
        m = hlo.parse_text(text)
        b = w.capture(_jax.mlir.hlo_to_stablehlo(m.as_serialized_hlo_module_proto()), cse)
        return hlo.to_text(hlo.parse_proto(b))

    res = {
        "straightforward_step_ms": med(straightforward_step),
        "hlo_to_mlir_ms": med(lambda: _jax.mlir.hlo_to_stablehlo(proto)),
        "mlir_import_only_ms": med(lambda: _jax.mlir.mlir_module_to_xla_computation(mlir, use_tuple_args=False, return_tuple=False)),
        "capture_compile_identity_ms": med(lambda: w.capture(mlir, w.flags("<identity>"))),
        "capture_compile_cse_ms": med(lambda: w.capture(mlir, cse)),
        "parse_result_ms": med(lambda: hlo.parse_proto(out)),
        "fingerprint_ms": med(lambda: hlo.fingerprint(parsed)),
        "measure_ms": med(lambda: w.metrics_of(parsed)),
    }
    res.update(alternatives(w, proto, mlir, med))
    t0 = time.perf_counter()
    w.backend.compile_and_load(mlir, w.devices, _jax.CompileOptions())
    res["full_default_compile_ms"] = 1e3 * (time.perf_counter() - t0)
    return res


def alternatives(w, proto: bytes, mlir: bytes, med) -> dict:
    """Ways around the import cost that were tried, measured next to what the engine does.

    The module can only enter as MLIR: StableHLO bytecode (what the engine sends), StableHLO text, or
    MHLO text from ``xla_computation_to_mlir_module``. And the pipeline's verifiers: does naming them in
    ``xla_disable_hlo_passes`` switch them off (it would show as a cheaper capture compile)?
    """
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib import _jax
    from jax._src.lib.mlir import ir
    from jaxlib import _hlo

    with jax_mlir.make_ir_context():
        stablehlo_text = ir.Module.parse(mlir).operation.get_asm(enable_debug_info=False)
    mhlo_text = _jax.mlir.xla_computation_to_mlir_module(_hlo.XlaComputation(proto))
    identity = w.flags("<identity>")
    (flag, value), = identity
    no_verifier = [(flag, value + ",hlo-verifier,cpu-gpu-verifier")]

    def imp(m):
        return lambda: _jax.mlir.mlir_module_to_xla_computation(m, use_tuple_args=False, return_tuple=False)

    return {
        "import_stablehlo_bytecode_ms": med(imp(mlir)),
        "import_stablehlo_text_ms": med(imp(stablehlo_text)),
        "import_mhlo_text_ms": med(imp(mhlo_text)),
        "capture_identity_verifiers_named_disabled_ms": med(lambda: w.capture(mlir, no_verifier)),
    }


def throughput(path: Path, tmp: Path, workers: int, budget: int, seed: int) -> dict:
    db = tmp / f"tp-{workers}-{seed}.db"
    out = {}
    with open_engine(db, workers=workers) as ev:
        module = load(path)
        ev.prepare(module)
        ev.default(ev.prepare(module))
        ev.pipeline.pool.warm(workers)
        for label in ("cold", "warm"):
            before = (ev.stats.steps_compiled, ev.stats.steps_cached)
            t0 = time.perf_counter()
            r = tune(ev, module, strategy="random", budget=budget, seed=seed, validate=False)
            dt = time.perf_counter() - t0
            compiled = ev.stats.steps_compiled - before[0]
            cached = ev.stats.steps_cached - before[1]
            out[label] = {
                "seconds": dt, "evaluations_per_s": budget / dt, "steps_compiled": compiled, "steps_cached": cached,
                "cache_hit_rate": cached / max(1, compiled + cached), "best": r.best_cost,
            }
        out["peak_rss_mib"] = {
            "evaluator": rss_peak_kib(os.getpid()) / 1024,
            "workers": [rss_peak_kib(p) / 1024 for p in ev.pipeline.pool.pids()],
        }
    return out


def throughput_isolated(path: Path, tmp: Path, workers: int, budget: int, seed: int) -> dict:
    """``throughput`` in a fresh interpreter, so the evaluator's peak memory is its own (this
    process also hosts an in-process XLA client for the breakdown, which would inflate it)."""
    import subprocess

    out = tmp / f"tp-{workers}.json"
    subprocess.run([sys.executable, __file__, "--throughput", str(path), str(tmp), str(workers), str(budget), str(seed),
                    str(out)], check=True)
    return json.loads(out.read_text())


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--throughput":
        path, tmp, workers, budget, seed, out = sys.argv[2:8]
        Path(out).write_text(json.dumps(throughput(Path(path), Path(tmp), int(workers), int(budget), int(seed))))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer actions and a smaller search (smoke run)")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--render-only", action="store_true", help="re-render perf.md from an existing perf.json")
    args = ap.parse_args()
    if args.render_only:
        out = Path(args.out)
        data = json.loads((out / "perf.json").read_text())
        print(write_markdown(out / "perf.md", render(data), Provenance.of(data)).read_text())
        return
    repeats = 5 if args.quick else 15
    budget = 40 if args.quick else 200
    limit = 12 if args.quick else None
    report = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
              "command": "python bench/perf.py" + (" --quick" if args.quick else ""), "modules": {}}
    with tempfile.TemporaryDirectory(prefix="autotune-bench-") as tmpdir:
        tmp = Path(tmpdir)
        for size, path in MODULES.items():
            if path is None:
                path = large_module(tmp)
            if not path.exists():
                print(f"skip {size}: {path} missing", file=sys.stderr)
                continue
            print(f"[{size}] {path.name}: step latency ...", file=sys.stderr)
            entry = step_latency(path, tmp, limit)
            print(f"[{size}] breakdown ...", file=sys.stderr)
            entry["breakdown"] = breakdown(path, repeats)
            entry["step_over_full_compile"] = entry["uncached_ms"]["median"] / entry["breakdown"]["full_default_compile_ms"]
            report["modules"][size] = entry
        medium = MODULES["medium"]
        print("[medium] random search, 1 worker ...", file=sys.stderr)
        one = throughput_isolated(medium, tmp, 1, budget, seed=1)
        print("[medium] random search, 2 workers ...", file=sys.stderr)
        two = throughput_isolated(medium, tmp, 2, budget, seed=1)
        report["search"] = {"module": medium.name, "budget": budget, "workers_1": one, "workers_2": two,
                            "speedup_2_over_1_cold": one["cold"]["seconds"] / two["cold"]["seconds"]}
    print(write(Path(args.out), "perf", report, render(report), Provenance.now()).read_text())


def render(r: dict) -> str:
    lines = ["# Engine performance", "", f"Made by `{r['command']}` on {r['machine']['cpus']} CPUs, "
             f"Python {r['machine']['python']}, {r['machine']['platform']}. Medians over repetitions; "
             "see `perf.json` for every figure.", "",
             "## One step (apply one pass), per module", "",
             "| module | instructions | uncached step median / p90 (ms) | in-worker part (ms) | straightforward step (ms) | cache hit (ms) | full default compile (ms) | step / full compile |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for size, m in r["modules"].items():
        lines.append(f"| {size}: {m['module']} | {m['instructions']} | {m['uncached_ms']['median']:.1f} / {m['uncached_ms']['p90']:.1f} "
                     f"| {m['worker_step_ms']['median']:.1f} | {m['breakdown']['straightforward_step_ms']:.1f} | {m['cache_hit_ms']['median']:.3f} "
                     f"| {m['breakdown']['full_default_compile_ms']:.0f} | {m['step_over_full_compile']:.3f} |")
    lines += ["", "## Where an uncached step's time goes (in-process, warm client)", "",
              "| module | HLO->MLIR | MLIR import alone | capture compile, no pass | capture compile, cse | parse result | fingerprint | measure |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for size, m in r["modules"].items():
        b = m["breakdown"]
        lines.append(f"| {size} | {b['hlo_to_mlir_ms']:.1f} | {b['mlir_import_only_ms']:.1f} | {b['capture_compile_identity_ms']:.1f} "
                     f"| {b['capture_compile_cse_ms']:.1f} | {b['parse_result_ms']:.1f} | {b['fingerprint_ms']:.1f} | {b['measure_ms']:.1f} |")
    lines += ["", "## Ways around the import, measured (in-process, ms)", "",
              "| module | import: StableHLO bytecode (used) | StableHLO text | MHLO text | capture compile, no pass "
              "| same, verifiers named in the disable list |", "|---|---:|---:|---:|---:|---:|"]
    for size, m in r["modules"].items():
        b = m["breakdown"]
        if "import_mhlo_text_ms" in b:
            lines.append(f"| {size} | {b['import_stablehlo_bytecode_ms']:.1f} | {b['import_stablehlo_text_ms']:.1f} "
                         f"| {b['import_mhlo_text_ms']:.1f} | {b['capture_compile_identity_ms']:.1f} "
                         f"| {b['capture_identity_verifiers_named_disabled_ms']:.1f} |")
    if "medium" in r["modules"]:
        m = r["modules"]["medium"]
        b = m["breakdown"]
        rest = b["parse_result_ms"] + b["fingerprint_ms"] + b["measure_ms"]
        lines += [
            "", "## Why a step does not get below ~30 ms on the medium module", "",
            f"The goal was 10 ms. Of the {m['worker_step_ms']['median']:.1f} ms a step spends in the worker, "
            f"{b['mlir_import_only_ms']:.1f} ms is XLA's StableHLO -> HLO import alone (MLIR parsing, the verifier after "
            "every MLIR pass, legalisation, HLO construction), "
            f"{b['capture_compile_identity_ms'] - b['mlir_import_only_ms']:.1f} ms is the HLO pipeline's fixed cost with every "
            "pass disabled (module creation, verifiers at each pipeline start, handing the module to the capture hook), "
            f"the pass itself (cse) {max(0.0, b['capture_compile_cse_ms'] - b['capture_compile_identity_ms']):.1f} ms, and "
            f"parsing, fingerprinting and measuring the result {rest:.1f} ms; converting a changed module back to MLIR "
            f"costs {b['hlo_to_mlir_ms']:.1f} ms more. jaxlib 0.10.2 has no entry point that compiles HLO without that "
            "import (`compile_and_load` accepts only MLIR; raw HloModuleProto bytes are refused; the hook that sees "
            "HLO runs only at the pre- and post-scheduler stages, after the passes), the bytecode the engine sends "
            "is the cheapest MLIR form to import (table above), and no option switches the MLIR verifier or the "
            "pipeline verifiers off (naming them in the disable list has no effect: XLA's "
            "`HloPassPipeline::RunInvariantCheckers` runs every checker without consulting that list, so the "
            "differences in the table's last two columns are noise, of both signs), so the import is the floor "
            "of any step. What "
            "the engine does to stay near that floor: modules travel as serialized protos, the worker keeps the MLIR "
            "of recent states (a pass that changes nothing reuses it), workers stay warm and are pinned one per core, "
            "independent sequences compile in parallel, and every step is cached (a hit costs "
            f"{m['cache_hit_ms']['median']:.3f} ms). Merging consecutive steps that follow XLA's pipeline order into "
            "one compile was not done: the merged compile yields only the last module, so the cache would lose the "
            "intermediate states that other sequences share, and two passes inside one fixed-point sub-pipeline do "
            "not compose (XLA iterates them together).",
        ]
    s = r["search"]
    lines += ["", f"## Random search, {s['budget']} sequences on {s['module']}", "",
              "| workers | cache | evaluations/s | steps compiled | cache hit rate | seconds |", "|---:|---|---:|---:|---:|---:|"]
    for w in ("workers_1", "workers_2"):
        for label in ("cold", "warm"):
            x = s[w][label]
            lines.append(f"| {w[-1]} | {label} | {x['evaluations_per_s']:.1f} | {x['steps_compiled']} | {x['cache_hit_rate']:.0%} | {x['seconds']:.1f} |")
    lines += ["", f"Speed-up of 2 workers over 1 (cold): **{s['speedup_2_over_1_cold']:.2f}x**.", "",
              "Peak RSS (MiB): evaluator " + f"{s['workers_2']['peak_rss_mib']['evaluator']:.0f}, workers "
              + ", ".join(f"{x:.0f}" for x in s['workers_2']['peak_rss_mib']['workers']) + "."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
