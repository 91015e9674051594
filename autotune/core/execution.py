"""Running the original and the tuned module on the same seeded inputs and comparing what they
return: the executions every validation level above ``compiled`` rests on (``core/validation.py``
hands them down the chain of checkers in ``core/checks/``, whose ``region.py`` runs only the changed regions).

Inputs that make the original's outputs non-finite make the comparison weak (NaN == NaN passes), so
the original is retried with other input distributions (``INPUT_LADDER``) and the one with the
fewest non-finite outputs is kept.
"""

from __future__ import annotations

import time
from collections import OrderedDict

import numpy as np

from autotune.core.backend import supports
from autotune.core.memory import with_memory
from autotune.core.outputs import OutputComparison, category, compare_outputs, nonfinite
from autotune.core.precision import Stopped, second_opinion
from autotune.errors import BadInput, PassFailed

#: Input distributions ``validate`` tries, in order, while the original's outputs are not finite:
#: (float distribution, integer upper bound). The first is the default of ``runner.random_inputs``.
INPUT_LADDER: tuple[tuple[str, int], ...] = (
    ("normal", 4), ("positive", 4), ("normal", 2), ("positive", 2), ("normal", 1), ("positive", 1),
)


# ---- running both modules -------------------------------------------------------------------------------
def describe_inputs(floats: str, int_high: int) -> str:
    return f"floats={floats},ints=[0,{int_high})"


#: Original outputs per (pipeline version, fingerprint, seed): a tuning run validates several
#: candidates against the same original, which need not be recompiled and rerun each time.
ORIGINAL_CACHE: OrderedDict = OrderedDict()
ORIGINAL_CACHE_SIZE = 4
ORIGINAL_CACHE_MAX_BYTES = 256 << 20


def original_outputs(pipeline, original, seed: int, specs, bound: float | None = None
                      ) -> tuple[list[np.ndarray], str, int]:
    """Run the original, retrying other input distributions while its outputs are not finite.

    Returns ``(outputs, floats, int_high)``. Any failure of the original is ``BadInput``: the input
    itself cannot run, so nothing can be validated against it. With ``bound`` (seconds) each run is
    stopped at the bound (``Overran``), and no retry starts once a run took a third of it.
    """
    key = (pipeline.version, original.fingerprint, int(seed))
    hit = ORIGINAL_CACHE.get(key)
    if hit is not None and hit[3] == original.proto:
        ORIGINAL_CACHE.move_to_end(key)
        return hit[0], hit[1], hit[2]
    best = None
    for floats, int_high in rungs(specs):
        started = time.perf_counter()
        try:
            outs = execute_bounded(pipeline, original, seed, floats, int_high, bound)
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
    if sum(x.nbytes for x in outs) <= ORIGINAL_CACHE_MAX_BYTES:
        ORIGINAL_CACHE[key] = (outs, floats, int_high, original.proto)
        while len(ORIGINAL_CACHE) > ORIGINAL_CACHE_SIZE:
            ORIGINAL_CACHE.popitem(last=False)
    return outs, floats, int_high


def validate(pipeline, original, tuned, seed: int = 0) -> OutputComparison:
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
    orig_outs, floats, int_high = original_outputs(pipeline, original, seed, specs)
    try:
        return compare_tuned(pipeline, tuned, specs, orig_outs, seed, floats, int_high, original=original)
    except BadInput as exc:
        return OutputComparison(False, f"the tuned module cannot be run: {exc}", (), seed, len(specs),
                                describe_inputs(floats, int_high))
    except Stopped as exc:  # not ok: this comparison has no "unknown"; the reason says it is not a mismatch
        return OutputComparison(False, f"not decided: the outputs differ beyond the strict bf16/f16 tolerance and "
                                f"the f32 second opinion was stopped: {exc}", (), seed, len(specs),
                                describe_inputs(floats, int_high))


class CannotRun(Exception):
    """The original cannot be executed here (memory, signature); carries the reason."""


class OriginalFails(Exception):
    """The original itself fails XLA's full pipeline or its run on this host."""


class Overran(Exception):
    """An execution ran past its time bound and was stopped (its worker killed and replaced)."""


def original_outputs_or_reason(pipeline, original, seed, specs, bound=None):
    try:
        return original_outputs(pipeline, original, seed, specs, bound)
    except BadInput as exc:
        message = str(exc)
        if "itself does not compile" in message:
            raise OriginalFails(message.split(": ", 1)[-1]) from None
        raise CannotRun(message.split("validation: ", 1)[-1]) from None


def stand_in(pipeline, module, extra=()):
    """``Backend.stand_ins`` where the backend has them; else nothing replaced."""
    if not supports(pipeline, "stand-ins"):
        return module, 0, ()
    return pipeline.stand_ins(module, extra)


def bounded(pipeline) -> bool:
    """Can this backend estimate an execution and stop one at a bound (``execution_estimate``,
    ``execute(..., timeout=)``)? XLA's can; the toy backend of the tests runs instantly and cannot."""
    return supports(pipeline, "bounded-execution")


def execute_bounded(pipeline, module, seed, floats, int_high, bound):
    """One run of ``module`` (``execute_once``), on one worker holding every worker's memory share
    when its own share refuses it (``memory.with_memory``)."""
    return with_memory(pipeline, lambda: execute_once(pipeline, module, seed, floats, int_high, bound))


def execute_once(pipeline, module, seed, floats, int_high, bound):
    """One run of ``module``; with ``bound``, the full compile first (not counted: the worker keeps
    the executable) and then the run alone within ``bound`` seconds, else ``Overran``. The compile
    first is the one the run uses (``warm``: the host's, also for a GPU target, whose own compile
    is ``compiles`` and has been checked before by ``checks.target``)."""
    if bound is None or not bounded(pipeline):
        return pipeline.execute(module, seed=seed, floats=floats, int_high=int_high)
    pipeline.warm(module)
    try:
        return pipeline.execute(module, seed=seed, floats=floats, int_high=int_high, timeout=bound)
    except PassFailed as exc:
        if getattr(exc, "status", None) == "timeout":
            raise Overran(str(exc)) from None
        raise


def rungs(specs):
    """The rungs of ``INPUT_LADDER`` that differ for these inputs: another float distribution only
    when some input is a float, another integer range only when some input is an integer."""
    has_float = any(category(s.dtype) in ("float", "complex") for s in specs)
    has_int = any(category(s.dtype) == "int" for s in specs)
    return [(floats, int_high) for floats, int_high in INPUT_LADDER
            if (floats == "normal" or has_float) and (int_high == INPUT_LADDER[0][1] or has_int)]



def compare_tuned(pipeline, tuned, specs, orig_outs, seed, floats, int_high, bound=None,
                   original=None, timeout=None) -> OutputComparison:
    """Run the tuned module on the original's inputs and compare (``BadInput`` when it cannot run here,
    ``Overran`` when its run passes ``bound``).

    A failed comparison of bf16/f16 results gets ``precision.second_opinion`` (an f32 reference run of
    ``original``): rounding differences no worse than XLA's default's are not a mismatch. ``timeout``
    (``precision.Timeout``): its runs' time under a phase budget; ``precision.Stopped`` when they
    could not finish in it (no verdict).
    """
    n_inputs, described = len(specs), describe_inputs(floats, int_high)
    try:
        tuned_specs = pipeline.parameter_specs(tuned)
    except BadInput as exc:
        return OutputComparison(False, f"tuned module: {exc}", (), seed, n_inputs, described)
    if [(s.shape, s.dtype) for s in tuned_specs] != [(s.shape, s.dtype) for s in specs]:
        return OutputComparison(False, "the tuned module's parameters differ from the original's "
                                f"({len(tuned_specs)} vs {len(specs)} parameter leaves)", (), seed, n_inputs, described)
    try:
        tuned_outs = execute_bounded(pipeline, tuned, seed, floats, int_high, bound)
    except PassFailed as exc:
        kind = {"crash": "crashes the compiler", "timeout": "timed out"}.get(getattr(exc, "status", "error"),
                                                                           "fails to compile or run")
        return OutputComparison(False, f"the tuned module {kind} with XLA's full pipeline: {exc}", (), seed,
                                n_inputs, described)
    report = compare_outputs(orig_outs, tuned_outs, seed=seed, n_inputs=n_inputs, inputs=described)
    if not report.ok and original is not None and _broke(orig_outs, tuned_outs):
        report = library_nan(pipeline, original, tuned, report, orig_outs, tuned_outs, seed, floats, int_high, bound)
        if report.ok:
            return report
    return second_opinion(pipeline, original, tuned, report, orig_outs, tuned_outs, seed, floats, int_high,
                          timeout=timeout)


#: Options that compile a module without library fusions: HLO's own semantics, where ``maximum`` propagates
#: NaN (YNNPACK's fused ReLU turns it into 0). Refused by a backend without them (then nothing is excused).
NO_LIBRARIES = {"xla_cpu_experimental_ynn_fusion_type": ""}


def _broke(orig_outs, tuned_outs) -> list:
    """Per float output, where the tuned module's value is NaN/Inf and the original's finite (None where none)."""
    masks = []
    for a, b in zip(orig_outs, tuned_outs):
        a, b = np.asarray(a), np.asarray(b)
        if category(a.dtype) not in ("float", "complex") or a.shape != b.shape:
            masks.append(None)
            continue
        m = np.isfinite(a) & ~np.isfinite(b)
        masks.append(m if m.any() else None)
    return masks if any(m is not None for m in masks) else []


def library_nan(pipeline, original, tuned, report, orig_outs, tuned_outs, seed, floats, int_high, bound=None):
    """A failed comparison in which the tuned module returns NaN/Inf where XLA's default returns a number,
    reconsidered: XLA's default may be finite there only because a library fusion swallowed a NaN (YNNPACK
    computes ``max(NaN, 0)`` as 0 at a fused ReLU; HLO's ``maximum`` gives NaN) on inputs that take the module
    outside its working range (random N(0, 1) weights overflow a deep network; a batch norm's variance drawn
    negative). Where the original compiled without libraries (``NO_LIBRARIES``: HLO's semantics) is finite at
    any of those places, the tuned module is wrong and ``report`` stands. Where it is not finite there either,
    this draw says nothing, and both are compared on the ``scaled`` draw of the same seed (inputs in a
    network's working range, ``runner.FLOAT_DISTRIBUTIONS``), whose comparison is the verdict when the
    original's outputs are finite there; else ``report`` stands."""
    try:
        reference = execute_bounded(pipeline, original.with_options({**original.options.as_dict(), **NO_LIBRARIES}),
                                    seed, floats, int_high, bound)
    except (BadInput, PassFailed):
        return report
    for mask, ref in zip(_broke(orig_outs, tuned_outs) or (), reference):
        if mask is not None and np.isfinite(np.asarray(ref)[mask]).any():
            return report
    try:
        orig2 = execute_bounded(pipeline, original, seed, "scaled", int_high, bound)
        if nonfinite(orig2):
            return report
        tuned2 = execute_bounded(pipeline, tuned, seed, "scaled", int_high, bound)
    except (BadInput, PassFailed):
        return report
    return compare_outputs(orig2, tuned2, seed=seed, n_inputs=report.n_inputs,
                           inputs=describe_inputs("scaled", int_high))
