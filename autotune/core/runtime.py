"""The ``runtime`` objective: measured, not modelled, and cached like everything else.

The tuned module is compiled with XLA's full CPU pipeline and run on seeded random inputs:
``REPEATS`` timed runs after ``WARMUP`` untimed ones, reported as the median in microseconds.
Timings are noisy on shared machines; the median of several runs is the stated statistic, and a
measurement is cached per (pipeline version, module state, seed, repeats) so a state is timed once
per run configuration.
"""

from __future__ import annotations


REPEATS = 5
WARMUP = 1


def measure_runtime(evaluator, state: str, seed: int = 0, repeats: int = REPEATS, warmup: int = WARMUP) -> float:
    """Median runtime in microseconds of the fully compiled module ``state`` (cached)."""
    key = f"{evaluator.version}|{state}|{seed}|{repeats}|{warmup}"
    report = evaluator.cache.get_report("runtime", key)
    if report is None:
        timing = evaluator.pipeline.time(evaluator.module(state), seed=seed, repeats=repeats, warmup=warmup)
        report = {**timing, "median_us": 1e6 * float(timing["median"])}
        evaluator.cache.put_report("runtime", key, report)
    return float(report["median_us"])
