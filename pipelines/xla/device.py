"""Where a GPU target's executions (validation's runs, the ``runtime`` objective's timings) happen.

A GPU target's steps compile deviceless, on any machine. Running a module is another matter: on a
machine where jax sees a CUDA device, a tuned module for ``--target h200`` should run and be timed on
that device, with the device's memory as the limit; elsewhere its outputs can only be compared on the
host CPU, and timing it there would time the wrong machine. ``choose`` decides, from the target, an
explicit request (``AUTOTUNE_EXECUTION_PLATFORM`` or the backend's ``execution_platform``) and what jax
sees; everything else follows from its answer:

* ``None``: the host worker as before (the CPU target always; a GPU target with no CUDA device:
  outputs compared on the host CPU, ``runtime`` refused, see ``missing``);
* ``Execution("cuda")``: a one-process pool of ``device_worker.XlaDeviceWorker`` on the CUDA device;
* ``Execution("cpu")``: the *same* device worker on jax's CPU device. It is the opt-in to time and
  validate a GPU target's modules on this CPU (``AUTOTUNE_EXECUTION_PLATFORM=cpu``), and the path CI
  exercises, since CI has no GPU: the code that runs on the CUDA device is the code tested there.

Why the driver does not import jax to find out: it would cost a second per run and print the CUDA
plugin's driver lines. The driver's files come first (no NVIDIA driver, no CUDA device), then one child
process asks jax (``cuda_devices``), once per process, and only for a GPU target on a machine with a driver.
"""

from __future__ import annotations

import glob
import os
import subprocess
from dataclasses import dataclass
from functools import lru_cache

from autotune.core.child import python_code_command
from autotune.errors import BadInput

#: Names the platform a GPU target's executions use: ``auto`` (default: the CUDA device when jax sees
#: one), ``cuda`` (required: refuse without one), ``cpu`` (jax's CPU device, through the device path).
PLATFORM_ENV = "AUTOTUNE_EXECUTION_PLATFORM"
PLATFORMS = ("auto", "cuda", "cpu")
#: Share of the GPU's memory jax's allocator may take in the device worker (jax's default is 75%):
#: learnt on the H200, where DeepSeek-V2's 58.6 GiB of inputs and 57 GiB temporary did not fit in 75%
#: of 139 GiB (``bench/gpu.py``). The worker is the device's only user. A value set by the user wins.
MEM_FRACTION = "0.95"


@dataclass(frozen=True)
class Execution:
    """The chosen execution platform (``cuda`` or ``cpu``, jax's names) and why, in words."""

    platform: str
    why: str

    @property
    def on_gpu(self) -> bool:
        return self.platform == "cuda"


def requested(value: str | None = None) -> str:
    """The requested platform: ``value`` if given, else ``$AUTOTUNE_EXECUTION_PLATFORM``, else ``auto``."""
    source = "execution_platform"
    if value is None:
        value, source = os.environ.get(PLATFORM_ENV) or "auto", PLATFORM_ENV
    value = str(value).strip().lower()
    if value not in PLATFORMS:
        raise BadInput(f"{source}={value!r}: expected one of {', '.join(PLATFORMS)}")
    return value


def choose(target, request: str = "auto", cuda: int | None = None) -> Execution | None:
    """Where ``target``'s executions run (see the module docstring); ``cuda`` is how many CUDA devices
    jax sees (None: not asked, treated as none). ``BadInput`` for a request that cannot be met."""
    if not target.is_gpu:
        if request == "cuda":
            raise BadInput(f"{PLATFORM_ENV}=cuda: target {target.name} runs on the host CPU; a CUDA device "
                           f"executes only a GPU target's modules (--target h100, h200, ...)")
        return None
    if request == "cpu":
        return Execution("cpu", f"{PLATFORM_ENV}=cpu: jax's CPU device stands in for the {target.name}")
    if cuda:
        return Execution("cuda", f"jax sees {cuda} CUDA device(s)")
    if request == "cuda":
        raise BadInput(f"{PLATFORM_ENV}=cuda: {missing(target)}")
    return None


def missing(target) -> str:
    """What is missing to execute ``target``'s modules on it, in one clause."""
    why = "no NVIDIA driver or GPU here, so jax sees no CUDA device" if not driver_present() else \
        "jax sees no CUDA device although an NVIDIA driver is here (is jax's CUDA plugin, xla-autotune[gpu], installed?)"
    return f"this machine cannot run a {target.name} program: {why}"


def driver_present() -> bool:
    """Does this machine have an NVIDIA driver with a device (its files, nothing loaded)?"""
    return bool(glob.glob("/dev/nvidia[0-9]*")) or bool(glob.glob("/proc/driver/nvidia/gpus/*"))


#: The child process that asks jax how many CUDA devices it sees (its own process: a CUDA failure, or
#: the plugin's log lines, stay there).
_PROBE = ("import os, jax\n"
          "try:\n    print(len(jax.devices('cuda')))\nexcept Exception:\n    print(0)\n")


@lru_cache(maxsize=1)
def cuda_devices(timeout: float = 120.0) -> int:
    """How many CUDA devices jax sees here (0 without a driver, without asking jax)."""
    if not driver_present():
        return 0
    env = {**os.environ, "JAX_PLATFORMS": "cuda", "TF_CPP_MIN_LOG_LEVEL": "3"}
    try:
        out = subprocess.run(python_code_command(_PROBE), capture_output=True, text=True, timeout=timeout, env=env)
        return int(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout.strip() else 0
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return 0


def worker_env(platform: str, base: dict) -> dict:
    """The device worker's environment: ``base`` (the step workers') with jax pointed at ``platform``;
    on a GPU, the allocator's share of its memory (``MEM_FRACTION`` unless the user set one)."""
    env = {**base, "JAX_PLATFORMS": platform}
    if platform == "cuda":
        env.pop("XLA_FLAGS", None)  # the host device count is for the CPU workers' partitioned runs
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", MEM_FRACTION)
    return env
