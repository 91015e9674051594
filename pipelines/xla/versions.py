"""Every name that moved between the jax/jaxlib versions autotune supports, in one place.

The pass *vocabulary* is discovered from the installed compiler at start-up (``inventory.py``); what
cannot be discovered is which of the discovered names plays a given role: where a GPU compile is
stopped, where the tunable GPU region starts, which pass names carry a per-compile number, which
CUDA plugin module to load, how the zoo's lowered text spells a sharding. Each is a table keyed by
the first jaxlib version that has the value (``at`` picks the newest key not above the installed
version), with a docstring saying what changed and where it was checked. ``tests/test_versions.py``
asserts each against what the installed XLA really does, so a new jax that moves a name fails there,
by name, instead of deep inside a run.

Checked on: jaxlib 0.10.2 (Python 3.11), 0.11.2 and 0.12.0.1 (Python 3.12), CPU and the H100 target
compiled deviceless through jax's CUDA 12 plugin; the CUDA 13 plugin on 0.11.2. 0.11.0, 0.11.1 and
0.12.0 were not installed: a key of ``0.11.0`` means "seen on 0.11.2, absent from 0.10.2".
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass
from functools import cache

from autotune.errors import BadInput

#: The oldest jaxlib autotune runs on, and the newest the test suite has passed on.
OLDEST = "0.10.2"
NEWEST_TESTED = "0.12.0.1"
#: Set to 1 to run on a jaxlib outside the range anyway (to try a new release: test_versions says what moved).
ALLOW_UNTESTED_ENV = "AUTOTUNE_ALLOW_UNTESTED_JAX"


def parse(version: str) -> tuple[int, ...]:
    """``"0.12.0.1"`` -> ``(0, 12, 0, 1)``; a local or dev suffix (``0.11.2+cuda``, ``0.12.0.dev1``) is dropped."""
    parts = []
    for piece in re.split(r"[.+]", version.strip()):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    if not parts:
        raise ValueError(f"not a version: {version!r}")
    return tuple(parts)


@cache
def installed() -> str:
    """The installed jaxlib's version (the XLA every compile runs), read without importing jax."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("jaxlib")
    except PackageNotFoundError:
        return "none"


def xla_build(jaxlib_version: str | None = None) -> str:
    """The XLA that records, cache keys and reports name: the jaxlib that carries it, its CPU platform and
    the machine (``jaxlib-0.12.0.1-cpu-x86_64``); default the installed jaxlib."""
    return f"jaxlib-{installed() if jaxlib_version is None else jaxlib_version}-cpu-{platform.machine()}"


def describe_installed() -> str:
    """One line for ``autotune --version``: jax, jaxlib, the XLA they carry and whether autotune supports
    them. Read from the installed distributions, without importing jax (a second, and with the CUDA plugin
    its driver lines)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        jax = version("jax")
    except PackageNotFoundError:
        jax = "none"
    span = f"{OLDEST} to {NEWEST_TESTED}"
    try:
        check_supported()
        support = f"supported: jax/jaxlib {span}"
    except BadInput:
        support = f"NOT supported: autotune runs on jax/jaxlib {span}"
    return f"jax {jax}, jaxlib {installed()}: XLA {xla_build()} ({support})"


def check_supported(version: str | None = None) -> str:
    """The installed jaxlib version if autotune supports it; ``BadInput`` (one line: the range and the
    installed version) if not. The CLI calls this at start-up, before any compile, so an unsupported
    jax fails with that line rather than with a pass name missing somewhere in a run."""
    version = installed() if version is None else version
    span = f"jax/jaxlib {OLDEST} to {NEWEST_TESTED}"
    try:
        inside = parse(OLDEST) <= parse(version) <= parse(NEWEST_TESTED)
    except ValueError:
        inside = False
    if not inside and os.environ.get(ALLOW_UNTESTED_ENV) != "1":
        raise BadInput(f"jaxlib {version} is not supported: autotune runs on {span} "
                       f"(pip install 'jax>={OLDEST},<={NEWEST_TESTED}'; {ALLOW_UNTESTED_ENV}=1 to try it anyway)")
    return version


def at(table: dict[str, object], version: str | None = None):
    """The value of ``table`` (first version that has it -> value) for ``version`` (default: installed)."""
    return table[_key(tuple(table), installed() if version is None else version)]


@cache
def _key(keys: tuple[str, ...], version: str) -> str:
    v = parse(version)
    chosen = min(keys, key=parse)
    for key in sorted(keys, key=parse):
        if parse(key) <= v:
            chosen = key
    return chosen


# ---- XLA's GPU pipeline -------------------------------------------------------------------------------
@dataclass(frozen=True)
class GpuStop:
    """Where a GPU compile ends early (``gpu_worker.py``): ``pass_`` run in ``pipeline`` has turned
    every remaining instruction into a kernel, and the stage after it autotunes kernels, which fails
    cleanly without a device under ``xla_gpu_require_complete_aot_autotune_results``. ``always_on``:
    the names a step never disables, so that the compile reaches that point (and stops there)."""

    pipeline: str
    pass_: str
    always_on: tuple[str, ...]


#: 0.10.2: ``fusion-wrapper`` is the first pass of the ``autotuner`` pipeline, whose autotuning pass
#: fails without a device. From 0.11 (seen on 0.11.2 and 0.12.0.1) ``fusion-wrapper`` is a top-level
#: pipeline of its own, and the stage after it is ``config-assigner`` (its ``conv-fp8-fallback`` runs,
#: then assigning configs fails with ``autotune_cache_hit_required``); there is no ``autotuner``.
#: Checked by dumping the probe module's H100 pipeline (``test_versions.py``).
GPU_STOP: dict[str, GpuStop] = {
    "0.10.2": GpuStop("autotuner", "fusion-wrapper", ("fusion-wrapper", "autotuner")),
    "0.11.0": GpuStop("fusion-wrapper", "fusion-wrapper", ("fusion-wrapper",)),
}

#: The top-level GPU pipeline where tunable actions start: XLA's post-SPMD ``optimization``
#: pipeline (expanders, ``simplification``, ``cse``, ...), as it was on 0.10.2, where it was the first
#: pipeline to run ``algsimp``. From 0.11 ``pre-spmd-partitioner`` runs ``algsimp`` too, so "the first
#: pipeline running algsimp" would have turned ten pre-partitioning passes into actions and pointed
#: ``algsimp``, ``dce`` and others at their pre-SPMD run. The name is the same on 0.10.2, 0.11.2 and
#: 0.12.0.1; what is before it prepares host offloading and SPMD partitioning.
GPU_REGION_START: dict[str, str] = {"0.10.2": "optimization"}


# ---- pass names that carry a number ---------------------------------------------------------------------
#: Pass families whose dump name is ``FAMILY-N``, N counting the compiles of the process (seen from 0.11:
#: the GPU worker's first compile dumps ``apply-xla-transforms-0``, the next ``-1``; the CPU's too).
#: A per-compile name cannot be handed to ``xla_disable_hlo_passes`` beforehand, so the pass runs in
#: every step; it applies the transforms registered from Python, and the GPU worker registers none,
#: so it leaves the module as it is (``test_versions.py`` checks both). The inventory reads every
#: member as the family's name, the name 0.10.2 dumps.
NUMBERED_FAMILIES: dict[str, tuple[str, ...]] = {
    "0.10.2": (),
    "0.11.0": ("apply-xla-transforms",),
}


def family(name: str, version: str | None = None) -> str:
    """``apply-xla-transforms-3`` -> ``apply-xla-transforms`` where that family is numbered; else ``name``."""
    for fam in at(NUMBERED_FAMILIES, version):
        if re.fullmatch(rf"{re.escape(fam)}-\d+", name):
            return fam
    return name


def runs_in_every_step(version: str | None = None) -> frozenset[str]:
    """Families no step can switch off (their names are numbered per compile): see ``NUMBERED_FAMILIES``."""
    return frozenset(at(NUMBERED_FAMILIES, version))


# ---- the pre-scheduler transformation (per-site decisions) ---------------------------------------------
#: Whether a module handed back by a ``register_hlo_module_transformation`` callback keeps the input's
#: input/output aliasing (jax's donated buffers). 0.10.2 rebuilds the module without it, even when the
#: callback returns the bytes it was given: the executable then donates nothing and copies every aliased
#: buffer into a fresh output each step (ResNet-50's 214 passed-through weights: 80 -> 113 ms a step on
#: this CPU). 0.11.2 and 0.12.0.1 keep it. A per-site decision (``sites.py``) pays that copy on 0.10
#: wherever a module aliases; ``tests/test_versions.py`` checks the installed jaxlib against this table.
HOOK_KEEPS_ALIASING: dict[str, bool] = {"0.10.2": False, "0.11.0": True}


def hook_keeps_aliasing(version: str | None = None) -> bool:
    """See ``HOOK_KEEPS_ALIASING``."""
    return bool(at(HOOK_KEEPS_ALIASING, version))


# ---- jax's CUDA plugin --------------------------------------------------------------------------------
#: jax's PJRT plugin modules for NVIDIA GPUs, one per CUDA major version (``jax-cuda12-pjrt``,
#: ``jax-cuda13-pjrt``; each has ``xla_cuda_plugin.so`` beside its ``__init__``, and both register
#: the platform ``cuda``). jax loads whichever is installed; ``pjrt_hlo.cuda_api`` drives the one jax
#: loaded. CUDA 12 first, because that is what jax does with both installed: it discovers
#: ``jax_plugins.*`` in sorted order, registers ``xla_cuda12`` and refuses ``xla_cuda13``
#: ("ALREADY_EXISTS: PJRT_Api already exists for device type cuda") after mapping its library too, so
#: the mapped libraries cannot tell them apart and this order must be jax's (checked on 0.11.2 with
#: both). Checked: 0.10.2/0.11.2/0.12.0.1 with CUDA 12; 0.11.2 with CUDA 13 alone (the H200 machines'
#: jax: same H100 baseline as CUDA 12, 463 instructions for the decode step).
CUDA_PLUGINS: dict[str, tuple[str, ...]] = {
    "0.10.2": ("jax_plugins.xla_cuda12", "jax_plugins.xla_cuda13"),
}


# ---- what the zoo reads in lowered text ---------------------------------------------------------------
#: How the SPMD partitioner's per-device module annotates a parameter split over a mesh axis.
#: 0.10.2: the tile form ``sharding={devices=[1,1,2]<=[2]}``; 0.11.2: the mesh form
#: ``sharding={mesh['model'=2], [{}, {}, {'model'}]}``; 0.12.0.1: no annotation on per-device
#: parameters at all. Checked on the llm_spmd family's tensor-parallel step (``tests/test_zoo_spmd.py``).
PARAMETER_SHARDING: dict[str, str | None] = {"0.10.2": "tiles", "0.11.0": "mesh", "0.12.0": None}


def parameter_sharding(tiles: tuple[int, ...], axis: str, version: str | None = None) -> str | None:
    """A regex for the sharding the partitioner writes on a per-device parameter tiled ``tiles`` ways
    per dimension over mesh ``axis`` (one axis), or None where that version writes none."""
    form = at(PARAMETER_SHARDING, version)
    if form is None:
        return None
    if form == "tiles":
        return re.escape("sharding={devices=[" + ",".join(map(str, tiles)) + "]")
    size = max(tiles)
    dims = ", ".join("{'" + axis + "'}" if t > 1 else "{}" for t in tiles)
    return re.escape(f"sharding={{mesh['{axis}'={size}], [{dims}]}}")
