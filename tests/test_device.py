"""A GPU target's executions on a jax device (``pipelines/xla/device.py``, ``device_worker.py``).

There is no GPU here or in CI, so the device path is run on jax's CPU device
(``AUTOTUNE_EXECUTION_PLATFORM=cpu`` / ``execution_platform="cpu"``): the same worker, input draw,
dispatch-ahead timing, donation feeding and memory limit that run on a CUDA device, with real XLA on
small modules. What only a GPU can show (its memory statistics, its compile, its speed) is in
``bench/gpu_check.sh``, for a session that has one.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from autotune.core import stats
from autotune.core.limits import execution_limit
from autotune.core.target import CPU
from autotune.errors import BadInput
from autotune.pipelines.xla import device, hlo, runner, targets
from autotune.pipelines.xla.loader import module_from_proto

from conftest import DATA, SMALL, needs_plugin, run_cli

MLP = DATA / "mlp_train_step.hlo"
#: The refusals need a machine without a CUDA device (this one, CI); on a GPU machine they do not apply.
no_gpu = pytest.mark.skipif(device.driver_present(), reason="an NVIDIA driver is here: nothing to refuse")
#: A step that donates its first parameter (a weight updated in place) and stays bounded when its
#: output is fed back as its input thousands of times (tanh).
DONATING = """HloModule donating, input_output_alias={ {0}: (0, {}, may-alias) }

ENTRY main {
  w = f32[64,64] parameter(0)
  x = f32[64,64] parameter(1)
  d = f32[64,64] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  s = f32[64,64] add(w, d)
  t = f32[64,64] tanh(s)
  ROOT r = (f32[64,64], f32[64,64]) tuple(t, d)
}
"""


# ---- the choice (no compiler) -----------------------------------------------------------------------------
def test_the_device_is_chosen_from_the_target_the_request_and_what_jax_sees():
    gpu = targets.resolve("h200").target
    assert device.choose(CPU, "auto", cuda=1) is None  # the CPU target runs on the host, GPU or not
    assert device.choose(gpu, "auto", cuda=0) is None  # no CUDA device: host executions, runtime refused
    chosen = device.choose(gpu, "auto", cuda=2)
    assert chosen.platform == "cuda" and chosen.on_gpu and "2 CUDA" in chosen.why
    forced = device.choose(gpu, "cpu", cuda=1)  # the explicit opt-in (and CI's path), even with a GPU
    assert forced.platform == "cpu" and not forced.on_gpu
    with pytest.raises(BadInput, match="cannot run a h200 program"):
        device.choose(gpu, "cuda", cuda=0)
    with pytest.raises(BadInput, match="runs on the host CPU"):
        device.choose(CPU, "cuda", cuda=1)


def test_the_request_comes_from_the_parameter_or_the_environment(monkeypatch):
    monkeypatch.delenv(device.PLATFORM_ENV, raising=False)
    assert device.requested() == "auto" and device.requested("CPU") == "cpu"
    monkeypatch.setenv(device.PLATFORM_ENV, "cuda")
    assert device.requested() == "cuda" and device.requested("auto") == "auto"
    monkeypatch.setenv(device.PLATFORM_ENV, "tpu")
    with pytest.raises(BadInput, match="expected one of auto, cuda, cpu"):
        device.requested()


def test_the_cuda_worker_takes_most_of_the_gpu_unless_told(monkeypatch):
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    base = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    env = device.worker_env("cuda", base)
    assert env["JAX_PLATFORMS"] == "cuda" and env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == device.MEM_FRACTION
    assert "XLA_FLAGS" not in env
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5")
    assert device.worker_env("cuda", base)["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.5"
    assert device.worker_env("cpu", base) == base


def test_a_device_that_reports_its_memory_is_its_own_limit(monkeypatch):
    monkeypatch.delenv("AUTOTUNE_MAX_EXEC_BYTES", raising=False)
    gpu = SimpleNamespace(devices=[SimpleNamespace(memory_stats=lambda: {"bytes_limit": 100 << 30,
                                                                         "bytes_in_use": 20 << 30})])
    limit, how = runner.device_limit(gpu)
    assert limit == int(runner.DEVICE_MEMORY_SHARE * (80 << 30)) and "device" in how
    cpu = SimpleNamespace(devices=[SimpleNamespace(memory_stats=lambda: None)])  # jax's CPU device
    assert runner.device_limit(cpu)[0] == pytest.approx(execution_limit()[0], rel=0.05)
    monkeypatch.setenv("AUTOTUNE_MAX_EXEC_BYTES", "1G")  # the user's limit wins everywhere
    assert runner.device_limit(gpu) == (1 << 30, "AUTOTUNE_MAX_EXEC_BYTES")


def test_a_time_taken_on_one_device_platform_is_never_reused_for_another():
    from autotune.core.objectives.runtime import runtime_key

    def key(execution):
        return runtime_key(SimpleNamespace(version="v", pipeline=SimpleNamespace(execution=execution)), "final")

    assert key(None) == runtime_key(SimpleNamespace(version="v", pipeline=object()), "final")  # the host: as before
    assert key(device.Execution("cpu", "")).endswith("|on-cpu") and key(device.Execution("cuda", "")).endswith("|on-cuda")


@needs_plugin
@no_gpu
def test_requiring_cuda_without_it_is_refused_when_the_backend_is_made():
    from autotune.pipelines.xla import XlaPipeline

    with pytest.raises(BadInput, match="cannot run a h100 program"):
        XlaPipeline(target="h100", execution_platform="cuda")


def test_donated_inputs_are_mapped_to_the_outputs_that_alias_them():
    proto = hlo.parse_text(DONATING).as_serialized_hlo_module_proto()
    assert runner.donated_outputs(proto) == {0: 0}
    dlrm = hlo.parse_text((DATA / "real" / "xla_dlrm_train_step.hlo").read_text()).as_serialized_hlo_module_proto()
    fed = runner.donated_outputs(dlrm)
    assert fed[18] == 0 and fed[0] == 2 and len(fed) == 57
    assert runner.donated_outputs(hlo.parse_text(MLP.read_text()).as_serialized_hlo_module_proto()) == {}


MIXED = """HloModule mixed

ENTRY main {
  f = bf16[4,8] parameter(0)
  i = s32[64] parameter(1)
  b = pred[16] parameter(2)
  d = f64[3] parameter(3)
  ROOT t = (bf16[4,8], s32[64], pred[16], f64[3]) tuple(f, i, b, d)
}
"""


def test_inputs_drawn_on_the_device_keep_the_types_ranges_and_seed():
    import jax
    from jax._src.lib import _jax

    worker = SimpleNamespace(devices=[jax.devices("cpu")[0]], _jax=_jax)
    proto = hlo.parse_text(MIXED).as_serialized_hlo_module_proto()
    drawn = runner.drawn_on_device(worker, proto, seed=7, floats="positive", int_high=3)
    host = [np.asarray(x) for x in drawn]
    assert [x.dtype.name for x in host] == ["bfloat16", "int32", "bool", "float64"]
    assert (host[0].astype(np.float32) >= 0).all() and set(np.unique(host[1])) <= {0, 1, 2}
    assert host[2].any() and not host[2].all()
    again = [np.asarray(x) for x in runner.drawn_on_device(worker, proto, seed=7, floats="positive", int_high=3)]
    assert all(np.array_equal(a, b) for a, b in zip(host, again))


# ---- the device path on jax's CPU device (real XLA) ---------------------------------------------------------
@pytest.fixture(scope="module")
def on_device():
    """An H100 target whose executions run on jax's CPU device through the device worker."""
    from autotune.pipelines.xla import XlaPipeline

    with XlaPipeline(target="h100", execution_platform="cpu") as pipeline:
        yield pipeline


@needs_plugin
def test_timing_on_the_device_path_dispatches_ahead_and_feeds_donations(on_device):
    assert on_device.runs_on_target and on_device.execution.platform == "cpu"
    assert "CPU device standing in for the h100" in on_device.executes_on
    mlp = on_device.parse(MLP.read_bytes(), ".hlo", "mlp")
    timed = on_device.time(mlp, repeats=3, min_seconds=0.002)
    assert timed["device"] == "cpu:cpu" and timed["dispatch"] == "ahead" and not timed["donates"]
    assert len(timed["seconds"]) == 3 and timed["median"] > 0 and timed["inner"] >= 1
    donating = on_device.parse(DONATING.encode(), ".hlo", "donating")
    # 20 ms samples: a step of microseconds runs many times in one even on a loaded machine (at 2 ms a slow run
    # made the inner count 1 once, in a fresh clone at d451bb6)
    timed = on_device.time(donating, repeats=3, min_seconds=0.02)
    assert timed["donates"] and timed["dispatch"] == "ahead+fed" and timed["inner"] > 1
    # the claim's protocol: interleaved A/B in one worker, then the same statistics as on the host
    ab = on_device.time_ab(donating, donating, rounds=6, min_seconds=0.002)
    assert ab["dispatch"] == ["ahead+fed", "ahead+fed"] and len(ab["a"]) == len(ab["b"]) == 6
    ratio = stats.time_ratio(ab["a"], ab["b"])
    assert ratio.low <= ratio.ratio <= ratio.high and not ratio.faster


@needs_plugin
def test_executions_on_the_device_path_give_the_host_s_outputs(on_device, pipeline):
    mlp = on_device.parse(MLP.read_bytes(), ".hlo", "mlp")
    here, there = pipeline.execute(mlp, seed=3), on_device.execute(mlp, seed=3)
    assert len(here) == len(there) and all(np.array_equal(a, b) for a, b in zip(here, there))


@needs_plugin
def test_validation_runs_on_the_device_path_and_says_where(on_device):
    from autotune.core.validation import establish

    original = module_from_proto(hlo.parse_text(SMALL.read_text()).as_serialized_hlo_module_proto(), "small")
    verdict = establish(on_device, original, original, seed=0)
    assert verdict.level == "executed", verdict.reason
    assert "compiled for h100 by XLA's GPU pipeline without a GPU" in verdict.reason
    assert "outputs compared on jax's CPU device standing in for the h100" in verdict.reason
    changed = SMALL.read_text().replace("c3 = f32[] constant(3)", "c3 = f32[] constant(4)")
    broken = module_from_proto(hlo.parse_text(changed).as_serialized_hlo_module_proto(), "changed")
    verdict = establish(on_device, original, broken, seed=0)
    assert verdict.level == "invalid" and "standing in for the h100" in verdict.reason


@pytest.mark.slow
@needs_plugin
@no_gpu
def test_runtime_for_a_gpu_target_is_refused_without_a_device_and_runs_on_request(tmp_path):
    db = tmp_path / "c.db"
    # The refusals and the run on request are the subject: no screen (tests/test_screen.py has it; the device
    # path's own timing is test_timing_on_the_device_path_...), which cost 11 of this test's 18 s.
    args = ("run", str(SMALL), "--target", "h100", "--objective", "runtime", "--budget", "3", "--no-screen",
            "--confirm-rounds", "4")  # nor the claim's power (test_runtime.py): 4 rounds a measurement
    refused = run_cli(*args, db=db, env={device.PLATFORM_ENV: "auto"})
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "cannot run a h100 program" in refused.stderr and f"{device.PLATFORM_ENV}=cpu" in refused.stderr
    required = run_cli(*args, db=db, env={device.PLATFORM_ENV: "cuda"})
    assert required.returncode == 2 and required.stderr.count("\n") == 1 and "CUDA" in required.stderr
    timed = run_cli(*args, "--json", db=db, env={device.PLATFORM_ENV: "cpu"})
    assert timed.returncode == 0, timed.stderr
    result = json.loads(timed.stdout)
    assert result["objective"] == "runtime" and result["default_cost"] > 0
