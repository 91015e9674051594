"""What is measured on a module, as one frozen record that crosses every layer."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

#: HLO opcodes that exchange data between devices (and their asynchronous halves).
COLLECTIVE_OPCODES = frozenset({
    "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute", "collective-broadcast",
    "ragged-all-to-all", "all-reduce-start", "all-gather-start", "collective-permute-start",
})


@dataclass(frozen=True)
class Metrics:
    """Measurements of one HLO module.

    ``instructions`` counts every HLO instruction in every computation of the module (entry and
    nested computations such as reduce bodies, while bodies and branches; parameters, constants and
    tuples included), i.e. the sum of ``len(computation.instructions())``. ``opcodes`` is the same
    count split per opcode. ``flops``, ``transcendentals`` and ``bytes_accessed`` come from XLA's
    own ``HloCostAnalysis`` on the CPU client (NaN when XLA cannot analyse the module).

    ``structure`` holds named structural counts (loop-body opcode histogram, CSE candidates,
    layout-op chains, ...; the XLA pipeline's are listed in ``pipelines/xla/structure.py``) that
    learned policies observe (``autotune.rl.observation``). It is optional: ``None`` means "not
    measured" (a backend that does not count structure, or a record written before the field
    existed), which ``from_dict`` returns for dicts without the key, so older rows still load.

    ``compiled`` holds what the target's pipeline reports about a module it has compiled (a final
    module of a GPU target: ``kernels`` launched per execution and a roofline ``estimate_us``,
    ``pipelines/xla/gpu_cost.py``); ``None`` for intermediate states and for the CPU target.
    """

    instructions: int
    flops: float = math.nan
    transcendentals: float = math.nan
    bytes_accessed: float = math.nan
    opcodes: tuple[tuple[str, int], ...] = field(default=())
    structure: tuple[tuple[str, int], ...] | None = None
    compiled: tuple[tuple[str, float], ...] | None = None

    @classmethod
    def from_dict(cls, data: dict) -> "Metrics":
        ops = data.get("opcodes") or {}
        if isinstance(ops, str):
            ops = json.loads(ops)
        return cls(
            instructions=int(data["instructions"]),
            flops=_f(data.get("flops")),
            transcendentals=_f(data.get("transcendentals")),
            bytes_accessed=_f(data.get("bytes_accessed")),
            opcodes=tuple(sorted((str(k), int(v)) for k, v in dict(ops).items())),
            structure=_counts(data.get("structure")),
            compiled=_figures(data.get("compiled")),
        )

    def to_dict(self) -> dict:
        data = {
            "instructions": self.instructions,
            "flops": _json_float(self.flops),
            "transcendentals": _json_float(self.transcendentals),
            "bytes_accessed": _json_float(self.bytes_accessed),
            "opcodes": dict(self.opcodes),
            "structure": None if self.structure is None else dict(self.structure),
        }
        if self.compiled is not None:  # only a target pipeline's final module has them
            data["compiled"] = dict(self.compiled)
        return data

    @property
    def opcode_counts(self) -> dict[str, int]:
        return dict(self.opcodes)

    @property
    def collectives(self) -> int:
        """Instructions that exchange data between devices (``COLLECTIVE_OPCODES``): a module with any
        is one device's program of a partitioned step, and runs say how it is judged."""
        return sum(n for op, n in self.opcodes if op in COLLECTIVE_OPCODES)

    @property
    def structure_counts(self) -> dict[str, int] | None:
        return None if self.structure is None else dict(self.structure)

    def figure(self, name: str) -> float | None:
        """One of the target pipeline's ``compiled`` figures, or None when it did not report it."""
        return None if self.compiled is None else dict(self.compiled).get(name)


def _counts(value) -> tuple[tuple[str, int], ...] | None:
    """A ``{name: count}`` dict (or its JSON text) as a sorted tuple; None stays None (not measured)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = json.loads(value)
    return tuple(sorted((str(k), int(v)) for k, v in dict(value).items()))


def _figures(value) -> tuple[tuple[str, float], ...] | None:
    """A ``{name: number}`` dict (or its JSON text) as a sorted tuple; None stays None."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = json.loads(value)
    return tuple(sorted((str(k), float(v)) for k, v in dict(value).items()))


def _f(value) -> float:
    return math.nan if value is None else float(value)


def _json_float(value: float):
    return None if value is None or math.isnan(value) else value
