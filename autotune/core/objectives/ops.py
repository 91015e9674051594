"""``ops``: instructions right after the sequence (the 2023 paper's metric, kept for comparison)."""

from __future__ import annotations

from autotune.core.metrics import Metrics
from autotune.core.objectives import MetricObjective


class Ops(MetricObjective):
    name = "ops"
    description = "instructions right after the sequence (the 2023 paper's metric)"
    after_default = False

    def from_metrics(self, metrics: Metrics) -> float:
        return float(metrics.instructions)
