#!/usr/bin/env python
"""A/A of the screen: XLA's default against itself through the screen's own protocol, then the claim's.

The screen (``core/screen.py``) decides on a single option value from one raced measurement (16 rounds,
racing against the bar from round 8) and its sequential confirmation (16 more rounds, at most twice, while
the distribution-free interval straddles the bar). Does it call a value that changes nothing "paid", and
does anything it passes on become a false win? Each trial: the default executable as the candidate B
against itself (A), measured as the screen measures (``Runtime._measure`` with the screen's racing, then
``Runtime._sequential``), and, where the screen says "paid", the run's confirmation (``measured_claim``:
30 interleaved rounds, replicated on other inputs). Reported: how often the screen said paid, how often a
straddler was extended, and false wins (with the Clopper-Pearson 95% upper bound), to sit beside
bench/runtime.py's A/A of the confirmation alone.

    python bench/screen_aa.py [--trials 50] [--module tests/data/mlp_train_step.hlo]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from harness import RESULTS, ROOT, Provenance, write

from autotune.core import screen as screen_mod
from autotune.core.engine import open_engine
from autotune.core.module import load
from autotune.core.objectives import ObjectiveContext
from autotune.core.objectives.runtime import Runtime, arm_order


def upper_bound(k: int, n: int) -> float:
    from scipy.stats import beta

    return 1.0 if k >= n else float(beta.ppf(0.975, k + 1, n - k))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--module", default="tests/data/mlp_train_step.hlo")
    parser.add_argument("--db", default=None)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    prov = Provenance.now(script="bench/screen_aa.py")
    obj = Runtime()
    bar = 1.0 - obj.min_effect
    rows = []
    with open_engine(args.db, workers=1) as ev:
        root = ev.prepare(load(ROOT / args.module))
        default = ev.default(root)
        for k in range(args.trials):
            ctx = ObjectiveContext(ev, root, default, seed=1000 + k)
            ctx.shared["screening"] = screen_mod.policy(bar)
            t0 = time.perf_counter()
            found = obj.screened(ctx, root, bar)  # B = XLA's default's own executable
            row = {"trial": k, "ratio": found.ratio, "low": found.low, "high": found.high, "rounds": found.rounds,
                   "extended": found.extended, "stopped": found.stopped, "paid": found.paid(bar), "win": False}
            if found.paid(bar):  # what the run would do with it: its claim
                claim = obj.measured_claim(lambda s: ev.pipeline.time_ab(root, root, seed=s, rounds=obj.rounds,
                                                                          min_seconds=obj.confirm_min_seconds,
                                                                          **arm_order(ev.pipeline, s)),
                                           ctx.seed)
                row.update(win=claim.win, claim=claim.message)
            row["seconds"] = time.perf_counter() - t0
            rows.append(row)
            print(row, flush=True)
            report_on(rows, args, bar, prov)  # after every trial: a stopped run keeps what it measured


def report_on(rows: list[dict], args, bar: float, prov) -> None:
    n = len(rows)
    paid, wins = sum(r["paid"] for r in rows), sum(r["win"] for r in rows)
    extended = sum(r["extended"] > 0 for r in rows)
    md = "\n".join([
        "# A/A of the screen: XLA's default against itself", "",
        f"`{args.module}`, {n} trials of {args.trials} planned, each XLA's default executable measured against itself as the screen "
        f"measures a single option value (16 rounds raced against the bar {bar:.2f} from round 8, then 16 more "
        "rounds at most twice while the 95% distribution-free interval of the median per-round ratio straddles "
        "the bar), and confirmed as a run would (30 interleaved rounds, replicated on other inputs) where the "
        "screen said paid.", "",
        f"- screen said **paid**: {paid} of {n} (95% upper bound {upper_bound(paid, n):.3f})",
        f"- extended by sequential confirmation: {extended} of {n}",
        f"- **false wins** after confirmation: {wins} of {n} (95% upper bound {upper_bound(wins, n):.3f})", "",
        "| trial | ratio [95% CI] | rounds (extended) | paid | win |", "|---|---|---|---|---|",
        *(f"| {r['trial']} | {r['ratio']:.3f}" + (f" [{r['low']:.3f}, {r['high']:.3f}]" if r["low"] is not None else "")
          + f" | {r['rounds']} ({r['extended']}) | {'yes' if r['paid'] else 'no'} | {'yes' if r['win'] else 'no'} |"
          for r in rows)]) + "\n"
    write(Path(args.out), "screen_aa", {"module": args.module, "trials": n, "paid": paid, "wins": wins,
                                        "extended": extended, "rows": rows}, md, prov)


if __name__ == "__main__":
    main()
