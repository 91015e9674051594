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

import math
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, replace

import numpy as np

from autotune.core.memory import with_memory
from autotune.core.precision import second_opinion, second_opinion_paired
from autotune.errors import BadInput, PassFailed

# ---- levels --------------------------------------------------------------------------------------
IDENTICAL = "identical"
EXECUTED = "executed"
EXECUTED_WITH_STAND_INS = "executed-with-stand-ins"
#: Whole execution declined (memory, time): only the region(s) where the tuned final module differs
#: from XLA's default final module ran, both sides on the same random inputs at their boundary.
EXECUTED_REGION = "executed-region"
COMPILED = "compiled"
UNVERIFIED = "unverified"
INVALID = "invalid"

#: Levels a reported result can reach, strongest first. ``invalid`` is not a level a result can
#: have: a check that ran and said no rejects the candidate (the tuner tries the next best).
LEVELS: tuple[str, ...] = (IDENTICAL, EXECUTED, EXECUTED_WITH_STAND_INS, EXECUTED_REGION, COMPILED, UNVERIFIED)
#: What ``--require`` accepts: a level, or ``none`` (anything, unverified included).
REQUIREMENTS: tuple[str, ...] = (*LEVELS, "none")


def rank(level: str) -> int:
    """Higher is stronger: identical 5 ... unverified 0, invalid -1."""
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


def compare_outputs(original_outputs, tuned_outputs, seed: int = 0, n_inputs: int = 0,
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
        bad = _nonfinite(outs)
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
    - ``executed-region``: the whole modules could not be executed here, but the region(s) where
      the tuned final module differs from XLA's default final module were, on the same random
      inputs at their boundary (``establish_region``); ``reason`` says how many regions and
      instructions, and the bytes executed against what the whole module would need.
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
    outputs, stand_ins, n_inputs, described, nonfinite, elements, rounding = [], 0, 0, None, 0, 0, []
    lifted = pipeline.exclusive_runs
    for r in cut.regions:
        ran = _run_region(pipeline, r, seed, bound_seconds)
        if not isinstance(ran, tuple):
            return ran  # an ``invalid`` Validation, or the note saying why no region check was done
        report, orig_outs, n_t = ran
        if report.reason:  # accepted by the f32 reference (``precision``): say so
            rounding.append(f"region {r.index}: {report.reason}")
        stand_ins += n_t
        nonfinite += _nonfinite(orig_outs)
        elements += sum(int(x.size) for x in orig_outs)
        base = len(outputs)
        outputs += [OutputDiff(base + o.index, o.shape, o.dtype, o.max_abs_diff, o.max_rel_diff, o.mismatches, o.ok)
                    for o in report.outputs]
        n_inputs += report.n_inputs
        described = described or report.inputs
    reason = _region_reason(cut, whole, why_not) + "".join(
        [f"; {stand_ins} custom call(s) replaced by host stand-ins" if stand_ins else "",
         f"; {nonfinite} of {elements} output elements are not finite on these inputs in both modules"
         if nonfinite else "",
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
    has_float = any(_category(s.dtype) in ("float", "complex") for s in specs)
    has_int = any(_category(s.dtype) == "int" for s in specs)
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
        empty = [i for i, x in enumerate(outs[:len(outs) // 2]) if x.size and _nonfinite([x]) == x.size]
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
