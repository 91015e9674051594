"""The validation phase's time budget: ``--validate-seconds`` for the phase as a whole.

Why: ``--validate-seconds`` used to bound each execution alone, while the phase ran one checker after
another (the tuned module's full compile, the changed regions with their input ladder and f32 second
opinion, every region of every candidate, then the memory comparison's two full compiles), so a
Gemma-size step spent 291 s in validation under a 30 s bound to end at ``compiled``. Now the run holds
one ``PhaseBudget`` for all the candidates it validates and the memory comparison, and a check that
cannot finish in time is skipped *before* it spends any:

* nothing starts once the budget (``--validate-seconds``, B) is spent (but the memory comparison, whose
  compile was timed, may while it ends within the cap);
* nothing starts whose own estimate would carry the phase past twice the budget (the cap, 2B): an
  execution's estimate (XLA's cost analysis), a compile's (the full compile this phase already timed);
* an execution estimated over one execution's bound (B) is not started either: it would be stopped
  there after its compile, for nothing.

Why twice and not B itself: estimates are rough (ViT-B's execution is estimated at 29 s, its whole
validation took 15-37 s on a loaded 2-core machine), and the executions the old bound allowed
(estimated within B, started early in the phase) must still run, or levels drop on the modules that
were fine; the cap stops what made the phase unbounded. Each skip
is one ``Skip`` line, kept with the verdict. Never skipped: the checks that establish the floor level,
``compiled`` (the tuned module's full compile, the target's compile), and the cheap ones before them.
So the phase ends within about twice ``--validate-seconds`` plus the full compile(s) ``compiled``
needs; what can still pass that: the compiles an execution needs before its bounded run (not
estimated). Every bounded run is also stopped at the cap (``run_bound``), and so is each run of a
bf16/f16 difference's f32 second opinion, its reference runs' compiles included
(``second_opinion_timeout``): none of them starts once the budget is spent (unless the time its first
reference run took says it ends within the cap), and a second opinion
stopped so leaves no verdict of its own (``compiled``, saying so), never the strict ``invalid`` it
was there to question.
"""

from __future__ import annotations

import time

from autotune.core.levels import Skip
from autotune.core.limits import duration
from autotune.core.precision import Stopped, Timeout

#: The names a skip gives, the ones the chain's checkers answer with (``memory``: the run's
#: comparison of buffer assignments, timed in the validation phase too).
EXECUTED_CHECK, REGION_CHECK, MEMORY_CHECK = "executed", "executed-region", "memory"

__all__ = ["EXECUTED_CHECK", "MEMORY_CHECK", "PhaseBudget", "REGION_CHECK", "Skip"]


class PhaseBudget:
    """``seconds`` for the whole validation phase of one run, counted from ``started``.

    Mutable working state like ``checks.Case`` (it accumulates what it refused and the full compile
    it saw timed); what leaves the chain is frozen (``Skip`` in ``Validation.skipped``). ``clock``
    is ``time.perf_counter`` by default; a run hands its ``validation`` phase total (so the budget and
    the total printed beside it are one figure), a test a clock that stands still, to find the budget
    spent or a given time left without waiting (decisions are tested, not speed).
    """

    def __init__(self, seconds: float, started: float | None = None, clock=time.perf_counter):
        self.seconds, self.clock = float(seconds), clock
        self.started = clock() if started is None else float(started)
        self.skipped: list[Skip] = []
        #: How long the tuned module's full compile took in this phase (the estimate of another one).
        self.compile_seconds: float | None = None

    @property
    def cap(self) -> float:
        """No check starts that is estimated to end past this: twice the budget."""
        return 2 * self.seconds

    def spent(self) -> float:
        return max(0.0, self.clock() - self.started)

    def refuse(self, check: str, estimate: float | None = None, what: str = "it",
               bound: float | None = None, late: bool = False) -> Skip | None:
        """A recorded ``Skip`` when ``check`` must not start: the budget is spent, ``estimate``
        (seconds, None where unknown) would carry the phase past ``cap``, or it exceeds ``bound``
        (one execution's bound: the run would be stopped there, after its compile, for nothing);
        None when it may start. ``late``: a check with a known estimate may start after the budget is
        spent if it ends within the cap (the memory comparison: a warning worth a few seconds' compile
        on an ordinary step, not worth a 19k-instruction step's)."""
        spent = self.spent()
        budget = self.named()
        if spent >= self.seconds and not (late and estimate is not None):
            reason = f"{budget} was spent ({duration(spent)} so far)"
        elif estimate is not None and bound is not None and estimate > bound:
            reason = (f"{what} would take ~{duration(estimate)} on this machine (bound {duration(bound)} per "
                      "execution, --validate-seconds)")
        elif estimate is not None and spent + estimate > self.cap:
            reason = (f"{what} would take ~{duration(estimate)}, {duration(spent)} into {budget}: past twice "
                      "the budget")
        else:
            return None
        skip = Skip(check, reason)
        self.skipped.append(skip)
        return skip

    def named(self) -> str:
        return f"the validation phase's {duration(self.seconds)} budget (--validate-seconds)"

    def second_opinion_timeout(self, check: str, whose: str, draw: float | None = None) -> Timeout:
        """The ``precision.Timeout`` of a second opinion (``whose``: which, for the reasons) under this
        budget. No run starts once the budget is spent (one ``Skip`` of ``check`` saying which run,
        then ``Stopped``), unless its estimate (what the first reference run took) ends within the cap,
        as the memory comparison's may: a second opinion that began in time is not left unfinished for
        a few seconds. An f32 reference run, its compile included, gets what is left until the cap (it
        had the backend's 10 minutes before); another draw that too, or ``draw`` (one execution's bound,
        as the run it repeats) when that is less."""
        def timeout(what: str, reference: bool, estimate: float | None = None) -> float | None:
            spent = self.spent()
            if spent >= self.seconds and (estimate is None or spent + estimate > self.cap):
                past = "" if estimate is None else f", and at ~{duration(estimate)} it would end past twice the budget"
                why = f"{what} was not started: {self.named()} was spent ({duration(spent)} so far{past})"
                self.skipped.append(Skip(check, f"{whose} {why}"))
                raise Stopped(why)
            left = self.cap - spent
            return left if reference or draw is None else min(draw, left)
        return timeout

    def run_bound(self, bound: float | None) -> float | None:
        """The bound of one run starting now: one execution's ``bound``, or what is left until the
        cap when that is less (0 once it is reached). Early in the phase this is ``bound`` itself."""
        if bound is None:
            return None
        return max(0.0, min(bound, self.cap - self.spent()))

    def timed_compile(self, seconds: float) -> None:
        """Remember the longest full compile seen in this phase: the estimate of the next one."""
        self.compile_seconds = max(seconds, self.compile_seconds or 0.0)
