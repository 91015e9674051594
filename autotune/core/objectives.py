"""Objectives: what "better module" means, as one number to minimise.

Why several (see ``xla-mechanics.md`` section 6): the raw instruction count right after a sequence
rewards *not* running canonicalising expanders that the backend runs anyway, so it overstates wins.

* ``final-ops`` (default): instructions after the sequence **followed by XLA's default
  target-independent pipeline**, i.e. what the backend will actually see.
* ``ops``: instructions right after the sequence (the 2023 paper's metric, for comparison).
* ``cost``: a roofline-style time estimate from XLA's cost analysis of the final module (after the
  default pipeline, like ``final-ops``)::

      cost_us = 1e6 * max(flops / FLOPS_PER_S, bytes_accessed / BYTES_PER_S)
                + 1e6 * transcendentals / TRANSCENDENTALS_PER_S
                + OP_OVERHEAD_US * instructions

  with constants for one modern CPU core (documented below). The per-instruction overhead keeps
  op-count reductions visible when a module is tiny.
* ``runtime``: compile the tuned module with the full XLA CPU pipeline and time it on seeded
  random inputs: median of ``RUNTIME_REPEATS`` runs after one warm-up, in microseconds.
"""

from __future__ import annotations

import abc
import math
from typing import ClassVar

from autotune.errors import UnknownName
from autotune.core.metrics import Metrics

FLOPS_PER_S = 5e10  # ~ one AVX2/AVX-512 core, f32 FMA throughput
BYTES_PER_S = 1e10  # ~ DRAM bandwidth available to one core
TRANSCENDENTALS_PER_S = 1e9  # vectorised exp/log/tanh
OP_OVERHEAD_US = 0.05  # per HLO instruction (dispatch, loop setup)
RUNTIME_REPEATS = 5


class Objective(abc.ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    unit: ClassVar[str] = "instructions"
    #: Whether the cost is read after XLA's default pipeline has run on the tuned module.
    after_default: ClassVar[bool] = True

    @abc.abstractmethod
    def from_metrics(self, metrics: Metrics) -> float:
        """Cost of a module from its metrics (``runtime`` measures instead)."""


class FinalOps(Objective):
    name = "final-ops"
    description = "instructions after the sequence followed by XLA's default pipeline (what the backend sees)"

    def from_metrics(self, metrics: Metrics) -> float:
        return float(metrics.instructions)


class Ops(Objective):
    name = "ops"
    description = "instructions right after the sequence (the 2023 paper's metric)"
    after_default = False

    def from_metrics(self, metrics: Metrics) -> float:
        return float(metrics.instructions)


class Cost(Objective):
    name = "cost"
    description = "roofline time estimate (us) from flops, bytes accessed and transcendentals of the final module"
    unit = "us (model)"

    def from_metrics(self, metrics: Metrics) -> float:
        return cost_model(metrics)


class Runtime(Objective):
    name = "runtime"
    description = "measured median runtime (us) of the fully compiled tuned module on random inputs"
    unit = "us (measured)"
    after_default = False  # the full compile runs XLA's whole pipeline itself

    def from_metrics(self, metrics: Metrics) -> float:  # pragma: no cover - measured, not derived
        raise NotImplementedError("runtime is measured by compiling and running the module")


def cost_model(m: Metrics) -> float:
    """The ``cost`` objective's formula (see the module docstring), in microseconds."""
    flops = 0.0 if math.isnan(m.flops) else m.flops
    nbytes = 0.0 if math.isnan(m.bytes_accessed) else m.bytes_accessed
    trans = 0.0 if math.isnan(m.transcendentals) else m.transcendentals
    return 1e6 * max(flops / FLOPS_PER_S, nbytes / BYTES_PER_S) + 1e6 * trans / TRANSCENDENTALS_PER_S + OP_OVERHEAD_US * m.instructions


OBJECTIVES: dict[str, type[Objective]] = {cls.name: cls for cls in (FinalOps, Ops, Cost, Runtime)}


def get(name: str) -> Objective:
    if name not in OBJECTIVES:
        raise UnknownName("objective", name, list(OBJECTIVES))
    return OBJECTIVES[name]()
