"""Validation levels: how far a tuned module was checked, as one frozen value (``Validation``).

What every layer reads (runs, results, reports, records, the CLI's ``--require``); how a level is
established lives in ``core/validation.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autotune.core.outputs import OutputDiff, OutputComparison
from autotune.errors import BadInput

# ---- levels --------------------------------------------------------------------------------------
IDENTICAL = "identical"
EXECUTED = "executed"
EXECUTED_WITH_STAND_INS = "executed-with-stand-ins"
#: Whole execution declined (memory, time): only the region(s) where the tuned final module differs
#: from XLA's default final module ran, both sides on the same random inputs at their boundary.
EXECUTED_REGION = "executed-region"
COMPILED = "compiled"
UNVERIFIED = "unverified"
INVALID = "invalid"

#: Levels a reported result can reach, strongest first. ``invalid`` is not a level a result can
#: have: a check that ran and said no rejects the candidate (the tuner tries the next best).
LEVELS: tuple[str, ...] = (IDENTICAL, EXECUTED, EXECUTED_WITH_STAND_INS, EXECUTED_REGION, COMPILED, UNVERIFIED)
#: What ``--require`` accepts: a level, or ``none`` (anything, unverified included).
REQUIREMENTS: tuple[str, ...] = (*LEVELS, "none")


def rank(level: str) -> int:
    """Higher is stronger: identical 5 ... unverified 0, invalid -1."""
    return len(LEVELS) - 1 - LEVELS.index(level) if level in LEVELS else -1


def verified(level: str | None) -> bool:
    """The old yes/no "valid": a check ran and passed, at least the full compile (not unverified)."""
    return level is not None and rank(level) >= rank(COMPILED)


def meets(level: str, required: str) -> bool:
    """Does a result at ``level`` satisfy ``--require required``?"""
    if required == "none":
        return level in LEVELS
    if required not in LEVELS:
        raise BadInput(f"unknown validation level '{required}' (expected one of {', '.join(REQUIREMENTS)})")
    return rank(level) >= rank(required)


# ---- the level of a result ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Skip:
    """A check the validation phase did not start because of its time budget (``--validate-seconds``
    for the phase as a whole, ``checks.budget``), and why, in one line."""

    check: str
    reason: str

    def describe(self) -> str:
        return f"{self.check} check skipped: {self.reason}"

    def to_dict(self) -> dict:
        return {"check": self.check, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: dict) -> "Skip":
        return cls(str(data["check"]), str(data["reason"]))


@dataclass(frozen=True)
class Validation:
    """How far this machine could check that a tuned module computes what the original computes.

    ``level`` is one of ``LEVELS`` (strongest first) or ``invalid`` (a check ran and said no):

    - ``identical``: after XLA's default pipeline the tuned module *is* the default's final module
      (same fingerprint): it compiles and computes exactly what XLA's default would; nothing to run.
    - ``executed``: full compile, and the same outputs as the original on seeded random inputs.
    - ``executed-with-stand-ins``: the same, with ``stand_ins`` custom calls that the host cannot
      run replaced by deterministic host stand-ins (``pipelines/xla/standins.py``) in both modules:
      everything around those calls is checked by execution, the calls themselves are not.
    - ``executed-region``: the whole modules could not be executed here, but the region(s) where
      the tuned final module differs from XLA's default final module were, on the same random
      inputs at their boundary (``establish_region``); ``reason`` says how many regions and
      instructions, and the bytes executed against what the whole module would need.
    - ``compiled``: the tuned module passes XLA's full pipeline including codegen, but is not
      executed here; ``reason`` says why (memory needed vs available, ...).
    - ``unverified``: not even compiled here (``--no-validate``, or the original itself does not
      compile on this host); ``reason`` says why.

    ``report`` is the output comparison (a ``OutputComparison``) when both modules ran.
    ``skipped``: the checks the phase's time budget kept from starting (``checks.budget``), and
    ``budget_seconds`` that budget (``--validate-seconds``), so a report can put the phase's total
    beside it; both empty where nothing was established here (a cached or unchecked verdict).
    """

    level: str
    reason: str | None = None
    stand_ins: int = 0
    report: OutputComparison | None = None
    skipped: tuple[Skip, ...] = ()
    budget_seconds: float | None = None

    @property
    def ok(self) -> bool:
        """False only when a check ran and found the tuned module wrong (``invalid``)."""
        return self.level != INVALID

    def meets(self, required: str) -> bool:
        return meets(self.level, required)

    def describe(self) -> str:
        """One line for a person, e.g. ``compiled (inputs need 30.1 GiB, 18.0 GiB available)``."""
        return self.level + (f" ({self.reason})" if self.reason else "")

    def to_dict(self) -> dict:
        data = {"level": self.level, "ok": self.ok, "reason": self.reason, "stand_ins": self.stand_ins,
                "report": self.report.to_dict() if self.report else None,
                "skipped": [s.to_dict() for s in self.skipped], "budget_seconds": self.budget_seconds}
        return data

    @classmethod
    def from_dict(cls, data: dict | None) -> "Validation | None":
        """Inverse of ``to_dict``; also reads the pre-level validity dicts (a bare OutputComparison)."""
        if data is None:
            return None
        report = data.get("report")
        if report is None and "outputs" in data and "level" not in data:
            report = data
        rep = None
        if report is not None:
            rep = OutputComparison(bool(report.get("ok")), report.get("reason"), tuple(
                OutputDiff(int(o["index"]), tuple(o["shape"]), o["dtype"],
                           math.inf if o.get("max_abs_diff") is None else float(o["max_abs_diff"]),
                           math.inf if o.get("max_rel_diff") is None else float(o["max_rel_diff"]),
                           int(o["mismatches"]), bool(o["ok"])) for o in report.get("outputs", ())),
                int(report.get("seed", 0)), int(report.get("n_inputs", 0)),
                report.get("inputs", "floats=normal,ints=[0,4)"))
        level = data.get("level")
        if level is None:  # a stored pre-level report: it ran, so it was executed or invalid
            level = EXECUTED if data.get("ok") else INVALID
        budget = data.get("budget_seconds")
        return cls(level, data.get("reason"), int(data.get("stand_ins") or 0), rep,
                   tuple(Skip.from_dict(s) for s in data.get("skipped") or ()),
                   None if budget is None else float(budget))


def not_checked(reason: str = "not checked (--no-validate)") -> Validation:
    return Validation(UNVERIFIED, reason)
