"""explain: the structural diff of two modules, the prefix trace, the missed-optimization report."""

from __future__ import annotations

import json

import pytest

from conftest import DATA, run_cli

MAML = DATA / "real" / "hloenv_maml_train_step.hlo"

# A hand-made pair with a known difference: B is A without the multiply by a broadcast one, and
# every name differs (matching must ignore names).
BEFORE = """HloModule before

ENTRY main {
  x = f32[8] parameter(0)
  one = f32[] constant(1)
  ones = f32[8] broadcast(one), dimensions={}
  xm = f32[8] multiply(x, ones)
  e = f32[8] exponential(xm)
  ROOT t = (f32[8], f32[8]) tuple(e, x)
}
"""
AFTER = """HloModule after

ENTRY other_entry {
  p = f32[8] parameter(0)
  ex = f32[8] exponential(p)
  ROOT r = (f32[8], f32[8]) tuple(ex, p)
}
"""


def _hlo(text):
    from autotune.pipelines.xla import hlo

    return hlo.instructions(hlo.parse_text(text))


def test_diff_of_a_known_pair_lists_exactly_what_vanished():
    from autotune.reporting.explain import diff_modules

    d = diff_modules(_hlo(BEFORE), _hlo(AFTER))
    assert (d.before_instructions, d.after_instructions, d.delta) == (6, 3, -3)
    assert d.opcodes == (("broadcast", 1, 0), ("constant", 1, 0), ("multiply", 1, 0))
    assert sorted((i.opcode, i.text) for i in d.vanished) == [
        ("broadcast", "%ones = f32[8]{0} broadcast(%one), dimensions={}"),
        ("constant", "%one = f32[] constant(1)"),
        ("multiply", "%xm = f32[8]{0} multiply(%x, %ones)"),
    ]
    assert d.appeared == () and d.vanished_total == 3 and d.appeared_total == 0
    assert d.matched == 1  # the parameter: everything below it is the same
    assert d.rewired == 2  # exponential and tuple: the same instructions, reading other inputs
    # Where the difference starts: the constant (no operands); the broadcast and the multiply
    # read something the other module does not have.
    assert {i.name: i.frontier for i in d.vanished} == {"one": True, "ones": False, "xm": False}
    assert all(i.computation == "main" for i in d.vanished)
    # The other direction is the mirror image.
    back = diff_modules(_hlo(AFTER), _hlo(BEFORE))
    assert sorted(i.name for i in back.appeared) == ["one", "ones", "xm"] and back.vanished == ()


def test_renamed_module_matches_completely_and_called_computations_count():
    from autotune.reporting.explain import diff_modules

    reduce_add = """HloModule m

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[8] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply=add
}
"""
    renamed = (reduce_add.replace("add {", "plus {").replace("to_apply=add", "to_apply=plus")
               .replace(" x ", " in0 ").replace("(x, z)", "(in0, z)").replace("x = ", "in0 = "))
    same = diff_modules(_hlo(reduce_add), _hlo(renamed))
    assert (same.matched, same.rewired, same.vanished, same.appeared, same.opcodes) == (6, 0, (), (), ())
    # The same reduce with another reducer is a different instruction (its called computation differs).
    reduce_max = reduce_add.replace("add(a, b)", "maximum(a, b)")
    d = diff_modules(_hlo(reduce_add), _hlo(reduce_max))
    assert d.opcodes == (("add", 1, 0), ("maximum", 0, 1))
    assert sorted(i.opcode for i in d.vanished) == ["add", "reduce"]
    assert sorted(i.opcode for i in d.appeared) == ["maximum", "reduce"]


def test_listing_is_capped_with_frontier_first():
    from autotune.reporting.explain import diff_modules

    many = "\n".join(f"  c{i} = f32[] constant({i})" for i in range(10))
    big = f"HloModule m\n\nENTRY main {{\n{many}\n  ROOT t = f32[] constant(99)\n}}\n"
    small = "HloModule m\n\nENTRY main {\n  ROOT t = f32[] constant(99)\n}\n"
    d = diff_modules(_hlo(big), _hlo(small), cap=4)
    assert d.vanished_total == 10 and len(d.vanished) == 4


@pytest.fixture(scope="module")
def maml_explained(engine):
    from autotune.core.module import load
    from autotune.reporting.explain import explain

    root = engine.prepare(load(MAML))
    return engine, root, explain(engine, root, ["dce", "cse", "tree_reduction_rewriter", "algsimp"],
                                 model_path=str(MAML))


def test_explain_real_win_on_maml(maml_explained):
    """MAML's known win (126 -> 125 final-ops, results/exhaustive.md), explained end to end."""
    _, _, e = maml_explained
    assert (e.default.instructions, e.tuned.instructions) == (126, 125)
    assert e.diff.opcodes == (("negate", 2, 1),)
    assert [i.opcode for i in e.diff.vanished] == ["negate"] and e.diff.appeared == ()
    # Which step: the final-ops after each prefix, the change at tree_reduction_rewriter.
    assert [s.final_instructions for s in e.steps] == [126, 126, 126, 125, 125]
    assert [s.action for s in e.steps if s.decisive] == ["tree_reduction_rewriter"]
    assert e.minimal == ("tree_reduction_rewriter", "algsimp")
    data = json.loads(e.to_json())
    assert data["deltas"]["instructions"] == -1 and data["minimal_sequence"] == list(e.minimal)
    md = e.to_markdown()
    assert "| negate | 2 | 1 | -1 |" in md and "Missed optimization" in md
    missed = e.missed_optimization()
    assert f"autotune apply --passes tree_reduction_rewriter,algsimp {MAML}" in missed
    assert missed.count("--xla_disable_hlo_passes=") == 3  # two passes, then XLA's default pipeline


def test_explain_again_compiles_nothing(maml_explained):
    from autotune.reporting.explain import explain

    engine, root, e = maml_explained
    again = explain(engine, root, list(e.sequence))
    assert again.steps_compiled == 0 and again.to_dict()["diff"] == e.to_dict()["diff"]


def test_xla_flags_are_the_workers(engine):
    inv = engine.pipeline.inventory
    steps = engine.pipeline.reproduce(["algsimp"])["xla_steps"]
    disabled = set(steps[0]["xla_disable_hlo_passes"].split(","))
    assert "algsimp" not in disabled and "simplification" not in disabled and "cse" in disabled
    assert steps[-1]["action"] == "<default>"
    assert steps[-1]["xla_disable_hlo_passes"] == ",".join(inv.disabled_for(inv.default_keep))


def test_cli_explain_model_and_bad_run(tmp_path):
    db = tmp_path / "c.db"
    out = tmp_path / "e.json"
    proc = run_cli("explain", str(MAML), "--passes", "tree_reduction_rewriter", "-o", str(out), db=db)
    assert proc.returncode == 0, proc.stderr
    assert "Missed optimization" in proc.stdout and "| negate | 2 | 1 | -1 |" in proc.stdout
    assert json.loads(out.read_text())["minimal_sequence"] == ["tree_reduction_rewriter"]
    proc = run_cli("explain", "no-such-run", db=db)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no run 'no-such-run'" in proc.stderr
    proc = run_cli("explain", str(MAML), db=db)
    assert proc.returncode == 2 and "--passes" in proc.stderr


def test_api_explain(db_path, maml_explained):
    import autotune

    e = autotune.explain(str(MAML), ["tree_reduction_rewriter"], cache=db_path, workers=1)
    assert e.minimal == ("tree_reduction_rewriter",) and e.final_delta == -1 and e.steps_compiled == 0
