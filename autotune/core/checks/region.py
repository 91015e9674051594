"""``executed-region``: when both whole modules cannot run here, run only the region(s) where the
tuned final module differs from the default's (the backend cuts them: ``Backend.regions``; XLA:
``pipelines/xla/region.py``), on the same seeded inputs at their boundary.
"""

from __future__ import annotations

from autotune.core.backend import supports
from autotune.core.checks import Case, Checker
from autotune.core.checks.budget import REGION_CHECK, PhaseBudget
from autotune.core.execution import Overran, bounded, describe_inputs, execute_bounded, rungs, stand_in
from autotune.core.levels import EXECUTED_REGION, INVALID, Validation
from autotune.core.outputs import OutputDiff, OutputComparison, compare_outputs, nonfinite
from autotune.core.precision import Stopped, second_opinion_paired
from autotune.errors import BadInput, PassFailed
from autotune.core.limits import duration, execution_limit, gib, validate_seconds

class Region(Checker):
    """Answers ``executed-region`` or ``invalid`` (a region computes other values); otherwise records
    why no region ran (``case.region_note``) for ``compiled``'s reason.

    Skipped before it spends anything when the phase budget (``case.budget``) is spent; each region's
    run is also refused by its own estimate (``establish_region``)."""

    def check(self, case: Case) -> Validation | None:
        if getattr(case.tuned, "options", None):  # the options change the whole compile, not one region
            case.region_note = ("; no region check: compiler options change how the whole module is compiled, "
                                "so a region cut from it is not what runs")
            return None
        if case.budget is not None and (skip := case.budget.refuse(REGION_CHECK)) is not None:
            case.region_note = f"; no region check: {skip.reason}"
            return None
        case.say("executing only the changed regions")
        found = establish_region(case.pipeline, case.original, case.tuned, case.seed, case.plan.why, case.finals,
                                 case.plan.bound_seconds, case.budget)
        if isinstance(found, Validation):
            return found
        case.region_note = found
        return None


def establish_region(pipeline, original, tuned, seed: int, why_not: str, finals=None,
                     bound_seconds: float | None = None, budget: PhaseBudget | None = None) -> "Validation | str":
    """Execute only the region(s) where the tuned final module differs from XLA's default one.

    Used when whole execution was declined (``why_not``). The backend cuts the regions
    (``pipeline.regions(default_final, tuned_final)``; XLA: ``pipelines/xla/region.py``): each is
    a pair of standalone modules taking the same parameters (the values both final modules compute
    identically at the region's boundary). Both run on the same seeded random inputs, through the
    same path and comparison as whole execution (input ladder, stand-ins, dtype-aware tolerances),
    each run bounded like a whole execution (``bound_seconds``; compiling not counted). Returns ``executed-region`` (reason: regions, instructions, bytes executed vs the whole module's),
    ``invalid`` for a region whose outputs differ (naming the region, listing its instructions), or a
    note (``"; no region check: ..."``: why it could not be done, or was stopped) for ``compiled``.
    ``budget``: the phase's time; a region that would start once it is spent, or whose run is estimated
    past twice it or past one execution's bound, is not started, and the note says so.
    """
    if not supports(pipeline, "regions"):
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
        ran = _refused(pipeline, r, budget, bound_seconds) or _run_region(pipeline, r, seed, bound_seconds, budget)
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
                      OutputComparison(True, None, tuple(outputs), int(seed), n_inputs, described or describe_inputs("normal", 4)))


def _refused(pipeline, r, budget: PhaseBudget | None, bound: float | None) -> str | None:
    """The note when the phase budget refuses ``r``'s run before anything of it is compiled or run:
    spent, or its estimate (``execution_estimate`` of both sides, XLA's cost analysis: no compile;
    the f32 second opinion a bf16 region may need is not in it) past twice the budget or over one
    execution's bound (where the run would be stopped anyway)."""
    if budget is None:
        return None
    estimate = None
    if bounded(pipeline) and budget.spent() < budget.seconds:
        try:
            estimate = pipeline.execution_estimate(r.modules()[0])
        except (BadInput, PassFailed):
            estimate = None
    skip = budget.refuse(REGION_CHECK, estimate, f"{r.describe()}'s run", validate_seconds(bound))
    return None if skip is None else f"; no region check: {skip.reason}"


def _region_reason(cut, whole: int | None, why_not: str) -> str:
    """What ``executed-region`` executed: regions, instructions, bytes against the whole module's."""
    return (f"{len(cut.regions)} region(s), {sum(r.instructions for r in cut.regions)} instructions "
            f"({sum(r.default_instructions for r in cut.regions)} of XLA's default, "
            f"{sum(r.tuned_instructions for r in cut.regions)} tuned) executed on "
            f"{gib(sum(r.input_bytes for r in cut.regions))} of inputs"
            + (f"; the whole module needs {gib(whole)}" if whole is not None else "")
            + f" (whole module not executed: {why_not})")


def _run_region(pipeline, r, seed: int, bound: float | None = None, budget: PhaseBudget | None = None):
    """One region, both sides in one module (``r.modules()``: the inputs are drawn once, compiled and
    run once): ``(report, default side's outputs, stand-ins)``, or an ``invalid`` Validation naming
    the region, or a note (``"; no region check: ..."``) when it could not be run or proves nothing."""
    both_module, tuned_module = r.modules()
    both, _, _ = _stand_in_or_same(pipeline, both_module)
    _, n_t, _ = _stand_in_or_same(pipeline, tuned_module)
    try:
        specs = pipeline.parameter_specs(both)
        outs, floats, int_high, empty = _region_outputs(pipeline, both, seed, specs, bound, budget)
    except Overran:
        if budget is not None and bound is not None and budget.cap - budget.spent() < bound:
            return (f"; no region check: {r.describe()} was stopped at the validation phase's cap (twice its "
                    f"{duration(budget.seconds)} budget, --validate-seconds; its worker was replaced)")
        return (f"; no region check: {r.describe()} was stopped at the {duration(bound)} bound "
                "(--validate-seconds; its worker was replaced)")
    except (BadInput, PassFailed) as exc:
        return f"; no region check: {r.describe()} could not be run: {exc}"
    half = len(outs) // 2
    orig_outs = outs[:half]
    report = compare_outputs(orig_outs, outs[half:], seed=seed, n_inputs=len(specs), inputs=describe_inputs(floats, int_high))
    if empty:  # NaN == NaN would pass whatever the tuned side computes: no evidence
        return (f"; no region check: {r.describe()}: on random inputs at its boundary, output(s) "
                f"{', '.join(map(str, empty))} of XLA's default side are not finite anywhere")
    # bf16/f16 rounding differences no worse than XLA's default's are no mismatch, as for whole modules
    # a narrow-float difference needs the f32 second opinion (up to three reference runs, each with
    # its own compile): a new check, not started once the budget is spent (nothing decided: compiled)
    narrow = any(not o.ok and o.dtype in ("bfloat16", "float16") for o in report.outputs)
    if narrow and budget is not None and (skip := budget.refuse(REGION_CHECK)) is not None:
        return (f"; no region check: {r.describe()} differs by more than its strict tolerance in bf16/f16 and "
                f"its f32 second opinion was not started: {skip.reason}")
    draw = bound if bounded(pipeline) else None
    timing = None if budget is None else budget.second_opinion_timeout(
        REGION_CHECK, f"{r.describe()}'s f32 second opinion:", draw)
    try:  # each of its runs within the cap, none started once the budget is spent (``second_opinion_timeout``)
        report = second_opinion_paired(pipeline, both, report, orig_outs, outs[half:], seed, floats, int_high,
                                       draw, timing=timing)
    except Stopped as exc:  # half a second opinion decides nothing: not invalid, no region verdict
        return (f"; no region check: {r.describe()} differs by more than its strict tolerance in bf16/f16 and "
                f"its f32 second opinion was stopped: {exc}")
    if not report.ok:
        return Validation(INVALID, f"{r.describe()} computes other values: {report.reason}\n{r.listing}",
                          n_t, report)
    return report, orig_outs, n_t


def _bound_now(bound: float | None, budget: PhaseBudget | None) -> float | None:
    """One run's bound now: ``bound``, or less when the phase's cap is nearer (``run_bound``)."""
    return bound if budget is None else budget.run_bound(bound)


def _region_outputs(pipeline, module, seed: int, specs, bound: float | None = None,
                    budget: PhaseBudget | None = None):
    """Both sides of a region (``module`` returns the default's outputs, then the tuned one's) on
    the input ladder, stopping at the first distribution where every output of the default side
    has finite values (whole execution wants *no* non-finite value, but a region's random weights
    rarely allow that, and each rung draws its inputs again: gigabytes for an LLM layer).
    Each run is stopped at ``bound`` seconds (``Overran``). Returns ``(outputs, floats, int_high,
    default-side outputs with no finite value)``."""
    best = None
    for floats, int_high in rungs(specs):
        now = _bound_now(bound, budget)
        if now is not None and now <= 0:
            raise Overran("the validation phase's cap")
        outs = execute_bounded(pipeline, module, seed, floats, int_high, now)
        empty = [i for i, x in enumerate(outs[:len(outs) // 2]) if x.size and nonfinite([x]) == x.size]
        if best is None or len(empty) < len(best[3]):
            best = (outs, floats, int_high, empty)
        if not empty:
            break
    return best


def _stand_in_or_same(pipeline, module, extra=()):
    try:
        return stand_in(pipeline, module, extra)
    except PassFailed:
        return module, 0, ()
