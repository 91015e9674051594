"""The policy's observation tells apart modules whose best first pass differs (real XLA passes)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import autotune
from autotune.core.metrics import Metrics

#: A layer under a loop whose body computes exp(x) twice: ``cse`` is the pass that pays first.
CSE_IN_LOOP = """HloModule cse_first
cond {
  p = (s32[], f32[8,16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[8,16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[8,16] get-tuple-element(p), index=1
  e1 = f32[8,16] exponential(x)
  e2 = f32[8,16] exponential(x)
  s = f32[8,16] add(e1, e2)
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT t = (s32[], f32[8,16]) tuple(i2, s)
}
ENTRY main {
  x = f32[8,16] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[8,16]) tuple(z, x)
  w = (s32[], f32[8,16]) while(t), condition=cond, body=body
  ROOT r = f32[8,16] get-tuple-element(w), index=1
}
"""

#: A round trip through f64 (convert of convert): ``algsimp`` folds it, ``cse`` finds nothing.
ALGSIMP_FIRST = """HloModule algsimp_first
ENTRY main {
  x = f32[8,16] parameter(0)
  y = f32[8,16] parameter(1)
  c1 = f64[8,16] convert(x)
  c2 = f32[8,16] convert(c1)
  s = f32[8,16] add(c2, y)
  ROOT e = f32[8,16] exponential(s)
}
"""


def _session(engine, tmp_path, name, text):
    from autotune.core.tuner import evaluation_session

    path = tmp_path / f"{name}.hlo"
    path.write_text(text)
    return evaluation_session(engine, autotune.load(path), budget=50)


def _first_observation(engine, session):
    from autotune.rl.env import PassOrderingEnv

    env = PassOrderingEnv([session], engine.pipeline.passes(), max_length=4)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert len(env.observation_names) == len(obs) == env.obs_size
    return env.observation.named(obs), env


def _paying_first(session, candidates=("cse", "algsimp")) -> str:
    """The candidate whose single step removes the most instructions (the premise of the test)."""
    n0 = session.input_metrics.instructions
    gains = {p: n0 - session.metrics((p,)).instructions for p in candidates if session((p,)) is not None}
    best = max(gains, key=gains.get)
    assert gains[best] > 0 and sorted(gains.values())[-2] < gains[best], gains
    return best


def test_observation_differs_where_the_best_first_pass_differs(engine, tmp_path):
    loop = _session(engine, tmp_path, "cse_first", CSE_IN_LOOP)
    conv = _session(engine, tmp_path, "algsimp_first", ALGSIMP_FIRST)
    # The premise, on real XLA passes: each module has a different pass that pays first.
    assert _paying_first(loop) == "cse"
    assert _paying_first(conv) == "algsimp"

    a, env = _first_observation(engine, loop)
    b, _ = _first_observation(engine, conv)
    # cse's features: duplicated instructions, inside the loop body.
    assert a["struct:cse_candidates"] > 0 and b["struct:cse_candidates"] == 0
    assert a["struct:cse_candidates_in_loops"] > 0 and b["struct:cse_candidates_in_loops"] == 0
    assert a["struct:while"] > 0 and a["loop:exponential"] > 0 and b["loop:exponential"] == 0
    # algsimp's feature: a convert chain.
    assert b["struct:convert_chains"] > 0 and a["struct:convert_chains"] == 0
    # The features are counts relative to the episode's initial instruction count.
    n0 = loop.input_metrics.instructions
    assert a["struct:cse_candidates"] == pytest.approx(dict(loop.input_metrics.structure)["cse_candidates"] / n0)

    # After cse the candidates are gone and the history says cse was applied.
    obs, _, _, _, info = env.step(env.actions.index("cse"))
    after = env.observation.named(obs)
    assert info["sequence"] == ("cse",)
    assert after["struct:cse_candidates"] == 0 and after["applied:cse"] == pytest.approx(1 / 4)
    assert after["step_fraction"] == pytest.approx(1 / 4)


def test_metrics_structure_round_trips_and_old_rows_load():
    m = Metrics(instructions=5, opcodes=(("add", 5),), structure=(("cse_candidates", 2), ("loop:add", 3)))
    assert Metrics.from_dict(json.loads(json.dumps(m.to_dict()))) == m
    old = {"instructions": 5, "flops": 1.0, "transcendentals": None, "bytes_accessed": 2.0, "opcodes": {"add": 5}}
    legacy = Metrics.from_dict(old)  # a row written before the field existed
    assert legacy.structure is None and legacy.structure_counts is None and math.isnan(legacy.transcendentals)


def test_observation_without_structure_reads_zeros():
    from autotune.rl.observation import Observation

    layout = Observation(("add", "exponential"), ("cse", "algsimp"))
    m0 = Metrics(instructions=4, flops=8.0, transcendentals=2.0, bytes_accessed=16.0, opcodes=(("add", 3), ("foo", 1)))
    vec = layout.vector(m0, m0, ("cse",), max_length=2)
    named = layout.named(vec)
    assert named["opcode_fraction:add"] == 0.75 and named["opcode_fraction:other"] == 0.25
    assert all(v == 0 for k, v in named.items() if k.startswith(("loop:", "struct:")))
    assert named["relative:flops"] == 1.0 and named["applied:cse"] == 0.5 and named["step_fraction"] == 0.5
    assert vec.dtype == np.float32 and layout.index("step_fraction") == len(vec) - 1


def test_cache_keeps_structure(engine, tmp_path):
    from autotune.core.cache import Cache

    m = Metrics(instructions=3, opcodes=(("add", 3),), structure=(("while", 1),))
    cache = Cache(tmp_path / "c.db")
    cache.put_state("v", "f" * 32, b"proto", m)
    fresh = Cache(tmp_path / "c.db")  # read back from SQLite, not the in-memory memo
    assert fresh.state_metrics("v", "f" * 32) == m


def test_cache_from_before_the_structure_column_still_loads(tmp_path):
    import sqlite3

    from autotune.core.cache import Cache

    m = Metrics(instructions=3, opcodes=(("add", 3),), structure=(("while", 1),))
    Cache(tmp_path / "old.db").put_state("v", "f" * 32, b"proto", m)
    with sqlite3.connect(tmp_path / "old.db") as db:  # the table as an older autotune wrote it
        db.execute("ALTER TABLE states DROP COLUMN structure")
    reopened = Cache(tmp_path / "old.db")  # adds the column back, NULL in the old row
    legacy = reopened.state_metrics("v", "f" * 32)
    assert legacy is not None and legacy.structure is None and legacy.opcodes == m.opcodes


#: One device's program of a step partitioned over 2 devices: the partitioner's offset arithmetic
#: (a constant table sliced by ``partition-id``), two all-reduces with computation between them, the
#: second exchanging a reshape.
PARTITIONED = """HloModule partitioned_step, num_partitions=2
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[4,8] parameter(0)
  w = f32[8,8] parameter(1)
  table = s32[2] constant({0, 2})
  pid = u32[] partition-id()
  off = s32[1] dynamic-slice(table, pid), dynamic_slice_sizes={1}
  o = s32[] reshape(off)
  zero = s32[] constant(0)
  xs = f32[2,8] dynamic-slice(x, o, zero), dynamic_slice_sizes={2,8}
  d = f32[2,8] dot(xs, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ar1 = f32[2,8] all-reduce(d), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=sum
  e = f32[2,8] exponential(ar1)
  t = f32[8,2] transpose(e), dimensions={1,0}
  r = f32[2,8] reshape(t)
  ar2 = f32[2,8] all-reduce(r), channel_id=2, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=sum
  ROOT out = f32[2,8] add(ar2, xs)
}
"""


def test_partition_counts_see_how_the_step_is_wired_around_its_collectives():
    from autotune.pipelines.xla import hlo
    from autotune.pipelines.xla.structure import PARTITION_COUNTS, structure_counts

    def counts(text):
        c = structure_counts(hlo.elided_text(hlo.parse_text(text)))
        return {k: c[k] for k in PARTITION_COUNTS}

    # between: exponential, transpose, reshape (ar1 -> ... -> ar2); the layout operand: ar2's reshape;
    # the index arithmetic: the table slice and its reshape (the f32 data it slices is not counted).
    assert counts(PARTITIONED) == {"devices": 2, "between_collectives": 3, "collective_layout_operands": 1,
                                   "device_index_arith": 2}
    # Without the header's option the devices come from the groups (iota form: 2 groups of 2 over 4 ids).
    iota = PARTITIONED.replace(", num_partitions=2", "").replace("replica_groups={{0,1}}", "replica_groups=[2,2]<=[4]")
    assert counts(iota)["devices"] == 4
    assert counts(ALGSIMP_FIRST) == {"devices": 1, "between_collectives": 0, "collective_layout_operands": 0,
                                     "device_index_arith": 0}


def test_observation_sees_the_partitioned_program_and_old_layouts_stay_the_same(engine, tmp_path):
    from autotune.rl.env import PassOrderingEnv
    from autotune.rl.observation import Observation

    step = _session(engine, tmp_path, "partitioned", PARTITIONED)
    single = _session(engine, tmp_path, "single", ALGSIMP_FIRST)
    a, env = _first_observation(engine, step)
    b, _ = _first_observation(engine, single)
    n0 = step.input_metrics.instructions
    assert a["partition:log2_devices"] == 1.0 and b["partition:log2_devices"] == 0.0
    assert a["partition:between_collectives"] == pytest.approx(3 / n0)
    assert a["partition:device_index_arith"] > 0 and b["partition:device_index_arith"] == 0
    assert a["opcode_fraction:all-reduce"] == pytest.approx(2 / n0)

    # A policy trained before the partition counts sees exactly its old vector (the same coordinates, minus those).
    old = PassOrderingEnv([step], engine.pipeline.passes(), max_length=4, partition_features=False)
    obs, _ = old.reset(seed=0)
    assert not Observation.has_partition_features(old.observation_names)
    assert old.observation.named(obs) == {k: v for k, v in a.items() if not k.startswith("partition:")}
    assert len(env.observation_names) == len(old.observation_names) + 4


def test_shipped_policies_keep_their_layout_and_need_no_pipeline_note():
    """The shipped policies were trained on engine 6, before the partition counts: they load with the
    layout they were trained on, and engine 7 (which only added counts they do not see) is no reason
    for a 'trained on another pipeline' note; a policy that observes the new counts would get one."""
    from autotune import policies
    from autotune.pipelines.xla import xla_version
    from autotune.rl.observation import Observation
    from autotune.rl.train import other_pipeline_version, read_sidecar

    for name in ("llm", "llm-spmd"):  # llm-h100 has its note already: trained on GPU engine 1
        meta = read_sidecar(policies.resolve(name))
        assert not Observation.has_partition_features(meta["observation_names"])
        assert meta["pipeline_version"].endswith(":engine-6")
        trained_here = f":{xla_version()}:" in meta["pipeline_version"]
        # On another jaxlib (CI's newest-jax leg) the note is due: the policy was trained elsewhere.
        assert (other_pipeline_version(meta) is None) == trained_here, name
        newer = dict(meta, observation_names=[*meta["observation_names"], "partition:log2_devices"])
        assert other_pipeline_version(newer) is not None
