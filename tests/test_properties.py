"""Property-based tests (hypothesis): sequence encodings, cache keys, and corruption detection."""

from __future__ import annotations

import sqlite3
import zlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.core.cache import Cache, Transition
from autotune.core.metrics import Metrics
from autotune.strategy import SearchSpace

ACTIONS = ("algsimp", "dce", "cse", "reshape-mover", "constant_folding", "simplification")
names = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FF, blacklist_characters=","), min_size=1, max_size=20)


@given(st.integers(1, 12).flatmap(lambda m: st.tuples(st.just(m), st.lists(st.sampled_from(ACTIONS), min_size=1, max_size=m))))
def test_encode_decode_round_trip(case):
    max_length, seq = case
    space = SearchSpace(ACTIONS, max_length)
    codes = space.encode(seq)
    assert len(codes) == max_length
    assert space.decode(codes) == tuple(seq)


@given(st.integers(1, 12), st.lists(st.integers(-1000, 1000), min_size=12, max_size=12), st.integers(0, 3))
def test_any_vector_decodes_to_a_valid_sequence(max_length, codes, min_length):
    space = SearchSpace(ACTIONS, max_length, min(min_length, max_length))
    seq = space.decode(codes)
    assert space.min_length <= len(seq) <= max_length
    assert all(a in ACTIONS for a in seq)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(version=names, src=names, action=names, dst=st.one_of(st.none(), names), status=st.sampled_from(["ok", "error", "crash", "timeout"]))
def test_transition_keys_round_trip(tmp_path, version, src, action, dst, status):
    cache = Cache(tmp_path / "p.db")
    try:
        t = Transition(src, action, dst, status, "msg", 0.5)
        cache.put_transition(version, t)
        fresh = Cache(tmp_path / "p.db")  # read back from disk, not from memory
        got = fresh.transition(version, src, action)
        assert (got.src, got.action, got.dst, got.status) == (src, action, dst, status)
        assert fresh.transition(version + "x", src, action) is None  # another pipeline version: a miss
        assert fresh.transition(version, src + "x", action) is None  # another module: a miss
        fresh.close()
    finally:
        cache.close()


def test_corrupted_transition_row_is_detected_and_dropped(tmp_path):
    db = tmp_path / "c.db"
    cache = Cache(db)
    cache.put_transition("v1", Transition("a" * 32, "cse", "b" * 32, "ok", None, 0.1))
    cache.close()
    conn = sqlite3.connect(db)
    conn.execute("UPDATE transitions SET dst=? WHERE action='cse'", ["c" * 32])  # bit rot / tampering
    conn.commit()
    conn.close()
    fresh = Cache(db)
    assert fresh.transition("v1", "a" * 32, "cse") is None  # reported as a miss -> recomputed
    assert fresh.corrupt_rows == 1
    assert fresh.db.execute("SELECT COUNT(*) FROM transitions").fetchone()[0] == 0


def test_corrupted_blob_is_detected_and_state_recomputed(tmp_path):
    db = tmp_path / "c.db"
    cache = Cache(db)
    cache.put_state("v1", "f" * 32, b"module bytes", Metrics(instructions=3))
    cache.close()
    conn = sqlite3.connect(db)
    conn.execute("UPDATE blobs SET data=?", [zlib.compress(b"other bytes")])
    conn.commit()
    conn.close()
    fresh = Cache(db)
    assert fresh.state_proto("v1", "f" * 32) is None
    assert fresh.state_metrics("v1", "f" * 32) is None  # the state row went with its blob


def test_corrupted_state_metrics_are_detected(tmp_path):
    db = tmp_path / "c.db"
    cache = Cache(db)
    cache.put_state("v1", "f" * 32, b"module bytes", Metrics(instructions=3))
    cache.close()
    conn = sqlite3.connect(db)
    conn.execute("UPDATE states SET instructions=2")
    conn.commit()
    conn.close()
    assert Cache(db).state_metrics("v1", "f" * 32) is None


def test_evaluator_recomputes_after_corruption(engine, small_root):
    """End to end: a tampered transition is recomputed by a real compile, with the same answer."""
    first = engine.evaluate(small_root, ["cse"])
    cache = engine.cache
    with cache.write() as db:
        db.execute("UPDATE transitions SET dst=? WHERE src=? AND action='cse'", ["0" * 32, small_root.fingerprint])
    cache._transitions.clear()
    again = engine.evaluate(small_root, ["cse"])
    assert again.compiled == 1 and again.state == first.state


def test_evaluator_recomputes_a_state_whose_blob_was_lost(tmp_path, small_root):
    from autotune.core.engine import open_engine
    from autotune.core.evaluator import Evaluator

    with open_engine(tmp_path / "own.db", workers=1) as ev:  # its own cache: nothing else cached there
        root = ev.prepare(small_root)
        first = ev.evaluate(root, ["cse", "tuple-simplifier"])
        blob = ev.cache.db.execute("SELECT blob FROM states WHERE fp=?", [first.state]).fetchone()[0]
        with ev.cache.write() as db:
            db.execute("UPDATE blobs SET data=? WHERE hash=?", [zlib.compress(b"rot"), blob])
        # A fresh evaluator (a later process) reads the bytes from the cache, not from its memo of
        # recently used modules (which holds bytes already checked when they were stored).
        fresh = Evaluator(ev.pipeline, ev.cache)
        again = fresh.evaluate(root, ["cse", "tuple-simplifier", "dce"])  # dce needs the lost bytes
        assert again.ok and again.compiled >= 2
        assert fresh.evaluate(root, ["cse", "tuple-simplifier"]).state == first.state


def test_a_second_handle_in_the_process_keeps_the_first_safe(tmp_path):
    """Regression: opening the cache file a second time in one process (the JAX hook does) must not
    drop the first connection's locks, or another process may delete the WAL under it."""
    import os
    import subprocess
    import sys

    db = tmp_path / "c.db"
    first = Cache(db)
    first.put_transition("v1", Transition("a" * 32, "cse", "b" * 32, "ok", None, 0.1))
    Cache(db).close()
    subprocess.run([sys.executable, "-c", f"from autotune.core.cache import Cache; Cache({str(db)!r}).close()"], check=True)
    assert os.path.exists(str(db) + "-wal")  # the other process saw it was not the last user
    first._transitions.clear()
    first.put_transition("v1", Transition("c" * 32, "dce", "d" * 32, "ok", None, 0.1))
    assert first.transition("v1", "a" * 32, "cse").dst == "b" * 32
    assert first.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    first.close()
