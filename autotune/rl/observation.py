"""What a pass-ordering policy sees of a module: one float vector with a name for every coordinate.

The first observation (an opcode histogram plus four cost ratios) was chosen for a suite where no
ordering beat XLA's default, and it cannot tell apart the modules where ordering pays: an LLM
step whose rotary tables are rebuilt in every layer of a ``scan`` body (``cse`` first pays) and
one whose reshapes sit on element-wise chains (``algsimp,reshape-mover`` pays) can have nearly the
same opcode histogram. The coordinates, in order (``Observation.names``):

* ``opcode_fraction:<opcode>`` (+ ``opcode_fraction:other``): instructions per opcode in the whole module;
* ``loop:<opcode>`` (+ ``loop:other``): the same inside ``while`` bodies and conditions (a layer
  under ``lax.scan``: where the KV-cache ``dynamic-update-slice``/``scatter`` and the MoE
  ``gather``/``scatter`` live);
* ``struct:<count>``: the structural counts of ``pipelines/xla/structure.py`` (``cse_candidates``
  and ``cse_candidates_in_loops``: instructions that repeat another exactly, what ``cse`` merges;
  ``layout_chains``, ``convert_chains``, ``broadcast_chains``: what ``algsimp`` folds;
  ``elementwise_of_layout``: what ``reshape-mover`` moves; ``dead``; ``while``; ...);
* ``partition:<count>`` (with ``partition_features``): how one device's program of a partitioned step
  is wired around its collectives (``PARTITION_COUNTS`` of ``structure.py``: the computation between
  collectives, collectives with a layout operand, the device-index arithmetic);

  all four groups **divided by the episode's initial instruction count**, so the vector is the
  module's composition relative to where the episode started, and a 300- and an 18,000-instruction
  step map to the same range (see ``autotune.rl.env``);
* ``partition:log2_devices`` (with ``partition_features``): ``log2`` of the devices the step is
  partitioned over (0 for one device): a tensor-parallel step over 8 devices and one over 2 exchange
  differently shaped pieces of the same model;
* ``relative:<name>`` (with ``cost_features``): instructions, flops, transcendentals and bytes accessed
  relative to the initial module, ``(x + 1) / (x0 + 1)``;
* ``progress:gain_percent`` and ``progress:above_best_percent``: how far the best state of the episode so
  far is below its start (``100 * (c0 - best) / c0``) and how far the current state is above that
  best (``100 * (cost - best) / c0``), both clipped into ``[0, OBS_HIGH]``. The module's composition
  says what a pass could still do; these say what the episode has already won, and whether the
  current state is a detour (a pass that made the module worse), which is what a policy under the
  best-so-far reward (``reward="best"``, ``autotune.rl.env``) must know to act well;
* ``applied:<action>``: how many times each action is already in the sequence, over
  ``max_length``. The module state alone does not say which passes were tried: a pass that changed
  nothing leaves every other coordinate where it was, and a deterministic policy that sees the same
  vector again picks the same pass again; with the history it can move on;
* ``step_fraction``: ``len(sequence) / max_length`` (the horizon is part of the state).

``partition_features`` is what policies trained before those counts existed lack: their sidecar's
``observation_names`` has no ``partition:`` coordinate (``Observation.has_partition_features``), and
``autotune.rl.train.observation_options`` builds that layout for them, so they keep seeing exactly
the vector they were trained on.

The structural groups come from ``Metrics.structure``, measured by the backend with every state
(the XLA pipeline counts them from the module's text); a ``Metrics`` without it (``None``: another
backend, or a record from before the field) reads zeros there. ``tests/test_observation.py``
checks on two small modules made in the test, one where ``cse`` is the pass that pays first and
one where ``algsimp`` is, that their observations differ in the features named for those passes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from autotune.core.metrics import Metrics
from autotune.pipelines.xla.structure import LOOP_PREFIX, PARTITION_COUNTS, STRUCTURE_COUNTS

#: Upper bound of every coordinate (values are clipped into ``[0, OBS_HIGH]``).
OBS_HIGH = 16.0
#: Cost coordinates, relative to the episode's initial module.
COST_FEATURES = ("instructions", "flops", "transcendentals", "bytes_accessed")
#: The episode's progress in the objective (percent of the starting cost; see the module docstring).
PROGRESS_FEATURES = ("gain_percent", "above_best_percent")
#: The partition counts observed relative to the initial instruction count (``devices`` is observed as log2).
PARTITION_RELATIVE = tuple(c for c in PARTITION_COUNTS if c != "devices")
PARTITION_PREFIX = "partition:"


def _ratio(x: float, x0: float) -> float:
    if x is None or x0 is None or math.isnan(x) or math.isnan(x0):
        return 1.0
    return (x + 1.0) / (x0 + 1.0)


@dataclass(frozen=True)
class Observation:
    """The observation layout over an opcode vocabulary and an action list (see the module docstring)."""

    opcodes: tuple[str, ...]
    actions: tuple[str, ...]
    cost_features: bool = True
    partition_features: bool = True
    names: tuple[str, ...] = field(init=False)

    def __post_init__(self):
        names = [f"opcode_fraction:{op}" for op in self.opcodes] + ["opcode_fraction:other"]
        names += [f"loop:{op}" for op in self.opcodes] + ["loop:other"]
        names += [f"struct:{c}" for c in STRUCTURE_COUNTS]
        if self.partition_features:
            names += [PARTITION_PREFIX + c for c in PARTITION_RELATIVE] + [PARTITION_PREFIX + "log2_devices"]
        if self.cost_features:
            names += [f"relative:{c}" for c in COST_FEATURES]
        names += [f"progress:{c}" for c in PROGRESS_FEATURES]
        names += [f"applied:{a}" for a in self.actions] + ["step_fraction"]
        object.__setattr__(self, "names", tuple(names))

    @staticmethod
    def has_partition_features(names) -> bool:
        """Whether a layout's coordinate names (a policy sidecar's ``observation_names``) include the
        partition group: policies trained before it existed do not."""
        return any(str(n).startswith(PARTITION_PREFIX) for n in names)

    @property
    def size(self) -> int:
        return len(self.names)

    def index(self, name: str) -> int:
        """Position of a named feature (ValueError if there is none of that name)."""
        return self.names.index(name)

    def vector(self, metrics: Metrics, initial: Metrics, sequence: Sequence[str], max_length: int,
               costs: tuple[float, float, float] | None = None) -> np.ndarray:
        """The observation of ``metrics`` reached by ``sequence`` from ``initial`` (float32, clipped).

        ``costs`` is ``(start, current, best so far)`` of the episode in the objective (None: no
        progress yet, both progress coordinates zero)."""
        n_ops = len(self.opcodes)
        op_index = {op: i for i, op in enumerate(self.opcodes)}
        obs = np.zeros(self.size, dtype=np.float64)
        for op, count in metrics.opcodes:
            obs[op_index.get(op, n_ops)] += count
        loop0 = n_ops + 1
        struct0 = loop0 + n_ops + 1
        structure = metrics.structure_counts or {}
        for key, count in structure.items():
            if key.startswith(LOOP_PREFIX):
                obs[loop0 + op_index.get(key[len(LOOP_PREFIX):], n_ops)] += count
        for k, name in enumerate(STRUCTURE_COUNTS):
            obs[struct0 + k] = structure.get(name, 0)
        k = struct0 + len(STRUCTURE_COUNTS)
        if self.partition_features:
            for name in PARTITION_RELATIVE:
                obs[k] = structure.get(name, 0)
                k += 1
        obs[:k] /= max(1, initial.instructions)
        if self.partition_features:
            obs[k] = math.log2(max(1, structure.get("devices", 1)))
            k += 1
        if self.cost_features:
            for name in COST_FEATURES:
                obs[k] = _ratio(float(getattr(metrics, name)), float(getattr(initial, name)))
                k += 1
        if costs is not None:
            c0, cost, best = costs
            scale = 100.0 / c0 if c0 and math.isfinite(c0) and c0 > 0 else 0.0
            obs[k] = (c0 - best) * scale if math.isfinite(best) else 0.0
            obs[k + 1] = (cost - best) * scale if math.isfinite(cost) and math.isfinite(best) else 0.0
        k += len(PROGRESS_FEATURES)
        action_index = {a: i for i, a in enumerate(self.actions)}
        for a in sequence:
            if a in action_index:
                obs[k + action_index[a]] += 1.0 / max_length
        obs[-1] = len(sequence) / max_length
        return np.clip(obs, 0.0, OBS_HIGH).astype(np.float32)

    def named(self, vector: np.ndarray) -> dict[str, float]:
        """``{name: value}`` of a vector of this layout (for reports and tests)."""
        return {n: float(v) for n, v in zip(self.names, vector)}
