"""A policy's pass and opcode vocabularies matched to the installed XLA's by name, not by position.

Why: XLA's pass and opcode lists move with every jaxlib (0.11 drops ``cse_barrier_expander`` and
adds ``permutation_sort_simplifier``; 0.12 adds two more passes; the opcodes go from 133 to 137). A
policy's output ``i`` is an index into the action list it was trained with, so comparing the lists
position by position made every policy useless on any other jaxlib (refused, or silently replaced
by PPO from scratch). Matching by name keeps what still means the same thing:

* the policy's output ``i`` means the pass named ``actions[i]`` in its sidecar; a pass the installed
  XLA lacks is masked out (``autotune.rl.actor``), and a pass the policy never saw is never chosen by it;
* each observation coordinate is looked up by its name (``observation_names``): opcodes the policy
  never saw are dropped, ones the installed XLA lacks read 0.

A policy that knows too little of the installed pipeline is refused: one sharing fewer than
``MIN_SHARED`` (80%) of the installed passes would leave too much of the search space unreachable
for its answer to be the policy's. ``VocabularyDiff`` says by how much two vocabularies differ,
in the one stderr line ``autotune run`` prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: The least share of the installed passes a policy must know to be used.
MIN_SHARED = 0.8


def trained_xla(meta: dict) -> str:
    """The XLA (jaxlib) build a policy was trained on: the sidecar's ``xla_version``, else read from
    its ``pipeline_version`` (``xla:jaxlib-0.10.2-cpu-x86_64:...``, sidecars before the field)."""
    if meta.get("xla_version"):
        return str(meta["xla_version"])
    parts = str(meta.get("pipeline_version") or "").split(":")
    return parts[1] if len(parts) > 1 and parts[0] == "xla" else "an unrecorded XLA"


@dataclass(frozen=True)
class VocabularyDiff:
    """How a policy's vocabularies compare with the installed ones (counts of names)."""

    passes_present: int  # of the policy's passes, how many the installed XLA has
    policy_passes: int
    passes_unseen: int  # installed passes the policy never saw
    installed_passes: int
    opcodes_present: int
    policy_opcodes: int
    opcodes_unseen: int
    trained_on: str

    @classmethod
    def of(cls, meta: dict, actions: Sequence[str], opcodes: Sequence[str]) -> "VocabularyDiff":
        theirs, ours = list(meta.get("actions") or []), list(actions)
        their_ops, our_ops = list(meta.get("opcodes") or []), list(opcodes)
        return cls(len(set(theirs) & set(ours)), len(theirs), len(set(ours) - set(theirs)), len(ours),
                   len(set(their_ops) & set(our_ops)), len(their_ops), len(set(our_ops) - set(their_ops)),
                   trained_xla(meta))

    @property
    def same_names(self) -> bool:
        """The same pass and opcode names (in any order)."""
        return (self.passes_present == self.policy_passes and not self.passes_unseen
                and self.opcodes_present == self.policy_opcodes and not self.opcodes_unseen)

    @property
    def shared(self) -> float:
        """The share of the installed passes the policy knows."""
        return self.passes_present / max(1, self.installed_passes)

    def refusal(self) -> str | None:
        """Why the policy cannot be used here (it knows too few of the installed passes), or None."""
        if self.shared >= MIN_SHARED:
            return None
        return (f"policy knows {self.passes_present} of this XLA's {self.installed_passes} passes "
                f"({100 * self.shared:.0f}%, below {100 * MIN_SHARED:.0f}%; trained on {self.trained_on})")

    def note(self, label: str) -> str:
        """One line saying how the vocabularies differ, e.g. ``policy llm: 56 of its 57 passes present;
        3 passes it never saw; ...``."""
        text = (f"{label}: {self.passes_present} of its {self.policy_passes} passes present; "
                f"{self.passes_unseen} passes it never saw")
        if self.opcodes_present != self.policy_opcodes or self.opcodes_unseen:
            text += (f"; {self.opcodes_present} of its {self.policy_opcodes} opcodes present, "
                     f"{self.opcodes_unseen} it never saw")
        return text + f" (trained on {self.trained_on}; matched by name)"
