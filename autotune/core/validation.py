"""Does the tuned module still compute what the original computes?

A pass sequence is only a result once the tuned module (1) compiles with XLA's complete default
CPU pipeline, codegen included, and (2) returns the same outputs as the original on the same
inputs. (1) is not a formality: passes applied out of their usual context can leave a module that
later stages reject (``docs/xla-mechanics.md`` section 6 has a real case). (2) catches passes that change
semantics when run out of order or outside their sub-pipeline.

Both modules run in a worker process (``XlaPipeline.execute``) on seeded random inputs built from
the entry signature (the backend's ``parameter_specs``; XLA's ``runner.random_inputs``), then the outputs are compared here
with dtype-aware tolerances (``tolerance``). Random inputs test one point of the input space; that
is evidence, not proof. ``seed`` picks another point.

Execution is bounded in time (``execution_plan``): XLA's cost analysis over this machine's calibrated
rates estimates each run before it starts, a module estimated over the bound (``--validate-seconds``)
is not executed, and a run that overruns its estimate is stopped at the bound (its worker killed).
Every such case, and too little memory, is one reason type, ``"whole execution declined: <why>"``
(``DECLINED``, ``ExecutionPlan.reason``): the level is then ``compiled`` with that reason.

Inputs that make the original's outputs non-finite make the comparison weak (NaN == NaN passes),
so ``validate`` retries the original with other input distributions and keeps the one with the
fewest non-finite outputs. Both common causes were seen on real modules: the GPT-2 example is an
Adam step whose second moment goes through rsqrt (negative random moments -> NaN in every updated
weight; non-negative floats fix it), and DLRM looks up a 3-row embedding with ``jnp.take`` whose
"fill" mode returns NaN for index 3 (smaller integers fix it).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, replace

import numpy as np

from autotune.core.levels import (COMPILED, EXECUTED, EXECUTED_REGION, EXECUTED_WITH_STAND_INS, IDENTICAL,  # noqa: F401
                                   INVALID, LEVELS, REQUIREMENTS, UNVERIFIED, Validation, meets, not_checked, rank,
                                   verified)
from autotune.core.memory import with_memory
from autotune.core.outputs import (OutputDiff, ValidationReport, category, compare_outputs, nonfinite,  # noqa: F401
                                   tolerance)
from autotune.core.precision import second_opinion, second_opinion_paired
from autotune.errors import BadInput, PassFailed

#: Input distributions ``validate`` tries, in order, while the original's outputs are not finite:
#: (float distribution, integer upper bound). The first is the default of ``runner.random_inputs``.
INPUT_LADDER: tuple[tuple[str, int], ...] = (
    ("normal", 4), ("positive", 4), ("normal", 2), ("positive", 2), ("normal", 1), ("positive", 1),
)


# ---- running both modules -------------------------------------------------------------------------------
def _describe(floats: str, int_high: int) -> str:
    return f"floats={floats},ints=[0,{int_high})"


#: Original outputs per (pipeline version, fingerprint, seed): a tuning run validates several
#: candidates against the same original, which need not be recompiled and rerun each time.
_ORIGINAL_CACHE: OrderedDict = OrderedDict()
_ORIGINAL_CACHE_SIZE = 4
_ORIGINAL_CACHE_MAX_BYTES = 256 << 20


def _original_outputs(pipeline, original, seed: int, specs, bound: float | None = None
                      ) -> tuple[list[np.ndarray], str, int]:
    """Run the original, retrying other input distributions while its outputs are not finite.

    Returns ``(outputs, floats, int_high)``. Any failure of the original is ``BadInput``: the input
    itself cannot run, so nothing can be validated against it. With ``bound`` (seconds) each run is
    stopped at the bound (``_Overran``), and no retry starts once a run took a third of it.
    """
    key = (pipeline.version, original.fingerprint, int(seed))
    hit = _ORIGINAL_CACHE.get(key)
    if hit is not None and hit[3] == original.proto:
        _ORIGINAL_CACHE.move_to_end(key)
        return hit[0], hit[1], hit[2]
    best = None
    for floats, int_high in _rungs(specs):
        started = time.perf_counter()
        try:
            outs = _execute(pipeline, original, seed, floats, int_high, bound)
        except PassFailed as exc:
            raise BadInput(f"the original module itself does not compile and run with XLA's full pipeline: {exc}") from None
        except BadInput as exc:
            raise BadInput(f"the original module cannot be run for validation: {exc}") from None
        bad = nonfinite(outs)
        if best is None or bad < best[3]:
            best = (outs, floats, int_high, bad)
        if bad == 0 or (bound is not None and time.perf_counter() - started > bound / 3):
            break
    outs, floats, int_high, _ = best
    if sum(x.nbytes for x in outs) <= _ORIGINAL_CACHE_MAX_BYTES:
        _ORIGINAL_CACHE[key] = (outs, floats, int_high, original.proto)
        while len(_ORIGINAL_CACHE) > _ORIGINAL_CACHE_SIZE:
            _ORIGINAL_CACHE.popitem(last=False)
    return outs, floats, int_high


def validate(pipeline, original, tuned, seed: int = 0) -> ValidationReport:
    """Run ``original`` and ``tuned`` (``Module``s) on the same seeded inputs and compare the outputs.

    The tuned module failing to compile fully, crashing the compiler or failing to run is a
    not-ok report whose reason carries the compiler's words (a search outcome). The original
    failing is ``BadInput``: the input itself cannot run, so there is nothing to validate against.
    A tuned module whose parameters differ from the original's is not ok (no common inputs).
    """
    seed = int(seed)
    try:
        specs = pipeline.parameter_specs(original)
    except BadInput as exc:
        raise BadInput(f"the original module cannot be run for validation: {exc}") from None
    orig_outs, floats, int_high = _original_outputs(pipeline, original, seed, specs)
    try:
        return _compare_tuned(pipeline, tuned, specs, orig_outs, seed, floats, int_high, original=original)
    except BadInput as exc:
        return ValidationReport(False, f"the tuned module cannot be run: {exc}", (), seed, len(specs),
                                _describe(floats, int_high))


class _CannotRun(Exception):
    """The original cannot be executed here (memory, signature); carries the reason."""


class _OriginalFails(Exception):
    """The original itself fails XLA's full pipeline or its run on this host."""


class _Overran(Exception):
    """An execution ran past its time bound and was stopped (its worker killed and replaced)."""


def _original_outputs_or_reason(pipeline, original, seed, specs, bound=None):
    try:
        return _original_outputs(pipeline, original, seed, specs, bound)
    except BadInput as exc:
        message = str(exc)
        if "itself does not compile" in message:
            raise _OriginalFails(message.split(": ", 1)[-1]) from None
        raise _CannotRun(message.split("validation: ", 1)[-1]) from None


def _stand_in(pipeline, module, extra=()):
    return pipeline.stand_ins(module, extra)


def _bounded(pipeline) -> bool:
    """Can this backend estimate an execution and stop one at a bound (``execution_estimate``,
    ``execute(..., timeout=)``)? XLA's can; the toy backend of the tests runs instantly and cannot."""
    return bool(pipeline.bounded_execution)


def _execute(pipeline, module, seed, floats, int_high, bound):
    """One run of ``module`` (``_execute_once``), on one worker holding every worker's memory share
    when its own share refuses it (``memory.with_memory``)."""
    return with_memory(pipeline, lambda: _execute_once(pipeline, module, seed, floats, int_high, bound))


def _execute_once(pipeline, module, seed, floats, int_high, bound):
    """One run of ``module``; with ``bound``, the full compile first (not counted: the worker keeps
    the executable) and then the run alone within ``bound`` seconds, else ``_Overran``."""
    if bound is None or not _bounded(pipeline):
        return pipeline.execute(module, seed=seed, floats=floats, int_high=int_high)
    pipeline.compiles(module)
    try:
        return pipeline.execute(module, seed=seed, floats=floats, int_high=int_high, timeout=bound)
    except PassFailed as exc:
        if getattr(exc, "status", None) == "timeout":
            raise _Overran(str(exc)) from None
        raise


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
    if not _bounded(pipeline):
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
        return Validation(IDENTICAL, "after XLA's default pipeline it is the same module as XLA's default result")
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
        orig_run, n_orig, targets = _stand_in(pipeline, original)
        tuned_run, n_tuned, _ = _stand_in(pipeline, tuned, targets)
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
        orig_outs, floats, int_high = _original_outputs_or_reason(pipeline, runs.original, seed, specs, bound)
    except _CannotRun as exc:
        return None, plan.declined(str(exc)), None
    except _OriginalFails as exc:
        return None, plan, str(exc)
    except _Overran:
        return None, plan.declined(_overran(plan, "the original's")), None
    say(f"executing the tuned module{est}")
    try:
        report = _compare_tuned(pipeline, runs.tuned, specs, orig_outs, seed, floats, int_high, bound,
                                original=runs.original)
    except BadInput:  # the tuned module needs more memory than the original did
        return None, plan.declined("the tuned module's run does not fit the execution limit"), None
    except _Overran:
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


def _compare_tuned(pipeline, tuned, specs, orig_outs, seed, floats, int_high, bound=None,
                   original=None) -> ValidationReport:
    """Run the tuned module on the original's inputs and compare (``BadInput`` when it cannot run here,
    ``_Overran`` when its run passes ``bound``).

    A failed comparison of bf16/f16 results gets ``precision.second_opinion`` (an f32 reference run of
    ``original``): rounding differences no worse than XLA's default's are not a mismatch.
    """
    n_inputs, described = len(specs), _describe(floats, int_high)
    try:
        tuned_specs = pipeline.parameter_specs(tuned)
    except BadInput as exc:
        return ValidationReport(False, f"tuned module: {exc}", (), seed, n_inputs, described)
    if [(s.shape, s.dtype) for s in tuned_specs] != [(s.shape, s.dtype) for s in specs]:
        return ValidationReport(False, "the tuned module's parameters differ from the original's "
                                f"({len(tuned_specs)} vs {len(specs)} parameter leaves)", (), seed, n_inputs, described)
    try:
        tuned_outs = _execute(pipeline, tuned, seed, floats, int_high, bound)
    except PassFailed as exc:
        kind = {"crash": "crashes the compiler", "timeout": "timed out"}.get(getattr(exc, "status", "error"),
                                                                           "fails to compile or run")
        return ValidationReport(False, f"the tuned module {kind} with XLA's full pipeline: {exc}", (), seed,
                                n_inputs, described)
    report = compare_outputs(orig_outs, tuned_outs, seed=seed, n_inputs=n_inputs, inputs=described)
    return second_opinion(pipeline, original, tuned, report, orig_outs, tuned_outs, seed, floats, int_high)


# ---- executing only what changed -------------------------------------------------------------------------
def establish_region(pipeline, original, tuned, seed: int, why_not: str, finals=None,
                     bound_seconds: float | None = None) -> "Validation | str":
    """Execute only the region(s) where the tuned final module differs from XLA's default one.

    Used when whole execution was declined (``why_not``). The backend cuts the regions
    (``pipeline.regions(default_final, tuned_final)``; XLA: ``pipelines/xla/region.py``): each is
    a pair of standalone modules taking the same parameters (the values both final modules compute
    identically at the region's boundary). Both run on the same seeded random inputs, through the
    same path and comparison as whole execution (input ladder, stand-ins, dtype-aware tolerances),
    each run bounded like a whole execution (``bound_seconds``; compiling not counted). Returns ``executed-region`` (reason: regions, instructions, bytes executed vs the whole module's),
    ``invalid`` for a region whose outputs differ (naming the region, listing its instructions), or a
    note (``"; no region check: ..."``: why it could not be done, or was stopped) for ``compiled``.
    """
    from autotune.core.limits import execution_limit, gib

    if not pipeline.cuts_regions:
        return ""
    limit, _ = execution_limit()
    try:
        default_final, tuned_final = finals if finals is not None else (pipeline.default(original),
                                                                        pipeline.default(tuned))
        cut = pipeline.regions(default_final, tuned_final, max_input_bytes=limit)
    except (BadInput, PassFailed) as exc:
        return f"; no region check: {exc}"
    if not cut.regions:
        return "; no region check: the final modules compute the same values everywhere"
    for r in cut.regions:
        if r.input_bytes > limit:
            return (f"; no region check: {r.describe()} needs {gib(r.input_bytes)} of inputs, {gib(limit)} available "
                    "(its outputs depend on all of them)")
    try:
        whole = sum(s.nbytes for s in pipeline.parameter_specs(original))
    except BadInput:
        whole = None
    outputs, stand_ins, n_inputs, described, n_nonfinite, elements, rounding = [], 0, 0, None, 0, 0, []
    lifted = pipeline.exclusive_runs
    for r in cut.regions:
        ran = _run_region(pipeline, r, seed, bound_seconds)
        if not isinstance(ran, tuple):
            return ran  # an ``invalid`` Validation, or the note saying why no region check was done
        report, orig_outs, n_t = ran
        if report.reason:  # accepted by the f32 reference (``precision``): say so
            rounding.append(f"region {r.index}: {report.reason}")
        stand_ins += n_t
        n_nonfinite += nonfinite(orig_outs)
        elements += sum(int(x.size) for x in orig_outs)
        base = len(outputs)
        outputs += [OutputDiff(base + o.index, o.shape, o.dtype, o.max_abs_diff, o.max_rel_diff, o.mismatches, o.ok)
                    for o in report.outputs]
        n_inputs += report.n_inputs
        described = described or report.inputs
    reason = _region_reason(cut, whole, why_not) + "".join(
        [f"; {stand_ins} custom call(s) replaced by host stand-ins" if stand_ins else "",
         f"; {n_nonfinite} of {elements} output elements are not finite on these inputs in both modules"
         if n_nonfinite else "",
         "; run on one worker holding every worker's memory share (more than one share needed)"
         if pipeline.exclusive_runs > lifted else ""] + [f"; {note}" for note in rounding])
    return Validation(EXECUTED_REGION, reason, stand_ins,
                      ValidationReport(True, None, tuple(outputs), int(seed), n_inputs, described or _describe("normal", 4)))


def _region_reason(cut, whole: int | None, why_not: str) -> str:
    """What ``executed-region`` executed: regions, instructions, bytes against the whole module's."""
    from autotune.core.limits import gib

    return (f"{len(cut.regions)} region(s), {sum(r.instructions for r in cut.regions)} instructions "
            f"({sum(r.default_instructions for r in cut.regions)} of XLA's default, "
            f"{sum(r.tuned_instructions for r in cut.regions)} tuned) executed on "
            f"{gib(sum(r.input_bytes for r in cut.regions))} of inputs"
            + (f"; the whole module needs {gib(whole)}" if whole is not None else "")
            + f" (whole module not executed: {why_not})")


def _run_region(pipeline, r, seed: int, bound: float | None = None):
    """One region, both sides in one module (``r.modules()``: the inputs are drawn once, compiled and
    run once): ``(report, default side's outputs, stand-ins)``, or an ``invalid`` Validation naming
    the region, or a note (``"; no region check: ..."``) when it could not be run or proves nothing."""
    both_module, tuned_module = r.modules()
    both, _, _ = _stand_in_or_same(pipeline, both_module)
    _, n_t, _ = _stand_in_or_same(pipeline, tuned_module)
    try:
        specs = pipeline.parameter_specs(both)
        outs, floats, int_high, empty = _region_outputs(pipeline, both, seed, specs, bound)
    except _Overran:
        from autotune.core.limits import duration

        return (f"; no region check: {r.describe()} was stopped at the {duration(bound)} bound "
                "(--validate-seconds; its worker was replaced)")
    except (BadInput, PassFailed) as exc:
        return f"; no region check: {r.describe()} could not be run: {exc}"
    half = len(outs) // 2
    orig_outs = outs[:half]
    report = compare_outputs(orig_outs, outs[half:], seed=seed, n_inputs=len(specs), inputs=_describe(floats, int_high))
    if empty:  # NaN == NaN would pass whatever the tuned side computes: no evidence
        return (f"; no region check: {r.describe()}: on random inputs at its boundary, output(s) "
                f"{', '.join(map(str, empty))} of XLA's default side are not finite anywhere")
    # bf16/f16 rounding differences no worse than XLA's default's are no mismatch, as for whole modules
    report = second_opinion_paired(pipeline, both, report, orig_outs, outs[half:], seed, floats, int_high,
                                   bound if _bounded(pipeline) else None)
    if not report.ok:
        return Validation(INVALID, f"{r.describe()} computes other values: {report.reason}\n{r.listing}",
                          n_t, report)
    return report, orig_outs, n_t


def _rungs(specs):
    """The rungs of ``INPUT_LADDER`` that differ for these inputs: another float distribution only
    when some input is a float, another integer range only when some input is an integer."""
    has_float = any(category(s.dtype) in ("float", "complex") for s in specs)
    has_int = any(category(s.dtype) == "int" for s in specs)
    return [(floats, int_high) for floats, int_high in INPUT_LADDER
            if (floats == "normal" or has_float) and (int_high == INPUT_LADDER[0][1] or has_int)]


def _region_outputs(pipeline, module, seed: int, specs, bound: float | None = None):
    """Both sides of a region (``module`` returns the default's outputs, then the tuned one's) on
    the input ladder, stopping at the first distribution where every output of the default side
    has finite values (whole execution wants *no* non-finite value, but a region's random weights
    rarely allow that, and each rung draws its inputs again: gigabytes for an LLM layer).
    Each run is stopped at ``bound`` seconds (``_Overran``). Returns ``(outputs, floats, int_high,
    default-side outputs with no finite value)``."""
    best = None
    for floats, int_high in _rungs(specs):
        outs = _execute(pipeline, module, seed, floats, int_high, bound)
        empty = [i for i, x in enumerate(outs[:len(outs) // 2]) if x.size and nonfinite([x]) == x.size]
        if best is None or len(empty) < len(best[3]):
            best = (outs, floats, int_high, empty)
        if not empty:
            break
    return best


def _stand_in_or_same(pipeline, module, extra=()):
    try:
        return _stand_in(pipeline, module, extra)
    except PassFailed:
        return module, 0, ()
