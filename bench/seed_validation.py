#!/usr/bin/env python
"""Does the held-out validation set rank PPO training seeds the way the test split does?

Why: retrained with another PPO seed, the shipped variant's share of the ceiling on the three real
LLM steps swings widely (results/learning*.md, "Training seeds"), because on three modules one
first pass decides. If the validation set (held-out TRAIN-split modules, the one model selection
already uses) ranks seeds as the test split and the real steps do, then choosing the seed on it is
a sound way to retrain. This rolls out each seed's policy of a finished ``bench/learning.py`` run
(``<variant>.zip``, ``<variant>-seed1.zip``, ...) once on that run's validation modules, against the
same expert (the beam search recorded in ``select.json``), and puts it beside the seeds' test and
shared figures from the same run.

    python bench/seed_validation.py [--work .autotune/learning] [--quick] [--out results/learning_seed_validation]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import learning as L  # noqa: E402

from autotune.core.engine import open_engine  # noqa: E402
from autotune.core.module import load  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, default=ROOT / ".autotune" / "learning")
    p.add_argument("--quick", action="store_true", help="the run's --quick preset")
    p.add_argument("--out", type=Path, default=None, help="write <out>.json and <out>.md (default: print only)")
    args = p.parse_args(argv)
    preset = "quick" if args.quick else "full"
    work = L.Work(args.work / preset, L.QUICK if args.quick else L.FULL)
    selected = work.load("select")
    if not selected or not selected.get("rows"):
        print(f"error: {work.root} has no finished select stage; run bench/learning.py first", file=sys.stderr)
        return 2
    chosen = selected["chosen"]
    zips = {0: work.root / f"{chosen}.zip"} | {s: work.root / f"{chosen}-seed{s}.zip" for s in L.TRAINING_SEEDS}
    missing = [str(z) for z in zips.values() if not z.exists()]
    if missing:
        print(f"error: no policy at {', '.join(missing)}; run bench/learning.py --stage seeds first", file=sys.stderr)
        return 2
    rows = []
    with open_engine(work.db("train"), workers=2) as ev:
        for seed, path in zips.items():
            pairs = []
            for name, r in selected["rows"].items():
                res = L.rollout(ev, load(work.suite / f"{name}.hlo"), path)
                pairs.append((r["default"] - min(res.best_cost, r["default"]), r["default"] - r["expert"]))
            mean, pooled = L.fractions(pairs)
            rows.append({"seed": seed, "validation_mean": mean, "validation_pooled": pooled})
            L.log(f"seed {seed}: validation {mean:.0%} ({pooled:.0%} pooled)")
    spread = L.seed_spread(work, L.summarise(work))
    for row in rows:
        for group in ("test", "shared"):
            g = (spread.get(row["seed"]) or {}).get(group) or {}
            row[f"{group}_mean"], row[f"{group}_pooled"] = g.get("mean_fraction"), g.get("pooled_fraction")
    data = {"work": L.rel(work.root), "variant": chosen, "validation_modules": len(selected["rows"]), "rows": rows}
    lines = [f"# Validation against test: PPO seeds of `{chosen}` ({L.rel(work.root)})", "",
             f"Made by `python bench/seed_validation.py --work {L.rel(args.work)}{' --quick' if args.quick else ''}"
             f"{' --out ' + L.rel(args.out) if args.out else ''}`. "
             f"Each seed's policy rolled out once; validation: {len(selected['rows'])} held-out train-split modules "
             "against the demonstrations' beam search; test and shared: the same run's seeds stage against the "
             "per-module search. Mean of per-module fractions (pooled). Evidence: final-ops counted after compiling "
             "each sequence and XLA's default pipeline (the `compiled` level; nothing executed), one roll-out per "
             "module and seed on a shared 2-core machine.", "",
             "| PPO seed | validation | test | shared |", "|---:|---:|---:|---:|"]
    pct = lambda v: "-" if v is None else f"{v:.0%}"  # noqa: E731
    for r in rows:
        cells = [f"{pct(r[f'{g}_mean'])} ({pct(r[f'{g}_pooled'])})" for g in ("validation", "test", "shared")]
        lines.append(f"| {r['seed']} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
