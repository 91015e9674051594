"""Real-scale modules: tuning never executes, constant data is hashed as bytes, workers have a memory limit.

Everything runs real XLA (jaxlib's parser, printer and CPU client) on modules made here.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from autotune.pipelines.xla import hlo
from autotune.core.module import load
from autotune.pipelines.xla.loader import MAX_ARRAY_BYTES, hlo_module
from autotune.core.worker_memory import parse_size, worker_memory_limit
from autotune.core.workers import WorkerPool
from autotune.errors import BadInput, PassFailed
from conftest import DATA


def weights_module(table: np.ndarray, matrix: np.ndarray, swap: bool = False, suffix: str = "") -> str:
    """HLO text with two f32 weight constants baked in (printed in full, as a dump would have them)."""

    def lit(a: np.ndarray) -> str:
        return "{ " + ", ".join("{ " + ", ".join(f"{v:.6g}" for v in row) + " }" for row in a) + " }"

    first, second = (matrix, table) if swap else (table, matrix)
    return f"""HloModule weights{suffix}

ENTRY main{suffix} {{
  ids{suffix} = s32[4,1] parameter(0)
  t{suffix} = f32[{first.shape[0]},{first.shape[1]}] constant({lit(first)})
  m{suffix} = f32[{second.shape[0]},{second.shape[1]}] constant({lit(second)})
  g{suffix} = f32[4,{table.shape[1]}] gather(t{suffix}, ids{suffix}), offset_dims={{1}}, collapsed_slice_dims={{0}}, start_index_map={{0}}, index_vector_dim=1, slice_sizes={{1,{table.shape[1]}}}
  ROOT d{suffix} = f32[4,{matrix.shape[1]}] dot(g{suffix}, m{suffix}), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""


@pytest.fixture(scope="module")
def weights():
    rng = np.random.default_rng(0)
    # 80,000 table elements: above hlo.PRINT_CONSTANT_ELEMENTS, so the data is hashed, not printed.
    return rng.standard_normal((5000, 16)).astype(np.float32), rng.standard_normal((16, 16)).astype(np.float32)


def test_fingerprint_hashes_constant_data_without_printing_it(weights):
    table, matrix = weights
    base = load(weights_module(table, matrix))
    # Equal programs, other names: equal fingerprints.
    assert load(weights_module(table, matrix, suffix="_renamed")).fingerprint == base.fingerprint
    # One element of the big table changed: a different program.
    changed = table.copy()
    changed[123, 7] += 1.0
    assert load(weights_module(changed, matrix)).fingerprint != base.fingerprint
    # The fingerprint text holds a hash per constant, not the data, and says which constant is where.
    text = hlo.canonical_text(hlo_module(base))
    assert "{...}" not in text and len(re.findall(r'autotune\.constant\.[0-9a-f]{32}', text)) == 2
    assert len(text) < 2000 < len(hlo.to_text(hlo_module(base)))
    # Little constant data is printed as before (cheaper than hashing), with the same guarantees.
    small = load(weights_module(table[:100], matrix))
    assert "autotune.constant." not in hlo.canonical_text(hlo_module(small))
    small_changed = table[:100].copy()
    small_changed[3, 3] += 1.0
    assert load(weights_module(small_changed, matrix)).fingerprint != small.fingerprint


def test_constants_in_other_places_are_other_programs(weights):
    """Two equally shaped constants swapped: the same multiset of data, a different program."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((260, 260)).astype(np.float32), rng.standard_normal((260, 260)).astype(np.float32)
    assert a.size > hlo.PRINT_CONSTANT_ELEMENTS
    assert load(weights_module(a, b)).fingerprint != load(weights_module(a, b, swap=True)).fingerprint
    assert load(weights_module(a, b)).fingerprint == load(weights_module(a, b)).fingerprint


def test_constant_literals_read_the_proto_field_numbers_jaxlib_writes(weights):
    """The stand-ins rely on hlo.proto field numbers: check them against jaxlib's own serialisation."""
    table, matrix = weights
    module = load(weights_module(table, matrix))
    literals = list(hlo.constant_literals(module.proto, min_bytes=64))
    assert len(literals) == 2
    sizes = sorted(len(lit) for _, _, lit in literals)
    assert sizes[0] >= matrix.nbytes and sizes[1] >= table.nbytes  # f32 data is held as raw bytes
    # The stand-in copy parses, keeps every instruction and has no constant data left.
    stand_in = hlo.parse_proto(hlo.constant_stand_ins(module.proto))
    assert hlo.instruction_count(stand_in) == hlo.instruction_count(hlo_module(module))
    assert len(stand_in.as_serialized_hlo_module_proto()) < 2000 < len(module.proto)


def test_tuning_with_constants_applies_real_passes(engine, weights):
    """A module with weights baked in normalises and steps; its constants survive the round trip."""
    table, matrix = weights
    root = engine.prepare(load(weights_module(table, matrix)))
    result = engine.evaluate(root, ["algsimp", "cse"])
    assert result.ok, result.message
    tuned = engine.module(result.state)
    assert f"{table[123, 7]:.4g}"[:5] in hlo.to_text(hlo_module(tuned))


ATTENTION = """HloModule llama_attention

ENTRY main {
  q = f32[1024,32,4096,128] parameter(0)
  k = f32[1024,32,4096,128] parameter(1)
  s = f32[1024,32,4096,4096] dot(q, k), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={3}
  ROOT l = f32[1024,32,4096,4096] logistic(s)
}
"""


def test_shapes_too_large_to_allocate_are_tuned_not_refused(engine):
    """Attention scores f32[1024,32,4096,4096] need 2 TiB: passes work on shapes, so it tunes."""
    module = load(ATTENTION)
    root = engine.prepare(module)
    assert engine.default(root).ok
    result = engine.evaluate(root, ["logistic-expander"])  # logistic(x) -> 1 / (1 + exp(-x))
    assert result.ok and result.metrics.instructions > engine.metrics(root.fingerprint).instructions
    assert 2 << 40 < MAX_ARRAY_BYTES


def test_unaddressable_shapes_are_still_refused():
    with pytest.raises(BadInput, match=r"3\.47 EiB, more than any machine can address"):
        load(DATA / "bad" / "huge_shape.hlo")


def test_a_step_that_changes_nothing_sends_no_module_bytes(engine, small_root):
    """Unchanged modules stay where they are; apply() still hands back a whole module."""
    items = [x for _, x in engine.pipeline.run_steps_many([(small_root.proto, small_root.fingerprint,
                                                            ["<identity>", "cse"])]) if hasattr(x, "status")]
    assert items[0].status == "ok" and items[0].fingerprint == small_root.fingerprint and items[0].proto is None
    assert items[1].fingerprint != small_root.fingerprint and items[1].proto is not None
    same = engine.pipeline.apply(small_root, ["<identity>"] if "<identity>" in engine.pipeline.passes() else ["dce"])
    assert same.proto


# ---- memory limit ----------------------------------------------------------------------------------
BROADCAST = """HloModule runaway

ENTRY main {
  x = f32[] parameter(0)
  ROOT b = f32[40000,40000] broadcast(x), dimensions={}
}
"""


def test_memory_limit_comes_from_the_machine_or_the_environment(monkeypatch):
    assert parse_size("6G") == 6 << 30 and parse_size("512MiB") == 512 << 20 and parse_size("off") == 0
    assert parse_size("2.5g") == int(2.5 * 2**30) and parse_size("4096") == 4096
    with pytest.raises(BadInput, match="AUTOTUNE_WORKER_MEMORY='lots' is not a size"):
        parse_size("lots")
    monkeypatch.delenv("AUTOTUNE_WORKER_MEMORY", raising=False)
    one, four = worker_memory_limit(1), worker_memory_limit(4)
    assert one >= four >= 1 << 30
    meminfo = dict(line.split(":", 1) for line in open("/proc/meminfo"))
    assert one < int(meminfo["MemAvailable"].split()[0]) * 1024
    monkeypatch.setenv("AUTOTUNE_WORKER_MEMORY", "3G")
    assert worker_memory_limit(4) == 3 << 30


def test_a_runaway_allocation_costs_one_worker_and_the_run_goes_on(monkeypatch, engine, tmp_path):
    """Executing a module whose output needs 6.4 GB under a 1 GiB limit: that worker fails with a
    clear message and is replaced; the same evaluator keeps tuning with a fresh worker."""
    from autotune.core.cache import Cache
    from autotune.core.evaluator import Evaluator
    from autotune.pipelines.xla import XlaPipeline

    monkeypatch.setenv("AUTOTUNE_WORKER_MEMORY", "1G")
    with XlaPipeline(workers=1, inventory=engine.pipeline.inventory) as pipeline:
        ev = Evaluator(pipeline, Cache(tmp_path / "cache.db"))
        root = ev.prepare(load(DATA / "small_redundant.hlo"))
        # Left to itself, execution sees that the worker's limit leaves too little and declines.
        with pytest.raises(BadInput, match="running it needs"):
            pipeline.execute(load(BROADCAST))
        assert pipeline.pool.memory_failures == 0
        # Told it may use 64 GiB, it really allocates: the kernel stops it at the worker's limit.
        monkeypatch.setenv("AUTOTUNE_MAX_EXEC_BYTES", "64G")
        pipeline.pool.close()  # workers read their environment when they start
        assert ev.evaluate(root, ["dce"]).ok
        first = pipeline.pool.pids()
        with pytest.raises(PassFailed, match=r"worker exceeded its memory limit of 1 GiB .*AUTOTUNE_WORKER_MEMORY"):
            pipeline.execute(load(BROADCAST))
        assert pipeline.pool.memory_failures == 1 and not set(first) & set(pipeline.pool.pids())
        result = ev.evaluate(root, ["dce", "cse"])
        assert result.ok and result.compiled == 1 and result.cached == 1
        assert pipeline.pool.pids() and not set(first) & set(pipeline.pool.pids())


def test_an_unlimited_pool_has_no_limit(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_WORKER_MEMORY", "none")
    pool = WorkerPool("autotune.pipelines.xla.worker:XlaWorker", (None,), size=1)
    assert pool.memory_limit == 0
    pool.close()


def test_an_exclusive_worker_holds_every_workers_memory_share():
    """Validation's fallback for an execution its worker's share refused (``WorkerPool.exclusive``):
    the idle workers stop, one worker runs with the memory all of them shared, and afterwards the
    pool has its size and share again."""
    pool = WorkerPool("autotune.pipelines.xla.worker:XlaWorker", (None,), size=2)
    try:
        pool.warm(2)
        share, before = pool.memory_limit, set(pool.pids())
        with pool.exclusive() as lifted:
            assert lifted and pool.size == 1 and pool.memory_limit > share
            assert not set(pool.pids()) & before  # the idle workers were stopped
            pid = pool.call("compiles", load(DATA / "mlp_train_step.hlo").proto, timeout=120) and pool.pids()
            assert len(pid) == 1
            limit = int(open(f"/proc/{pid[0]}/environ", "rb").read().split(b"AUTOTUNE_WORKER_MEMORY_BYTES=")[1]
                        .split(b"\0")[0])
            assert limit == pool.memory_limit  # the one worker runs under the whole share
        assert pool.size == 2 and pool.memory_limit == share and not pool.pids()
        assert pool.exclusive_runs == 1  # counted: validation names it in the region's reason
        with WorkerPool("autotune.pipelines.xla.worker:XlaWorker", (None,), size=1) as single:
            with single.exclusive() as lifted:
                assert not lifted  # one worker has every share already
            assert single.exclusive_runs == 0
    finally:
        pool.close()
