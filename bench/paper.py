#!/usr/bin/env python
"""The 2023 paper's protocol ("Target-independent XLA optimization using Reinforcement Learning"),
reproduced at a configurable scale; writes results/README.md and results/paper/.

    python bench/paper.py --quick          # ~10 small test modules, budget 50, short training (< 30 min, 2 cores)
    python bench/paper.py --full           # every suite module, 3 seeds, budget 200, long training (many hours)

Without a preset flag the quick preset runs (the full one must be asked for).

Steps:

1. **Suite**: generate the benchmark suite (``autotune.zoo.suite.generate``) into ``--suite`` or reuse
   it; ``--limit``/``--families`` subsample what is generated; the train/test split is the suite's own
   (grouped by model configuration, so no test module shares a configuration with a training one).
   Then up to ``--train-modules``/``--test-modules`` modules of at most ``--max-instructions`` are
   picked per side, round-robin over the families (a seeded, stable order inside each family).
2. **Training** on the TRAIN split (``autotune.rl.train.train_policy``): PPO without shaping, PPO with
   potential-based shaping (the paper's best), A2C and DQN, ``--timesteps`` environment steps each.
3. **Zero-shot** on the TEST split: each policy is rolled out deterministically once per module (the
   ``ppo`` strategy with ``policy=...`` and ``finetune=false``; budget ``max_length + 1``: the
   starting cost plus one evaluation per appended pass).
4. **Search** on the TEST split, per module, at equal budget: random, greedy, optuna, nevergrad and PPO
   from scratch (``autotune.reporting.compare.compare``).
5. With ``--ops-objective`` (the default in both presets) the same search with the paper's own
   objective, raw ``ops``, so the raw-ops number is the one a search *for raw ops* reaches.
6. **Report**: ``results/README.md`` (numbers, plots, the command, the scale, the paper's numbers next
   to ours), ``results/paper/report.html`` (self-contained), ``results/paper/paper.json`` and the plots.

Everything shares one evaluator and one cache (``--db``), so no compile step is ever repeated, and a
second run with a warm cache recompiles nothing.

Importable: ``run(Settings(...))`` does the same from Python.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shlex
import sys
import time
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # bench/, also when a test loads this file by path
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Provenance  # noqa: E402
from paper_parts.report import write  # noqa: E402
from paper_parts.settings import POLICIES, PRESETS, Settings  # noqa: E402


# ---- suite ---------------------------------------------------------------------------------------------
def ensure_suite(s: Settings, log=print) -> Path:
    """Generate the suite into ``s.suite`` unless a manifest made with the same settings is there."""
    from autotune.zoo import suite as zoo_suite

    out = Path(s.suite)
    stamp = out / "paper_suite.json"
    want = {"limit": s.limit, "families": sorted(s.families) if s.families else None}
    if (out / "manifest.json").is_file() and stamp.is_file():
        try:
            if json.loads(stamp.read_text()) == want:
                log(f"suite: reusing {out} ({len(zoo_suite.load_manifest(out).entries)} modules)")
                return out
        except ValueError:
            pass
    log(f"suite: generating into {out} (limit {s.limit}, families {s.families or 'all'}) ...")
    t0 = time.perf_counter()
    manifest = zoo_suite.generate(out, limit=s.limit, families=list(s.families) if s.families else None)
    stamp.write_text(json.dumps(want))
    log(f"suite: {len(manifest.entries)} modules in {time.perf_counter() - t0:.0f}s")
    return out


def select(suite_dir: Path, side: str, count: int | None, max_instructions: int, seed: int = 0) -> list:
    """Up to ``count`` manifest entries of ``side`` with at most ``max_instructions``, round-robin
    over families, each family in a seeded stable order (a hash of the name)."""
    from autotune.zoo.suite import load_manifest

    entries = [e for e in load_manifest(suite_dir).entries if e.split == side and e.instructions <= max_instructions]
    by_family: dict[str, list] = {}
    for e in sorted(entries, key=lambda e: hashlib.sha256(f"{seed}:{e.name}".encode()).hexdigest()):
        by_family.setdefault(e.family, []).append(e)
    picked = []
    queues = [by_family[f] for f in sorted(by_family)]
    while queues and (count is None or len(picked) < count):
        for q in list(queues):
            if count is not None and len(picked) >= count:
                break
            picked.append(q.pop(0))
            if not q:
                queues.remove(q)
    return sorted(picked, key=lambda e: (e.family, e.instructions, e.name))


# ---- the protocol --------------------------------------------------------------------------------------------
def run(s: Settings, argv: list[str] | None = None, log=print) -> dict:
    from autotune.reporting.progress import RichCompareProgress
    from autotune.reporting.compare import compare
    from autotune.core.engine import open_engine
    from autotune.core.module import load
    from autotune.rl.train import train_policy
    from autotune.reporting.progress import RichObserver

    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    suite_dir = ensure_suite(s, log)
    timings["suite"] = time.perf_counter() - t_start
    train_entries = select(suite_dir, "train", s.train_modules, s.max_instructions, s.seed)
    test_entries = select(suite_dir, "test", s.test_modules, s.max_instructions, s.seed)
    if not train_entries or not test_entries:
        raise SystemExit(f"the suite in {suite_dir} has no train or no test modules of <= {s.max_instructions} "
                         "instructions; raise --max-instructions or --limit")
    log(f"modules: {len(train_entries)} train, {len(test_entries)} test (<= {s.max_instructions} instructions)")
    train_mods = [load(suite_dir / e.file) for e in train_entries]
    test_mods = [load(suite_dir / e.file) for e in test_entries]
    work = Path(s.work)
    (work / "policies").mkdir(parents=True, exist_ok=True)
    results = Path(s.results)
    report_dir = results / "paper"
    report_dir.mkdir(parents=True, exist_ok=True)
    training: list[dict] = []
    comparisons = {}
    with open_engine(s.db, workers=s.workers) as ev:
        # -- training --------------------------------------------------------------------------------------
        t0 = time.perf_counter()
        wanted = [p for p in POLICIES if p[0] in s.policies]
        policy_paths = {}
        for label, algo, shaping in wanted:
            out = work / "policies" / f"{label.removesuffix('-zero-shot')}.zip"
            log(f"train: {algo}{' + shaping' if shaping else ''} on {len(train_mods)} modules, {s.timesteps} steps")
            stats = train_policy(ev, train_mods, out, timesteps=s.timesteps, seed=s.seed, shaping=shaping,
                                 objective="final-ops", algo=algo, max_length=s.max_length, observer=RichObserver())
            stats = {k: v for k, v in stats.items() if k != "modules"} | {"label": label}
            training.append(stats)
            policy_paths[label] = stats["policy"]
        timings["training"] = time.perf_counter() - t0
        # -- zero-shot ----------------------------------------------------------------------------------------
        t0 = time.perf_counter()
        if policy_paths:
            log(f"zero-shot: {len(policy_paths)} policies on {len(test_mods)} test modules")
            comparisons["zero_shot"] = compare(
                ev, test_mods, list(policy_paths), budget=s.max_length + 1, seeds=list(s.seeds),
                objective="final-ops", time_limit=s.time_limit, max_length=s.max_length, validate=s.validate,
                options_per_strategy={k: {"strategy": "ppo", "policy": v, "finetune": False}
                                      for k, v in policy_paths.items()},
                progress=RichCompareProgress())
        timings["zero_shot"] = time.perf_counter() - t0
        # -- search -----------------------------------------------------------------------------------------------
        t0 = time.perf_counter()
        log(f"search: {', '.join(s.strategies)} on {len(test_mods)} test modules, budget {s.budget}, seeds {list(s.seeds)}")
        comparisons["search"] = compare(
            ev, test_mods, list(s.strategies), budget=s.budget, seeds=list(s.seeds), objective="final-ops",
            time_limit=s.time_limit, max_length=s.max_length, validate=s.validate, progress=RichCompareProgress())
        timings["search"] = time.perf_counter() - t0
        if s.ops_objective:
            t0 = time.perf_counter()
            log("search with the paper's objective (raw ops)")
            comparisons["search_ops"] = compare(
                ev, test_mods, list(s.strategies), budget=s.budget, seeds=list(s.seeds), objective="ops",
                time_limit=s.time_limit, max_length=s.max_length, validate=s.validate, progress=RichCompareProgress())
            timings["search_ops"] = time.perf_counter() - t0
        version = ev.version
    timings["total"] = time.perf_counter() - t_start
    main = comparisons["search"]
    if "zero_shot" in comparisons:
        main = main.merged(comparisons["zero_shot"])
    command = shlex.join(["python", "bench/paper.py", *(argv if argv is not None else sys.argv[1:])])
    data = {
        "settings": dataclasses.asdict(s), "command": command, "pipeline_version": version,
        "timings": timings, "training": training,
        "train_modules": [dataclasses.asdict(e) for e in train_entries],
        "test_modules": [dataclasses.asdict(e) for e in test_entries],
        "comparisons": {k: c.to_dict() for k, c in comparisons.items()},
        "cpus": os.cpu_count(),
        "provenance": Provenance.now(argv, script=__file__).as_dict(),
    }
    write(main, comparisons.get("search_ops"), data, results, log)
    return data


# ---- command line ------------------------------------------------------------------------------------------------
def parse(argv: list[str] | None = None, with_flags: bool = False):
    p = argparse.ArgumentParser(prog="python bench/paper.py", description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="the quick preset (< 30 min on 2 cores; the default)")
    g.add_argument("--full", action="store_true", help="the full preset (many hours)")
    p.add_argument("--suite", help="suite directory (generated if missing)")
    p.add_argument("--work", help="directory for trained policies")
    p.add_argument("--results", help="where README.md and paper/ are written (default results)")
    p.add_argument("--db", help="cache database (default .autotune/cache.db or $AUTOTUNE_DB)")
    p.add_argument("--workers", type=int, help="compiler worker processes")
    p.add_argument("--limit", type=int, help="generate only the first N suite entries")
    p.add_argument("--families", help="comma-separated families to generate (gpt2,bert,resnet)")
    p.add_argument("--test-modules", type=int, help="test modules used (0: all)")
    p.add_argument("--train-modules", type=int, help="training modules used (0: all)")
    p.add_argument("--max-instructions", type=int, help="largest module used")
    p.add_argument("--budget", type=int, help="evaluations per search run")
    p.add_argument("--seeds", help="comma-separated seeds")
    p.add_argument("--max-length", type=int, help="longest pass sequence")
    p.add_argument("--timesteps", type=int, help="training steps per policy")
    p.add_argument("--time-limit", type=float, help="seconds per run")
    p.add_argument("--strategies", help="comma-separated search strategies")
    p.add_argument("--policies", help=f"comma-separated policies to train ({', '.join(x[0] for x in POLICIES)}); "
                                      "empty for none")
    p.add_argument("--ops-objective", action=argparse.BooleanOptionalAction, default=None,
                   help="also search with the paper's raw-ops objective")
    p.add_argument("--no-validate", action="store_true", help="skip validity checks")
    p.add_argument("--report-only", action="store_true",
                   help="only re-render results/README.md and the plots from results/paper/paper.json")
    a = p.parse_args(argv)
    s = PRESETS["full" if a.full else "quick"]
    over = {}
    for key in ("suite", "work", "results", "db", "workers", "limit", "max_instructions", "budget", "max_length",
                "timesteps", "time_limit"):
        if getattr(a, key) is not None:
            over[key] = getattr(a, key)
    if a.families:
        over["families"] = tuple(x.strip() for x in a.families.split(",") if x.strip())
    for key in ("test_modules", "train_modules"):
        if getattr(a, key) is not None:
            over[key] = getattr(a, key) or None
    if a.seeds:
        over["seeds"] = tuple(int(x) for x in a.seeds.split(",") if x.strip())
    if a.strategies:
        over["strategies"] = tuple(x.strip() for x in a.strategies.split(",") if x.strip())
    if a.policies is not None:
        known = {x[0] for x in POLICIES}
        chosen = tuple(x.strip() for x in a.policies.split(",") if x.strip())
        bad = [x for x in chosen if x not in known]
        if bad:
            p.error(f"unknown policy {bad[0]!r}; choose from {', '.join(sorted(known))}")
        over["policies"] = chosen
    if a.ops_objective is not None:
        over["ops_objective"] = a.ops_objective
    if a.no_validate:
        over["validate"] = False
    s = dataclasses.replace(s, **over)
    return (s, a.report_only) if with_flags else s


def rerender(results: Path, log=print) -> None:
    """Write the report again from ``results/paper/paper.json`` (no compile, no training)."""
    from autotune.reporting.comparison import Comparison

    data = json.loads((results / "paper" / "paper.json").read_text())
    comps = {k: Comparison.from_dict(v) for k, v in data["comparisons"].items()}
    main = comps["search"].merged(comps["zero_shot"]) if "zero_shot" in comps else comps["search"]
    write(main, comps.get("search_ops"), data, results, log)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    settings, report_only = parse(argv, with_flags=True)
    if report_only:
        rerender(Path(settings.results))
        return 0
    from autotune.reporting.compare import resolve

    resolve(list(settings.strategies), None)  # unknown strategies fail before any work
    run(settings, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
