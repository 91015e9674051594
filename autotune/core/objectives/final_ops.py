"""``final-ops`` (the default): instructions after the sequence followed by XLA's default pipeline.

That is what the backend will actually see. Counting right after the sequence (``ops``) rewards not
running canonicalising expanders that the backend runs anyway, so it overstates wins.
"""

from __future__ import annotations

from autotune.core.metrics import Metrics
from autotune.core.objectives import MetricObjective


class FinalOps(MetricObjective):
    name = "final-ops"
    description = "instructions after the sequence followed by XLA's default pipeline (what the backend sees)"

    def from_metrics(self, metrics: Metrics) -> float:
        return float(metrics.instructions)
