#!/usr/bin/env python
"""Hedged roll-outs: is a second (third) deterministic roll-out from the policy's next most probable
first pass worth more than fine-tuning with the same budget?

    python bench/hedge.py [--work .autotune/learning] [--quick] [--out results/hedge]

Why: on unseen LLM steps the shipped policy's doubt is mostly its first pass (``algsimp`` or ``cse``
first), and last round's seeds disagreed exactly there. ``autotune run --strategy ppo -O rollouts=K``
rolls out K deterministic episodes, the k-th starting with the policy's k-th most probable first pass;
``--budget 4K`` with the default ``rollouts=1`` instead spends what is left after one roll-out on
PPO fine-tuning (stochastic episodes that also update the policy). Both are compared here at equal
budget, on the modules of a finished ``bench/learning.py`` run (its test sample and the three shared
LLM steps), against that run's ceiling (its per-module search), each variant on its own cold cache,
every answer pruned as ``autotune run`` prunes it. The shipped policy is used (``--policy``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import learning as L  # noqa: E402

from autotune.core.engine import open_engine  # noqa: E402
from autotune.core.module import load  # noqa: E402
from autotune.core.tuner import tune  # noqa: E402

#: (name, budget, strategy options)
VARIANTS = (
    ("1 roll-out", 4, {"finetune": False}),
    ("1 roll-out + fine-tune", 8, {}),
    ("2 hedged roll-outs", 8, {"finetune": False, "rollouts": 2}),
    ("1 roll-out + fine-tune, 12", 12, {}),
    ("3 hedged roll-outs", 12, {"finetune": False, "rollouts": 3}),
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, default=ROOT / ".autotune" / "learning")
    p.add_argument("--quick", action="store_true", help="the learning run's --quick preset")
    p.add_argument("--policy", default=str(L.POLICY))
    p.add_argument("--out", type=Path, default=ROOT / "results" / "hedge")
    args = p.parse_args(argv)
    work = L.Work(args.work / ("quick" if args.quick else "full"), L.QUICK if args.quick else L.FULL)
    search = work.load("eval-search")
    if not search:
        print(f"error: {work.root} has no finished eval stage; run bench/learning.py first", file=sys.stderr)
        return 2
    modules = [(x, "test") for x in work.test_set()] + [(L.SHARED / f, "shared") for f in L.SHARED_LLM]
    rows = {}
    for k, (name, budget, options) in enumerate(VARIANTS):
        db = work.root / f"hedge-{k}.db"
        db.unlink(missing_ok=True)
        with open_engine(str(db), workers=2) as ev:
            for path, split in modules:
                t0 = time.perf_counter()
                r = tune(ev, load(path), strategy="ppo", budget=budget, max_length=L.MAX_LENGTH, validate=False,
                         options={"policy": args.policy, **options})
                cost = min(r.best_cost, r.default_cost)
                rows.setdefault(path.stem, {"split": split, "default": r.default_cost,
                                            "ceiling": search[path.stem]["cost"]})[name] = {
                    "cost": cost, "steps": r.steps_compiled, "sequence": list(r.best_sequence),
                    "seconds": time.perf_counter() - t0}
                L.log(f"{name}: {path.stem[:50]}: {r.default_cost:.0f} -> {cost:.0f} ({r.steps_compiled} steps)")
    summary = {}
    for split in ("test", "shared"):
        group = [r for r in rows.values() if r["split"] == split]
        summary[split] = {}
        for name, _, _ in VARIANTS:
            mean, pooled = L.fractions((r["default"] - r[name]["cost"], r["default"] - r["ceiling"]) for r in group)
            summary[split][name] = {"mean_fraction": mean, "pooled_fraction": pooled,
                                    "mean_steps": sum(r[name]["steps"] for r in group) / len(group)}
    command = f"python bench/hedge.py --work {L.rel(args.work)}{' --quick' if args.quick else ''}"
    pct = L._f
    lines = [f"# Hedged roll-outs against fine-tuning at equal budget ({L.rel(work.root)})", "",
             f"Made by `{command}`. The shipped policy on the learning run's {len(modules) - 3} test-split modules and "
             "the three shared LLM steps; fraction of that run's ceiling (per-module search) recovered, mean over "
             "modules (pooled), and compiled steps per module. Every answer pruned as `autotune run` prunes it; each "
             "variant on its own cold cache. Evidence: final-ops at the `compiled` level, one run per module.", "",
             "| variant | budget | test | test steps | shared | shared steps |", "|---|---:|---:|---:|---:|---:|"]
    for name, budget, _ in VARIANTS:
        t, s = summary["test"][name], summary["shared"][name]
        lines.append(f"| {name} | {budget} | {pct(t['mean_fraction'])} ({pct(t['pooled_fraction'])}) | "
                     f"{t['mean_steps']:.1f} | {pct(s['mean_fraction'])} ({pct(s['pooled_fraction'])}) | "
                     f"{s['mean_steps']:.1f} |")
    lines += ["", "Shared LLM steps (final-ops; the pruned sequence):", "",
              "| module | default | ceiling | " + " | ".join(n for n, _, _ in VARIANTS) + " |",
              "|---|---:|---:|" + "---|" * len(VARIANTS)]
    for name, r in rows.items():
        if r["split"] == "shared":
            lines.append(f"| {name} | {r['default']:.0f} | {r['ceiling']:.0f} | " + " | ".join(
                f"{r[n]['cost']:.0f} `{','.join(r[n]['sequence']) or '-'}`" for n, _, _ in VARIANTS) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"command": command, "summary": summary, "rows": rows},
                                                        indent=2) + "\n")
    args.out.with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
