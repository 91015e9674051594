"""``identical``: after the default pipeline the tuned module is the default's own final module."""

from __future__ import annotations

from autotune.core.checks import Case, Checker
from autotune.core.levels import IDENTICAL, Validation


class Identical(Checker):
    """The caller already compared the final fingerprints (the tuner has them anyway): equal means
    the tuned module compiles and computes exactly what the default would; nothing runs."""

    def __init__(self, identical: bool):
        self.identical = identical

    def check(self, case: Case) -> Validation | None:
        if not self.identical:
            return None
        base = case.pipeline.baseline
        return Validation(IDENTICAL, f"after {base} pipeline it is the same module as {base} result")
