"""``executed``: both modules run whole on the same seeded inputs and their outputs compared.

Execution is bounded in time (``execution_plan``): the backend's estimate of each run (XLA: its
cost analysis over this machine's calibrated rates) is checked before it starts, a module
estimated over the bound (``--validate-seconds``) is not executed, and a run that overruns is
stopped at the bound (its worker killed). Every such case, and too little memory, is one reason
type, ``"whole execution declined: <why>"`` (``DECLINED``, ``ExecutionPlan.reason``): the checkers
after this one then try the changed regions, and otherwise say ``compiled`` with that reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.core.checks import Case, Checker
from autotune.core.checks.budget import EXECUTED_CHECK
from autotune.core.execution import (CannotRun, OriginalFails, Overran, bounded, compare_tuned,
                                     original_outputs_or_reason)
from autotune.core.levels import EXECUTED, EXECUTED_WITH_STAND_INS, INVALID, UNVERIFIED, Validation
from autotune.core.limits import duration, execution_limit, gib, validate_seconds
from autotune.core.precision import Stopped
from autotune.errors import BadInput, PassFailed

#: Every reason for not executing both modules whole starts with this: too much memory, an estimate
#: over the time bound, an execution stopped at the bound. The region check catches exactly these.
DECLINED = "whole execution declined"


@dataclass(frozen=True)
class ExecutionPlan:
    """Whether the original and the tuned module may be executed whole on this machine, and if not why.

    ``fits`` False means "whole execution declined"; ``why`` says why for a person (``inputs need
    30.2 GiB, 11.4 GiB available``, ``execution would take ~14 min on this machine (bound 30 s)``,
    ``execution stopped at the 30 s bound ...``) and ``reason`` is the level's reason,
    ``"whole execution declined: <why>"``. ``estimate_seconds`` is the longer of the two modules'
    estimated run times (None where the backend cannot estimate), ``bound_seconds`` the bound.
    """

    fits: bool
    why: str | None = None
    estimate_seconds: float | None = None
    bound_seconds: float | None = None

    @property
    def reason(self) -> str | None:
        return None if self.fits else f"{DECLINED}: {self.why}"

    def declined(self, why: str) -> "ExecutionPlan":
        """The same plan, declined after all (an execution overran, the tuned module needs more memory)."""
        return ExecutionPlan(False, why, self.estimate_seconds, self.bound_seconds)


def is_declined(reason: str | None) -> bool:
    """Is ``reason`` (a ``Validation.reason``) a declined whole execution?"""
    return bool(reason) and reason.startswith(DECLINED)


def execution_plan(pipeline, original, tuned, specs, bound_seconds: float | None = None) -> ExecutionPlan:
    """Decide, before anything runs, whether both modules may be executed whole here.

    Memory first (the inputs against ``limits.execution_limit()``), then time: the backend's
    estimate of each module (``execution_estimate``) against ``bound_seconds``
    (``limits.validate_seconds()``: ``--validate-seconds``). XLA's cost analysis counts a loop's
    body once, so an estimate can be far too low: the bound stops the run itself too.
    """
    bound = validate_seconds(bound_seconds)
    need = sum(s.nbytes for s in specs)
    limit, _ = execution_limit()
    if need > limit:
        return ExecutionPlan(False, f"inputs need {gib(need)}, {gib(limit)} available", None, bound)
    if not bounded(pipeline):
        return ExecutionPlan(True, None, None, bound)
    estimates = []
    for module in (original, tuned):
        try:
            estimates.append(pipeline.execution_estimate(module))
        except (PassFailed, BadInput):
            estimates.append(None)
    known = [e for e in estimates if e is not None]
    estimate = max(known) if known else None
    if estimate is not None and estimate > bound:
        return ExecutionPlan(False, f"execution would take ~{duration(estimate)} on this machine "
                                    f"(bound {duration(bound)}, --validate-seconds)", estimate, bound)
    return ExecutionPlan(True, None, estimate, bound)


class Executed(Checker):
    """Answers ``executed``/``executed-with-stand-ins`` (same outputs), ``invalid`` (other outputs) or
    ``unverified`` (the original itself does not run here); otherwise records the declined plan.

    Skipped before it spends anything (``case.budget``, the phase's time): when the phase budget is
    already spent, or when the execution's estimate would carry the phase past twice it; the plan is
    then declined with that reason, as for an estimate over the per-execution bound."""

    def check(self, case: Case) -> Validation | None:
        bound = validate_seconds(case.bound_seconds)
        if case.budget is not None and (skip := case.budget.refuse(EXECUTED_CHECK)) is not None:
            case.specs, case.plan = None, ExecutionPlan(False, f"not tried: {skip.reason}", None, bound)
            return None
        case.say("estimating execution time")
        runs = case.runs
        try:
            case.specs = case.pipeline.parameter_specs(case.original)
            case.plan = execution_plan(case.pipeline, runs.original, runs.tuned, case.specs, case.bound_seconds)
        except BadInput as exc:
            case.specs, case.plan = None, ExecutionPlan(False, str(exc), None, bound)
        if not case.plan.fits:
            return None
        if case.budget is not None and (skip := case.budget.refuse(
                EXECUTED_CHECK, case.plan.estimate_seconds, "the longer module's execution")) is not None:
            case.plan = case.plan.declined(f"not tried: {skip.reason}")
            return None
        return self._run_whole(case)

    def _run_whole(self, case: Case) -> Validation | None:
        pipeline, runs, plan, seed = case.pipeline, case.runs, case.plan, int(case.seed)
        bound = plan.bound_seconds
        est = f" (estimated {duration(plan.estimate_seconds)}, bound {duration(bound)})" \
            if plan.estimate_seconds is not None else ""
        case.say(f"executing the original{est}")
        now = _bound_now(case, bound)
        try:
            orig_outs, floats, int_high = original_outputs_or_reason(pipeline, runs.original, seed, case.specs, now)
        except CannotRun as exc:
            return self._declined(case, str(exc))
        except OriginalFails as exc:
            return Validation(UNVERIFIED, f"the original does not compile and run on this host: {exc}{runs.note()}",
                              runs.n_tuned)
        except Overran:
            return self._declined(case, _overran(plan, "the original's", now))
        case.say(f"executing the tuned module{est}")
        now = _bound_now(case, bound)
        if now is not None and now <= 0:  # the original's run took the phase to its cap: not compiled, not run
            return self._declined(case, "the tuned module's execution was not started: the original's took the "
                                        "validation phase to its cap (twice its budget, --validate-seconds)")
        timing = None if case.budget is None else case.budget.second_opinion_timeout(
            EXECUTED_CHECK, "the whole modules' f32 second opinion:")
        try:
            report = compare_tuned(pipeline, runs.tuned, case.specs, orig_outs, seed, floats, int_high, now,
                                   original=runs.original, timeout=timing)
        except BadInput:  # the tuned module needs more memory than the original did
            return self._declined(case, "the tuned module's run does not fit the execution limit")
        except Overran:
            return self._declined(case, _overran(plan, "the tuned module's", now))
        except Stopped as exc:  # half a second opinion decides nothing: no execution verdict, said why
            return self._declined(case, "the outputs differ beyond the strict bf16/f16 tolerance and the f32 "
                                        f"second opinion was stopped: {exc}")
        if not report.ok:
            return Validation(INVALID, report.reason, runs.n_tuned, report)
        level = EXECUTED_WITH_STAND_INS if runs.n_tuned or runs.n_orig else EXECUTED
        return Validation(level, runs.note().lstrip("; ") or None, runs.n_tuned, report)

    @staticmethod
    def _declined(case: Case, why: str) -> None:
        case.plan = case.plan.declined(why)
        return None


def _bound_now(case: Case, bound: float | None) -> float | None:
    """One run's bound now: ``bound``, or what is left until the phase's cap when that is nearer
    (``PhaseBudget.run_bound``; never early in the phase, where the estimate's check let it start)."""
    return bound if case.budget is None else case.budget.run_bound(bound)


def _overran(plan: ExecutionPlan, whose: str, applied: float | None = None) -> str:
    est = f"; estimated {duration(plan.estimate_seconds)}" if plan.estimate_seconds is not None else ""
    bound = plan.bound_seconds if applied is None else applied
    cap = " (the validation phase's cap, twice its budget)" if bound is not None and plan.bound_seconds is not None \
        and bound < plan.bound_seconds else ""
    return (f"{whose} execution was stopped at the {duration(bound)} bound{cap}{est} "
            f"(--validate-seconds; its worker was replaced)")
