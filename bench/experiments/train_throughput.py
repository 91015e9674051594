#!/usr/bin/env python
"""Training throughput with 1, 2 and 4 parallel environments: writes results/train_throughput.md/.json/.png.

What is measured: ``autotune.rl.train.train_policy(..., envs=N)`` (what ``autotune train --envs N``
runs) on the same modules, the same seed and the same number of environment steps, each N on a
fresh (cold) cache file, so every N compiles its own steps. The figure is environment steps per
second of SB3's ``learn`` (rollouts and PPO updates; the envs' start-up, i.e. N subprocesses
importing jaxlib and starting one compiler worker each, is reported separately). Distinct compiled
steps come from the cache afterwards (its ``transitions`` table). Runs alternate over N and the
median of ``--repeats`` is kept.

Honest reading: the machine's core count bounds the speed-up (compiles are CPU-bound; each env has
one compiler worker), and the machine is shared, so the load average at the start is recorded.

    python bench/experiments/train_throughput.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: the harness
from harness import ROOT, Provenance, pyplot, save_figure, write  # noqa: E402

from autotune.core.cache import Cache  # noqa: E402
from autotune.core.engine import open_engine  # noqa: E402
from autotune.core.module import load  # noqa: E402
from autotune.rl.train import train_policy  # noqa: E402

COMMAND = "python bench/experiments/train_throughput.py"
ENVS = (1, 2, 4)
QUICK_MODULES = ("tests/data/real/hloenv_maml_train_step.hlo", "examples/gpt2_train_step.hlo")
FULL_MODULES = ("tests/data/real/hloenv_maml_train_step.hlo", "tests/data/real/hloenv_jaxrl_td_target.hlo",
                "examples/gpt2_train_step.hlo", "examples/bert_encoder_step.hlo")


def _one(envs: int, modules: list, timesteps: int, max_length: int, tmp: Path, tag: str) -> dict:
    db = tmp / f"{tag}-envs{envs}.db"
    t0 = time.perf_counter()
    with open_engine(db, workers=1) as ev:
        stats = train_policy(ev, modules, tmp / f"{tag}-envs{envs}.zip", timesteps=timesteps, seed=0,
                             max_length=max_length, envs=envs)
    total = time.perf_counter() - t0
    cache = Cache(db)
    try:
        compiled = cache.stats().get("transitions")
    finally:
        cache.close()
    return {"envs": envs, "timesteps": stats["timesteps"], "learn_seconds": stats["learn_seconds"],
            "steps_per_second": stats["steps_per_second"], "total_seconds": total,
            "startup_seconds": total - stats["learn_seconds"], "evaluations": stats["evaluations"],
            "distinct_steps_compiled": compiled, "episodes": stats["episodes"],
            "per_env_episodes": [e["episodes"] for e in stats["per_env"]]}


def _plot(rows: list[dict], out: Path) -> None:
    plt = pyplot()
    xs = [r["envs"] for r in rows]
    ys = [r["steps_per_second"] for r in rows]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(xs, ys, "o-", label="measured (median)")
    ax.plot(xs, [ys[0] * x for x in xs], ":", color="grey", label="linear in envs")
    cores = os.cpu_count() or 1
    ax.axvline(cores, color="red", lw=0.8, ls="--", label=f"{cores} cores")
    ax.set_xlabel("parallel environments (autotune train --envs N)")
    ax.set_ylabel("environment steps / s")
    ax.set_xticks(xs)
    ax.set_title("PPO training throughput")
    ax.legend(fontsize=8)
    save_figure(fig, out, dpi=120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 modules, 256 steps, 1 repeat (a few minutes)")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--out", default=str(ROOT / "results"))
    args = ap.parse_args()
    names = QUICK_MODULES if args.quick else FULL_MODULES
    timesteps = 256 if args.quick else 512  # multiples of PPO's rollout with 4 envs (4 x 32)
    repeats = args.repeats or (1 if args.quick else 3)
    max_length = 8
    modules = [load(str(ROOT / n)) for n in names]
    load1 = os.getloadavg()[0]
    runs: dict[int, list[dict]] = {n: [] for n in ENVS}
    with tempfile.TemporaryDirectory(prefix="train-throughput-") as tmp:
        for rep in range(repeats):
            for n in ENVS:
                row = _one(n, modules, timesteps, max_length, Path(tmp), f"r{rep}")
                print(f"envs={n} repeat={rep}: {row['steps_per_second']:.1f} steps/s "
                      f"({row['learn_seconds']:.1f}s learn, {row['startup_seconds']:.1f}s start-up)", flush=True)
                runs[n].append(row)
    rows = []
    for n in ENVS:
        med = statistics.median(r["steps_per_second"] for r in runs[n])
        chosen = min(runs[n], key=lambda r: abs(r["steps_per_second"] - med))
        rows.append({**chosen, "steps_per_second": med,
                     "all_steps_per_second": [r["steps_per_second"] for r in runs[n]]})
    base = rows[0]["steps_per_second"]
    for r in rows:
        r["speedup"] = r["steps_per_second"] / base
    out = Path(args.out)
    command = COMMAND + (" --quick" if args.quick else "") + (f" --repeats {args.repeats}" if args.repeats else "")
    data = {"command": command, "quick": args.quick, "modules": list(names), "timesteps": timesteps,
            "max_length": max_length, "repeats": repeats, "cpu_count": os.cpu_count(),
            "load_average_at_start": load1, "machine": platform.machine(), "python": platform.python_version(),
            "rows": rows}
    lines = [
        "# Training throughput: parallel environments",
        "",
        f"Regenerate: `{command}` (this file, `train_throughput.json` and `train_throughput.png`).",
        "",
        f"`autotune train --envs N` (PPO, seed 0, {timesteps} environment steps, max length {max_length}) on "
        + ", ".join(f"`{n}`" for n in names) + f"; a cold cache per run; median of {repeats} run(s) per N. "
        f"Machine: {os.cpu_count()} cores, shared (1-minute load average {load1:.1f} at the start).",
        "",
        "| envs | env steps/s (median) | every run | speed-up vs 1 | learn s | start-up s | evaluations "
        "| distinct steps compiled | episodes per env |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        every = ", ".join(f"{x:.1f}" for x in r["all_steps_per_second"])
        lines.append(f"| {r['envs']} | {r['steps_per_second']:.1f} | {every} | {r['speedup']:.2f}x | {r['learn_seconds']:.1f} | "
                     f"{r['startup_seconds']:.1f} | {r['evaluations']} | {r['distinct_steps_compiled']} | "
                     f"{', '.join(map(str, r['per_env_episodes']))} |")
    cores = os.cpu_count() or 1
    by_n = {r["envs"]: r for r in rows}
    lines += [
        "",
        "![throughput](train_throughput.png)",
        "",
        f"Median speed-up here: {by_n[2]['speedup']:.2f}x with 2 envs, {by_n[4]['speedup']:.2f}x with 4 (single runs "
        "vary a lot on this shared machine: compare the 'every run' column). "
        f"On an idle {cores}-core machine at most {cores} compiles overlap (each env has one compiler worker), "
        f"so the ceiling is about {cores}x; on this shared, loaded machine (load {load1:.1f} on {cores} cores) "
        "more processes also take a larger share of contended CPU, which is part of the gain past "
        f"{cores} envs and would not show on a dedicated one. Start-up (N subprocesses importing jaxlib and "
        "starting a worker, in parallel) is paid once per training run.",
        "",
        *([("A likely reason (not measured separately) why 2 envs gain little: SB3 steps a vector of envs in "
            "lock-step, every vector step waits for the slowest env, so while one env compiles a step of the larger "
            "module, an env on the smaller module, or one that chose STOP (free), idles. With modules of very "
            "different sizes this barrier, not only the cores, limits the gain; more envs make the slowest step a "
            "smaller share of the work per vector step."), ""] if by_n[2]["speedup"] < 1.3 else []),
        "Environment steps include STOP actions (free) and cache hits; all envs share one SQLite cache, so a "
        "step compiled by one env is a hit for the others; with more envs more distinct sequences are explored "
        "(each env has its own seed).",
        "",
    ]
    print(write(out, "train_throughput", data, "\n".join(lines), Provenance.now(),
                plot=lambda path: _plot(rows, path)).read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
