"""A target this host does not run (a GPU compiled deviceless): the target's whole pipeline first.

The executions after it happen on the host CPU, so they say the tuned module computes the same
values, not that the target runs it: every verdict says where the outputs were compared.
"""

from __future__ import annotations

from dataclasses import replace

from autotune.core.checks import Case, Checker, compile_errors
from autotune.core.levels import EXECUTED, EXECUTED_REGION, EXECUTED_WITH_STAND_INS, INVALID, UNVERIFIED, Validation


class TargetCompile(Checker):
    """``invalid`` when the tuned module fails the target's pipeline and the original passes it;
    ``unverified`` when neither does; otherwise the case goes on, marked as compiled."""

    def check(self, case: Case) -> Validation | None:
        pipeline, target = case.pipeline, case.pipeline.target
        case.say(f"compiling the tuned module with {target.judged_by()}")
        failed = compile_errors(pipeline, case.tuned, case.original)
        if failed is None:
            case.compiled = True
            return None
        tuned_error, original_error = failed
        if original_error is not None:
            return Validation(UNVERIFIED, f"the original does not compile for {target.name} either: {original_error}")
        return Validation(INVALID, f"the tuned module fails {pipeline.compiler}'s GPU pipeline for {target.name} "
                                   f"(the original passes it): {tuned_error}")

    def finish(self, case: Case, verdict: Validation) -> Validation:
        if not case.compiled:
            return verdict
        name = case.pipeline.target.name
        ran = verdict.level in (EXECUTED, EXECUTED_WITH_STAND_INS, EXECUTED_REGION, INVALID)
        where = f"compiled for {name} by {case.pipeline.compiler}'s GPU pipeline without a GPU" + (
            f"; outputs compared on the host CPU, not on the {name}" if ran else f"; not run on the {name}")
        return replace(verdict, reason=f"{verdict.reason}; {where}" if verdict.reason else where)
