"""The validation phase's time budget: ``--validate-seconds`` for the phase as a whole.

Why: ``--validate-seconds`` used to bound each execution alone, while the phase ran one checker after
another (the tuned module's full compile, the changed regions with their input ladder and f32 second
opinion, every region of every candidate, then the memory comparison's two full compiles), so a
Gemma-size step spent 291 s in validation under a 30 s bound to end at ``compiled``. Now the run holds
one ``PhaseBudget`` for all the candidates it validates, and a checker that cannot raise the level in
the time left is skipped *before* it spends any: one that would start after the budget is spent, or
whose own estimate (an execution's, from XLA's cost analysis; a compile's, from the full compile this
phase already timed) exceeds what is left. Each skip is one ``Skip`` line, kept with the verdict.

What is never skipped: the checks that establish the floor level, ``compiled`` (the tuned module's
full compile, the target's compile), and the cheap ones before them; a check that started within the
budget finishes its current run, each run still stopped at ``--validate-seconds``. So the phase ends
within twice ``--validate-seconds`` plus the full compile(s) it needs to say ``compiled``.
"""

from __future__ import annotations

import time

from autotune.core.levels import Skip
from autotune.core.limits import duration

#: The names a skip gives, the ones the chain's checkers answer with (``memory``: the run's
#: comparison of buffer assignments, timed in the validation phase too).
EXECUTED_CHECK, REGION_CHECK, MEMORY_CHECK = "executed", "executed-region", "memory"

__all__ = ["EXECUTED_CHECK", "MEMORY_CHECK", "PhaseBudget", "REGION_CHECK", "Skip"]


class PhaseBudget:
    """``seconds`` for the whole validation phase of one run, counted from ``started``.

    Mutable working state like ``checks.Case`` (it accumulates what it refused and the full compile
    it saw timed); what leaves the chain is frozen (``Skip`` in ``Validation.skipped``). ``clock``
    is ``time.perf_counter``; a test hands a ``started`` in the past to find the budget spent
    without waiting (decisions are tested, not speed).
    """

    def __init__(self, seconds: float, started: float | None = None, clock=time.perf_counter):
        self.seconds, self.clock = float(seconds), clock
        self.started = clock() if started is None else float(started)
        self.skipped: list[Skip] = []
        #: How long the tuned module's full compile took in this phase (the estimate of another one).
        self.compile_seconds: float | None = None

    def spent(self) -> float:
        return max(0.0, self.clock() - self.started)

    def left(self) -> float:
        return self.seconds - self.spent()

    def refuse(self, check: str, estimate: float | None = None, what: str = "it",
               bound: float | None = None) -> Skip | None:
        """A recorded ``Skip`` when ``check`` must not start: the budget is spent, ``estimate``
        (seconds, None where unknown) exceeds what is left, or it exceeds ``bound`` (one execution's
        bound: the run would be stopped there, after its compile, for nothing); None when it may start."""
        left = self.left()
        if left <= 0:
            reason = (f"the validation phase's {duration(self.seconds)} budget (--validate-seconds) was spent "
                      f"({duration(self.spent())} so far)")
        elif estimate is not None and bound is not None and estimate > bound:
            reason = (f"{what} would take ~{duration(estimate)} on this machine (bound {duration(bound)} per "
                      "execution, --validate-seconds)")
        elif estimate is not None and estimate > left:
            reason = (f"{what} would take ~{duration(estimate)}, {duration(left)} left of the validation "
                      f"phase's {duration(self.seconds)} budget (--validate-seconds)")
        else:
            return None
        skip = Skip(check, reason)
        self.skipped.append(skip)
        return skip

    def timed_compile(self, seconds: float) -> None:
        """Remember the longest full compile seen in this phase: the estimate of the next one."""
        self.compile_seconds = max(seconds, self.compile_seconds or 0.0)
