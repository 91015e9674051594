"""``compiled``: whole execution was declined, and the tuned module passes the full compile.

``TunedCompiles`` comes before the region check (a region of a module that does not compile proves
nothing); ``Compiled`` ends the chain with every reason a stronger level was not reached.
"""

from __future__ import annotations

import time

from autotune.core.checks import Case, Checker, compile_errors
from autotune.core.levels import COMPILED, INVALID, UNVERIFIED, Validation


class TunedCompiles(Checker):
    """``invalid`` when only the tuned module fails the full compile, ``unverified`` when the original
    fails it too; otherwise the case goes on (skipped when the target's compile already passed).

    Never skipped for time: it is what establishes ``compiled``, the level a declined execution falls
    back to. Its time is kept in the phase budget as the estimate of the next full compile (the
    memory comparison's)."""

    def check(self, case: Case) -> Validation | None:
        if case.compiled or case.target_note:  # the target's whole compile was tried (checks.target)
            return None
        pipeline, runs = case.pipeline, case.runs
        case.say(f"compiling the tuned module with {pipeline.compiler}'s full pipeline")
        t0 = time.perf_counter()
        failed = compile_errors(pipeline, runs.tuned, runs.original)
        if failed is None:
            if case.budget is not None:
                case.budget.timed_compile(time.perf_counter() - t0)
            return None
        tuned_error, original_error = failed
        if original_error is not None:
            return Validation(UNVERIFIED, f"the original does not compile and run on this host: {original_error}"
                                          f"{runs.note()}", runs.n_tuned)
        return Validation(INVALID, f"the tuned module fails {pipeline.compiler}'s full pipeline (the original "
                                   f"passes it): {tuned_error}", runs.n_tuned)


class Compiled(Checker):
    """The last answer: ``compiled``, saying why whole execution was declined and why no region ran;
    ``unverified`` where the target's whole compile rejected both modules (nothing compiled, nothing
    run: ``checks.target`` adds why)."""

    def check(self, case: Case) -> Validation | None:
        level = UNVERIFIED if case.target_note else COMPILED
        return Validation(level, f"{case.plan.reason}{case.runs.note()}{case.region_note}", case.runs.n_tuned)
