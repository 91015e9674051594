"""Applying passes through the cache: counts move, nothing is compiled twice, crashes cost a worker."""

from __future__ import annotations

import json
import os
import signal

import pytest

from autotune.errors import PassFailed
from conftest import GPT2, ROOT, SMALL, run_cli


def test_algsimp_dce_cse_reduces_gpt2(engine, gpt2_root):
    before = engine.metrics(gpt2_root.fingerprint).instructions
    result = engine.evaluate(gpt2_root, ["algsimp", "dce", "cse"])
    assert result.ok
    assert result.metrics.instructions < before


def test_default_ordering_is_measured(engine, gpt2_root):
    before = engine.metrics(gpt2_root.fingerprint).instructions
    default = engine.default(gpt2_root)
    assert default.ok and default.metrics.instructions < before


def test_cse_removes_the_duplicate(engine, small_root):
    before = engine.metrics(small_root.fingerprint)
    after = engine.evaluate(small_root, ["cse"]).metrics
    assert after.instructions == before.instructions - 1
    assert after.opcode_counts["exponential"] == before.opcode_counts["exponential"] - 1


def test_second_evaluation_compiles_nothing(engine, gpt2_root):
    seq = ["cse", "algsimp", "transpose-folding"]
    first = engine.evaluate(gpt2_root, seq)
    second = engine.evaluate(gpt2_root, seq)
    assert second.compiled == 0 and second.cached == len(seq)
    assert second.state == first.state


def test_prefixes_reaching_the_same_state_share_later_work(engine, small_root):
    # cholesky_expander leaves this module unchanged (no cholesky; a pass of every supported XLA: the
    # CPU pipeline dropped cse_barrier_expander in 0.11), so [noop, cse, dce] reaches the same state
    # as [cse, dce] after the first step and must reuse the cached 'cse' and 'dce' steps.
    engine.evaluate(small_root, ["cse", "dce"])
    shared = engine.evaluate(small_root, ["cholesky_expander", "cse", "dce"])
    assert shared.ok
    assert shared.compiled <= 1
    assert shared.state == engine.evaluate(small_root, ["cse", "dce"]).state


def test_cli_second_apply_hits_cache(tmp_path):
    db = tmp_path / "c.db"
    first = run_cli("apply", "--passes", "cse,dce", str(SMALL), "--json", db=db)
    assert first.returncode == 0, first.stderr
    second = run_cli("apply", "--passes", "cse,dce", str(SMALL), "--json", db=db)
    data = json.loads(second.stdout)
    assert data["steps_compiled"] == 0 and data["steps_cached"] == 2
    stats = json.loads(run_cli("cache", "stats", "--json", db=db).stdout)
    assert stats["transitions"] == 2 and stats["states"] == 2  # dce changes nothing after cse


def test_cli_baseline_and_apply_on_gpt2(tmp_path):
    db = tmp_path / "c.db"
    base = run_cli("baseline", str(GPT2), "--json", db=db)
    assert base.returncode == 0, base.stderr
    data = json.loads(base.stdout)
    assert data["default"]["instructions"] < data["input"]["instructions"]
    out = tmp_path / "tuned.hlo"
    applied = run_cli("apply", "--passes", "algsimp,dce,cse", str(GPT2), "-o", str(out), "--json", db=db)
    assert applied.returncode == 0, applied.stderr
    data = json.loads(applied.stdout)
    assert data["after"]["instructions"] < data["before"]["instructions"]
    assert out.read_text().startswith("HloModule")


def test_compiler_fatal_error_costs_one_worker(engine, gpt2_root):
    """scatter_simplifier hits a CHECK failure (SIGABRT) on this module: a failed step, not a crash."""
    crashes = engine.pipeline.pool.crashes
    result = engine.evaluate(gpt2_root, ["dce", "scatter_simplifier", "cse"])
    assert result.status == "crash" and result.failed_at == 1
    assert "Check failed" in result.message
    assert engine.pipeline.pool.crashes == crashes + 1
    assert engine.evaluate(gpt2_root, ["cse", "dce"]).ok  # the pool replaced the worker
    again = engine.evaluate(gpt2_root, ["dce", "scatter_simplifier", "cse"])
    assert again.status == "crash" and again.compiled == 0  # the failure itself is cached


def _signal_on_start(pipeline, sig):
    """Send ``sig`` to the worker as soon as it receives the next job (i.e. mid-pass)."""
    pool = pipeline.pool
    pool.on_start = lambda key, pid: os.kill(pid, sig)
    return lambda: setattr(pool, "on_start", None)


def test_worker_killed_mid_pass_and_evaluator_carries_on(tmp_path, small_root):
    """Its own cold cache: on the session's shared one, a step another test already compiled would be a
    cache hit, no worker would start, nothing would be killed (the test depended on the test order)."""
    from autotune.core.engine import open_engine

    with open_engine(tmp_path / "k.db", workers=1) as ev:
        root = ev.prepare(small_root)
        restore = _signal_on_start(ev.pipeline, signal.SIGKILL)
        try:
            result = ev.evaluate(root, ["tuple-simplifier", "cse"])
        finally:
            restore()
        assert result.status == "crash" and "SIGKILL" in result.message
        # The crash is recorded for that step; the next sequence evaluates normally. Its passes are not the
        # killed one's: tuple-simplifier leaves this module as it is, so on a busy machine the signal can land
        # after its step and blame (the same state, cse), which a later ``cse`` first would read back.
        assert ev.evaluate(root, ["algsimp", "dce"]).ok


def test_hung_worker_times_out_and_is_replaced(tmp_path, small_root):
    from autotune.core.engine import open_engine

    with open_engine(tmp_path / "t.db", workers=1, step_timeout=3) as ev:
        root = ev.prepare(small_root)
        # Stopped before the job is handed over, not on its start: a step of a few milliseconds could finish
        # before a signal sent after the hand-over lands (it did once, on a loaded machine).
        ev.pipeline.pool.warm(1)
        for pid in ev.pipeline.pool.pids():
            os.kill(pid, signal.SIGSTOP)
        result = ev.evaluate(root, ["cse"])
        assert result.status == "timeout"
        assert ev.pipeline.pool.timeouts == 1
        assert ev.evaluate(root, ["dce"]).ok


def test_pass_error_is_a_failed_step(engine, gpt2_root):
    result = engine.evaluate(gpt2_root, ["gather_simplifier"])
    assert result.status == "error" and "RET_CHECK" in result.message


def test_apply_raises_pass_failed(pipeline, gpt2_root):
    with pytest.raises(PassFailed):
        pipeline.apply(gpt2_root, ["gather_simplifier"])


def test_parallel_batch_matches_sequential(engine, small_root):
    seqs = [["cse"], ["dce", "cse"], ["algsimp"], ["tuple-simplifier", "dce"]]
    batch = engine.evaluate_many(small_root, seqs)
    single = [engine.evaluate(small_root, s) for s in seqs]
    assert [r.state for r in batch] == [r.state for r in single]


def test_successors_are_single_steps_from_each_state(engine, small_root):
    after_cse = engine.evaluate(small_root, ["cse"]).state
    got = engine.steps([(s, a) for s in (small_root.fingerprint, after_cse) for a in ("cse", "dce")])
    want = [engine.evaluate(small_root, s) for s in (["cse"], ["dce"], ["cse", "cse"], ["cse", "dce"])]
    assert [r.state for r in got] == [r.state for r in want]


def test_exhaustive_search_finds_the_best_short_sequence(engine):
    """The breadth-first walk agrees with evaluating its best sequence directly, and no sequence it
    covers beats it (checked on every length-1 sequence)."""
    from autotune.core.explore import explore
    from autotune.core.module import load

    out = explore(engine, load(SMALL), depth=2)
    root = engine.prepare(load(SMALL))
    n = len(engine.pipeline.passes())
    assert out.sequences_covered == 1 + n + n ** 2
    assert out.default_final_ops == engine.default(root).metrics.instructions
    assert out.best_final_ops <= out.default_final_ops
    best = engine.evaluate(root, out.best_sequence)
    assert engine.final(best.state).metrics.instructions == out.best_final_ops
    assert best.metrics.instructions == out.best_raw_ops
    singles = engine.evaluate_many(root, [[a] for a in engine.pipeline.passes()])
    finals = engine.final_many([r.state for r in singles if r.ok])
    assert min(f.metrics.instructions for f in finals) >= out.best_final_ops
    assert out.distinct_states == 1 + sum(lv.new_states for lv in out.levels)
    assert out.levels[0].steps == n and out.levels[1].steps == n * out.levels[0].new_states


def test_cli_explore_finds_a_better_ordering_on_maml(tmp_path):
    """On the real MAML module one pass before XLA's default beats it (126 -> 125 final-ops)."""
    r = run_cli("explore", "--depth", "1", str(ROOT / "tests/data/real/hloenv_maml_train_step.hlo"), "--json",
                db=tmp_path / "c.db")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["improved"] and out["best_final_ops"] < out["default_final_ops"]
    assert len(out["best_sequence"]) == 1 and out["valid"] is True
    bad = run_cli("explore", "--depth", "0", str(SMALL), db=tmp_path / "c.db")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
