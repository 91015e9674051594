"""Comparing the outputs of two executions: dtype-aware tolerances, one report per comparison.

Low in the graph on purpose: validation (``core/validation.py``) and the narrow-float second opinion
(``core/precision.py``) both compare outputs, and neither may import the other to do it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np


# ---- tolerances ------------------------------------------------------------------------------------
def category(dtype) -> str:
    """bool | int | float | complex | other, for numpy and ml_dtypes types alike."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return "bool"
    name = dtype.name
    if dtype.kind in "iu" or name in ("int4", "uint4", "int2", "uint2"):
        return "int"
    if dtype.kind == "c":
        return "complex"
    if dtype.kind == "f" or name.startswith(("float", "bfloat")):
        return "float"
    return "other"


def tolerance(dtype) -> tuple[float, float]:
    """``(rtol, atol)`` for comparing an output of this dtype: ok when ``|t - o| <= atol + rtol * |o|``.

    - bool, integers: exact. Integer arithmetic has no rounding, so any difference is a real one.
    - f32: rtol 1e-3, atol 1e-4. Passes like algsimp, reshape-mover or dot decomposition legally
      reassociate sums, fold constants and swap exp(a)*exp(b) for exp(a+b); each changes rounding
      by a few ulps (f32 eps = 1.2e-7), and a deep network (softmax, layer norm, a backward pass)
      amplifies that by up to ~1e3-1e4 near cancellations. 1e-3 is ~8000 ulps: loose enough for
      that, yet a real change (a constant, a dropped term, a wrong operand) moves values by far
      more. atol covers outputs that cancel to ~0, where a relative bound is meaningless.
    - f64: rtol 1e-9, atol 1e-10: the same reasoning at eps = 2.2e-16, with a wide margin.
    - f16: rtol 1e-2, atol 2e-3 (~10 ulps, eps = 9.8e-4). bf16: rtol 5e-2, atol 1e-2 (~6 ulps,
      eps = 7.8e-3): XLA CPU computes narrow floats in f32 and rounds, so a moved convert or a
      reassociated sum changes results by whole ulps, which are coarse in these types.
    - other narrow floats (f8, f4): two ulps relative, one absolute.
    - complex: the tolerance of its component type, applied to the complex difference.
    """
    dtype = np.dtype(dtype)
    cat = category(dtype)
    if cat in ("bool", "int", "other"):
        return 0.0, 0.0
    if cat == "complex":
        return tolerance(np.float64 if dtype.itemsize == 16 else np.float32)
    if dtype == np.float64:
        return 1e-9, 1e-10
    if dtype == np.float32:
        return 1e-3, 1e-4
    if dtype == np.float16:
        return 1e-2, 2e-3
    if dtype.name == "bfloat16":
        return 5e-2, 1e-2
    import ml_dtypes

    eps = float(ml_dtypes.finfo(dtype).eps)
    return 2 * eps, eps


# ---- reports -----------------------------------------------------------------------------------------
def _json_float(x: float) -> float | None:
    """Strict JSON has no inf/NaN: such a diff becomes null (the report's reason says what it was)."""
    return float(x) if math.isfinite(x) else None


@dataclass(frozen=True)
class OutputDiff:
    """How one output of the tuned module compares with the original's.

    ``max_abs_diff`` is inf where a non-finite value differs (NaN vs number, inf vs -inf); NaN == NaN
    and equal infinities count as equal. ``max_rel_diff`` is ``|t - o| / max(|o|, atol)`` over finite
    pairs (the atol floor keeps exact zeros in the original from making it meaningless).
    ``mismatches`` counts elements outside the tolerance. NaN for shape/dtype mismatches.
    """

    index: int
    shape: tuple[int, ...]
    dtype: str
    max_abs_diff: float
    max_rel_diff: float
    mismatches: int
    ok: bool

    def to_dict(self) -> dict:
        data = asdict(self)
        data["shape"] = list(self.shape)
        data["max_abs_diff"] = _json_float(self.max_abs_diff)
        data["max_rel_diff"] = _json_float(self.max_rel_diff)
        return data


@dataclass(frozen=True)
class OutputComparison:
    """The answer to "does the tuned module compute the same thing?".

    ``reason`` is one line for a person (None when ok, unless ``precision`` accepted a narrow-float
    rounding difference: then it says so, with the numbers). ``outputs`` has one entry per output when
    both modules ran. ``seed`` and ``n_inputs`` (parameter leaves) say which inputs were used;
    ``inputs`` names their distribution (``runner.random_inputs`` arguments).
    """

    ok: bool
    reason: str | None
    outputs: tuple[OutputDiff, ...]
    seed: int
    n_inputs: int
    inputs: str = "floats=normal,ints=[0,4)"

    def to_dict(self) -> dict:
        return {
            "ok": self.ok, "reason": self.reason, "outputs": [o.to_dict() for o in self.outputs],
            "seed": self.seed, "n_inputs": self.n_inputs, "inputs": self.inputs,
        }


# ---- comparison ----------------------------------------------------------------------------------------
def _type_str(shape, dtype) -> str:
    return f"{np.dtype(dtype).name}[{','.join(map(str, shape))}]"


def _diff_one(index: int, orig: np.ndarray, tuned: np.ndarray) -> tuple[OutputDiff, str | None]:
    shape, dtype = tuple(orig.shape), np.dtype(orig.dtype)
    nan = float("nan")
    if np.dtype(tuned.dtype) != dtype:
        return (OutputDiff(index, shape, dtype.name, nan, nan, int(orig.size), False),
                f"output {index} has dtype {np.dtype(tuned.dtype).name} in the tuned module, {dtype.name} in the original")
    if tuple(tuned.shape) != shape:
        return (OutputDiff(index, shape, dtype.name, nan, nan, int(orig.size), False),
                f"output {index} has shape {_type_str(tuned.shape, dtype)} in the tuned module, "
                f"{_type_str(shape, dtype)} in the original")
    cat = category(dtype)
    rtol, atol = tolerance(dtype)
    if orig.size == 0:
        return OutputDiff(index, shape, dtype.name, 0.0, 0.0, 0, True), None
    if cat in ("bool", "int", "other"):
        if cat == "other":
            a = np.frombuffer(np.ascontiguousarray(orig).tobytes(), np.uint8)
            b = np.frombuffer(np.ascontiguousarray(tuned).tobytes(), np.uint8)
            bad = int(np.count_nonzero(a != b))
            max_abs = 1.0 if bad else 0.0
        else:
            a, b = orig.astype(np.float64), tuned.astype(np.float64)
            bad = int(np.count_nonzero(orig != tuned))
            max_abs = float(np.max(np.abs(a - b))) if bad else 0.0
        max_rel = float(np.max(np.abs(a - b) / np.maximum(np.abs(a), 1.0))) if bad and cat == "int" else max_abs
    else:
        wide = np.complex128 if cat == "complex" else np.float64
        a, b = orig.astype(wide), tuned.astype(wide)
        finite = np.isfinite(a) & np.isfinite(b)
        both_nan = np.isnan(a) & np.isnan(b)
        same_inf = ~finite & ~np.isnan(a) & ~np.isnan(b) & (a == b)
        nonfinite_bad = ~finite & ~both_nan & ~same_inf
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.where(finite, np.abs(a - b), 0.0)
            rel = diff / np.maximum(np.abs(a), atol if atol > 0 else np.finfo(np.float64).tiny)
            close = finite & (diff <= atol + rtol * np.abs(a))
        bad = int(np.count_nonzero(finite & ~close) + np.count_nonzero(nonfinite_bad))
        max_abs = math.inf if nonfinite_bad.any() else float(diff.max())
        max_rel = math.inf if nonfinite_bad.any() else float(rel.max())
        # NaN or Inf where the original is finite: an option that computes garbage fast says so by name
        broke = int(np.count_nonzero(np.isfinite(a) & ~np.isfinite(b)))
    ok = bad == 0
    reason = None
    if not ok:
        what = f"{bad} of {orig.size} elements differ"
        if cat in ("float", "complex"):
            what += f" beyond rtol={rtol:g}, atol={atol:g} (max abs diff {max_abs:.3g}, max rel diff {max_rel:.3g})"
            if broke:
                what += f"; {broke} are NaN or Inf where the original's are finite"
        elif cat == "int":
            what += f" (max abs diff {max_abs:g})"
        reason = f"output {index} ({_type_str(shape, dtype)}): {what}"
    return OutputDiff(index, shape, dtype.name, max_abs, max_rel, bad, ok), reason


def compare_outputs(original_outputs, tuned_outputs, seed: int = 0, n_inputs: int = 0,
            inputs: str = "floats=normal,ints=[0,4)") -> OutputComparison:
    """Compare two lists of output arrays elementwise with ``tolerance(dtype)``.

    A different number of outputs, or an output with another shape or dtype, is a mismatch with a
    reason saying which. The report's reason names the first failing output (and how many others).
    """
    orig = [np.asarray(x) for x in original_outputs]
    tuned = [np.asarray(x) for x in tuned_outputs]
    if len(orig) != len(tuned):
        return OutputComparison(False, f"the tuned module has {len(tuned)} outputs, the original {len(orig)}",
                                (), seed, n_inputs, inputs)
    diffs, reasons = [], []
    for i, (a, b) in enumerate(zip(orig, tuned)):
        d, r = _diff_one(i, a, b)
        diffs.append(d)
        if r:
            reasons.append(r)
    reason = None
    if reasons:
        reason = reasons[0] + (f"; and {len(reasons) - 1} more output(s) differ" if len(reasons) > 1 else "")
    return OutputComparison(not reasons, reason, tuple(diffs), seed, n_inputs, inputs)



def nonfinite(outputs) -> int:
    """Non-finite elements over every float or complex output (what makes a comparison weak)."""
    n = 0
    for x in outputs:
        if category(x.dtype) in ("float", "complex") and x.size:
            n += int(np.count_nonzero(~np.isfinite(np.asarray(x).astype(
                np.complex128 if category(x.dtype) == "complex" else np.float64))))
    return n
