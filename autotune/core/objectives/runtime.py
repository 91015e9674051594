"""``runtime``: measured, not modelled, and cached like everything else.

The module is compiled with XLA's full CPU pipeline and run on seeded random inputs: ``REPEATS``
timed runs after ``WARMUP`` untimed ones, reported as the median in microseconds. A measurement is
cached per (pipeline version, module state, seed, repeats) so a state is timed once per run
configuration.
"""

from __future__ import annotations

from autotune.core.objectives import Objective, ObjectiveContext

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


class Runtime(Objective):
    name = "runtime"
    description = "measured median runtime (us) of the fully compiled tuned module on random inputs"
    unit = "us (measured)"
    deterministic = False

    def cost(self, state: str, ctx: ObjectiveContext) -> float:
        return measure_runtime(ctx.evaluator, state)

    def default_cost(self, ctx: ObjectiveContext) -> float:
        return measure_runtime(ctx.evaluator, ctx.default.state)
