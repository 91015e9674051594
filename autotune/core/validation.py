"""Does the tuned module still compute what the original computes?

A pass sequence is only a result once the tuned module (1) compiles with XLA's complete default
CPU pipeline, codegen included, and (2) returns the same outputs as the original on the same
inputs. (1) is not a formality: passes applied out of their usual context can leave a module that
later stages reject (``xla-mechanics.md`` section 6 has a real case). (2) catches passes that change
semantics when run out of order or outside their sub-pipeline.

Both modules run in a worker process (``XlaPipeline.execute``) on seeded random inputs built from
the entry signature (the backend's ``parameter_specs``; XLA's ``runner.random_inputs``), then the outputs are compared here
with dtype-aware tolerances (``tolerance``). Random inputs test one point of the input space; that
is evidence, not proof. ``seed`` picks another point.

Inputs that make the original's outputs non-finite make the comparison weak (NaN == NaN passes),
so ``validate`` retries the original with other input distributions and keeps the one with the
fewest non-finite outputs. Both common causes were seen on real modules: the GPT-2 example is an
Adam step whose second moment goes through rsqrt (negative random moments -> NaN in every updated
weight; non-negative floats fix it), and DLRM looks up a 3-row embedding with ``jnp.take`` whose
"fill" mode returns NaN for index 3 (smaller integers fix it).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import asdict, dataclass

import numpy as np

from autotune.core.precision import second_opinion
from autotune.errors import BadInput, PassFailed

# ---- levels --------------------------------------------------------------------------------------
IDENTICAL = "identical"
EXECUTED = "executed"
EXECUTED_WITH_STAND_INS = "executed-with-stand-ins"
COMPILED = "compiled"
UNVERIFIED = "unverified"
INVALID = "invalid"

#: Levels a reported result can reach, strongest first. ``invalid`` is not a level a result can
#: have: a check that ran and said no rejects the candidate (the tuner tries the next best).
LEVELS: tuple[str, ...] = (IDENTICAL, EXECUTED, EXECUTED_WITH_STAND_INS, COMPILED, UNVERIFIED)
#: What ``--require`` accepts: a level, or ``none`` (anything, unverified included).
REQUIREMENTS: tuple[str, ...] = (*LEVELS, "none")


def rank(level: str) -> int:
    """Higher is stronger: identical 4 ... unverified 0, invalid -1."""
    return len(LEVELS) - 1 - LEVELS.index(level) if level in LEVELS else -1


def verified(level: str | None) -> bool:
    """The old yes/no "valid": a check ran and passed, at least the full compile (not unverified)."""
    return level is not None and rank(level) >= rank(COMPILED)


def meets(level: str, required: str) -> bool:
    """Does a result at ``level`` satisfy ``--require required``?"""
    if required == "none":
        return level in LEVELS
    if required not in LEVELS:
        raise BadInput(f"unknown validation level '{required}' (expected one of {', '.join(REQUIREMENTS)})")
    return rank(level) >= rank(required)

#: Input distributions ``validate`` tries, in order, while the original's outputs are not finite:
#: (float distribution, integer upper bound). The first is the default of ``runner.random_inputs``.
INPUT_LADDER: tuple[tuple[str, int], ...] = (
    ("normal", 4), ("positive", 4), ("normal", 2), ("positive", 2), ("normal", 1), ("positive", 1),
)


# ---- tolerances ------------------------------------------------------------------------------------
def _category(dtype) -> str:
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
    cat = _category(dtype)
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
class ValidationReport:
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
    cat = _category(dtype)
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
    ok = bad == 0
    reason = None
    if not ok:
        what = f"{bad} of {orig.size} elements differ"
        if cat in ("float", "complex"):
            what += f" beyond rtol={rtol:g}, atol={atol:g} (max abs diff {max_abs:.3g}, max rel diff {max_rel:.3g})"
        elif cat == "int":
            what += f" (max abs diff {max_abs:g})"
        reason = f"output {index} ({_type_str(shape, dtype)}): {what}"
    return OutputDiff(index, shape, dtype.name, max_abs, max_rel, bad, ok), reason


def compare(original_outputs, tuned_outputs, seed: int = 0, n_inputs: int = 0,
            inputs: str = "floats=normal,ints=[0,4)") -> ValidationReport:
    """Compare two lists of output arrays elementwise with ``tolerance(dtype)``.

    A different number of outputs, or an output with another shape or dtype, is a mismatch with a
    reason saying which. The report's reason names the first failing output (and how many others).
    """
    orig = [np.asarray(x) for x in original_outputs]
    tuned = [np.asarray(x) for x in tuned_outputs]
    if len(orig) != len(tuned):
        return ValidationReport(False, f"the tuned module has {len(tuned)} outputs, the original {len(orig)}",
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
    return ValidationReport(not reasons, reason, tuple(diffs), seed, n_inputs, inputs)


# ---- running both modules -------------------------------------------------------------------------------
def _nonfinite(outputs) -> int:
    n = 0
    for x in outputs:
        if _category(x.dtype) in ("float", "complex") and x.size:
            n += int(np.count_nonzero(~np.isfinite(np.asarray(x).astype(
                np.complex128 if _category(x.dtype) == "complex" else np.float64))))
    return n


def _describe(floats: str, int_high: int) -> str:
    return f"floats={floats},ints=[0,{int_high})"


#: Original outputs per (pipeline version, fingerprint, seed): a tuning run validates several
#: candidates against the same original, which need not be recompiled and rerun each time.
_ORIGINAL_CACHE: OrderedDict = OrderedDict()
_ORIGINAL_CACHE_SIZE = 4
_ORIGINAL_CACHE_MAX_BYTES = 256 << 20


def _original_outputs(pipeline, original, seed: int, specs) -> tuple[list[np.ndarray], str, int]:
    """Run the original, retrying other input distributions while its outputs are not finite.

    Returns ``(outputs, floats, int_high)``. Any failure of the original is ``BadInput``: the input
    itself cannot run, so nothing can be validated against it.
    """
    key = (pipeline.version, original.fingerprint, int(seed))
    hit = _ORIGINAL_CACHE.get(key)
    if hit is not None and hit[3] == original.proto:
        _ORIGINAL_CACHE.move_to_end(key)
        return hit[0], hit[1], hit[2]
    has_float = any(_category(s.dtype) in ("float", "complex") for s in specs)
    has_int = any(_category(s.dtype) == "int" for s in specs)
    best = None
    for floats, int_high in INPUT_LADDER:
        if (floats != "normal" and not has_float) or (int_high != INPUT_LADDER[0][1] and not has_int):
            continue
        try:
            outs = pipeline.execute(original, seed=seed, floats=floats, int_high=int_high)
        except PassFailed as exc:
            raise BadInput(f"the original module itself does not compile and run with XLA's full pipeline: {exc}") from None
        except BadInput as exc:
            raise BadInput(f"the original module cannot be run for validation: {exc}") from None
        bad = _nonfinite(outs)
        if best is None or bad < best[3]:
            best = (outs, floats, int_high, bad)
        if bad == 0:
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
        return _compare_tuned(pipeline, tuned, specs, orig_outs, seed, floats, int_high, original)
    except BadInput as exc:
        return ValidationReport(False, f"the tuned module cannot be run: {exc}", (), seed, len(specs),
                                _describe(floats, int_high))


# ---- the level of a result ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Validation:
    """How far this machine could check that a tuned module computes what the original computes.

    ``level`` is one of ``LEVELS`` (strongest first) or ``invalid`` (a check ran and said no):

    - ``identical``: after XLA's default pipeline the tuned module *is* the default's final module
      (same fingerprint): it compiles and computes exactly what XLA's default would; nothing to run.
    - ``executed``: full compile, and the same outputs as the original on seeded random inputs.
    - ``executed-with-stand-ins``: the same, with ``stand_ins`` custom calls that the host cannot
      run replaced by deterministic host stand-ins (``pipelines/xla/standins.py``) in both modules:
      everything around those calls is checked by execution, the calls themselves are not.
    - ``compiled``: the tuned module passes XLA's full pipeline including codegen, but is not
      executed here; ``reason`` says why (memory needed vs available, ...).
    - ``unverified``: not even compiled here (``--no-validate``, or the original itself does not
      compile on this host); ``reason`` says why.

    ``report`` is the output comparison (a ``ValidationReport``) when both modules ran.
    """

    level: str
    reason: str | None = None
    stand_ins: int = 0
    report: ValidationReport | None = None

    @property
    def ok(self) -> bool:
        """False only when a check ran and found the tuned module wrong (``invalid``)."""
        return self.level != INVALID

    def meets(self, required: str) -> bool:
        return meets(self.level, required)

    def describe(self) -> str:
        """One line for a person, e.g. ``compiled (inputs need 30.1 GiB, 18.0 GiB available)``."""
        return self.level + (f" ({self.reason})" if self.reason else "")

    def to_dict(self) -> dict:
        data = {"level": self.level, "ok": self.ok, "reason": self.reason, "stand_ins": self.stand_ins,
                "report": self.report.to_dict() if self.report else None}
        return data

    @classmethod
    def from_dict(cls, data: dict | None) -> "Validation | None":
        """Inverse of ``to_dict``; also reads the pre-level validity dicts (a bare ValidationReport)."""
        if data is None:
            return None
        report = data.get("report")
        if report is None and "outputs" in data and "level" not in data:
            report = data
        rep = None
        if report is not None:
            rep = ValidationReport(bool(report.get("ok")), report.get("reason"), tuple(
                OutputDiff(int(o["index"]), tuple(o["shape"]), o["dtype"],
                           math.inf if o.get("max_abs_diff") is None else float(o["max_abs_diff"]),
                           math.inf if o.get("max_rel_diff") is None else float(o["max_rel_diff"]),
                           int(o["mismatches"]), bool(o["ok"])) for o in report.get("outputs", ())),
                int(report.get("seed", 0)), int(report.get("n_inputs", 0)),
                report.get("inputs", "floats=normal,ints=[0,4)"))
        level = data.get("level")
        if level is None:  # a stored pre-level report: it ran, so it was executed or invalid
            level = EXECUTED if data.get("ok") else INVALID
        return cls(level, data.get("reason"), int(data.get("stand_ins") or 0), rep)


def not_checked(reason: str = "not checked (--no-validate)") -> Validation:
    return Validation(UNVERIFIED, reason)


class _CannotRun(Exception):
    """The original cannot be executed here (memory, signature); carries the reason."""


class _OriginalFails(Exception):
    """The original itself fails XLA's full pipeline or its run on this host."""


def _original_outputs_or_reason(pipeline, original, seed, specs):
    try:
        return _original_outputs(pipeline, original, seed, specs)
    except BadInput as exc:
        message = str(exc)
        if "itself does not compile" in message:
            raise _OriginalFails(message.split(": ", 1)[-1]) from None
        raise _CannotRun(message.split("validation: ", 1)[-1]) from None


def _stand_in(pipeline, module, extra=()):
    return pipeline.stand_ins(module, extra)


def establish(pipeline, original, tuned, seed: int = 0, identical: bool = False) -> Validation:
    """The strongest level this machine can establish for ``tuned`` against ``original``.

    ``identical``: the caller already knows both end as the same module after XLA's default
    pipeline (the tuner compares the final fingerprints it has anyway); nothing runs.
    Otherwise: custom calls the host cannot run get stand-ins (identically in both modules); if
    the inputs and the executable fit ``limits.execution_limit()``, both run and their outputs are
    compared (``executed``/``executed-with-stand-ins``, or ``invalid``); if not, the tuned module
    must pass the full compile (``compiled``, or ``invalid`` when the original does compile);
    when the original itself does not compile here the result is ``unverified``. Never raises
    for a module that cannot be executed: a lower level is the answer.
    """
    from autotune.core.limits import execution_limit, gib

    if identical:
        return Validation(IDENTICAL, "after XLA's default pipeline it is the same module as XLA's default result")
    seed = int(seed)
    # 1. stand-ins for custom calls the host cannot run
    n_orig = n_tuned = 0
    stand_in_error = None
    orig_run, tuned_run = original, tuned
    try:
        orig_run, n_orig, targets = _stand_in(pipeline, original)
        tuned_run, n_tuned, _ = _stand_in(pipeline, tuned, targets)
    except PassFailed as exc:
        stand_in_error = str(exc)
        orig_run, tuned_run, n_orig, n_tuned = original, tuned, 0, 0

    def stand_note() -> str:
        if stand_in_error:
            return f"; {stand_in_error}"
        if not n_tuned and not n_orig:
            return ""
        note = f"{n_tuned} custom call(s) replaced by host stand-ins"
        return "; " + note + (f" ({n_orig} in the original)" if n_orig != n_tuned else "")

    # 2. can it run here?
    why_not = None
    try:
        specs = pipeline.parameter_specs(original)
        need = sum(s.nbytes for s in specs)
        limit, _ = execution_limit()
        if need > limit:
            why_not = f"inputs need {gib(need)}, {gib(limit)} available"
    except BadInput as exc:
        specs, why_not = None, str(exc)
    original_error = None
    if why_not is None:
        try:
            orig_outs, floats, int_high = _original_outputs_or_reason(pipeline, orig_run, seed, specs)
        except _CannotRun as exc:
            why_not = str(exc)
        except _OriginalFails as exc:
            original_error = str(exc)
    if why_not is None and original_error is None:
        try:
            report = _compare_tuned(pipeline, tuned_run, specs, orig_outs, seed, floats, int_high, orig_run)
        except BadInput:
            report = None
        if report is None:  # the tuned module needs more memory than the original did
            why_not = "the tuned module's run does not fit the execution limit"
        elif not report.ok:
            return Validation(INVALID, report.reason, n_tuned, report)
        else:
            level = EXECUTED_WITH_STAND_INS if n_tuned or n_orig else EXECUTED
            note = stand_note().lstrip("; ") or None
            return Validation(level, note, n_tuned, report)
    # 3. not executed here: does the tuned module at least compile?
    if original_error is None:
        try:
            pipeline.compiles(tuned_run)
            return Validation(COMPILED, f"not executed: {why_not}{stand_note()}", n_tuned)
        except PassFailed as exc:
            tuned_error = str(exc)
        try:
            pipeline.compiles(orig_run)
        except PassFailed as exc:
            original_error = str(exc)
        else:
            return Validation(INVALID, f"the tuned module fails XLA's full pipeline (the original passes it): "
                                       f"{tuned_error}", n_tuned)
    return Validation(UNVERIFIED, f"the original does not compile and run on this host: {original_error}"
                                  f"{stand_note()}", n_tuned)


def _compare_tuned(pipeline, tuned, specs, orig_outs, seed, floats, int_high, original=None) -> ValidationReport:
    """Run the tuned module on the original's inputs and compare (``BadInput`` when it cannot run here).

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
        tuned_outs = pipeline.execute(tuned, seed=seed, floats=floats, int_high=int_high)
    except PassFailed as exc:
        kind = {"crash": "crashes the compiler", "timeout": "timed out"}.get(getattr(exc, "status", "error"),
                                                                           "fails to compile or run")
        return ValidationReport(False, f"the tuned module {kind} with XLA's full pipeline: {exc}", (), seed,
                                n_inputs, described)
    report = compare(orig_outs, tuned_outs, seed=seed, n_inputs=n_inputs, inputs=described)
    return second_opinion(pipeline, original, tuned, report, orig_outs, tuned_outs, seed, floats, int_high)
