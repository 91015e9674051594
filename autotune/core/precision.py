"""A second opinion for bf16/f16 results: is the tuned module as accurate as XLA's default?

Why this exists. XLA CPU computes bf16/f16 in f32 and rounds, and by default
(``xla_allow_excess_precision``) algsimp removes a rounding pair ``convert(convert(x, bf16), f32)``
when the two converts are adjacent. Pass order decides adjacency: on the llm family's bf16 decode
step, ``algsimp,reshape-mover,cse`` moves the reshape that sat between each Q/K projection dot and
the rotary embedding's ``astype(float32)``, so the tuned module feeds RoPE the f32 dot result where
XLA's default feeds it the dot rounded to bf16. That is a legal (here: more precise) rounding of the
same math, yet four layers of a random bf16 network grow the one-ulp change to 0.1 in a few cache
entries, past any fixed bf16 tolerance. The elementwise comparison (``outputs.compare_outputs``) cannot
tell that from a miscompile, because it compares two roundings with each other and not with the
math.

The method. When the strict comparison fails on float, integer or bool outputs of a module that
computes in bf16/f16, the backend runs the ORIGINAL module once more with every bf16/f16 widened to
f32, on exactly the same (bf16-rounded) inputs (``XlaPipeline.execute_reference``). That run is a
better approximation of the math than either bf16 result. For each failing float output, both
XLA's default (the original's outputs) and the tuned module get their error against it, as the
largest elementwise error and as the root-mean-square error; the tuned output is accepted when both
are at most ``MARGIN`` times XLA's default's: it is then no less accurate than the result every
user of XLA gets today, by a stated factor. An integer or bool output (an argmax over bf16 logits)
has no rounding to allow for: it is accepted when no more of its elements differ from the
reference's than XLA's default's do (a near-tie the default resolves against the f32 math and the
tuned module resolves with it is fine; the other way round is not). The acceptance must then hold
on ``EXTRA_SEEDS`` further input draws. Anything else (shape/dtype changes, complex outputs, no
reference possible) keeps the strict verdict.

What it can and cannot catch. A real miscompile (a wrong constant, a dropped term, a wrong
operand) usually moves values by more than the default's own rounding error and stays rejected. An
error no larger than the default's own rounding error on the inputs drawn cannot be told from
rounding at this precision, by this check or by the strict one (which then rejects the legitimate
results too). Measured on the llm family's default decode step (``LLMConfig()``, 4 layers, the win
``algsimp,reshape-mover,cse``; ``post_scatter_expansion_simplification,cse`` ends in the same
numbers): on seeds 0-3 and 5-7 the strict check rejects the win, its errors against the reference
are 0.82-1.28x the default's (max and RMS, both caches; the default's own max error is 0.15-0.66),
and it is accepted. Three injected miscompiles in the same tuned module (attention scale 1.25x,
RMSNorm mean over 60 instead of 64, RoPE frequency base 4% off) give 2.0-6.0x on most single draws,
but 0.4-1.35x on a few (a chaotic random bf16 network has a large rounding error of its own), which
is why one draw is not enough: with the two extra draws all three are rejected on every one of
those seeds. Seed 4 draws position 0, where RoPE is the identity and softmax sees one key: there
even the strict comparison cannot see the attention-scale and RoPE changes.

Time. Each reference run and extra draw is a compile and a run of its own. Under a run's validation
phase budget (``checks.budget.PhaseBudget.second_opinion_timeout``) none starts once the budget is
spent (unless the time the first reference run took says it ends within the phase's cap) and each is
stopped where the cap is; a second opinion that cannot finish so decides
nothing (``Stopped``): its caller says the check was stopped instead of letting the strict verdict,
which the second opinion exists to question, stand as ``invalid``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from autotune.core.backend import supports
from autotune.core.memory import with_memory
from autotune.core.outputs import compare_outputs
from autotune.errors import BadInput, PassFailed

#: The tuned module's error against the f32 reference may be at most this many times XLA's default's.
MARGIN = 2.0
#: Further input draws an acceptance must hold on (see ``second_opinion``).
EXTRA_SEEDS = 2

#: ``timeout(what, reference, estimate)``: the seconds the next run of a second opinion may take (None:
#: the backend's own limit; ``reference``: an f32 reference run, its compile included; ``estimate``: the
#: seconds its first reference run took, None before it), or ``Stopped`` raised when it may not start.
#: ``unbounded`` where there is no phase budget.
Timeout = Callable[[str, bool, "float | None"], "float | None"]


class Stopped(Exception):
    """A second opinion that could not finish in the time it was given (a run not started once the
    validation phase's budget was spent, or stopped at its cap): it decides nothing either way, so
    the caller says so (``compiled``) rather than let the strict verdict it questions stand."""


def unbounded(draw: float | None = None) -> Timeout:
    """No phase budget: another draw bounded by ``draw`` (one execution's bound), a reference run by
    the backend's own limit (as before the budget). A run stopped there is still ``Stopped``."""
    return lambda what, reference, estimate=None: None if reference else draw


def _timed(call, timeout: Timeout, what: str, reference: bool, estimate: float | None = None):
    """``call(seconds)`` with the seconds ``timeout`` gives ``what``; a run stopped at them (the
    backend's status ``timeout``) is ``Stopped``, saying which run and where."""
    seconds = timeout(what, reference, estimate)
    if seconds is not None and seconds <= 0:
        raise Stopped(f"{what} was not started: no time left before the validation phase's cap")
    try:
        return call(seconds)
    except PassFailed as exc:
        if getattr(exc, "status", None) == "timeout":
            where = "its time" if seconds is None else f"{seconds:.3g} s"
            raise Stopped(f"{what} was stopped after {where} (its worker was replaced)") from None
        raise


@dataclass(frozen=True)
class ReferenceErrors:
    """One output's error against the f32 reference: XLA's default vs the tuned module."""

    index: int
    default_max: float
    default_rms: float
    tuned_max: float
    tuned_rms: float
    margin: float = MARGIN
    exact: bool = False  # an integer/bool output: *_max count elements unequal to the reference

    @property
    def ok(self) -> bool:
        if self.exact:  # no rounding to allow for: no more wrong elements than XLA's default has
            return self.tuned_max <= self.default_max
        return (self.tuned_max <= self.margin * self.default_max
                and self.tuned_rms <= self.margin * self.default_rms)

    def describe(self) -> str:
        if self.exact:
            return (f"output {self.index} against an f32 reference: {self.tuned_max:g} element(s) differ, "
                    f"XLA default's {self.default_max:g} (accepted up to as many)")
        return (f"output {self.index} against an f32 reference: error max {self.tuned_max:.3g} rms "
                f"{self.tuned_rms:.3g}, XLA default's max {self.default_max:.3g} rms {self.default_rms:.3g} "
                f"(accepted up to {self.margin:g}x)")


def reference_errors(index: int, default, tuned, reference, margin: float = MARGIN) -> ReferenceErrors:
    """Max and RMS errors of ``default`` and ``tuned`` against ``reference`` (same shape).

    Non-finite values count as an infinite error unless the reference has the same value there.
    Integer and bool outputs (an argmax) count the elements unequal to the reference instead.
    """
    if not _is_float(np.dtype(np.asarray(reference).dtype).name):
        r = np.asarray(reference)
        dn = int(np.count_nonzero(np.asarray(default) != r))
        tn = int(np.count_nonzero(np.asarray(tuned) != r))
        return ReferenceErrors(index, float(dn), 0.0, float(tn), 0.0, margin, exact=True)
    r = np.asarray(reference).astype(np.float64)

    def errors(x) -> tuple[float, float]:
        x = np.asarray(x).astype(np.float64)
        same = (x == r) | (np.isnan(x) & np.isnan(r))
        with np.errstate(invalid="ignore", over="ignore"):
            e = np.where(same, 0.0, np.abs(x - r))
        e = np.where(np.isnan(e), math.inf, e)
        if e.size == 0:
            return 0.0, 0.0
        with np.errstate(over="ignore"):
            return float(e.max()), float(np.sqrt(np.mean(np.square(e))))

    dmax, drms = errors(default)
    tmax, trms = errors(tuned)
    return ReferenceErrors(index, dmax, drms, tmax, trms, margin)


def _is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def _judgeable(dtype: str) -> bool:
    """Float, integer or bool: what the reference can speak for (not complex, not opaque bytes)."""
    return _is_float(dtype) or dtype == "bool" or dtype.startswith(("int", "uint"))


def judge(report, default_outputs, tuned_outputs, reference_outputs, margin: float = MARGIN):
    """``report`` (a failed ``OutputComparison``) re-judged against ``reference_outputs``.

    Every failing output must be a float, integer or bool output whose comparison ran (same
    shape/dtype) and pass ``ReferenceErrors.ok``; otherwise the report stays failed, its reason extended with the
    reference numbers when they were measured. An accepted report keeps its per-output diffs (the
    mismatches against the default remain visible) and says in ``reason`` how it was accepted.
    """
    failing = [d for d in report.outputs if not d.ok]
    if not failing or len(reference_outputs) != len(default_outputs):
        return report
    judged, notes = {}, []
    for d in failing:
        ref = np.asarray(reference_outputs[d.index])
        if not _judgeable(d.dtype) or math.isnan(d.max_abs_diff) or tuple(ref.shape) != tuple(d.shape):
            return report
        errs = reference_errors(d.index, default_outputs[d.index], tuned_outputs[d.index], ref, margin)
        notes.append(errs)
        judged[d.index] = errs.ok
    if not all(judged.values()):
        worst = next(e for e in notes if not e.ok)
        return replace(report, reason=f"{report.reason}; {worst.describe()}: worse than XLA's default")
    outputs = tuple(replace(d, ok=True) if d.index in judged else d for d in report.outputs)
    return replace(report, ok=True, outputs=outputs,
                   reason="differs from XLA's default only by narrow-float rounding: "
                          + "; ".join(e.describe() for e in notes))


def _bound(seconds: float | None) -> dict:
    """The ``timeout=`` keyword of a backend's ``execute``/``execute_reference`` call, none when unbounded
    (a backend written before the keyword still takes an unbounded call)."""
    return {} if seconds is None else {"timeout": seconds}


def _reference(pipeline, original, seed: int, floats: str, int_high: int, timeout: float | None = None):
    """The f32 reference outputs, None where there is none (width-dependent ops, memory); a run
    stopped at ``timeout`` raises (``_timed`` makes it ``Stopped``): no reference is not the same as
    no time for one."""
    if not supports(pipeline, "reference"):
        return None
    try:
        return with_memory(pipeline, lambda: pipeline.execute_reference(original, seed=seed, floats=floats,
                                                                         int_high=int_high, **_bound(timeout)))
    except BadInput:
        return None
    except PassFailed as exc:
        if getattr(exc, "status", None) == "timeout":
            raise
        return None


def second_opinion(pipeline, original, tuned, report, default_outputs, tuned_outputs, seed: int, floats: str,
                   int_high: int, extra_seeds: int = EXTRA_SEEDS, timeout: Timeout | None = None):
    """The hook ``validation`` calls on a failed comparison of two whole modules: ``reconsider``
    against the original's f32 reference run when the backend can make one and the module computes
    in bf16/f16, else ``report``. ``timeout``: each run's time (``unbounded()`` by default); raises
    ``Stopped`` when a run could not finish in it."""
    if original is None or tuned is None:
        return report

    def run(other: int, seconds: float | None):
        return (pipeline.execute(original, seed=other, floats=floats, int_high=int_high, **_bound(seconds)),
                pipeline.execute(tuned, seed=other, floats=floats, int_high=int_high, **_bound(seconds)))

    return reconsider(report, default_outputs, tuned_outputs, seed, run,
                      lambda s, seconds: _reference(pipeline, original, s, floats, int_high, seconds), extra_seeds,
                      timeout or unbounded())


def second_opinion_paired(pipeline, both, report, default_outputs, tuned_outputs, seed: int, floats: str,
                          int_high: int, timeout: float | None = None, extra_seeds: int = EXTRA_SEEDS,
                          timing: Timeout | None = None):
    """``second_opinion`` for a module that computes both sides at once (a region: its outputs are
    XLA's default side's, then the tuned side's). Its reference is the same module widened to f32,
    whose default side is the f32 math both sides approximate. Each extra draw is bounded by
    ``timeout`` (one execution's bound), or by ``timing`` where the run has a phase budget."""
    def halves(outs):
        return outs[:len(outs) // 2], outs[len(outs) // 2:]

    def reference(s: int, seconds: float | None):
        outs = _reference(pipeline, both, s, floats, int_high, seconds)
        return None if outs is None else halves(outs)[0]

    def run(s: int, seconds: float | None):
        return halves(with_memory(pipeline, lambda: pipeline.execute(both, seed=s, floats=floats, int_high=int_high,
                                                                     **_bound(seconds))))

    return reconsider(report, default_outputs, tuned_outputs, seed, run, reference, extra_seeds,
                      timing or unbounded(timeout))


def reconsider(report, default_outputs, tuned_outputs, seed: int, run, reference, extra_seeds: int = EXTRA_SEEDS,
               timeout: Timeout | None = None):
    """``judge`` a failed ``report`` against ``reference(seed, seconds)`` (f32 outputs, or None where
    there is no reference); ``run(seed, seconds)`` gives ``(default outputs, tuned outputs)`` for
    another draw. ``timeout`` gives each its seconds (``Timeout``; ``unbounded()`` by default).

    An acceptance must also hold on ``extra_seeds`` further input draws (seed + 1, ...): each is
    either strictly equal or passes ``judge``. One draw can hide a wrong value behind the default's
    own rounding error (or not reach it at all); a wrong value rarely hides on three. Raises
    ``Stopped`` when a run is not started or is stopped for time: no verdict is made of half a check.
    """
    timeout = timeout or unbounded()
    if report.ok or not report.outputs:
        return report
    if not any(not d.ok and _judgeable(d.dtype) for d in report.outputs):
        return report
    started = time.perf_counter()
    ref = _timed(lambda t: reference(seed, t), timeout, f"the f32 reference run (seed {seed})", True)
    # what the first reference run took (compile + f32 run) is the estimate of each run after it: an
    # extra draw runs the same module narrower, another reference the same again
    took = time.perf_counter() - started
    if ref is None:  # no bf16/f16 in the module, or no reference here: the strict verdict stands
        return report
    judged = judge(report, default_outputs, tuned_outputs, ref)
    if not judged.ok:
        return judged
    for other in range(seed + 1, seed + 1 + extra_seeds):
        try:
            d, t = _timed(lambda s: run(other, s), timeout, f"the extra draw (seed {other})", False, took)
        except (PassFailed, BadInput):
            return report
        again = compare_outputs(d, t, seed=other, n_inputs=report.n_inputs, inputs=report.inputs)
        if again.ok:
            continue
        ref = _timed(lambda s: reference(other, s), timeout, f"the f32 reference run (seed {other})", True, took)
        if ref is None:
            return report
        again = judge(again, d, t, ref)
        if not again.ok:
            return replace(report, reason=f"{report.reason}; with seed {other}: {again.reason}")
    if extra_seeds:
        judged = replace(judged, reason=f"{judged.reason}; also holds with seeds {seed + 1}-{seed + extra_seeds}")
    return judged
