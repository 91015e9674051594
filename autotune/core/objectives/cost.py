"""``cost``: a roofline-style time estimate from XLA's cost analysis of the final module.

Read after XLA's default pipeline, like ``final-ops``::

    cost_us = 1e6 * max(flops / FLOPS_PER_S, bytes_accessed / BYTES_PER_S)
              + 1e6 * transcendentals / TRANSCENDENTALS_PER_S
              + OP_OVERHEAD_US * instructions

with constants for one modern CPU core. The per-instruction overhead keeps op-count reductions
visible when a module is tiny. A model, not a measurement: use ``runtime`` for a measured claim.
"""

from __future__ import annotations

import math

from autotune.core.metrics import Metrics
from autotune.core.objectives import MetricObjective

FLOPS_PER_S = 5e10  # ~ one AVX2/AVX-512 core, f32 FMA throughput
BYTES_PER_S = 1e10  # ~ DRAM bandwidth available to one core
TRANSCENDENTALS_PER_S = 1e9  # vectorised exp/log/tanh
OP_OVERHEAD_US = 0.05  # per HLO instruction (dispatch, loop setup)


def cost_model(m: Metrics) -> float:
    """The formula above, in microseconds (NaN analyses count as zero)."""
    flops = 0.0 if math.isnan(m.flops) else m.flops
    nbytes = 0.0 if math.isnan(m.bytes_accessed) else m.bytes_accessed
    trans = 0.0 if math.isnan(m.transcendentals) else m.transcendentals
    return (1e6 * max(flops / FLOPS_PER_S, nbytes / BYTES_PER_S) + 1e6 * trans / TRANSCENDENTALS_PER_S
            + OP_OVERHEAD_US * m.instructions)


class Cost(MetricObjective):
    name = "cost"
    description = "roofline time estimate (us) from flops, bytes accessed and transcendentals of the final module"
    unit = "us (model)"

    def from_metrics(self, metrics: Metrics) -> float:
        return cost_model(metrics)
