"""What a run's answer costs in memory against XLA's default, from the compiler's buffer assignment.

Why: final-ops counts instructions, not bytes, and a pass can lower the count while the compiled
module holds more at once; ``cse_barrier_expander``, for one, removes the optimization barriers with
which ``jax.checkpoint`` keeps a recomputation from being merged with the value it recomputes. So a
validated run also compiles both modules whole (validation compiles them anyway) and compares their
buffer assignments, and says so when the answer needs more. Nothing runs, so this holds for modules
too large to execute here. (On the `llm` family's rematerialised training steps checked so far,
removing the barriers left the CPU buffer assignment unchanged: the guard is for the modules where
it does not.)
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.core.backend import supports
from autotune.core.limits import gib
from autotune.errors import BadInput, PassFailed

#: More than this much more memory than XLA's default is said as a warning.
WARN_RATIO = 1.10


@dataclass(frozen=True)
class MemoryChange:
    """Bytes per device XLA's buffer assignment gives the default and the tuned module."""

    default_total: int
    tuned_total: int
    default_temporaries: int
    tuned_temporaries: int

    @property
    def ratio(self) -> float | None:
        return self.tuned_total / self.default_total if self.default_total else None

    @property
    def grows(self) -> bool:
        """True when the tuned module needs more than ``WARN_RATIO`` times the default's memory."""
        return self.ratio is not None and self.ratio > WARN_RATIO

    def describe(self) -> str:
        change = f" ({self.ratio - 1:+.0%})" if self.ratio is not None else ""
        return (f"memory per device (XLA's buffer assignment, nothing run): default {gib(self.default_total)}, "
                f"tuned {gib(self.tuned_total)}{change}; temporaries {gib(self.default_temporaries)} -> "
                f"{gib(self.tuned_temporaries)}")

    def to_dict(self) -> dict:
        return {"default_total": self.default_total, "tuned_total": self.tuned_total,
                "default_temporaries": self.default_temporaries, "tuned_temporaries": self.tuned_temporaries,
                "ratio": self.ratio}

    @classmethod
    def from_dict(cls, data: dict | None) -> "MemoryChange | None":
        if not data:
            return None
        return cls(int(data["default_total"]), int(data["tuned_total"]), int(data["default_temporaries"]),
                   int(data["tuned_temporaries"]))


def compare(pipeline, original, tuned) -> MemoryChange | None:
    """Both modules' buffer assignments; None when the backend has no such figure (a GPU target's
    memory is the device's) or either module does not compile whole here."""
    if not supports(pipeline, "memory"):
        return None
    try:
        a, b = pipeline.memory(original), pipeline.memory(tuned)
    except (PassFailed, BadInput):
        return None
    return MemoryChange(a["total"], b["total"], a["temporaries"], b["temporaries"])

