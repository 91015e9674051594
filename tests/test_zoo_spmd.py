"""The partitioned LLM family (``llm_spmd``): real SPMD partitioner output, tuned end to end.

One small tensor-parallel training step is lowered over 2 CPU devices (in its own process, as
``autotune.zoo.lower`` does for any partitioned program), checked to be the partitioner's per-device
program (collectives, partition ids, ``num_partitions``), and tuned by the real CLI. A per-device
program is validated as partitions on several CPU devices, with real collectives: a dropped all-reduce
is caught. The mesh-form device groups that jax's Shardy partitioner writes are checked against groups
worked out by hand, and through a compile. Bad family options are one line and exit 2 with nothing
written.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import SMALL as SMALL_MODULE, needs_plugin, run_cli
from autotune.core.module import load
from autotune.errors import BadInput
from autotune.pipelines.xla import replica_groups, versions
from autotune.zoo import SpmdConfig, llm_spmd, lower, suite

SMALL = dict(layers=1, d_model=32, heads=4, kv_heads=2, ffn=64, vocab=64, seq=16, batch=4)


@pytest.fixture(scope="module")
def tp_train(tmp_path_factory):
    """A tensor-parallel training step over 2 devices, as HLO text on disk."""
    text = lower("llm_spmd", "train", SpmdConfig(**SMALL, parallel="tp", devices=2))
    path = tmp_path_factory.mktemp("spmd") / "tp_train.hlo"
    path.write_text(text)
    return path


def test_partitioned_step_is_the_per_device_program(tp_train):
    text = tp_train.read_text()
    assert re.search(r"num_partitions=2\b", text.splitlines()[0])
    assert " all-reduce(" in text  # the row-parallel projections' partial sums
    assert " partition-id(" in text
    # per device: the column-parallel query projection [layers, d, heads * head_dim] holds half the columns
    # (annotated with its sharding in the form this jax's partitioner prints, none from 0.12: versions.py)
    sharding = versions.parameter_sharding((1, 1, 2), "model")
    assert re.search(r"bf16\[1,32,16\]\{2,1,0\} parameter\(\d+\)" + (", " + sharding if sharding else "$"), text,
                     re.MULTILINE)
    assert "metadata=" not in text and "FileNames" not in text  # machine-independent text


def test_partitioned_step_tunes_end_to_end(tp_train, tmp_path):
    proc = run_cli("run", "--strategy", "random", "--budget", "6", str(tp_train), db=tmp_path / "c.db")
    assert proc.returncode == 0, proc.stderr
    assert "collectives over 2 devices: judged as one device's program of a partitioned step" in " ".join(
        proc.stdout.split())
    proc = run_cli("run", "--strategy", "random", "--budget", "6", "--json", str(tp_train), db=tmp_path / "c.db")
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)
    assert run["evaluations"] == 6 and run["judged_by"] == "XLA's CPU pipeline"
    # XLA's default pipeline keeps the collectives (they are the program, not a detail of it)
    assert run["default"]["opcodes"]["all-reduce"] > 0 and run["default"]["opcodes"]["partition-id"] == 1
    assert run["best"]["cost"] <= run["default_cost"]


def test_ppo_without_a_policy_starts_from_the_partitioned_steps_policy(tp_train, tmp_path):
    """``--strategy ppo`` with no ``--policy`` on a partitioned step rolls out the shipped ``llm-spmd``
    (trained on such steps), and says so; a single-device module keeps ``llm``."""
    args = ("run", "--strategy", "ppo", "--budget", "4", "--no-validate", "--json")
    proc = run_cli(*args, str(tp_train), db=tmp_path / "c.db", env={"AUTOTUNE_POLICY_PATH": ""})
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if line.startswith("note: ppo:")]
    assert len(notes) == 1 and "shipped policy 'llm-spmd' (the default for partitioned steps" in notes[0], proc.stderr
    assert json.loads(proc.stdout)["best"]["cost"] <= json.loads(proc.stdout)["default_cost"]
    proc = run_cli(*args, str(SMALL_MODULE), db=tmp_path / "c.db", env={"AUTOTUNE_POLICY_PATH": ""})
    assert proc.returncode == 0, proc.stderr
    assert "shipped policy 'llm' (its roll-out first" in proc.stderr, proc.stderr


@needs_plugin
def test_partitioned_step_tunes_for_a_gpu(tp_train, tmp_path):
    """XLA's GPU pipeline takes the partitioned step as HLO (jax's compile-only client could not import
    it through MLIR: "CHLO => StableHLO failed", docs/gpu.md)."""
    proc = run_cli("run", "--target", "h100", "--strategy", "random", "--budget", "4", "--no-validate", "--json",
                   str(tp_train), db=tmp_path / "c.db")
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)
    assert run["judged_by"].startswith("XLA's GPU pipeline") and run["evaluations"] == 4
    # the collectives survive the GPU pipeline (made asynchronous: all-reduce-start / -done)
    assert sum(n for op, n in run["default"]["opcodes"].items() if op.startswith("all-reduce")) > 0
    assert run["best"]["cost"] <= run["default_cost"]


AR = """HloModule ar, num_partitions=2

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

ENTRY e {
  p = f32[4] parameter(0)
  pid = u32[] partition-id()
  c = f32[] convert(pid)
  b = f32[4] broadcast(c), dimensions={}
  q = f32[4] add(p, b)
  ROOT r = f32[4] %s
}
"""


def test_partitioned_program_runs_with_its_peers(tmp_path):
    """Run alone, an all-reduce over {0,1} would sum one participant (the identity) and dropping it
    would look harmless; run as 2 partitions with their own inputs and partition ids, it is caught."""
    original, dropped, same = (tmp_path / n for n in ("ar.hlo", "dropped.hlo", "same.hlo"))
    collective = "all-reduce(q), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add"
    original.write_text(AR % collective)
    dropped.write_text(AR % "copy(q)")
    sums = ("  sum_p = f32[4] all-reduce(p), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add\n"
            "  sum_b = f32[4] all-reduce(b), channel_id=2, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add")
    same.write_text((AR % "add(sum_p, sum_b)").replace("  q = f32[4] add(p, b)", sums))  # the same values, another program
    proc = run_cli("validate", str(original), str(dropped), db=tmp_path / "c.db")
    assert proc.returncode == 1 and "MISMATCH" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    proc = run_cli("validate", "--json", str(original), str(same), db=tmp_path / "c.db")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["level"] == "executed", report


def test_partitioned_step_specs_and_limits(tp_train, pipeline, engine, tmp_path):
    module = engine.prepare(load(tp_train))
    assert pipeline.devices_spanned(module) == 2
    specs = pipeline.parameter_specs(module)
    assert len(specs) % 2 == 0 and specs[: len(specs) // 2] == specs[len(specs) // 2:]  # one set per device
    with pytest.raises(BadInput, match="run time here says nothing"):
        pipeline.time(module)
    wide = tmp_path / "wide.hlo"
    wide.write_text((AR % ("all-reduce(q), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15}}, "
                           "use_global_device_ids=true, to_apply=add")).replace("num_partitions=2", "num_partitions=16"))
    with pytest.raises(BadInput, match="at most 8"):
        pipeline.parameter_specs(engine.prepare(load(wide)))
    single = engine.prepare(load(SMALL_MODULE))
    assert pipeline.devices_spanned(single) == 1 and pipeline.parameter_specs(single)


def test_mesh_groups_expand_as_worked_out_by_hand():
    # mesh [2,4] whose position (i, j) holds device ids [4,2]T(1,0) = 0 2 4 6 / 1 3 5 7
    text = "x = f32[4] all-reduce(p), replica_groups=mesh['axis_0'=2,'axis_1'=4], device_ids=([4,2]T(1,0)) {'axis_0'}, to_apply=add"
    assert "replica_groups={{0,1},{2,3},{4,5},{6,7}}, to_apply" in replica_groups.expand(text)
    assert replica_groups.mesh_groups("'a'=2,'b'=4", "[4,2]T(1,0)", "'b'") == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert replica_groups.mesh_groups("'a'=2,'b'=2,'c'=2", None, "'a','c'") == [[0, 1, 4, 5], [2, 3, 6, 7]]
    with pytest.raises(BadInput, match="not understood"):
        replica_groups.expand("replica_groups=mesh['a':(1)2=2] {'a'}")


def test_mesh_form_module_compiles(tmp_path):
    """XLA's conversion for compiling rejects the mesh form ("Unknown axis"); after expansion it compiles."""
    path = tmp_path / "mesh.hlo"
    path.write_text("""HloModule mesh_groups, num_partitions=4

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

ENTRY e {
  p = f32[8] parameter(0)
  n = f32[8] negate(p)
  m = f32[8] negate(n)
  ROOT r = f32[8] all-reduce(m), channel_id=1, replica_groups=mesh['axis_0'=2,'axis_1'=2] {'axis_1'}, use_global_device_ids=true, to_apply=add
}
""")
    proc = run_cli("apply", "--passes", "algsimp", "-o", str(tmp_path / "out.hlo"), str(path), db=tmp_path / "c.db")
    assert proc.returncode == 0, proc.stderr
    out = (tmp_path / "out.hlo").read_text()
    assert "replica_groups={{0,1},{2,3}}" in out and "negate" not in out


def test_config_refuses_a_mesh_that_does_not_divide():
    with pytest.raises(ValueError, match="splits batch 8 ways, but batch is 4"):
        SpmdConfig(**SMALL, parallel="dp", devices=8)
    with pytest.raises(ValueError, match="mixture of experts"):
        SpmdConfig(**SMALL, parallel="ep", devices=2)
    with pytest.raises(ValueError, match="unknown parallel style"):
        SpmdConfig(**SMALL, parallel="pp")


def test_suite_devices_option_bad_input_writes_nothing(tmp_path):
    out = tmp_path / "suite"
    for devices in ("16", "3", "64"):
        proc = run_cli("suite", "generate", str(out), "--family", "llm_spmd", "--devices", devices)
        assert proc.returncode == 2, proc.stderr
        lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("autotune:")]
        assert len(lines) == 1 and "Traceback" not in proc.stderr
        assert "cannot be partitioned" in lines[0] or "devices must be within" in lines[0]
        assert not out.exists()


def test_ring_attention_left_every_other_module_on_its_side():
    """The ``ring`` style joined the grid after policies were trained on its split: it is split on its
    own, so no module of the grid without it changed sides (a module a shipped policy trained on never
    lands in the test split), and it has modules on both sides."""
    entries = suite.configs()
    ring = {e.name for e in entries if e.family == "llm_spmd" and e.config.parallel == "ring"}
    assert ring and all(n.endswith(("_ring2", "_ring4", "_ring8")) for n in ring)
    before = suite.split([e for e in entries if e.name not in ring])
    after = {n: side for side, names in suite.split(entries).items() for n in names}
    assert all(after[n] == side for side, names in before.items() for n in names)
    assert {after[n] for n in ring} == {"train", "test"}


def test_split_keeps_every_partitioning_of_a_model_on_one_side():
    entries = suite.configs()
    spmd = [e for e in entries if e.family == "llm_spmd"]
    assert len({(e.config.parallel, e.config.devices) for e in spmd}) == (len(suite._SPMD_MESHES) + len(suite._SPMD_MANUAL)
                                                                         + len(suite._SPMD_RING))
    sides = suite.split(entries)
    side = {n: s for s, names in sides.items() for n in names}
    by_model: dict[str, set[str]] = {}
    for e in spmd:
        by_model.setdefault(e.group(), set()).add(side[e.name])
    assert all(len(s) == 1 for s in by_model.values())
    # the single-device family's split is its own: unchanged by the partitioned one
    llm_only = [e for e in entries if e.family == "llm"]
    assert sorted(n for n in suite.split(llm_only)["test"]) == sorted(n for n in sides["test"] if n.startswith("llm_")
                                                                     and not n.startswith("llm_spmd_"))


def test_module_name_says_style_and_devices():
    cfg = SpmdConfig(**SMALL, parallel="dp_tp", devices=4)
    assert llm_spmd.module_name(cfg, "decode").endswith("_dp_tp4")
    assert cfg.mesh == (("data", 2), ("model", 2))
    assert dataclasses.replace(cfg, devices=2).mesh == (("data", 1), ("model", 2))


_CP_CHECK = """
import dataclasses, jax
import sys
style, devices = sys.argv[1], int(sys.argv[2])
jax.config.update("jax_platforms", "cpu"); jax.config.update("jax_num_cpu_devices", devices)
import numpy as np, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from autotune.zoo import LLMConfig, SpmdConfig, llm, program
cfg = SpmdConfig(layers=1, d_model=32, heads=4, kv_heads=2, ffn=64, vocab=64, seq=16, batch=2, dtype="f32", optimizer="sgd",
                 parallel=style, devices=devices)
base = LLMConfig(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(LLMConfig)})
rng = np.random.default_rng(0)
for kind in ("train", "prefill"):
    prog = program("llm_spmd", kind, cfg)
    args = jax.tree.map(lambda s: jnp.asarray(rng.integers(0, 8, s.shape), s.dtype) if jnp.issubdtype(s.dtype, jnp.integer)
                        else jnp.asarray(rng.normal(size=s.shape) * 0.1, s.dtype), prog.args)
    mesh = Mesh(np.array(jax.devices()[:devices]), ("seq",))
    shardings = jax.tree.map(lambda s: NamedSharding(mesh, s), prog.in_specs, is_leaf=lambda x: isinstance(x, PartitionSpec))
    with jax.set_mesh(mesh):
        got = jax.jit(prog.fn, in_shardings=shardings)(*args)
    want = jax.jit(llm.program(base, kind).fn)(*args)
    print(kind, max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want))))
"""


@pytest.mark.parametrize("style,devices", [("cp", 2), ("ring", 4)])
def test_context_parallel_attention_computes_the_single_device_step(style, devices):
    """``cp`` writes attention by hand in shard_map (keys and values all-gathered along the sequence),
    ``ring`` passes the key/value blocks around the devices with an online softmax: run over 2 and 4
    devices, their training and prefill steps give what the unpartitioned step gives."""
    proc = subprocess.run([sys.executable, "-c", _CP_CHECK, style, str(devices)], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    diffs = dict(line.split() for line in proc.stdout.splitlines())
    assert set(diffs) == {"train", "prefill"} and all(float(d) < 1e-4 for d in diffs.values()), diffs
    if style == "ring":  # what the partitioner writes of it: blocks passed on, offsets from the device index
        from autotune.zoo import lower

        text = lower("llm_spmd", "train", SpmdConfig(**SMALL, parallel="ring", devices=4))
        assert "collective-permute(" in text and "partition-id()" in text
    with pytest.raises(ValueError, match="not latent"):
        SpmdConfig(**SMALL, latent=8, parallel=style, devices=2)
    assert not llm_spmd.supports(SpmdConfig(**SMALL, parallel=style, devices=2), "decode")
