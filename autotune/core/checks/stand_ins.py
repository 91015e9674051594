"""Host stand-ins: custom calls the host cannot run (accelerator kernels) replaced, identically in
both modules, so the rest can execute (the level is then ``executed-with-stand-ins``)."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.core.checks import Case, Checker
from autotune.core.execution import stand_in
from autotune.core.levels import Validation
from autotune.errors import PassFailed


@dataclass(frozen=True)
class Runs:
    """The two modules as they are executed: with host stand-ins for custom calls the host cannot
    run (identically in both), how many were replaced, or why none could be built."""

    original: object
    tuned: object
    n_orig: int = 0
    n_tuned: int = 0
    error: str | None = None

    def note(self) -> str:
        if self.error:
            return f"; {self.error}"
        if not self.n_tuned and not self.n_orig:
            return ""
        note = f"{self.n_tuned} custom call(s) replaced by host stand-ins"
        return "; " + note + (f" ({self.n_orig} in the original)" if self.n_orig != self.n_tuned else "")


class StandIns(Checker):
    """Never answers: it prepares ``case.runs`` for the executions after it (the original's stand-in
    targets are forced in the tuned module too, so both run the same replacements)."""

    def check(self, case: Case) -> Validation | None:
        try:
            orig_run, n_orig, targets = stand_in(case.pipeline, case.original)
            tuned_run, n_tuned, _ = stand_in(case.pipeline, case.tuned, targets)
        except PassFailed as exc:
            case.runs = Runs(case.original, case.tuned, error=str(exc))
        else:
            case.runs = Runs(orig_run, tuned_run, n_orig, n_tuned)
        return None
