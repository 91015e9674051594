"""The region check (level ``executed-region``): cut where two final modules differ, execute only
that, on real XLA. Real modules (MAML from tests/data/real) and hand-made ones; no mocks.

Also the stand-in fix it needs on real GPU dumps: a custom call with more than five operands is
printed by XLA with ``/*index=5*/`` before its sixth operand, which the stand-in rewrite used to
read as part of the operand's name ("operand ... is not defined before it").
"""

from __future__ import annotations

import re

import pytest

from autotune.pipelines.xla import hlo
from autotune.pipelines.xla.loader import hlo_module, module_from_proto
from autotune.core.module import Module, load
from autotune.core.validation import (COMPILED, EXECUTED, EXECUTED_REGION, EXECUTED_WITH_STAND_INS, INVALID, LEVELS,
                                      Validation, establish, establish_region, meets)
from autotune.pipelines.xla import region, standins
from autotune.pipelines.xla.mutate import mutate
from conftest import DATA, run_cli, value_and_reduce_hlo

MAML = DATA / "real" / "hloenv_maml_train_step.hlo"
MAML_WIN = ["tree_reduction_rewriter"]  # 126 -> 125 final-ops (README)


def text_module(text: str, name: str = "m") -> Module:
    return module_from_proto(hlo.parse_text(text).as_serialized_hlo_module_proto(), name)


@pytest.fixture(scope="module")
def maml(engine):
    """(root, tuned state module, XLA default's final module, the tuned final module)."""
    root = engine.prepare(load(MAML))
    default, tuned = engine.default(root), engine.evaluate(root, MAML_WIN)
    final = engine.final(tuned.state)
    assert final.metrics.instructions < default.metrics.instructions  # the win
    return root, engine.module(tuned.state), engine.module(default.state), engine.module(final.state)


# ---- the level ----------------------------------------------------------------------------------------
def test_the_level_sits_between_stand_ins_and_compiled():
    assert LEVELS.index(EXECUTED_WITH_STAND_INS) + 1 == LEVELS.index(EXECUTED_REGION) == LEVELS.index(COMPILED) - 1
    assert meets(EXECUTED_REGION, "compiled") and meets(EXECUTED_REGION, EXECUTED_REGION)
    assert not meets(EXECUTED_REGION, EXECUTED_WITH_STAND_INS) and not meets(COMPILED, EXECUTED_REGION)
    v = Validation(EXECUTED_REGION, "1 region(s), 54 instructions ...")
    assert Validation.from_dict(v.to_dict()) == v
    help_text = run_cli("run", "--help").stdout
    assert "executed-region" in help_text


# ---- cutting ------------------------------------------------------------------------------------------
def test_an_unchanged_module_has_no_region(maml):
    _, _, default_final, _ = maml
    cut = region.cut(default_final.proto, default_final.proto)
    assert cut.regions == () and cut.matched == cut.default_total


def test_the_real_win_is_one_small_region(maml):
    _, _, default_final, tuned_final = maml
    cut = region.cut(default_final.proto, tuned_final.proto)
    assert len(cut.regions) == 1
    r = cut.regions[0]
    assert r.default_instructions < cut.default_total / 2  # a fraction of the module runs
    assert {name for _, name in r.tuned_members} & {"reduce-window.10", "reduce.39"}  # where the rewrite is
    assert "tuned:" in r.listing and r.inputs > 0 and r.input_bytes > 0
    for proto in (r.default, r.tuned):  # both sides are standalone modules with the same signature
        hlo.parse_proto(proto)
    assert [(s.shape, s.dtype) for s in region_specs(r.default)] == [(s.shape, s.dtype) for s in region_specs(r.tuned)]


def test_cutting_is_bounded_in_time_and_by_the_inputs_it_could_run(maml):
    """A change spread over a big module stops the cut with a reason instead of minutes of building
    regions that could never run: at its time budget, or at the first region whose inputs exceed
    what could be executed."""
    _, _, default_final, tuned_final = maml
    with pytest.raises(region.CannotCut, match=r"cutting stopped after 0 s at region 1 of 1"):
        region.cut(default_final.proto, tuned_final.proto, max_seconds=0.0)
    with pytest.raises(region.CannotCut, match=r"region 1 .* needs .* of inputs, 1 bytes available"):
        region.cut(default_final.proto, tuned_final.proto, max_input_bytes=1)
    assert len(region.cut(default_final.proto, tuned_final.proto, max_input_bytes=1 << 30).regions) == 1


def region_specs(proto):
    from autotune.pipelines.xla.runner import parameter_specs

    return parameter_specs(proto)


# ---- executing it: agreement with the whole-module check, and a miscompile caught --------------------------
def test_region_check_agrees_with_the_whole_module_check(pipeline, maml):
    root, tuned, default_final, tuned_final = maml
    whole = establish(pipeline, root, tuned)
    assert whole.level == EXECUTED
    v = establish_region(pipeline, root, tuned, 0, "compared with the whole check", (default_final, tuned_final))
    assert isinstance(v, Validation) and v.level == EXECUTED_REGION, v
    assert v.report.ok and "1 region(s)" in v.reason and "executed on" in v.reason and "the whole module needs" in v.reason


def test_a_region_run_past_the_bound_is_stopped_and_said(pipeline, maml):
    """The region check is bounded like whole execution (--validate-seconds): a run past the bound is
    stopped (its worker replaced), the note says so, and the next check runs normally."""
    root, tuned, default_final, tuned_final = maml
    crashes = pipeline.pool.crashes + pipeline.pool.timeouts
    for _ in range(3):  # this region runs in ~1 ms: a busy parent can find its answer ready at the deadline
        note = establish_region(pipeline, root, tuned, 0, "test", (default_final, tuned_final), bound_seconds=1e-4)
        if isinstance(note, str):
            break
    assert isinstance(note, str) and "was stopped at the" in note and "--validate-seconds" in note, note
    assert pipeline.pool.crashes + pipeline.pool.timeouts > crashes  # the worker running it was replaced
    again = establish_region(pipeline, root, tuned, 0, "test", (default_final, tuned_final), bound_seconds=60)
    assert isinstance(again, Validation) and again.level == EXECUTED_REGION, again


def _mutate(text: str, name: str, how: str) -> str:
    out = mutate(text, name, how)
    assert out is not None, f"no instruction {name}"
    return out


@pytest.mark.parametrize("how", ["swap", "constant"])
def test_a_wrong_rewrite_inside_the_region_is_invalid_with_the_region(pipeline, maml, how):
    root, _, default_final, tuned_final = maml
    r = region.cut(default_final.proto, tuned_final.proto).regions[0]
    module = hlo_module(tuned_final)
    table = {(c.name, i.name): i for c in module.computations() for i in c.instructions()}
    if how == "swap":  # a non-commutative instruction the tuned side changed
        target = next(n for c, n in r.tuned_members if re.search(r" (subtract|divide)\(", table[(c, n)].to_string()))
    else:  # a scalar float constant the region computes
        target = next(n for c, n in r.tuned_members if re.search(r"= f32\[\] constant\(", table[(c, n)].to_string()))
    broken = text_module(_mutate(hlo.to_text(module), target, how), "broken")
    v = establish_region(pipeline, root, broken, 0, "test", (default_final, broken))
    assert isinstance(v, Validation) and v.level == INVALID and not v.ok, v
    assert re.match(r"region \d+ \(in ", v.reason) and "computes other values" in v.reason and "elements differ" in v.reason
    assert "tuned:" in v.reason  # the region's instructions are printed
    whole = establish(pipeline, root, broken)  # the whole module says the same
    assert whole.level == INVALID


# ---- hand-made modules: equal values pass, loops are looked through ------------------------------------------
def test_whole_execution_declined_falls_back_to_the_region(monkeypatch, pipeline):
    """x*2 and x+x compute the same values: the region (3 instructions, 32 bytes of input) runs while
    the whole module's 16 MiB of inputs are declined; x*3 is caught."""
    default = text_module(value_and_reduce_hlo("multiply(%x, %b)"), "default")
    same = text_module(value_and_reduce_hlo("add(%x, %x)"), "same")
    wrong = text_module(value_and_reduce_hlo("add(%x, %b)"), "wrong")
    monkeypatch.setenv("AUTOTUNE_MAX_EXEC_BYTES", "1M")
    v = establish(pipeline, default, same, finals=(default, same))
    assert v.level == EXECUTED_REGION, v.describe()
    assert "1 region(s)" in v.reason and "32 bytes of inputs" in v.reason and "the whole module needs 16.0 MiB" in v.reason
    assert "inputs need 16.0 MiB, 1.0 MiB available" in v.reason
    monkeypatch.setenv("AUTOTUNE_MAX_EXEC_BYTES", "16")  # not even the region's 32 bytes: say why
    small = establish(pipeline, default, same, finals=(default, same))
    assert small.level == COMPILED and "no region check: region 1" in small.reason
    assert "needs 32 bytes of inputs, 16 bytes available" in small.reason
    monkeypatch.setenv("AUTOTUNE_MAX_EXEC_BYTES", "1M")
    bad = establish(pipeline, default, wrong, finals=(default, wrong))
    assert bad.level == INVALID and "region 1" in bad.reason and re.search(r"%y = f32\[8\]\S* add\(%x, %b", bad.reason)


LOOP = """HloModule loop
%body (s: (s32[], f32[8], f32[8])) -> (s32[], f32[8], f32[8]) {{
  %s = (s32[], f32[8], f32[8]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %acc = f32[8] get-tuple-element(%s), index=1
  %c = f32[8] get-tuple-element(%s), index=2
  %one = s32[] constant(1)
  %i1 = s32[] add(%i, %one)
  %v = f32[8] {inside}
  %acc1 = f32[8] add(%acc, {use})
  ROOT %t = (s32[], f32[8], f32[8]) tuple(%i1, %acc1, %c)
}}

%cond (s: (s32[], f32[8], f32[8])) -> pred[] {{
  %s = (s32[], f32[8], f32[8]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(5)
  ROOT %p = pred[] compare(%i, %n), direction=LT
}}

ENTRY %main (x: f32[8]) -> f32[8] {{
  %x = f32[8] parameter(0)
  %zero = s32[] constant(0)
  %e = f32[8] exponential(%x)
  %f0 = f32[] constant(0)
  %z8 = f32[8] broadcast(%f0), dimensions={{}}
  %init = (s32[], f32[8], f32[8]) tuple(%zero, %z8, {carried})
  %w = (s32[], f32[8], f32[8]) while(%init), condition=%cond, body=%body
  ROOT %out = f32[8] get-tuple-element(%w), index=1
}}
"""


def test_a_loop_invariant_hoisted_or_not_is_no_difference_and_a_wrong_body_is_caught(pipeline):
    # exp(x) computed once before the loop and carried through it, or computed in every iteration
    hoisted = text_module(LOOP.format(inside="exponential(%c)", use="%c", carried="%e"), "hoisted")
    inside = text_module(LOOP.format(inside="exponential(%c)", use="%v", carried="%x"), "inside")
    wrong = text_module(LOOP.format(inside="log(%c)", use="%v", carried="%x"), "wrong")
    assert region.cut(hoisted.proto, inside.proto).regions == ()  # the same values, loop state aside
    note = establish_region(pipeline, hoisted, inside, 0, "test", (hoisted, inside))
    assert note == "; no region check: the final modules compute the same values everywhere"
    cut = region.cut(hoisted.proto, wrong.proto)
    assert len(cut.regions) == 1 and cut.regions[0].outputs[0].startswith("loop-carried")
    assert {n for _, n in cut.regions[0].tuned_members} >= {"v", "acc1"}  # inside the body, not the loop
    bad = establish_region(pipeline, hoisted, wrong, 0, "test", (hoisted, wrong))
    assert isinstance(bad, Validation) and bad.level == INVALID and "log(" in bad.reason


# ---- stand-ins in a valid order for any custom call ------------------------------------------------------
TE = """HloModule te
ENTRY %main (q: bf16[2,4,8], k: bf16[2,4,8], v: bf16[2,4,8], lens: s32[3], offs: s32[3], seed: u64[2], bias: bf16[4,4]) -> bf16[2,4,8] {
  %q = bf16[2,4,8] parameter(0)
  %k = bf16[2,4,8] parameter(1)
  %v = bf16[2,4,8] parameter(2)
  %lens = s32[3] parameter(3)
  %offs = s32[3] parameter(4)
  %seed = u64[2] parameter(5)
  %bias = bf16[4,4] parameter(6)
  %scaled = bf16[4,4] add(%bias, %bias)
  %attn = (bf16[2,4,8], f32[2,4,1], u64[2]) custom-call(%q, %k, %v, %lens, %offs, %scaled, %seed), custom_call_target="te_fused_attn_forward_ffi"
  ROOT %out = bf16[2,4,8] get-tuple-element(%attn), index=0
}
"""


def test_stand_ins_for_a_custom_call_with_many_operands(pipeline):
    """XLA prints ``/*index=5*/%scaled``: the sixth operand, defined before the call, used to be
    reported as "not defined before it" (the TransformerEngine attention call on a held-out dump)."""
    text = hlo.to_text(hlo.parse_text(TE))
    assert "/*index=5*/" in text
    new, n, targets = standins.rewrite(text, lambda t: t.startswith("te_"))
    assert n == 1 and targets == ("te_fused_attn_forward_ffi",)
    hlo.parse_text(new)  # XLA accepts the generated text
    module = text_module(TE, "te")
    standing, n, _ = pipeline.stand_ins(module)
    a, b = pipeline.execute(standing, seed=1), pipeline.execute(standing, seed=2)
    assert n == 1 and a[0].shape == (2, 4, 8) and not (a[0] == b[0]).all()  # depends on the operands


def test_stand_in_operands_are_found_wherever_the_computation_defines_them():
    """The rewrite looks an operand up in its whole computation, not only in the lines above."""
    text = hlo.to_text(hlo.parse_text(TE))
    lines = text.splitlines()
    call = next(i for i, ln in enumerate(lines) if "custom-call(" in ln)
    scaled = next(i for i, ln in enumerate(lines) if "%scaled = " in ln)
    lines.insert(call + 1, lines.pop(scaled))  # the operand printed after its user
    new, n, _ = standins.rewrite("\n".join(lines) + "\n", lambda t: t.startswith("te_"))
    assert n == 1 and "call(%q, %k, %v, %lens, %offs, %scaled, %seed)" in new


def test_the_region_check_applies_to_modules_with_stand_ins(pipeline):
    """A region holding a GPU custom call runs with the same host stand-in on both sides."""
    default = text_module(TE, "te-default")
    same = text_module(TE.replace("%scaled = bf16[4,4] add(%bias, %bias)",
                                  "%two = bf16[] constant(2)\n  %b2 = bf16[4,4] broadcast(%two), dimensions={}\n"
                                  "  %scaled = bf16[4,4] multiply(%bias, %b2)"), "te-same")
    wrong = text_module(TE.replace("add(%bias, %bias)", "subtract(%bias, %bias)"), "te-wrong")
    cut = region.cut(default.proto, same.proto)
    assert len(cut.regions) == 1 and any("custom-call" in ln for ln in cut.regions[0].listing.splitlines())
    v = establish_region(pipeline, default, same, 0, "test", (default, same))
    assert isinstance(v, Validation) and v.level == EXECUTED_REGION and v.stand_ins == 1, v
    assert "1 custom call(s) replaced by host stand-ins" in v.reason
    bad = establish_region(pipeline, default, wrong, 0, "test", (default, wrong))
    assert isinstance(bad, Validation) and bad.level == INVALID, bad


DUPLICATED = """HloModule dup
%body (s: (s32[], f32[8], f32[8], f32[8])) -> (s32[], f32[8], f32[8], f32[8]) {{
  %s = (s32[], f32[8], f32[8], f32[8]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %a = f32[8] get-tuple-element(%s), index=1
  %b = f32[8] get-tuple-element(%s), index=2
  %x = f32[8] get-tuple-element(%s), index=3
  %one = s32[] constant(1)
  %i1 = s32[] add(%i, %one)
  %a1 = f32[8] add(%a, %x)
  %b1 = f32[8] add(%b, %x)
  %out = f32[8] {use}
  ROOT %t = (s32[], f32[8], f32[8], f32[8]) tuple(%i1, %a1, %out, %x)
}}

%cond (s: (s32[], f32[8], f32[8], f32[8])) -> pred[] {{
  %s = (s32[], f32[8], f32[8], f32[8]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(3)
  ROOT %p = pred[] compare(%i, %n), direction=LT
}}

ENTRY %main (x: f32[8]) -> (f32[8], f32[8]) {{
  %x = f32[8] parameter(0)
  %zero = s32[] constant(0)
  %f0 = f32[] constant(0)
  %z8 = f32[8] broadcast(%f0), dimensions={{}}
  %init = (s32[], f32[8], f32[8], f32[8]) tuple(%zero, %z8, %z8, %x)
  %w = (s32[], f32[8], f32[8], f32[8]) while(%init), condition=%cond, body=%body
  %ra = f32[8] get-tuple-element(%w), index=1
  %rb = f32[8] get-tuple-element(%w), index=2
  ROOT %r = (f32[8], f32[8]) tuple(%ra, %rb)
}}
"""


def test_loop_carried_elements_that_always_hold_the_same_value_are_one_value():
    """Two accumulators updated identically are one value (as after ``cse`` merged loop state), so
    carrying it twice or reading one copy twice is no difference; updating one differently is."""
    twice = text_module(DUPLICATED.format(use="add(%b, %x)"), "twice")  # b carried and updated like a
    once = text_module(DUPLICATED.format(use="add(%a, %x)"), "once")  # b's next value is a's
    assert region.cut(twice.proto, once.proto).regions == ()  # a and b hold the same value in every iteration
    other = text_module(DUPLICATED.format(use="multiply(%b, %x)"), "other")
    try:
        regions = region.cut(twice.proto, other.proto).regions
    except region.CannotCut as exc:  # b is now its own loop-carried value, which `twice` does not have
        assert "only one module" in str(exc)
    else:
        assert regions
