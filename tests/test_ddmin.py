"""ddmin: the smallest subsequence with the same result, on real modules through the cache."""

from __future__ import annotations

import pytest

from conftest import DATA

MAML = DATA / "real" / "hloenv_maml_train_step.hlo"
PADDED = ("dce", "cse", "tree_reduction_rewriter", "algsimp", "reshape-mover", "tuple-simplifier")


def _is_subsequence(small, big) -> bool:
    it = iter(big)
    return all(any(x == y for y in it) for x in small)


def test_ddmin_core_finds_a_one_minimal_subsequence():
    """The algorithm alone, on a known predicate: keeps 'a' before 'c' and one 'x'."""
    from autotune.core.ddmin import ddmin_core

    def holds(c):
        return "x" in c and "a" in c and "c" in c and c.index("a") < c.index("c")

    out = ddmin_core(tuple("qaxbrcsd"), lambda cands: [holds(c) for c in cands])
    assert out == ("a", "x", "c")


@pytest.fixture(scope="module")
def maml(engine):
    from autotune.core.module import load

    return engine.prepare(load(MAML))


def _final(engine, root, seq):
    r = engine.evaluate(root, list(seq))
    if not r.ok:
        return None
    f = engine.final(r.state)
    return f.state if f.ok else None


def test_ddmin_same_final_module_and_one_minimal(engine, maml):
    from autotune.core.ddmin import ddmin

    out = ddmin(engine, maml, PADDED)
    assert 0 < len(out) < len(PADDED) and _is_subsequence(out, PADDED)
    target = _final(engine, maml, PADDED)
    assert _final(engine, maml, out) == target
    assert target != engine.default(maml).state  # the sequence really beats the default
    for i in range(len(out)):  # 1-minimal: dropping any single pass changes the final module
        assert _final(engine, maml, out[:i] + out[i + 1:]) != target, out[i]


def test_ddmin_same_state(engine, maml):
    from autotune.core.ddmin import ddmin

    out = ddmin(engine, maml, PADDED, same="state")
    state = engine.evaluate(maml, list(PADDED)).state
    assert engine.evaluate(maml, list(out)).state == state
    for i in range(len(out)):
        assert engine.evaluate(maml, list(out[:i] + out[i + 1:])).state != state


def test_ddmin_of_a_sequence_that_changes_nothing_is_empty(engine, maml):
    from autotune.core.ddmin import ddmin_result

    m = ddmin_result(engine, maml, ("dce", "tuple-simplifier"))
    assert m.sequence == () and m.tests >= 1


def test_ddmin_same_cost_never_longer_than_same_module(engine, maml):
    from autotune.core.ddmin import ddmin

    by_module = ddmin(engine, maml, PADDED)
    by_cost = ddmin(engine, maml, PADDED, same="cost")
    assert len(by_cost) <= len(by_module)
    final = engine.final(engine.evaluate(maml, list(by_cost)).state)
    assert final.metrics.instructions <= engine.final(engine.evaluate(maml, list(PADDED)).state).metrics.instructions
