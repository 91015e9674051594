"""What is measured on a module, as one frozen record that crosses every layer."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field


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
    """

    instructions: int
    flops: float = math.nan
    transcendentals: float = math.nan
    bytes_accessed: float = math.nan
    opcodes: tuple[tuple[str, int], ...] = field(default=())
    structure: tuple[tuple[str, int], ...] | None = None

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
        )

    def to_dict(self) -> dict:
        return {
            "instructions": self.instructions,
            "flops": _json_float(self.flops),
            "transcendentals": _json_float(self.transcendentals),
            "bytes_accessed": _json_float(self.bytes_accessed),
            "opcodes": dict(self.opcodes),
            "structure": None if self.structure is None else dict(self.structure),
        }

    @property
    def opcode_counts(self) -> dict[str, int]:
        return dict(self.opcodes)

    @property
    def structure_counts(self) -> dict[str, int] | None:
        return None if self.structure is None else dict(self.structure)


def _counts(value) -> tuple[tuple[str, int], ...] | None:
    """A ``{name: count}`` dict (or its JSON text) as a sorted tuple; None stays None (not measured)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = json.loads(value)
    return tuple(sorted((str(k), int(v)) for k, v in dict(value).items()))


def _f(value) -> float:
    return math.nan if value is None else float(value)


def _json_float(value: float):
    return None if value is None or math.isnan(value) else value
