"""XLA targets: the host CPU, or a GPU named by XLA's ``GpuTargetConfig``, compiled deviceless.

XLA compiles for a named GPU without one present: jax's CUDA plugin compiles for a topology made
from the config (``jax.experimental.topologies.get_topology_desc(platform="cuda", target_config=TEXT)``;
the GPU worker calls the plugin's ``PJRT_Compile`` on such a topology itself, ``pjrt_hlo.py``) and
runs XLA's whole GPU pipeline for the device the config describes. The configs shipped in ``gpu_specs/`` (``a100``, ``h100``, ``h200``, ``b200``) have the
form of XLA's own ``xla/tools/hlo_opt/gpu_specs``; a user's own config is given as a path.

What the GPU target needs that the CPU one does not: jax's CUDA plugin (``pip install
'xla-autotune[gpu]'``; no GPU, driver or CUDA runtime libraries: a compile needs none).
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from autotune.core.target import CPU, Target
from autotune.errors import BadInput, UnknownName
from autotune.pipelines.xla import versions
from autotune.version import install_line

SPECS = Path(__file__).with_name("gpu_specs")
INSTALL_HINT = install_line("gpu")

_FIELDS = {
    "core_count": int, "fpus_per_core": int, "clock_rate_ghz": float, "memory_bandwidth": float,
    "device_memory_size": float, "l2_cache_size": float,
}


@dataclass(frozen=True)
class GpuSpec:
    """One GPU as XLA's GPU compiler sees it: the config text it compiles with and the figures the
    roofline estimate needs (``gpu_cost.py``)."""

    name: str
    config: str
    description: str
    core_count: int
    fpus_per_core: int
    clock_rate_ghz: float
    memory_bandwidth: float  # bytes/s
    device_memory_size: float  # bytes
    l2_cache_size: float
    compute_capability: tuple[int, int]

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.config.encode()).hexdigest()[:10]

    @property
    def target(self) -> Target:
        return Target(self.name, "gpu", self.description, self.digest)

    @property
    def fp32_flops(self) -> float:
        """Peak FP32 FLOP/s of the CUDA cores (an FMA is two flops)."""
        return 2.0 * self.core_count * self.fpus_per_core * self.clock_rate_ghz * 1e9


def known() -> tuple[str, ...]:
    """The GPU names shipped with the package (``gpu_specs/NAME.txtpb``)."""
    return tuple(sorted(p.stem for p in SPECS.glob("*.txtpb")))


def names() -> tuple[str, ...]:
    """Every target a user can name: the CPU first, then the shipped GPUs."""
    return (CPU.name, *known())


def parse_config(text: str, name: str, where: str) -> GpuSpec:
    """A ``GpuTargetConfig`` text proto -> ``GpuSpec``; ``BadInput`` naming what is missing."""
    if "gpu_device_info" not in text:
        raise BadInput(f"{where}: not a GpuTargetConfig text proto (no gpu_device_info)")
    values = {}
    for field, cast in _FIELDS.items():
        m = re.search(rf"\b{field}\s*:\s*([0-9.eE+]+)", text)
        if m is None:
            raise BadInput(f"{where}: GpuTargetConfig without {field}")
        try:
            values[field] = cast(float(m.group(1))) if cast is int else cast(m.group(1))
        except ValueError:
            raise BadInput(f"{where}: GpuTargetConfig {field} is not a number ({m.group(1)})") from None
    cc = re.search(r"cuda_compute_capability\s*\{([^}]*)\}", text)
    if cc is None:
        raise BadInput(f"{where}: GpuTargetConfig without cuda_compute_capability (only NVIDIA GPUs are supported)")
    major = re.search(r"major\s*:\s*(\d+)", cc.group(1))
    minor = re.search(r"minor\s*:\s*(\d+)", cc.group(1))
    desc = re.search(r'device_description_str\s*:\s*"([^"]*)"', text)
    return GpuSpec(name, text, desc.group(1) if desc else name, values["core_count"], values["fpus_per_core"],
                   values["clock_rate_ghz"], values["memory_bandwidth"], values["device_memory_size"],
                   values["l2_cache_size"], (int(major.group(1)) if major else 0, int(minor.group(1)) if minor else 0))


@cache
def _shipped(name: str) -> GpuSpec:
    return parse_config((SPECS / f"{name}.txtpb").read_text(), name, f"gpu_specs/{name}.txtpb")


def resolve(value: str | None) -> GpuSpec | None:
    """``--target`` -> None for the CPU, else the GPU's spec: a shipped name (case-insensitive) or a
    path to a ``GpuTargetConfig`` text proto. ``BadInput`` (one line) for anything else."""
    if value is None or str(value).strip().lower() in ("", CPU.name):
        return None
    text = str(value).strip()
    if text.lower() in known():
        return _shipped(text.lower())
    path = Path(text)
    if path.suffix or "/" in text or path.exists():
        if not path.is_file():
            raise BadInput(f"--target {text}: no such GpuTargetConfig file")
        try:
            config = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInput(f"--target {text}: cannot read ({exc})") from None
        return parse_config(config, path.stem.lower(), str(path))
    raise UnknownName("target", text, list(names()))


def for_device(device_kind: str) -> str | None:
    """The shipped target whose device name is ``device_kind`` (jax's ``Device.device_kind``, e.g.
    ``NVIDIA H100 80GB HBM3`` -> ``h100``), or None when none describes that device."""
    kind = " ".join(device_kind.lower().split())
    for name in known():
        if " ".join(_shipped(name).description.lower().split()) == kind:
            return name
    return None


def plugin_available() -> bool:
    """True when one of jax's CUDA plugins is installed, CUDA 12's or CUDA 13's
    (``versions.CUDA_PLUGINS``): what a deviceless GPU compile needs."""
    for name in versions.at(versions.CUDA_PLUGINS):
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


def require_plugin(spec: GpuSpec) -> None:
    """``BadInput`` (exit 2, one line) when a GPU target is asked for and the plugin is missing."""
    if not plugin_available():
        raise BadInput(f"--target {spec.name} compiles with jax's CUDA plugin, which is not installed: "
                       f"{INSTALL_HINT} (no GPU needed)")
