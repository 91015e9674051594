"""Does the tuned module still compute what the original computes?

A pass sequence is only a result once the tuned module (1) compiles with XLA's complete default
CPU pipeline, codegen included, and (2) returns the same outputs as the original on the same
inputs. (1) is not a formality: passes applied out of their usual context can leave a module that
later stages reject (``docs/xla-mechanics.md`` section 6 has a real case). (2) catches passes that change
semantics when run out of order or outside their sub-pipeline.

Both modules run in a worker process (``XlaPipeline.execute``) on seeded random inputs built from
the entry signature (the backend's ``parameter_specs``; XLA's ``runner.random_inputs``), then the
outputs are compared with dtype-aware tolerances. Random inputs test one point of the input space;
that is evidence, not proof. ``seed`` picks another point. This file decides which level to try
(``establish``); the pieces are their own files: running and comparing (``core/execution.py``,
``core/outputs.py``), the changed regions alone (``core/region_check.py``), the levels themselves
(``core/levels.py``).

Execution is bounded in time (``execution_plan``): XLA's cost analysis over this machine's calibrated
rates estimates each run before it starts, a module estimated over the bound (``--validate-seconds``)
is not executed, and a run that overruns its estimate is stopped at the bound (its worker killed).
Every such case, and too little memory, is one reason type, ``"whole execution declined: <why>"``
(``DECLINED``, ``ExecutionPlan.reason``): the level is then ``compiled`` with that reason.

Inputs that make the original's outputs non-finite make the comparison weak (NaN == NaN passes),
so the original is retried with other input distributions (``execution.INPUT_LADDER``). Both common
causes were seen on real modules: the GPT-2 example is an Adam step whose second moment goes through
rsqrt (negative random moments -> NaN in every updated weight; non-negative floats fix it), and DLRM
looks up a 3-row embedding with ``jnp.take`` whose "fill" mode returns NaN for index 3 (smaller
integers fix it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from autotune.core.levels import (COMPILED, EXECUTED, EXECUTED_REGION, EXECUTED_WITH_STAND_INS, IDENTICAL,  # noqa: F401
                                   INVALID, LEVELS, REQUIREMENTS, UNVERIFIED, Validation, meets, not_checked, rank,
                                   verified)
from autotune.core.execution import (INPUT_LADDER, CannotRun, OriginalFails, Overran, bounded, compare_tuned,  # noqa: F401
                                     original_outputs_or_reason, stand_in, validate)
from autotune.core.outputs import (OutputDiff, ValidationReport, category, compare_outputs, nonfinite,  # noqa: F401
                                   tolerance)
from autotune.core.backend import supports
from autotune.core.region_check import establish_region
from autotune.errors import BadInput, PassFailed

# ---- the execution plan: may both modules be executed whole here? -----------------------------------
#: Every reason for not executing both modules whole starts with this: too much memory, an estimate
#: over the time bound, an execution stopped at the bound. A weaker check that needs no whole
#: execution (issue 20's differential execution of the changed region) catches exactly these.
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

    Memory first (the inputs against ``limits.execution_limit()``), then time: XLA's cost analysis
    of each module over this machine's calibrated rates (``pipeline.execution_estimate``) against
    ``bound_seconds`` (``limits.validate_seconds()``: ``--validate-seconds``). Cost analysis counts
    a loop's body once, so an estimate can be far too low: the bound stops the run itself too.
    """
    from autotune.core.limits import duration, execution_limit, gib, validate_seconds

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


def establish(pipeline, original, tuned, seed: int = 0, identical: bool = False,
              bound_seconds: float | None = None, progress=None, finals=None) -> Validation:
    """The strongest level this machine can establish for ``tuned`` against ``original``.

    ``identical``: the caller already knows both end as the same module after XLA's default
    pipeline (the tuner compares the final fingerprints it has anyway); nothing runs.
    Otherwise: custom calls the host cannot run get stand-ins (identically in both modules); if
    ``execution_plan`` says both fit (memory, and the estimated time against ``bound_seconds``),
    both run, each stopped at the bound, and their outputs are compared (``executed``/
    ``executed-with-stand-ins``, or ``invalid``); if not ("whole execution declined: <why>"), the
    tuned module must pass the full compile (``compiled`` with that reason, or ``invalid`` when the
    original does compile); when the original itself does not compile here the result is
    ``unverified``. Never raises for a module that cannot be executed: a lower level is the answer.
    ``progress`` (a callable taking one line) hears what is being done, with the estimate.

    Whenever whole execution is declined (whatever the reason) and the tuned module compiles, the
    changed regions are executed instead (``executed-region``, see ``establish_region``);
    ``finals``: ``(XLA's default final module, the tuned final module)`` when the caller has them
    (else they are computed here).
    """
    say = progress or (lambda line: None)
    if identical:
        return Validation(IDENTICAL, f"after {pipeline.baseline} pipeline it is the same module as {pipeline.baseline} "
                                     "result")
    if not supports(pipeline, "execute"):
        return Validation(UNVERIFIED, f"the {pipeline.name} backend cannot compile and run modules: nothing was "
                                      "executed")
    target = pipeline.target
    if not pipeline.runs_on_target:  # the executions below run on the host CPU: the target's compile first
        refused = _target_compile(pipeline, original, tuned, target, say)
        if refused is not None:
            return refused
        verdict = _establish_here(pipeline, original, tuned, seed, bound_seconds, say, finals, compiled=True)
        ran = verdict.level in (EXECUTED, EXECUTED_WITH_STAND_INS, EXECUTED_REGION, INVALID)
        where = f"compiled for {target.name} by XLA's GPU pipeline without a GPU" + (
            f"; outputs compared on the host CPU, not on the {target.name}" if ran else f"; not run on the {target.name}")
        return replace(verdict, reason=f"{verdict.reason}; {where}" if verdict.reason else where)
    return _establish_here(pipeline, original, tuned, seed, bound_seconds, say, finals)


def _target_compile(pipeline, original, tuned, target, say) -> Validation | None:
    """A GPU target: the tuned module must pass the target's whole pipeline (codegen included).
    ``invalid`` when it does not and the original does; ``unverified`` when neither does; else None."""
    say(f"compiling the tuned module with XLA's GPU pipeline for {target.name} (no GPU needed)")
    try:
        pipeline.compiles(tuned)
        return None
    except PassFailed as exc:
        tuned_error = str(exc)
    try:
        pipeline.compiles(original)
    except PassFailed as exc:
        return Validation(UNVERIFIED, f"the original does not compile for {target.name} either: {exc}")
    return Validation(INVALID, f"the tuned module fails XLA's GPU pipeline for {target.name} (the original "
                               f"passes it): {tuned_error}")


def _establish_here(pipeline, original, tuned, seed, bound_seconds, say, finals, compiled: bool = False) -> Validation:
    """``establish`` on this host's own execution (see there); ``compiled``: the tuned module already
    passed the target's full compile (a GPU target's, ``_target_compile``)."""
    seed = int(seed)
    runs = _stand_ins_for(pipeline, original, tuned)  # 1. host stand-ins for custom calls
    say("estimating execution time")  # 2. may both run whole here? (memory, estimated time)
    try:
        specs = pipeline.parameter_specs(original)
        plan = execution_plan(pipeline, runs.original, runs.tuned, specs, bound_seconds)
    except BadInput as exc:
        from autotune.core.limits import validate_seconds

        specs, plan = None, ExecutionPlan(False, str(exc), None, validate_seconds(bound_seconds))
    verdict, plan, original_error = _run_whole(pipeline, runs, specs, plan, seed, say)
    if verdict is not None:
        return verdict
    if original_error is None:  # 3. declined: the changed regions (``executed-region``), else ``compiled``
        verdict, original_error = _when_declined(pipeline, original, tuned, runs, plan, seed, finals, say, compiled)
        if verdict is not None:
            return verdict
    return Validation(UNVERIFIED, f"the original does not compile and run on this host: {original_error}"
                                  f"{runs.note()}", runs.n_tuned)


@dataclass(frozen=True)
class _Runs:
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


def _stand_ins_for(pipeline, original, tuned) -> _Runs:
    try:
        orig_run, n_orig, targets = stand_in(pipeline, original)
        tuned_run, n_tuned, _ = stand_in(pipeline, tuned, targets)
    except PassFailed as exc:
        return _Runs(original, tuned, error=str(exc))
    return _Runs(orig_run, tuned_run, n_orig, n_tuned)


def _run_whole(pipeline, runs: _Runs, specs, plan: ExecutionPlan, seed: int, say):
    """Execute both modules whole if ``plan`` fits: ``(verdict or None, plan, original's error)``;
    the plan comes back declined when a run did not fit or overran its bound after all."""
    from autotune.core.limits import duration

    if not plan.fits:
        return None, plan, None
    bound = plan.bound_seconds
    est = f" (estimated {duration(plan.estimate_seconds)}, bound {duration(bound)})" \
        if plan.estimate_seconds is not None else ""
    say(f"executing the original{est}")
    try:
        orig_outs, floats, int_high = original_outputs_or_reason(pipeline, runs.original, seed, specs, bound)
    except CannotRun as exc:
        return None, plan.declined(str(exc)), None
    except OriginalFails as exc:
        return None, plan, str(exc)
    except Overran:
        return None, plan.declined(_overran(plan, "the original's")), None
    say(f"executing the tuned module{est}")
    try:
        report = compare_tuned(pipeline, runs.tuned, specs, orig_outs, seed, floats, int_high, bound,
                                original=runs.original)
    except BadInput:  # the tuned module needs more memory than the original did
        return None, plan.declined("the tuned module's run does not fit the execution limit"), None
    except Overran:
        return None, plan.declined(_overran(plan, "the tuned module's")), None
    if not report.ok:
        return Validation(INVALID, report.reason, runs.n_tuned, report), plan, None
    level = EXECUTED_WITH_STAND_INS if runs.n_tuned or runs.n_orig else EXECUTED
    return Validation(level, runs.note().lstrip("; ") or None, runs.n_tuned, report), plan, None


def _when_declined(pipeline, original, tuned, runs: _Runs, plan: ExecutionPlan, seed: int, finals, say,
                   compiled: bool = False):
    """Whole execution declined (``plan.reason`` starts with ``DECLINED``): ``(verdict, None)`` —
    ``executed-region`` or ``invalid`` from the changed regions, ``compiled``, or ``invalid`` when
    only the tuned module fails the full compile — or ``(None, error)`` when the original does not
    compile here either. ``compiled``: the full compile already passed (not repeated)."""
    if not compiled:
        say("compiling the tuned module with XLA's full pipeline")
    try:
        if not compiled:
            pipeline.compiles(runs.tuned)
    except PassFailed as exc:
        tuned_error = str(exc)
    else:
        say("executing only the changed regions")
        region = establish_region(pipeline, original, tuned, seed, plan.why, finals, plan.bound_seconds)
        if isinstance(region, Validation):
            return region, None
        return Validation(COMPILED, f"{plan.reason}{runs.note()}{region}", runs.n_tuned), None
    try:
        pipeline.compiles(runs.original)
    except PassFailed as exc:
        return None, str(exc)
    return Validation(INVALID, f"the tuned module fails XLA's full pipeline (the original passes it): "
                               f"{tuned_error}", runs.n_tuned), None


def _overran(plan: ExecutionPlan, whose: str) -> str:
    from autotune.core.limits import duration

    est = f"; estimated {duration(plan.estimate_seconds)}" if plan.estimate_seconds is not None else ""
    return (f"{whose} execution was stopped at the {duration(plan.bound_seconds)} bound{est} "
            f"(--validate-seconds; its worker was replaced)")
