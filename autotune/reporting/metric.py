"""The 2023 paper's metric ("Target-independent XLA optimization using Reinforcement Learning").

For one module, with ``I`` the instruction count of the (normalised) input, ``D`` the count after
XLA's default ordering, and ``T`` the count of the tuned module::

    ratio = (I - T) / (I - D)          # tuned reduction / default reduction

and a strategy's score is the geometric mean of ``ratio`` over modules; ``score - 1`` is the "x% more
reduction than XLA's default" the paper reports. The edge cases (seeds, ratios <= 0, modules where
the default removes nothing, runs without a valid best) are decided in ``autotune.reporting.compare``'s
docstring and stated in every report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from autotune.reporting.rows import RATIO_FLOOR, TIE_RTOL, RunRow  # noqa: F401  (RATIO_FLOOR, TIE_RTOL: their old home)

#: The 2023 paper's headline numbers (raw-ops metric, geometric mean of the ratio, minus 1).
PAPER = {"gpt2": 0.133, "mixed": 0.104}


@dataclass(frozen=True)
class PaperMetric:
    """The paper's metric over a set of runs: geometric mean of per-module (seed-averaged) ratios."""

    geomean_ratio: float | None  # None: no module had a defined ratio
    modules: int  # modules in the mean
    floored_runs: int  # runs whose ratio was < RATIO_FLOOR (incl. <= 0) and was floored
    excluded_modules: int  # modules left out: XLA's default reduces nothing (or every run errored)
    per_module: dict[str, float] = field(default_factory=dict)  # seed-averaged floored ratio per module

    @property
    def improvement(self) -> float | None:
        """``geomean - 1``: the "x% more reduction than XLA's default" of the paper."""
        return None if self.geomean_ratio is None else self.geomean_ratio - 1.0

    def to_dict(self) -> dict:
        return {"geomean_ratio": self.geomean_ratio, "improvement": self.improvement, "modules": self.modules,
                "floored_runs": self.floored_runs, "excluded_modules": self.excluded_modules,
                "per_module": dict(self.per_module)}

    @classmethod
    def from_dict(cls, d: dict) -> "PaperMetric":
        return cls(d["geomean_ratio"], d["modules"], d["floored_runs"], d["excluded_modules"],
                   dict(d.get("per_module") or {}))


def paper_metric(rows: Sequence[RunRow], final: bool = True) -> PaperMetric:
    """Aggregate ``rows`` (one strategy) as the paper does; see the module doc for the edge cases."""
    by_module: dict[str, list[RunRow]] = {}
    for r in rows:
        by_module.setdefault(r.module, []).append(r)
    per_module: dict[str, float] = {}
    floored = excluded = 0
    for module, runs in by_module.items():
        ratios = []
        for r in runs:
            raw = r.ratio(final)
            if raw is None:
                continue
            if raw < RATIO_FLOOR:
                floored += 1
            ratios.append(max(raw, RATIO_FLOOR))
        if not ratios:
            excluded += 1
            continue
        per_module[module] = sum(ratios) / len(ratios)
    if not per_module:
        return PaperMetric(None, 0, floored, excluded, {})
    geo = math.exp(sum(math.log(v) for v in per_module.values()) / len(per_module))
    return PaperMetric(geo, len(per_module), floored, excluded, per_module)


