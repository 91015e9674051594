"""Objectives through the real tuner: what each one minimises, and that every trial is measured."""

from __future__ import annotations

import pytest

from autotune.core import objectives
from autotune.core.objectives import cost as cost_model
from autotune.core.runs import RunStore
from autotune.errors import UnknownName
from autotune.core.module import load
from autotune.core.tuner import tune
from conftest import SMALL


def _trials(engine, run_id):
    return [(",".join(t.sequence), t.cost, t.status, t.state) for t in RunStore(engine.cache).trials(run_id)]


def test_ops_is_the_raw_count_and_final_ops_the_count_after_the_default(engine, small_root):
    module = load(SMALL)
    ops = tune(engine, module, strategy="random", budget=6, objective="ops", seed=3, max_length=3, validate=False)
    final = tune(engine, module, strategy="random", budget=6, objective="final-ops", seed=3, max_length=3, validate=False)
    for (seq, cost, status, state), (seq2, cost2, _, state2) in zip(_trials(engine, ops.run_id), _trials(engine, final.run_id)):
        assert seq == seq2 and state == state2  # same seed, same sequences
        if status == "ok":
            assert cost == engine.metrics(state).instructions
            assert cost2 == engine.final(state).metrics.instructions
    assert final.default_cost == engine.default(small_root).metrics.instructions


def test_cost_objective_follows_its_documented_formula(engine):
    result = tune(engine, load(SMALL), strategy="random", budget=4, objective="cost", seed=1, max_length=2, validate=False)
    for _, cost, status, state in _trials(engine, result.run_id):
        if status == "ok":
            m = engine.final(state).metrics
            expected = (1e6 * max(m.flops / cost_model.FLOPS_PER_S, m.bytes_accessed / cost_model.BYTES_PER_S)
                        + 1e6 * m.transcendentals / cost_model.TRANSCENDENTALS_PER_S + cost_model.OP_OVERHEAD_US * m.instructions)
            assert cost == pytest.approx(expected)


def test_runtime_objective_measures_and_caches(engine):
    from autotune.core.objectives.runtime import Runtime

    module = load(SMALL)
    # The claim's power is not the subject (four short measurements: test_runtime.py has the claim's).
    quick = Runtime(rounds=4, max_instances=4, confirm_min_seconds=0.01)
    first = tune(engine, module, strategy="random", budget=3, objective=quick, seed=2, max_length=2, validate=False)
    assert first.best is not None and 0 < first.best_cost < 1e6  # microseconds
    assert first.default_cost > 0
    runtimes = engine.cache.db.execute("SELECT COUNT(*) FROM reports WHERE kind='runtime'").fetchone()[0]
    again = tune(engine, module, strategy="random", budget=3, objective=quick, seed=2, max_length=2, validate=False)
    assert [t[1] for t in _trials(engine, again.run_id)] == [t[1] for t in _trials(engine, first.run_id)]
    assert engine.cache.db.execute("SELECT COUNT(*) FROM reports WHERE kind='runtime'").fetchone()[0] == runtimes


def test_unknown_objective():
    with pytest.raises(UnknownName, match="did you mean final-ops"):
        objectives.get("final_ops")
