"""Real steps on another mesh (``autotune partition``, ``autotune.zoo.remesh``).

A step lowered on ONE device with its shardings (what a MaxText dump made on one GPU holds) is
partitioned over two by the mesh resize alone, and the per-device program is checked to be exactly
the one jax's own jit makes of the same step over two real devices (the same module after autotune's
import round trip). The CLI writes it, `autotune run` tunes it as a partitioned step, and bad input is
one line and exit 2 with nothing written.
"""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from conftest import DATA, run_cli
from autotune.api import Session
from autotune.zoo import SpmdConfig, llm_spmd, lower, remesh, reshard

SMALL = dict(layers=1, d_model=32, heads=4, kv_heads=2, ffn=64, vocab=64, seq=16, batch=4)
CFG = SpmdConfig(**SMALL, parallel="tp", devices=2)


@pytest.fixture(scope="module")
def one_device_dump(tmp_path_factory):
    """The tensor-parallel training step jitted with its shardings over a mesh of ONE device: every
    instruction replicated, the shardings kept as Shardy attributes, as in a dump of a one-GPU run."""
    prog = llm_spmd.program(CFG, "train")
    mesh = Mesh(np.array(jax.devices("cpu")[:1]).reshape([1] * len(prog.mesh)), tuple(a for a, _ in prog.mesh))
    shardings = jax.tree.map(lambda s: NamedSharding(mesh, s), prog.in_specs,
                             is_leaf=lambda x: isinstance(x, PartitionSpec))
    text = jax.jit(prog.fn, in_shardings=shardings).lower(*prog.args).compiler_ir("hlo").as_hlo_text()
    path = tmp_path_factory.mktemp("reshard") / "tp_train_1dev.hlo"
    path.write_text(text)
    return path


def test_the_dump_declares_a_mesh_of_one_device(one_device_dump):
    text = one_device_dump.read_text()
    assert reshard.mesh_axes(text) == {"model": 1}
    assert reshard.collective_count(text) == 0


def test_remesh_gives_the_program_jax_partitions_over_real_devices(one_device_dump, tmp_path):
    ours = remesh(one_device_dump.read_text(), {"model": 2})
    theirs = lower("llm_spmd", "train", CFG)  # jit over a mesh of two CPU devices, the partitioner's output
    assert reshard.collective_count(ours) > 0
    # per device: the column-parallel query projection holds half its columns
    assert re.search(r"bf16\[1,32,16\]\{2,1,0\} parameter\(\d+\)", ours)
    with Session(cache=tmp_path / "c.db", workers=1) as session:
        assert session.normalize(ours).fingerprint == session.normalize(theirs).fingerprint


def test_partition_cli_writes_a_step_that_tunes_as_partitioned(one_device_dump, tmp_path):
    out = tmp_path / "tp2.hlo"
    proc = run_cli("partition", str(one_device_dump), "--mesh", "model=2", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "over 2 devices (model=2)" in " ".join(proc.stdout.split())
    proc = run_cli("run", "--strategy", "random", "--budget", "4", "--no-validate", str(out), db=tmp_path / "c.db")
    assert proc.returncode == 0, proc.stderr
    assert "collectives over 2 devices" in " ".join(proc.stdout.split())


@pytest.mark.parametrize("model, mesh, says", [
    (DATA / "mlp_train_step.hlo", "model=2", "declares no Shardy mesh"),
    (None, "nosuch=2", "has no axis nosuch"),
    (None, "model=two", "expected AXIS=N"),
])
def test_partition_bad_input_is_one_line_and_writes_nothing(one_device_dump, tmp_path, model, mesh, says):
    out = tmp_path / "out.hlo"
    proc = run_cli("partition", str(model or one_device_dump), "--mesh", mesh, "-o", str(out))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr, proc.stderr
    assert not out.exists()


def test_meshes_that_partition_nothing_or_too_much_are_refused(one_device_dump):
    text = one_device_dump.read_text()
    with pytest.raises(ValueError, match="partitions nothing"):
        remesh(text, {"model": 1})
    with pytest.raises(ValueError, match="at most 16"):
        remesh(text, {"model": 64})


def test_aliases_are_dropped_and_the_rest_of_the_header_kept():
    header = ('HloModule m, input_output_alias={ {0}: (0, {}, may-alias), {2}: (1, {}, may-alias) }, '
              'entry_computation_layout={(f32[4]{0})->f32[4]{0}}, '
              'frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<["data"=1, "tensor"=1]>}}')
    text, devices = reshard.resized(header + "\nENTRY e {}\n", {"tensor": 4})
    first = text.splitlines()[0]
    assert devices == 4 and "input_output_alias" not in first
    assert 'entry_computation_layout={(f32[4]{0})->f32[4]{0}}' in first and '"data"=1, "tensor"=4' in first
