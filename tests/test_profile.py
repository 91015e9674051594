"""``autotune profile``: where a module's time goes, traced back to its instructions (real XLA, small
modules built here; the figures on ResNet-50 and GPT-2 are ``bench/where_time_goes.py``'s)."""

from __future__ import annotations

import json

import pytest

from conftest import SMALL, assert_one_line_error, run_cli

#: A dot that holds most of the step, a loop of small ops run 200 times (too many to unroll), and a reduce.
HOT_DOT = """HloModule hot_dot

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%cond (c: (s32[], f32[64])) -> pred[] {
  %c = (s32[], f32[64]) parameter(0)
  %i = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(200)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (p: (s32[], f32[64])) -> (s32[], f32[64]) {
  %p = (s32[], f32[64]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %v = f32[64] get-tuple-element(%p), index=1
  %sq = f32[64] multiply(%v, %v)
  %sn = f32[64] sine(%sq)
  ROOT %t = (s32[], f32[64]) tuple(%next, %sn)
}

ENTRY %main (x: f32[384,384], w: f32[384,384], v: f32[64]) -> (f32[384], f32[64]) {
  %x = f32[384,384] parameter(0)
  %w = f32[384,384] parameter(1)
  %v = f32[64] parameter(2)
  %big_dot = f32[384,384] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %zero = f32[] constant(0)
  %row_sums = f32[384] reduce(%big_dot, %zero), dimensions={1}, to_apply=%add
  %i0 = s32[] constant(0)
  %init = (s32[], f32[64]) tuple(%i0, %v)
  %loop = (s32[], f32[64]) while(%init), condition=%cond, body=%body
  %out = f32[64] get-tuple-element(%loop), index=1
  ROOT %r = (f32[384], f32[64]) tuple(%row_sums, %out)
}
"""


def test_exclusive_wall_time_splits_nesting_and_concurrency():
    """A loop's event encloses its body's on one thread (each keeps its exclusive time); two threads
    running at once split that time evenly: the seconds add up to the busy time, never more."""
    from autotune.pipelines.xla.profiling import exclusive_segments, wall_seconds

    events = [("t1", 0, 100, "while", 1), ("t1", 10, 30, "body_a", 1), ("t1", 40, 60, "body_b", 1),
              ("t2", 50, 150, "other", 1)]
    seconds = {k: v * 1e9 for k, v in wall_seconds(exclusive_segments(events)).items()}
    assert seconds["body_a"] == pytest.approx(20)
    assert seconds["body_b"] == pytest.approx(15)  # 40-50 alone, 50-60 shared with t2
    assert seconds["while"] == pytest.approx(10 + 10 + 40 / 2)  # 0-10, 30-40 alone; 60-100 shared
    assert seconds["other"] == pytest.approx(5 + 20 + 50)
    assert sum(seconds.values()) == pytest.approx(150)  # the union of busy time


def test_tagged_text_names_each_instruction_and_keeps_the_framework_name():
    from autotune.pipelines.xla import hlo
    from autotune.pipelines.xla.profiling import tagged_text

    text = HOT_DOT.replace("to_apply=%add\n", 'to_apply=%add, metadata={op_name="jit(f)/reduce_sum"}\n', 1)
    tagged, source = tagged_text(text)
    hlo.parse_text(tagged)  # still parses
    assert source == {"row_sums": "jit(f)/reduce_sum"}
    assert 'metadata={op_name="big_dot"}' in tagged and 'metadata={op_name="sn"}' in tagged


@pytest.fixture(scope="module")
def hot(engine, tmp_path_factory):
    from autotune.core.module import load
    from autotune.core.profile import Profile

    path = tmp_path_factory.mktemp("profile") / "hot_dot.hlo"
    path.write_text(HOT_DOT)
    root = engine.prepare(load(path))
    return root, Profile.from_backend(root.name, engine.pipeline.profile(root, rounds=3))


def test_profile_attributes_the_step_to_the_input_instructions(engine, hot):
    """Every op traced back to an instruction of the module profiled (opcode and shape included); the
    dot holds the largest share; the shares, the gaps and the time outside the run add up to the
    traced step, and the seconds are the shares of the untraced step."""
    from autotune.pipelines.xla import hlo

    root, p = hot
    names = {i.name: i for i in hlo.instructions(hlo.parse_proto(root.proto))}
    sited = [e for e in p.entries if e.site]
    assert sited and p.named >= 0.5, p.to_dict(5)
    for e in sited:
        name, opcode, _shape = e.site.split(":", 2)
        assert name in names and names[name].opcode == opcode, e
        assert set(e.inputs) <= set(names), e
    hottest = p.hot(1)[0]
    assert hottest.site.split(":")[1:] == ["dot", "f32[384,384]"], p.hot_sites(0.0)
    assert hottest.source == "big_dot"  # the file's own name (the normalised module renames: big_dot.1)
    assert p.attributed + p.between_ops + p.outside == pytest.approx(1.0, abs=1e-6)
    assert 0 < p.named <= p.attributed <= 1.0
    for e in p.entries:
        assert e.seconds == pytest.approx(e.share * p.step_seconds)
    assert 0.3 < p.closure < 3.0  # traced vs untraced step: same order (a loaded machine is noisy)
    # The loop's time goes to it and to the body's instructions (XLA runs a small loop as one call).
    loop = [e for e in p.entries if any(i.split(".")[0] == "sn" for i in e.inputs)]
    assert loop and loop[0].site and loop[0].calls >= 1


def test_signature_module_has_the_entry_signature_and_does_no_work():
    """The hand-over probe: a module with the compiled module's parameters and result (layouts included,
    from XLA's own program shape), each result a broadcast zero; one that XLA compiles and runs. A result
    that is not arrays of a plain type has no probe (None), never a wrong one."""
    from jaxlib import _hlo

    from autotune.pipelines.xla import hlo
    from autotune.pipelines.xla.profiling import signature_text

    def shape_of(text):
        return _hlo.XlaComputation(hlo.parse_text(text).as_serialized_hlo_module_proto()).program_shape()

    several = shape_of("""HloModule m
ENTRY main {
  x = f32[384,384] parameter(0)
  t = (s32[], pred[2]) parameter(1)
  b = bf16[8] parameter(2)
  r = f32[384] slice(x), slice={[0:1], [0:384]}
  s = f32[384] reshape(r)
  i = s32[] get-tuple-element(t), index=0
  p = pred[2] get-tuple-element(t), index=1
  ROOT out = (f32[384], pred[2], s32[]) tuple(s, p, i)
}
""")
    text = signature_text(several)
    module = hlo.parse_text(text)
    names = [i.opcode for i in hlo.instructions(module)]
    assert names.count("parameter") == 3 and "slice" not in names and "broadcast" in names
    assert "(s32[], pred[2]{0}) parameter(1)" in text and "pred[] constant(false)" in text
    token = shape_of("HloModule m\nENTRY main {\n  x = f32[4] parameter(0)\n  a = token[] after-all()\n"
                     "  ROOT r = (f32[4], token[]) tuple(x, a)\n}\n")
    assert signature_text(token) is None
    single = signature_text(shape_of("HloModule m, entry_computation_layout={(f32[2,3]{1,0})->f32[2,3]{0,1}}\n"
                                     "ENTRY main {\n  ROOT x = f32[2,3]{1,0} parameter(0)\n}\n"))
    assert "ROOT r = f32[2,3]{0,1} copy(o0)" in single and hlo.parse_text(single)


def test_profile_measures_the_hand_over(hot):
    """The hand-over (arguments and results, measured by the signature module beside the module) is a
    part of the time outside the executor's run, never more; named + hand-over is what a user can name."""
    _root, p = hot
    assert not p.handover_missing, p.handover_missing
    assert len(p.samples["handover_seconds"]) == p.runs and all(s >= 0 for s in p.samples["handover_seconds"])
    assert 0 < p.handover <= p.outside + 1e-12
    assert p.accounted == pytest.approx(p.named + p.handover)


def test_the_search_profiles_without_the_hand_over_probe(engine, hot):
    """The search ranks sites by the ops' shares only: its profile skips the probe (a second compile) and
    says the hand-over was not asked for, the ops named as with it."""
    from autotune.core.profile import Profile

    root, with_probe = hot
    bare = Profile.from_backend(root.name, engine.pipeline.profile(root, rounds=1, handover=False))
    assert bare.samples["handover_seconds"] == [] and bare.handover == 0.0
    assert bare.handover_missing == "not asked for"
    assert bare.entries[0].op == with_probe.entries[0].op and bare.entries[0].site == with_probe.entries[0].site


def test_profile_round_trips_and_compares(hot):
    from autotune.core.profile import Profile, compare

    _root, p = hot
    back = Profile.from_dict(json.loads(json.dumps(p.to_dict())))
    assert back.entries == p.entries and back.step_seconds == p.step_seconds and back.handover == p.handover
    assert p.hot(2) == p.entries[:2]
    changes = compare(p, back)
    assert changes and all(c.before == pytest.approx(c.after) for c in changes)


def test_cli_json_and_bad_input(tmp_path):
    """``--json``: the summary and the hottest ops, each with its site; bad input: one line, exit 2."""
    proc = run_cli("profile", str(SMALL), "--json", "--top", "3", "--rounds", "2", db=tmp_path / "c.db")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for key in ("module", "step_seconds", "traced_step_seconds", "attributed", "named", "unattributed",
                "between_ops", "outside", "closure", "ops", "sites", "ops_total"):
        assert key in out, key
    assert 1 <= len(out["ops"]) <= 3 and out["ops_total"] >= len(out["ops"])
    for op in out["ops"]:
        assert {"op", "share", "seconds", "kind", "opcode", "shape", "site", "inputs"} <= set(op)
    assert out["step_seconds"] > 0 and 0 <= out["attributed"] <= 1

    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule broken\nENTRY main { nonsense }\n")
    assert "not valid HLO" in assert_one_line_error(run_cli("profile", str(bad)))
    assert "not both" in assert_one_line_error(run_cli("profile", str(SMALL), "--record", "r.json", "--run", "x"))
