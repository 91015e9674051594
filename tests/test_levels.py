"""Validation levels: each level reached on a real module, stand-ins around GPU custom calls, and a
broken tuned module found invalid. Real XLA compiles and runs throughout (no mocks).

Modules come from ``tests/data/gen`` (``python examples/generate_real.py --out tests/data/gen``):
GPU-dumped-style LU and eigh modules lowered for CUDA on the CPU-only jaxlib, an LLM-shaped train
step whose inputs need ~28 GiB, and a function with baked-in weights.
"""

from __future__ import annotations

import json

import pytest

from autotune.pipelines.xla import hlo
from autotune.core.limits import execution_limit, parse_bytes
from autotune.core.module import Module, load
from autotune.pipelines.xla.loader import module_from_proto
from autotune.core.validation import (COMPILED, EXECUTED, EXECUTED_REGION, EXECUTED_WITH_STAND_INS, IDENTICAL, INVALID,
                                      LEVELS, UNVERIFIED, Validation, establish, meets)
from autotune.errors import BadInput
from autotune.pipelines.xla import standins
from conftest import DATA, SMALL, run_cli

GEN = DATA / "gen"
GPU_LU, GPU_EIGH = GEN / "gpu_lu.hlo", GEN / "gpu_eigh.hlo"
LLM, BAKED = GEN / "llm_train_step.hlo", GEN / "baked_weights.hlo"


def text_module(text: str, name: str = "m") -> Module:
    return module_from_proto(hlo.parse_text(text).as_serialized_hlo_module_proto(), name)


@pytest.fixture(scope="module")
def lu_root(engine):
    return engine.prepare(load(GPU_LU))


# ---- the level model --------------------------------------------------------------------------------
def test_levels_are_ordered_and_round_trip():
    assert LEVELS == (IDENTICAL, EXECUTED, EXECUTED_WITH_STAND_INS, EXECUTED_REGION, COMPILED, UNVERIFIED)
    assert meets(IDENTICAL, "executed") and meets(EXECUTED, "executed")
    assert not meets(EXECUTED_WITH_STAND_INS, "executed") and meets(EXECUTED_WITH_STAND_INS, "compiled")
    assert not meets(COMPILED, "executed-with-stand-ins") and meets(UNVERIFIED, "none")
    assert not meets(INVALID, "none") and not meets(UNVERIFIED, "compiled")
    with pytest.raises(BadInput):
        meets(EXECUTED, "proven")
    v = Validation(COMPILED, "not executed: inputs need 30.1 GiB, 18.0 GiB available", 2)
    again = Validation.from_dict(json.loads(json.dumps(v.to_dict(), allow_nan=False)))
    assert again == v and again.ok and again.describe().startswith("compiled (not executed: inputs need")
    # a summary stored before levels existed (a bare OutputComparison dict) reads as executed / invalid
    old = {"ok": False, "reason": "output 0 differs", "outputs": [], "seed": 0, "n_inputs": 1, "inputs": "x"}
    assert Validation.from_dict(old).level == INVALID and Validation.from_dict({**old, "ok": True}).level == EXECUTED


def test_execution_limit_from_machine_or_env(monkeypatch):
    monkeypatch.delenv("AUTOTUNE_MAX_EXEC_BYTES", raising=False)
    limit, how = execution_limit()
    assert limit > 0 and "MemAvailable" in how
    monkeypatch.setenv("AUTOTUNE_MAX_EXEC_BYTES", "1.5G")
    assert execution_limit() == (3 << 29, "AUTOTUNE_MAX_EXEC_BYTES")
    assert parse_bytes("512M") == 512 << 20 and parse_bytes("2048") == 2048 and parse_bytes("8GiB") == 8 << 30
    with pytest.raises(BadInput, match="not a size"):
        parse_bytes("lots")


# ---- stand-ins --------------------------------------------------------------------------------------
def test_stand_in_rewrite_replaces_only_what_the_host_cannot_run():
    text = hlo.to_text(hlo.parse_text(GPU_LU.read_text()))
    new, n, targets = standins.rewrite(text, lambda t: t.startswith("cu"))
    assert n == 3 and targets == ("cusolver_getrf_ffi", "cu_lu_pivots_to_permutation")
    assert "cusolver" not in new and new.count("to_apply=%autotune_standin.") == 3
    hlo.parse_text(new)  # XLA parses what we generate
    assert standins.rewrite(text, lambda t: False) == (text, 0, ())
    with pytest.raises(standins.Unsupported, match="dynamic"):
        standins.parse_type("f32[<=8]")
    assert standins.parse_type("(f32[8,8]{0,1}, (s32[8]{0}, pred[]))") == [("f32", (8, 8)), [("s32", (8,)), ("pred", ())]]


def test_stand_ins_run_and_depend_on_operands(pipeline, lu_root):
    standing, n, targets = pipeline.stand_ins(lu_root)
    assert n == 3 and "cusolver_getrf_ffi" in targets and standing.fingerprint != lu_root.fingerprint
    a, b = pipeline.execute(standing, seed=1), pipeline.execute(standing, seed=2)
    assert a[0].shape == (8, 8) and not (a[0] == b[0]).all()  # other inputs, other stand-in values
    assert (a[2] == b[2]).all()  # pivots: an iota pattern, valid indices whatever the inputs
    same, n0, _ = pipeline.stand_ins(text_module(SMALL.read_text()))
    assert n0 == 0  # nothing to replace: the module comes back as it was


# ---- each level ---------------------------------------------------------------------------------------
def test_identical_when_the_final_modules_match(engine, small_root):
    from autotune.core.tuner import validity_of

    # the input itself: after XLA's default pipeline it is, by definition, the default's result
    report = validity_of(engine, small_root, small_root.fingerprint)
    assert report.level == IDENTICAL and report.ok and report.report is None


def test_executed(engine, pipeline, small_root):
    tuned = engine.evaluate(small_root, ["cse", "dce", "algsimp"])
    v = establish(pipeline, small_root, engine.module(tuned.state))
    assert v.level == EXECUTED and v.stand_ins == 0 and v.report.ok and len(v.report.outputs) == 2


@pytest.mark.parametrize("path,count", [(GPU_LU, 3), (GPU_EIGH, 1)])
def test_executed_with_stand_ins_around_gpu_custom_calls(engine, pipeline, path, count):
    root = engine.prepare(load(path))
    tuned = engine.evaluate(root, ["cse", "dce", "simplification"])
    assert tuned.ok and tuned.state != root.fingerprint
    v = establish(pipeline, root, engine.module(tuned.state))
    assert v.level == EXECUTED_WITH_STAND_INS, v.reason
    assert v.stand_ins == count and f"{count} custom call(s) replaced by host stand-ins" in v.reason
    assert v.report.ok and v.meets("compiled") and not v.meets("executed")


@pytest.mark.parametrize("old,new,where", [
    ("constant(2)", "constant(2.5)", "after the custom call (tanh(lu) * 2)"),
    ("constant(0.5)", "constant(0.625)", "before it, in the custom call's operand"),
])
def test_broken_module_around_a_custom_call_is_invalid(engine, pipeline, lu_root, old, new, where):
    text = GPU_LU.read_text()
    assert text.count(old) == 1, where
    broken = engine.prepare(load(text.replace(old, new), name="broken"))
    v = establish(pipeline, lu_root, broken)
    assert v.level == INVALID and not v.ok, where
    assert v.stand_ins == 3 and "elements differ" in v.reason


def test_compiled_when_inputs_exceed_the_limit(monkeypatch, engine, pipeline, small_root):
    monkeypatch.setenv("AUTOTUNE_MAX_EXEC_BYTES", "16")
    tuned = engine.evaluate(small_root, ["cse", "dce"])
    v = establish(pipeline, small_root, engine.module(tuned.state))
    assert v.level == COMPILED and v.report is None
    assert "inputs need" in v.reason and "16 bytes available" in v.reason
    assert v.reason.startswith("whole execution declined: ")  # the one reason type a weaker check can take over


def test_llm_train_step_needing_tens_of_gib_is_compiled(engine, pipeline):
    root = engine.prepare(load(LLM))
    specs = pipeline.parameter_specs(root)
    assert sum(s.nbytes for s in specs) > 20 << 30  # tens of GiB, never allocated
    if sum(s.nbytes for s in specs) <= execution_limit()[0]:
        pytest.skip("this machine could execute it")
    v = establish(pipeline, root, root)
    assert v.level == COMPILED and "inputs need 28.2 GiB" in v.reason


DYNAMIC = """HloModule dyn
ENTRY main {
  x = f32[8] parameter(0)
  c = f32[<=8] custom-call(x), custom_call_target="autotune_gpu_only_kernel"
  n = f32[8] negate(x)
  ROOT t = (f32[8], f32[<=8]) tuple(n, c)
}
"""


def test_unverified_when_the_original_cannot_compile_here(pipeline):
    module = text_module(DYNAMIC)  # no stand-in for a dynamic shape, and the host has no such kernel
    v = establish(pipeline, module, module)
    assert v.level == UNVERIFIED and v.ok
    assert "autotune_gpu_only_kernel" in v.reason and "no host stand-in possible" in v.reason


def test_tuned_module_that_fails_to_compile_is_invalid_when_not_executable(monkeypatch, pipeline):
    monkeypatch.setenv("AUTOTUNE_MAX_EXEC_BYTES", "16")  # no execution: the full compile decides
    good = text_module("HloModule g\nENTRY main {\n  x = f32[8] parameter(0)\n  ROOT n = f32[8] negate(x)\n}\n")
    v = establish(pipeline, good, text_module(DYNAMIC))
    assert v.level == INVALID and "fails XLA's full pipeline (the original passes it)" in v.reason
    assert establish(pipeline, good, good).level == COMPILED


# ---- the CLI: a level for every run, --require, --no-validate --------------------------------------------
@pytest.mark.slow
def test_run_reports_a_level_and_require_gates_it(tmp_path):
    db = tmp_path / "c.db"
    ok = run_cli("run", "--strategy", "random", "--budget", "4", str(GPU_EIGH), "--json", "--require", "compiled", db=db)
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    level = data["validation_level"]
    assert level in (IDENTICAL, EXECUTED_WITH_STAND_INS) and data["validity"]["level"] == level
    no = run_cli("run", "--strategy", "random", "--budget", "4", str(GPU_EIGH), "--no-validate",
                 "--require", "compiled", db=db)
    assert no.returncode == 1
    assert no.stderr.strip().splitlines()[-1].endswith("reached unverified (not checked (--no-validate))")
    listed = run_cli("runs", "--json", db=db)
    assert [r["validation"] for r in json.loads(listed.stdout)] == ["unverified", level]
    bad = run_cli("run", "--budget", "2", str(DATA / "bad" / "garbage.hlo"), "--require", "executed", db=db)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_check_re_establishes_the_recorded_level(monkeypatch, engine):
    from autotune.core.record import TuningRecord, check

    module = load(DATA / "mlp_train_step.hlo")
    root = engine.prepare(module)
    record = TuningRecord(module=root.name, fingerprint=root.fingerprint, sequence=("algsimp",), objective="final-ops",
                          pipeline_version=engine.version, xla_version="", autotune_version="",
                          metrics={"cost": 1e9}, valid=True, validation=EXECUTED)
    assert TuningRecord.from_dict(record.to_dict()).validation == EXECUTED
    monkeypatch.setenv("AUTOTUNE_MAX_EXEC_BYTES", "16")  # this "machine" cannot execute it any more
    low = check(engine, module, record, seed=7)
    assert not low.ok and low.validation == COMPILED
    assert "the record says executed, this machine re-established only compiled" in "; ".join(low.reasons)
    monkeypatch.delenv("AUTOTUNE_MAX_EXEC_BYTES")
    high = check(engine, module, record, seed=7)
    assert high.ok and high.validation == EXECUTED and high.valid
