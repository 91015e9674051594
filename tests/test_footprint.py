"""The memory a run's answer needs against XLA's default (``autotune.core.footprint``), on real XLA."""

from __future__ import annotations

import autotune
from autotune.core.footprint import MemoryChange, compare
from autotune.core.results import TuneResult
from conftest import DATA

MAML = DATA / "real" / "hloenv_maml_train_step.hlo"  # tree_reduction_rewriter: 126 -> 125 final-ops


def test_memory_is_the_buffer_assignment_of_the_whole_compile(pipeline, small_root):
    """small_redundant takes f32[8,16] and f32[16,4] (768 bytes) and returns f32[8] and f32[8,4]."""
    m = pipeline.memory(small_root)
    assert m["arguments"] == 4 * (8 * 16 + 16 * 4)
    assert m["outputs"] >= 4 * (8 + 8 * 4)  # the two arrays, and the tuple's own index table
    assert m["total"] == m["arguments"] + m["outputs"] + m["temporaries"] - m["aliased"]


def test_a_validated_run_reports_both_modules_memory(engine):
    from autotune.core.tuner import tune

    root = engine.prepare(autotune.load(MAML))
    result = tune(engine, root, strategy="greedy", budget=80, seed=0, max_length=1)
    assert result.beats_default and result.memory is not None
    tuned = engine.module(result.best.state, root.name)
    assert result.memory.default_total == engine.pipeline.memory(root)["total"]
    assert result.memory.tuned_total == engine.pipeline.memory(tuned)["total"]
    assert compare(engine.pipeline, root, tuned) == result.memory
    again = TuneResult.from_dict(result.to_dict())
    assert again.memory == result.memory
    unchecked = tune(engine, root, strategy="greedy", budget=80, seed=0, max_length=1, validate=False)
    assert unchecked.memory is None  # --no-validate compiles nothing whole


def test_more_than_a_tenth_more_memory_is_a_warning():
    assert MemoryChange(1000, 1101, 0, 0).grows and not MemoryChange(1000, 1100, 0, 0).grows
    assert not MemoryChange(1000, 900, 0, 0).grows and MemoryChange(0, 10, 0, 0).ratio is None
    assert "+10%" in MemoryChange(1000, 1100, 10, 20).describe()
