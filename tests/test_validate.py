"""Validity check and runtime measurement: full XLA compiles on real modules, no mocks."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

from autotune.pipelines.xla import hlo
from autotune.errors import BadInput
from autotune.pipelines.xla import runner
from autotune.core.module import Module
from autotune.pipelines.xla.loader import module_from_proto
from autotune.core.validation import compare_outputs, tolerance, validate
from conftest import SMALL


def text_module(text: str, name: str = "m") -> Module:
    """A Module straight from (known-good) HLO text, parsed in this process."""
    return module_from_proto(hlo.parse_text(text).as_serialized_hlo_module_proto(), name)


#: tests/data/small_redundant.hlo with one constant changed (c3: 3 -> 4); same signature.
SMALL_CHANGED = SMALL.read_text().replace("c3 = f32[] constant(3)", "c3 = f32[] constant(4)")

#: Three outputs; the variant changes only the constant that feeds output 1.
THREE_OUT = """HloModule three_out
ENTRY main {
  x = f32[4,8] parameter(0)
  y = f32[8] parameter(1)
  a = f32[4,8] exponential(x)
  k = f32[] constant(%s)
  kb = f32[8] broadcast(k), dimensions={}
  b = f32[8] multiply(y, kb)
  c = f32[4,8] negate(x)
  ROOT t = (f32[4,8], f32[8], f32[4,8]) tuple(a, b, c)
}
"""

#: Integer indices into an embedding (gather), a bool mask, a bf16 matmul, an unsigned and a
#: tuple-shaped parameter: every kind of input ``random_inputs`` must get right.
MIXED = """HloModule mixed
ENTRY main {
  table = f32[4,8] parameter(0)
  ids = s32[6] parameter(1)
  mask = pred[6,8] parameter(2)
  a = bf16[8,8] parameter(3)
  u = u8[5] parameter(4)
  tup = (f32[3], (s64[2], f64[2])) parameter(5)
  ids2 = s32[6,1] reshape(ids)
  rows = f32[6,8] gather(table, ids2), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,8}
  zero = f32[] constant(0)
  zeros = f32[6,8] broadcast(zero), dimensions={}
  masked = f32[6,8] select(mask, rows, zeros)
  mm = bf16[8,8] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  uw = u32[5] convert(u)
  inner = (s64[2], f64[2]) get-tuple-element(tup), index=1
  i64 = s64[2] get-tuple-element(inner), index=0
  f64v = f64[2] get-tuple-element(inner), index=1
  ROOT out = (f32[6,8], bf16[8,8], u32[5], s64[2], f64[2], pred[6,8], s32[6]) tuple(masked, mm, uw, i64, f64v, mask, ids)
}
"""

#: The same signature as THREE_OUT's, but a custom call no backend implements: the full compile fails.
UNCOMPILABLE = """HloModule uncompilable
ENTRY main {
  x = f32[4,8] parameter(0)
  y = f32[8] parameter(1)
  a = f32[4,8] custom-call(x), custom_call_target="autotune_no_such_target"
  ROOT t = (f32[4,8], f32[8], f32[4,8]) tuple(a, y, x)
}
"""


# ---- the module against itself and against tuned versions -------------------------------------
def test_module_validates_against_itself(pipeline, small_root):
    report = validate(pipeline, small_root, small_root, seed=3)
    assert report.ok and report.reason is None
    assert report.n_inputs == 2 and report.seed == 3
    assert [o.shape for o in report.outputs] == [(8,), (8, 4)]
    assert all(o.ok and o.mismatches == 0 and o.max_abs_diff == 0 for o in report.outputs)
    json.loads(json.dumps(report.to_dict(), allow_nan=False))  # strict JSON


def test_tuned_small_module_validates(engine, pipeline, small_root):
    result = engine.evaluate(small_root, ["cse", "dce", "algsimp"])
    assert result.ok
    assert result.state != small_root.fingerprint  # the passes did change the module
    report = validate(pipeline, small_root, engine.module(result.state))
    assert report.ok, report.reason


def test_tuned_gpt2_validates_on_finite_outputs(engine, pipeline, gpt2_root):
    result = engine.evaluate(gpt2_root, ["cse", "dce", "algsimp"])
    assert result.ok and result.state != gpt2_root.fingerprint
    report = validate(pipeline, gpt2_root, engine.module(result.state))
    assert report.ok, report.reason
    assert len(report.outputs) == 19 and report.n_inputs == 20
    # An Adam step fed negative second moments returns NaN weights (a vacuous NaN == NaN
    # comparison): validation must have switched to non-negative floats, where all is finite.
    assert report.inputs.startswith("floats=positive")
    outs = pipeline.execute(gpt2_root, floats="positive")
    assert all(np.isfinite(o).all() for o in outs)


# ---- real differences are caught ----------------------------------------------------------------
def test_changed_constant_is_a_mismatch(pipeline, small_root):
    report = validate(pipeline, small_root, text_module(SMALL_CHANGED, "changed"))
    assert not report.ok
    assert report.reason.startswith("output 0 ")  # both outputs depend on the constant
    assert [o.ok for o in report.outputs] == [False, False]
    assert all(o.max_abs_diff > 0 and o.mismatches > 0 for o in report.outputs)


def test_mismatch_names_the_right_output(pipeline):
    original = text_module(THREE_OUT % "2", "orig")
    report = validate(pipeline, original, text_module(THREE_OUT % "2.5", "changed"))
    assert not report.ok
    assert [o.ok for o in report.outputs] == [True, False, True]
    diff = report.outputs[1]
    assert diff.index == 1 and diff.shape == (8,) and diff.dtype == "float32"
    assert diff.mismatches > 0 and diff.max_abs_diff > 0
    assert report.reason.startswith("output 1 (float32[8])")
    # the size of the change, from the inputs themselves: |y| * 0.5
    y = runner.random_inputs(original.proto, 0)[1]
    assert diff.max_abs_diff == pytest.approx(float(np.abs(y).max()) * 0.5, rel=1e-6)


def test_tuned_module_that_fails_to_compile_is_not_ok(pipeline):
    report = validate(pipeline, text_module(THREE_OUT % "2"), text_module(UNCOMPILABLE))
    assert not report.ok and report.outputs == ()
    assert "fails to compile or run" in report.reason and "autotune_no_such_target" in report.reason


def test_original_that_cannot_run_is_bad_input(pipeline):
    with pytest.raises(BadInput, match="original module itself"):
        validate(pipeline, text_module(UNCOMPILABLE), text_module(THREE_OUT % "2"))


def test_different_signature_is_not_ok(pipeline, small_root):
    report = validate(pipeline, small_root, text_module(THREE_OUT % "2"))
    assert not report.ok and "parameters differ" in report.reason


# ---- inputs ---------------------------------------------------------------------------------------
def test_inputs_for_int_bool_bf16_unsigned_and_tuple_parameters(pipeline):
    module = text_module(MIXED, "mixed")
    inputs = runner.random_inputs(module.proto, seed=5)
    dtypes = [x.dtype for x in inputs]
    assert dtypes == [np.float32, np.int32, np.bool_, np.dtype(ml_dtypes.bfloat16), np.uint8,
                      np.float32, np.int64, np.float64]  # the tuple parameter flattened depth-first
    ids, mask, a, u = inputs[1], inputs[2], inputs[3], inputs[4]
    assert ids.min() >= 0 and ids.max() < 4  # valid rows of the 4-row table
    assert u.max() < 4 and 0 < mask.sum() < mask.size
    assert np.isfinite(a.astype(np.float32)).all() and a.astype(np.float32).std() > 0.5

    outs = pipeline.execute(module, seed=5)
    masked, mm, u32, i64, f64v, mask_out, ids_out = outs
    assert [o.dtype for o in outs] == [np.float32, np.dtype(ml_dtypes.bfloat16), np.uint32, np.int64,
                                       np.float64, np.bool_, np.int32]
    # exact dtypes reach the device (no x64 canonicalisation) and tuple leaves keep their order
    np.testing.assert_array_equal(i64, inputs[6])
    np.testing.assert_array_equal(f64v, inputs[7])
    np.testing.assert_array_equal(u32, u.astype(np.uint32))
    np.testing.assert_array_equal(mask_out, mask)
    np.testing.assert_array_equal(masked, np.where(mask, inputs[0][ids], 0))
    assert np.isfinite(mm.astype(np.float32)).all()
    assert validate(pipeline, module, module, seed=5).ok


def test_same_seed_same_inputs_and_outputs(pipeline, small_root):
    first = runner.random_inputs(small_root.proto, seed=11)
    again = runner.random_inputs(small_root.proto, seed=11)
    other = runner.random_inputs(small_root.proto, seed=12)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(first, again))
    assert not np.array_equal(first[0], other[0])
    run1, run2 = pipeline.execute(small_root, seed=11), pipeline.execute(small_root, seed=11)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(run1, run2))


def test_oversized_inputs_are_refused(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_MAX_EXEC_BYTES", "2G")  # the limit comes from the machine unless set
    big = text_module("HloModule big\nENTRY main {\n  p = f32[1024,1024,1024] parameter(0)\n"
                      "  ROOT n = f32[1024,1024,1024] negate(p)\n}\n")
    with pytest.raises(BadInput, match="GiB"):
        runner.random_inputs(big.proto, 0)


# ---- timing -----------------------------------------------------------------------------------------
def test_time_reports_repeats_and_statistics(pipeline, small_root):
    timing = pipeline.time(small_root, seed=0, repeats=4, warmup=1)
    assert len(timing["seconds"]) == 4 and all(s > 0 for s in timing["seconds"])
    assert timing["min"] <= timing["median"] <= timing["p90"] <= max(timing["seconds"])


def test_time_survives_donated_inputs(pipeline):
    aliased = text_module("""HloModule aliased, input_output_alias={ {}: (0, {}, may-alias) }
ENTRY main {
  p = f32[64] parameter(0)
  c = f32[] constant(2)
  b = f32[64] broadcast(c), dimensions={}
  ROOT r = f32[64] multiply(p, b)
}
""")
    timing = pipeline.time(aliased, repeats=3, warmup=1)  # each run deletes its donated argument
    assert len(timing["seconds"]) == 3


# ---- compare_outputs() alone ----------------------------------------------------------------------------------
def test_compare_catches_count_shape_and_dtype_mismatches():
    a = [np.zeros((2, 3), np.float32), np.arange(4, dtype=np.int32)]
    count = compare_outputs(a, a[:1])
    assert not count.ok and "1 outputs, the original 2" in count.reason
    shape = compare_outputs(a, [np.zeros((3, 2), np.float32), a[1]])
    assert not shape.ok and shape.outputs[0].ok is False and "shape" in shape.reason
    dtype = compare_outputs(a, [a[0], a[1].astype(np.int64)])
    assert not dtype.ok and dtype.reason.startswith("output 1 has dtype int64")
    assert compare_outputs(a, [x.copy() for x in a]).ok


def test_compare_nan_inf_and_dtype_aware_tolerances():
    nan, inf = float("nan"), float("inf")
    f = np.array([1.0, nan, inf, -inf, 0.0], np.float32)
    assert compare_outputs([f], [f.copy()]).ok  # NaN == NaN, equal infinities
    flipped = f.copy()
    flipped[2] = -inf
    bad = compare_outputs([f], [flipped])
    assert not bad.ok and bad.outputs[0].mismatches == 1 and bad.outputs[0].max_abs_diff == inf
    json.loads(json.dumps(bad.to_dict(), allow_nan=False))
    assert not compare_outputs([f], [np.where(np.isnan(f), 0, f).astype(np.float32)]).ok  # NaN vs number

    # f32: reassociation-sized noise passes, a 1% change does not
    x = np.linspace(-3, 3, 50, dtype=np.float32)
    assert compare_outputs([x], [x * np.float32(1 + 1e-5)]).ok
    assert not compare_outputs([x], [x * np.float32(1.01)]).ok
    # bf16 is much looser: a couple of ulps pass
    b = np.linspace(-3, 3, 50).astype(ml_dtypes.bfloat16)
    b2 = (b.astype(np.float32) * 1.015).astype(ml_dtypes.bfloat16)
    assert compare_outputs([b], [b2]).ok and not compare_outputs([b], [(b.astype(np.float32) * 1.2).astype(ml_dtypes.bfloat16)]).ok
    # integers and bools are exact
    i = np.arange(10, dtype=np.int32)
    assert not compare_outputs([i], [i + np.eye(1, 10, 3, dtype=np.int32)[0]]).ok
    assert not compare_outputs([np.array([True, False])], [np.array([True, True])]).ok
    assert tolerance(np.int32) == (0.0, 0.0) and tolerance(np.bool_) == (0.0, 0.0)
    assert tolerance(np.float32) == (1e-3, 1e-4)
    assert tolerance(ml_dtypes.bfloat16)[0] > tolerance(np.float16)[0] > tolerance(np.float32)[0] > tolerance(np.float64)[0]


def test_api_function_stays_callable_after_the_module_is_imported():
    # The feature's module is autotune.core.validation, so importing it cannot shadow the API function.
    import autotune
    import autotune.core.validation as module

    assert callable(autotune.validate) and module.OutputComparison is not None


def test_scaled_inputs_are_in_a_networks_working_range():
    """``floats="scaled"``: a weight (two or more dimensions) N(0, 1/fan-in), a vector (a bias, a norm's scale,
    mean or variance) at least 0.5, so a deep network stays finite and a variance is never negative; the same
    arrays for the same seed, and large arrays (drawn in chunks) scaled alike."""
    from autotune.pipelines.xla import hlo, runner

    text = ("HloModule m\n\nENTRY e {\n  w = f32[3,3,64,32] parameter(0)\n  v = f32[32] parameter(1)\n"
            "  big = f32[2048,4096] parameter(2)\n  ROOT t = (f32[3,3,64,32], f32[32], f32[2048,4096]) tuple(w, v, big)\n}\n")
    proto = hlo.parse_text(text).as_serialized_hlo_module_proto()
    w, v, big = runner.random_inputs(proto, seed=3, floats="scaled")
    assert abs(float(np.std(w)) * (3 * 3 * 64) ** 0.5 - 1.0) < 0.05
    assert float(v.min()) >= 0.5 and float(np.median(v)) < 1.0
    assert big.size >= runner.DRAW_CHUNK and abs(float(np.std(big)) * 2048 ** 0.5 - 1.0) < 0.01
    again = runner.random_inputs(proto, seed=3, floats="scaled")
    assert all(np.array_equal(a, b) for a, b in zip((w, v, big), again))
