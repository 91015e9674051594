"""The ``runtime`` objective: measured, not modelled, and cached like everything else.

The tuned module is compiled with XLA's full CPU pipeline and run on seeded random inputs:
``REPEATS`` timed runs after ``WARMUP`` untimed ones, reported as the median in microseconds.
Timings are noisy on shared machines; the median of several runs is the stated statistic, and a
measurement is cached per (pipeline version, module state, seed, repeats) so a state is timed once
per run configuration.
"""

from __future__ import annotations

import json

REPEATS = 5
WARMUP = 1


def measure_runtime(evaluator, state: str, seed: int = 0, repeats: int = REPEATS, warmup: int = WARMUP) -> float:
    cache = evaluator.cache
    key = f"{evaluator.version}|{state}|{seed}|{repeats}|{warmup}"
    with cache.write() as db:
        db.execute("CREATE TABLE IF NOT EXISTS runtimes (key TEXT PRIMARY KEY, report TEXT)")
    row = cache.db.execute("SELECT report FROM runtimes WHERE key=?", [key]).fetchone()
    if row:
        return float(json.loads(row[0])["median_us"])
    timing = evaluator.pipeline.time(evaluator.module(state), seed=seed, repeats=repeats, warmup=warmup)
    report = {**timing, "median_us": 1e6 * float(timing["median"])}
    with cache.write() as db:
        db.execute("INSERT OR REPLACE INTO runtimes(key, report) VALUES (?, ?)", [key, json.dumps(report)])
    return report["median_us"]
