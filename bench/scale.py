#!/usr/bin/env python
"""Scale-out benchmark: the ray executor against the local pool; writes results/scale.md and .json.

Measured here (one machine, ``os.cpu_count()`` cores, shared):
  * throughput: a seeded random search on examples/gpt2_train_step.hlo, cold cache, local pool vs
    Ray actors at the same worker count (evaluations/s; same seed, so both compile the same steps);
    runs alternate local/ray and the median of ``--repeats`` is kept;
  * dispatch overhead: a no-op request's round trip (``pool.call("ping")``) and the per-job cost of
    a batch of no-ops spread over the workers, plus the driver's CPU time per compiled step;
  * a scaling curve on a multi-node local cluster (``ray.cluster_utils.Cluster``: 1, 2, 3 nodes of
    one CPU each), a fixed batch of uncached steps per point.
Projected (computed from the figures above and results/perf.md, not run): the paper protocol on
64 nodes x 16 cores, and a fleet of 100 LLM-sized modules.

    python bench/scale.py [--quick]
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

from harness import RESULTS, ROOT, Provenance, write  # first: the repository on the path

from autotune.core.cache import Cache
from autotune.core.engine import open_engine
from autotune.core.evaluator import Evaluator
from autotune.core.module import load
from autotune.core.tuner import tune

MODULE = ROOT / "examples/gpt2_train_step.hlo"
COMMAND = "python bench/scale.py"


def _tune_once(ev, tmp: Path, tag: str, budget: int, seed: int) -> dict:
    """A cold-cache random search on the engine's warm pool (a fresh cache file per run)."""
    ev.pipeline.pool.warm()
    cold = Cache(tmp / f"{tag}.db")
    try:
        cpu0, t0 = time.process_time(), time.perf_counter()
        r = tune(Evaluator(ev.pipeline, cold), load(MODULE), strategy="random", budget=budget, seed=seed,
                 validate=False, prune=False)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        cold.close()
    return {"seconds": wall, "evaluations": r.evaluations, "evals_per_s": r.evaluations / wall,
            "steps_compiled": r.steps_compiled, "steps_per_s": r.steps_compiled / wall,
            "driver_cpu_ms_per_step": 1000 * cpu / max(1, r.steps_compiled), "best": list(r.best_sequence)}


def _noop(pool, n: int) -> dict:
    from autotune.core.workers import Job

    pool.warm()
    pool.call("ping", timeout=60)
    rtt = []
    for _ in range(n):
        t0 = time.perf_counter()
        pool.call("ping", timeout=60)
        rtt.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in pool.run_many([Job("ping", (), 60.0) for _ in range(n)]):
        pass
    batch = time.perf_counter() - t0
    return {"round_trip_ms": 1000 * statistics.median(rtt), "batch_ms_per_job": 1000 * batch / n}


def throughput(workers: int, budget: int, repeats: int, tmp: Path) -> dict:
    out: dict = {"local": [], "ray": []}
    with open_engine(tmp / "l.db", workers=workers, executor="local") as local, \
            open_engine(tmp / "r.db", workers=workers, executor="ray", executor_options={"num_cpus": workers}) as rayev:
        for ev in (local, rayev):
            ev.prepare(load(MODULE))
        for k in range(repeats):
            for name, ev in (("local", local), ("ray", rayev)):
                out[name].append(_tune_once(ev, tmp, f"{name}{k}", budget, seed=k))
                print(f"  {name} #{k}: {out[name][-1]['evals_per_s']:.2f} evals/s", flush=True)
        noop = {"local": _noop(local.pipeline.pool, 200), "ray": _noop(rayev.pipeline.pool, 200)}
    med = {n: {key: statistics.median(r[key] for r in runs) for key in
               ("seconds", "evals_per_s", "steps_per_s", "driver_cpu_ms_per_step", "steps_compiled")}
           for n, runs in out.items()}
    same = all(a["best"] == b["best"] and a["steps_compiled"] == b["steps_compiled"]
               for a, b in zip(out["local"], out["ray"]))
    return {"workers": workers, "budget": budget, "repeats": repeats, "runs": out, "median": med,
            "ratio": med["ray"]["evals_per_s"] / med["local"]["evals_per_s"], "same_results": same, "noop": noop}


def scaling(nodes_list: list[int], steps: int) -> list[dict]:
    """Uncached single steps (distinct actions on distinct states) per second on n one-CPU nodes."""
    import ray
    from ray.cluster_utils import Cluster

    points = []
    for n in nodes_list:
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        for _ in range(n - 1):
            c.add_node(num_cpus=1)
        c.wait_for_nodes()
        with tempfile.TemporaryDirectory() as tmp, \
                open_engine(Path(tmp) / "s.db", workers=n, executor="ray",
                            executor_options={"address": c.address}) as ev:
            ev.pipeline.pool.warm()
            nodes = len({a.node for a in ev.pipeline.pool.actors})
            root = ev.prepare(load(MODULE))
            actions = list(ev.pipeline.passes())
            first = [r for r in ev.steps([(root.fingerprint, a) for a in actions[:8]]) if r.ok]
            states = list(dict.fromkeys([root.fingerprint] + [r.state for r in first]))
            pairs = [(s, a) for s in states for a in actions][8:8 + steps]
            t0 = time.perf_counter()
            ev.steps(pairs)
            wall = time.perf_counter() - t0
        ray.shutdown()
        c.shutdown()
        points.append({"nodes": n, "actor_nodes": nodes, "steps": len(pairs), "seconds": wall,
                       "steps_per_s": len(pairs) / wall})
        print(f"  {n} node(s): {points[-1]['steps_per_s']:.1f} steps/s", flush=True)
    base = points[0]["steps_per_s"]
    for p in points:
        p["speedup"] = p["steps_per_s"] / base
    return points


def plan(tp: dict) -> dict:
    """Projections (not measured): wall time = compiled steps x step cost / (workers x efficiency)."""
    perf = json.loads((ROOT / "results/perf.json").read_text())
    med = tp["median"]
    efficiency = min(1.0, tp["ratio"])  # Ray's measured throughput relative to the local pool
    workers = 64 * 16
    steps_per_eval = med["ray"]["steps_compiled"] / tp["budget"]  # measured, cold cache, budget-sized run
    driver_ms = med["ray"]["driver_cpu_ms_per_step"]
    step_ms = _medium_step_ms(perf)
    from autotune.zoo import suite

    modules = len(suite.configs())  # the suite as generated today (every family; no lowering needed)
    evals = modules * 5 * 3 * 200
    paper_steps = evals * steps_per_eval
    paper_worker_s = paper_steps * step_ms / 1000
    llm_step_s = 2.7
    llm_steps_per_eval = 122 / 10  # the measured budget-10 run on a 17.9k-instruction module
    llm_evals = 100 * 200
    llm_worker_s = llm_evals * llm_steps_per_eval * llm_step_s
    driver_ceiling = 1000 / driver_ms  # steps/s one driver can dispatch and store
    return {
        "workers": workers, "efficiency": efficiency, "suite_modules": modules, "steps_per_eval": steps_per_eval, "step_ms": step_ms,
        "driver_cpu_ms_per_step": driver_ms, "driver_ceiling_steps_per_s": driver_ceiling,
        "paper": {"evaluations": evals, "compiled_steps": paper_steps, "worker_hours": paper_worker_s / 3600,
                  "one_machine_2_workers_hours": paper_worker_s / 2 / 3600,
                  "cluster_hours_compute_bound": paper_worker_s / (workers * efficiency) / 3600,
                  "cluster_hours_driver_bound": paper_steps / driver_ceiling / 3600},
        "llm_fleet": {"modules": 100, "budget": 200, "evaluations": llm_evals, "steps_per_eval": llm_steps_per_eval,
                      "step_s": llm_step_s, "worker_hours": llm_worker_s / 3600,
                      "one_machine_2_workers_hours": llm_worker_s / 2 / 3600,
                      "cluster_hours": llm_worker_s / (workers * efficiency) / 3600,
                      "driver_load": (llm_evals * llm_steps_per_eval / (llm_worker_s / (workers * efficiency)))
                      / driver_ceiling},
    }


def _medium_step_ms(perf: dict) -> float:
    """The uncached step median on the medium module (gpt2_train_step.hlo) from results/perf.json."""
    return float(perf["modules"]["medium"]["uncached_ms"]["median"])


def report(data: dict, prov: Provenance | None) -> None:
    tp, sc, pl = data["throughput"], data["scaling"], data["plan"]
    m = tp["median"]
    L = [
        "# Scaling out on Ray",
        "",
        f"Regenerate: `{data.get('command', COMMAND)}` ({data['machine']}; {data['seconds']:.0f} s). Measured figures are from this run;",
        "the plan at the end is projected from them and results/perf.md (nothing was run on 64 nodes).",
        "",
        f"## Throughput at equal worker counts (measured; {tp['workers']} workers, cold cache)",
        "",
        f"Seeded random search, budget {tp['budget']}, on `examples/gpt2_train_step.hlo`, median of {tp['repeats']} "
        "alternating runs (seeds 0..n-1, the same seeds for both executors).",
        "",
        "| executor | evaluations/s | steps compiled/s | steps compiled | driver CPU per step (ms) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in ("local", "ray"):
        r = m[name]
        L.append(f"| {name} | {r['evals_per_s']:.2f} | {r['steps_per_s']:.1f} | {r['steps_compiled']:.0f} | "
                 f"{r['driver_cpu_ms_per_step']:.2f} |")
    L += ["", f"Ray / local: **{tp['ratio']:.2f}x** (goal >= 0.9x). Same best sequence and same compiled-step count "
          f"for every seed with both executors: **{'yes' if tp['same_results'] else 'NO'}**.", "",
          "## Dispatch overhead (measured; no-op request)", "",
          "| executor | round trip, one request (ms) | per job in a batch over all workers (ms) |", "|---|---:|---:|"]
    for name in ("local", "ray"):
        r = tp["noop"][name]
        L.append(f"| {name} | {r['round_trip_ms']:.2f} | {r['batch_ms_per_job']:.2f} |")
    L += ["", "An uncached step on the medium module costs ~34 ms in the worker (results/perf.md), so Ray's extra "
          "dispatch cost is a few percent of a step there and negligible on LLM-sized modules (seconds per step).", "",
          f"## Scaling curve on a multi-node local cluster (measured; {os.cpu_count()} physical cores)", "",
          "`ray.cluster_utils.Cluster`, n nodes of 1 CPU each, one actor per node, a fixed batch of distinct "
          "uncached steps.", "",
          "| nodes | actors on distinct nodes | steps | seconds | steps/s | speed-up |", "|---:|---:|---:|---:|---:|---:|"]
    for p in sc:
        L.append(f"| {p['nodes']} | {p['actor_nodes']} | {p['steps']} | {p['seconds']:.1f} | {p['steps_per_s']:.1f} | "
                 f"{p['speedup']:.2f}x |")
    L += ["", f"This machine has {os.cpu_count()} cores shared with other work: the curve is CPU-bound past "
          f"{os.cpu_count()} nodes (the third node's actor shares a core), so it shows that steps spread over nodes "
          "and what the per-node overhead is, not how a real cluster scales.", "",
          "## Plan: 64 nodes x 16 cores (projected)", "",
          f"Inputs: {pl['workers']} workers; Ray efficiency {pl['efficiency']:.2f} (measured ratio above, capped at 1); "
          f"{pl['steps_per_eval']:.2f} compiled steps per evaluation (measured above, cold cache, budget "
          f"{tp['budget']}); {pl['step_ms']:.1f} ms per step on an 855-instruction module (results/perf.md); "
          f"driver CPU {pl['driver_cpu_ms_per_step']:.2f} ms per compiled step (measured above), i.e. one driver "
          f"dispatches and stores at most ~{pl['driver_ceiling_steps_per_s']:.0f} steps/s.", ""]
    p, f = pl["paper"], pl["llm_fleet"]
    L += ["| workload | evaluations | compiled steps | worker-hours | this machine (2 workers) | 64 x 16 cores |",
          "|---|---:|---:|---:|---:|---:|",
          f"| paper protocol: {pl.get('suite_modules', 682)} modules x 5 strategies x 3 seeds x budget 200 | {p['evaluations']:,} | "
          f"{p['compiled_steps']:,.0f} | {p['worker_hours']:.1f} | {p['one_machine_2_workers_hours']:.1f} h | "
          f"{max(p['cluster_hours_compute_bound'], p['cluster_hours_driver_bound']) * 60:.0f} min |",
          f"| 100 LLM-sized modules (17.9k instructions, 2.7 s/step) x budget 200 | {f['evaluations']:,} | "
          f"{f['evaluations'] * f['steps_per_eval']:,.0f} | {f['worker_hours']:.0f} | "
          f"{f['one_machine_2_workers_hours'] / 24:.0f} days | {f['cluster_hours'] * 60:.0f} min |",
          "",
          f"The paper protocol is small steps: compute alone would take {p['cluster_hours_compute_bound'] * 60:.0f} min "
          f"on 1024 workers, but one driver stores at most ~{pl['driver_ceiling_steps_per_s']:.0f} steps/s, i.e. "
          f"{p['cluster_hours_driver_bound'] * 60:.0f} min: the driver (dispatch + SQLite) is the bottleneck, so run "
          "it as several drivers (one `autotune compare` per module shard, each with its own cache file, merged "
          "afterwards) to use the whole cluster. The LLM fleet is compute-bound: steps take seconds, yet 1024 "
          f"workers finishing {pl['workers'] * pl['efficiency'] / f['step_s']:.0f} steps/s keep one driver at "
          f"{f['driver_load']:.0%} of its ceiling, so one driver just keeps up and a second would not hurt (assumed "
          f"{f['steps_per_eval']:.1f} compiled steps per evaluation, the issue's budget-10 run; longer runs hit the "
          "cache more, so this is an upper bound). Both need enough runs in flight to fill 1024 workers: a random "
          "search keeps 16 sequences in flight, so ~64 concurrent runs (or more parallel strategies) are needed; "
          "memory per LLM-sized worker was not measured here.", ""]
    write(RESULTS, "scale", {k: v for k, v in data.items() if k != "provenance"}, "\n".join(L), prov)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller budgets (a smoke run, ~3 minutes)")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--rewrite", action="store_true",
                    help="only rewrite results/scale.md from results/scale.json (the projections are recomputed "
                         "from its measured throughput, for today's suite size)")
    args = ap.parse_args()
    if args.rewrite:
        data = json.loads((ROOT / "results/scale.json").read_text())
        data["plan"] = plan(data["throughput"])
        report(data, Provenance.of(data))
        return
    budget, repeats, steps = (30, 1, 24) if args.quick else (100, 3, 60)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        print("throughput (local vs ray) ...", flush=True)
        tp = throughput(args.workers, budget, repeats, Path(tmp))
    print("scaling curve ...", flush=True)
    sc = scaling([1, 2, 3], steps)
    data = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
            "throughput": tp, "scaling": sc}
    data["plan"] = plan(tp)
    data["seconds"] = time.perf_counter() - t0
    data["command"] = " ".join(["python bench/scale.py", *sys.argv[1:]])
    report(data, Provenance.now())
    print((RESULTS / "scale.md").read_text())


if __name__ == "__main__":
    main()
