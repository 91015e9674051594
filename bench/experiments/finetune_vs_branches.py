#!/usr/bin/env python
"""At the same budget, does a policy do better fine-tuning after its roll-out or trying its branches?

    python bench/experiments/finetune_vs_branches.py --work .autotune/learning-e7q --seeds 0,1,2,3,4,5,6,7,8

Issue 31: one roll-out (``--budget 4``) of a PPO policy depends on its training seed. Two ways of
spending a few more evaluations exist: ``autotune run --strategy ppo --budget 8`` (the default:
the roll-out, then fine-tuning on the module with what is left) and ``-O branches=4 -O
finetune=false --budget 8`` (the roll-out and the policy's next three most likely first passes).
This script runs the first on every seed's policy of a finished ``bench/learning.py --quick``
work directory (its ``--stage ensemble`` must have run: the seed policies and their branches rows),
each seed on its own cold cache, against the work directory's search ceiling, and sets it beside
the stored branches rows. Writes ``<out>/finetune_vs_branches.md`` and ``.json``. Judged by XLA's
CPU pipeline on final-ops, nothing timed, answers not validated here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autotune.core.engine import open_engine
from autotune.core.module import load
from autotune.core.tuner import tune

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: the harness
from harness import LLM_STEPS as SHARED_LLM, REAL_LLM as SHARED, Provenance, write  # noqa: E402
import learn as L  # noqa: E402

BUDGET = 8


def finetune_rows(work, policy: Path, modules) -> dict:
    """``autotune run --strategy ppo --budget 8 --no-validate`` (roll-out, fine-tuning, prune) per module."""
    tag = f"finetune{BUDGET}-{policy.stem}"
    rows = work.load(f"eval-{tag}") or {}
    digest = L.file_digest(policy)
    if any(r.get("basis") != digest for r in rows.values()):
        rows = {}
    with open_engine(work.db(tag), workers=2, target=L.common.TARGET) as ev:
        for path, split in modules:
            if path.stem in rows:
                continue
            r = tune(ev, load(path), strategy="ppo", budget=BUDGET, max_length=L.MAX_LENGTH, validate=False,
                       prune=True, options={"policy": str(policy)})
            rows[path.stem] = {**L.tuned_row(r, path.stem, split), "basis": digest}
            work.save(f"eval-{tag}", rows)
            L.log(f"{tag}: {path.stem[:60]}: {r.default_cost:.0f} -> {rows[path.stem]['cost']:.0f}")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default=".autotune/learning", help="a bench/learning.py --quick work directory")
    ap.add_argument("--seeds", default=",".join(map(str, sorted({k for d in L.ENSEMBLE_DRAWS for k in d}))))
    ap.add_argument("--out", default="results/learning-quick-engine7")
    args = ap.parse_args()
    work = L.Work(Path(args.work) / "quick", dict(L.QUICK, branches=L.BRANCHES, branch_budget=L.BRANCH_BUDGET))
    selected, search = work.load("select") or {}, work.load("eval-search") or {}
    if not selected.get("chosen") or not search:
        print(f"error: {work.root} has no selection or search rows (run bench/learning.py --quick first)", file=sys.stderr)
        return 2
    modules = [(x, "test") for x in work.test_set()] + [(SHARED / f, "shared") for f in SHARED_LLM]
    table, data = [], {}
    for seed in [int(s) for s in args.seeds.split(",")]:
        policy = work.seed_policy(selected["chosen"], seed)
        branches = work.load(f"eval-{L.branches_tag(work, policy)}")
        if not policy.exists() or not branches:
            print(f"error: no policy or branches rows for seed {seed} (run bench/learning.py --quick --stage ensemble)",
                  file=sys.stderr)
            return 2
        finetune = finetune_rows(work, policy, modules)
        data[seed] = {}
        for name, rows in (("finetune", finetune), ("branches", branches)):
            data[seed][name] = L.eval_groups(work, rows)
        cells = [f"{data[seed][m][g]['mean_fraction']:.0%} at {data[seed][m][g]['steps']:.1f}"
                 for g in ("llm", "shared") for m in ("finetune", "branches")]
        table.append(f"| {seed} | " + " | ".join(cells) + " |")
    out = Path(args.out)
    worst = {m: {g: min(d[m][g]["mean_fraction"] for d in data.values()) for g in ("llm", "shared")}
             for m in ("finetune", "branches")}
    lines = [f"# Fine-tuning or branches at `--budget {BUDGET}`, per PPO seed", "",
             f"Made by `python bench/experiments/finetune_vs_branches.py --work {args.work} --seeds {args.seeds} --out {args.out}` "
             f"on the work directory's test modules and the three real LLM steps, each seed on its own cold cache. "
             "Mean of per-module fractions of the work directory's budget-40 search's gain, then compiled steps per "
             "module. Judged by XLA's CPU pipeline on final-ops, nothing timed, answers not validated here.", "",
             f"`finetune`: `autotune run --strategy ppo --policy SEED.zip --budget {BUDGET}` (the roll-out, then "
             f"fine-tuning, pruned). `branches`: `-O branches={L.BRANCHES} -O finetune=false --budget {BUDGET}` "
             "(the rows of `bench/learning.py --stage ensemble`).", "",
             "| seed | test: finetune | test: branches | real steps: finetune | real steps: branches |",
             "|---:|---:|---:|---:|---:|", *table, "",
             f"Worst seed: fine-tuning {worst['finetune']['llm']:.0%} on the test split and "
             f"{worst['finetune']['shared']:.0%} on the real steps; branches {worst['branches']['llm']:.0%} and "
             f"{worst['branches']['shared']:.0%}.", ""]
    write(out, "finetune_vs_branches", data, "\n".join(lines), Provenance.now())
    L.log(f"wrote {out / 'finetune_vs_branches.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
