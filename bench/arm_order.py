#!/usr/bin/env python
"""Does the arm built second read slower? An A/A of ``time_ab``'s construction order: results/arm-order/.

Every runtime claim is ``time_ab(default, candidate)``: the default compiled and its inputs placed first,
the candidate second, then interleaved rounds (A B, B A, ...). The effect stage's A/A instances (330 of them,
``bench/options.py --stage effect``) averaged 1.0076 (t test p 0.015): perhaps the second arm pays ~1%,
which would make every claim that much conservative and every effect that much small. If so, the cure is to
alternate which arm is built first. This checks the cause before building the cure: per module, XLA's default
against itself in ``--instances`` independent ``time_ab`` measurements (each its own inputs, seed k, the
claim's protocol at 50 ms samples and 10 rounds), half built A first (``ab``, as claims are) and half B first
(``ba``), interleaved so that the machine's drift hits both. Per variant: the geometric mean of the
per-measurement median ratios B/A with a t interval; the construction effect is ``ab`` against ``ba`` (Welch t
test): an arm-built-second penalty shows as ``ab`` above 1 and ``ba`` below.

Measured as claims are, on the pipeline's timing worker (``XlaPipeline.time_ab``, ``b_first`` for ``ba``).

    python bench/arm_order.py [--instances 40] [MODULE ...]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from harness import RESULTS, ROOT, Provenance, log, rel, write
from options_parts.effect import ROUNDS, estimate, log_ratio
from scipy import stats

from autotune.core.objectives.runtime import CONFIRM_MIN_SECONDS as MIN_SECONDS

MODULES = [ROOT / "tests/data/real/hloenv_jaxrl_td_target.hlo", ROOT / "tests/data/real/hloenv_maml_train_step.hlo",
           ROOT / "examples/gpt2_train_step.hlo"]
VARIANTS = ("ab", "ba")


def measure(pipeline, root, instances: int) -> dict[str, list[float]]:
    logs: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for k in range(instances):
        for variant in VARIANTS:
            t = pipeline.time_ab(root, root, seed=k, rounds=ROUNDS, min_seconds=MIN_SECONDS, b_first=variant == "ba")
            logs[variant].append(log_ratio(t))
    return logs


def _row(path: Path, step: float, logs: dict[str, list[float]]) -> dict:
    row = {"module": path.stem, "path": rel(path), "step_ms": 1e3 * step, "logs": logs,
           **{v: estimate(logs[v]) for v in VARIANTS},
           "construction_p": float(stats.ttest_ind(logs["ab"], logs["ba"], equal_var=False).pvalue)}
    log(f"{path.stem}: ab {row['ab']['ratio']:.4f} ba {row['ba']['ratio']:.4f} p {row['construction_p']:.2f}")
    return row


def summary(rows: list[dict]) -> dict:
    pooled = {v: [x for r in rows for x in r["logs"][v]] for v in VARIANTS}
    both = pooled["ab"] + pooled["ba"]
    return {"pooled": {v: estimate(pooled[v]) for v in VARIANTS}, "all": estimate(both),
            "construction_p": float(stats.ttest_ind(pooled["ab"], pooled["ba"], equal_var=False).pvalue)}


def markdown(data: dict) -> str:
    s = data["summary"]

    def fmt(e: dict) -> str:
        return f"{e['ratio']:.4f} [{e['low']:.4f}, {e['high']:.4f}] (p {e['p_value']:.2f}, n {e['instances']})"

    lines = ["# Does the arm built second read slower? (A/A of `time_ab`'s construction order)", "",
             f"XLA's default against itself, {data['instances']} measurements per variant and module (each its own "
             f"inputs; {ROUNDS} interleaved rounds of {MIN_SECONDS * 1e3:.0f} ms samples); B/A as the geometric mean "
             "of per-measurement medians with a 95% t interval. `ab`: A built first, as every claim is; `ba`: B "
             "first. A penalty on the arm built second reads `ab` > 1 and `ba` < 1.", "",
             "| module | step (ms) | ab: B/A | ba: B/A | construction p |", "|---|---|---|---|---|"]
    for r in data["modules"]:
        lines.append(f"| {r['module']} | {r['step_ms']:.2f} | {fmt(r['ab'])} | {fmt(r['ba'])} | "
                     f"{r['construction_p']:.2f} |")
    lines += ["", f"Pooled: `ab` {fmt(s['pooled']['ab'])}, `ba` {fmt(s['pooled']['ba'])}; construction effect "
              f"(Welch t, `ab` against `ba`) p {s['construction_p']:.2f}; every A/A measurement together "
              f"{fmt(s['all'])}.", "", f"Load average {data['load'][0]:.1f} before, {data['load'][1]:.1f} after; "
              f"{data['seconds'] / 60:.1f} min."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", type=Path, default=MODULES)
    parser.add_argument("--instances", type=int, default=40)
    parser.add_argument("--out", type=Path, default=RESULTS / "arm-order")
    args = parser.parse_args()
    from autotune.core.engine import open_engine
    from autotune.core.module import load

    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp, open_engine(Path(tmp) / "cache.db", workers=1) as ev:
        for path in args.modules:
            root = ev.prepare(load(path))
            step = ev.pipeline.time(root, repeats=3, min_seconds=MIN_SECONDS)["median"]
            rows.append(_row(path, step, measure(ev.pipeline, root, args.instances)))
    data = {"instances": args.instances, "rounds": ROUNDS, "min_seconds": MIN_SECONDS, "modules": rows,
            "summary": summary(rows), "load": [load0, os.getloadavg()[0]], "seconds": time.perf_counter() - t0}
    print(write(args.out, "arm_order", data, markdown(data), Provenance.now()))


if __name__ == "__main__":
    main()
