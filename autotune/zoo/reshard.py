"""A real step's per-device program on another mesh, partitioned by XLA from the shardings the step carries.

Why: every real multi-GPU step is a partitioned program, and a policy or a search tuned on generated
steps must be checked on real ones it has never seen. A dump of a jax (MaxText, ...) step keeps its
mesh and every sharding its authors wrote as Shardy frontend attributes, even when the step ran on
one device (every axis of size 1, every instruction replicated):

    HloModule jit__generate_jit, ..., frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<["data"=1, "tensor"=1, ...]>}}
    %wq = f32[4096,32,32,128] parameter(19), sharding={replicated},
          frontend_attributes={xla.sdy.sharding="#sdy.sharding<@mesh, [{\\"fsdp\\"}, {}, {\\"tensor\\"}, {}]>"}

Resizing the mesh's axes (``tensor=4``) and compiling the module for that many partitions with Shardy
gives the per-device program XLA would run for the step on that mesh, with the collectives its
authors' shardings imply (all-gather, all-reduce, all-to-all, collective-permute) and the
partition-id arithmetic: the program a dump of the same job on 4 GPUs would hold after SPMD
partitioning, made from the single-device dump. Only the mesh is chosen here; every sharding is the
step's own.

The module's ``input_output_alias`` is dropped before partitioning: where a step's output is sharded
unlike the input it aliases (a KV cache read replicated and written split by heads), the aliased
buffers no longer have one shape and the compile would refuse the module. Aliasing decides buffer
reuse only; no pass autotune orders reads it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import numpy as np
from jax._src.lib import _jax
from jax.extend.backend import get_backend

from autotune.core.metrics import COLLECTIVE_OPCODES
from autotune.pipelines.xla import hlo
from autotune.zoo.common import partitioner_output

#: The mesh a dump declares: ``xla.sdy.meshes={mesh = #sdy.mesh<["data"=1, "tensor"=1]>}``.
_MESHES = re.compile(r"xla\.sdy\.meshes=\{(.*?)\}\}?(?:,|$)")
_MESH = re.compile(r'(\w+) = #sdy\.mesh<\[([^\]]*)\]')
_AXIS = re.compile(r'"([^"]+)"=(\d+)')
_COLLECTIVE = re.compile(r"\s(?:" + "|".join(sorted(map(re.escape, COLLECTIVE_OPCODES), key=len, reverse=True))
                         + r")\(")
_ALIAS = re.compile(r"input_output_alias=\{(?:[^()]*?\([^()]*\))*\s*\},\s*")


def mesh_axes(text: str) -> dict[str, int]:
    """The axes (name -> size) of the one Shardy mesh ``text``'s header declares; ``ValueError`` when
    it declares none (a module without Shardy shardings: nothing to partition it by) or several."""
    header = text.split("\n", 1)[0]
    found = _MESHES.search(header)
    meshes = _MESH.findall(found.group(1)) if found else []
    if not meshes:
        raise ValueError("the module declares no Shardy mesh (xla.sdy.meshes): it carries no shardings to "
                         "partition it by; dump the step from jax with its shardings (a jit with in_shardings)")
    if len(meshes) > 1:
        raise ValueError(f"the module declares {len(meshes)} Shardy meshes; one is supported")
    return {name: int(size) for name, size in _AXIS.findall(meshes[0][1])}


def parse_mesh(spec: str) -> dict[str, int]:
    """``"tensor=4,fsdp=2"`` -> ``{"tensor": 4, "fsdp": 2}``; ``ValueError`` on anything else."""
    sizes: dict[str, int] = {}
    for part in (p.strip() for p in spec.split(",")):
        name, eq, size = part.partition("=")
        if not eq or not name or not size.isdigit() or int(size) < 1:
            raise ValueError(f"mesh {spec!r}: expected AXIS=N[,AXIS=N] with N >= 1, got {part!r}")
        sizes[name.strip()] = int(size)
    return sizes


def devices_of(sizes: Mapping[str, int]) -> int:
    """How many devices a mesh of these axis sizes has."""
    return math.prod(sizes.values())


def collective_count(text: str) -> int:
    """Collectives in HLO text (``COLLECTIVE_OPCODES``: the ones a run counts)."""
    return len(_COLLECTIVE.findall(text))


def resized(text: str, sizes: Mapping[str, int]) -> tuple[str, int]:
    """``text`` with its mesh axes resized and its aliases dropped, and the device count of the new mesh.

    ``ValueError`` names an axis the mesh does not have, or a mesh of one device."""
    axes = mesh_axes(text)
    unknown = sorted(set(sizes) - set(axes))
    if unknown:
        raise ValueError(f"the module's mesh has no axis {', '.join(unknown)}; its axes: {', '.join(axes)}")
    new = {**axes, **sizes}
    devices = devices_of(new)
    if devices < 2:
        raise ValueError(f"a mesh of {devices} device partitions nothing; give an axis a size of 2 or more")
    header, rest = text.split("\n", 1)
    mesh_text = ", ".join(f'"{name}"={size}' for name, size in new.items())
    header = _MESH.sub(lambda m: f"{m.group(1)} = #sdy.mesh<[{mesh_text}]", header, count=1)
    header = _ALIAS.sub("", header, count=1)
    return header + "\n" + rest, devices


def remeshed_here(text: str, sizes: Mapping[str, int]) -> str:
    """The per-device program of ``text`` on its mesh with ``sizes``, partitioned in this process (which
    needs as many CPU devices as the new mesh has: :func:`autotune.zoo.remesh` provides them)."""
    new_text, devices = resized(text, sizes)
    backend = get_backend("cpu")
    have = backend.devices()
    if len(have) < devices:
        raise ValueError(f"the mesh has {devices} devices; this process has {len(have)} CPU devices")
    try:
        mlir = _jax.mlir.hlo_to_stablehlo(hlo.parse_text(new_text).as_serialized_hlo_module_proto())
    except Exception as exc:  # noqa: BLE001 - XLA's parser/converter errors are its own types
        raise ValueError(f"XLA cannot read the module: {str(exc).splitlines()[0]}") from None

    def compile_with(dump: dict) -> None:
        options = _jax.CompileOptions()
        build = options.executable_build_options
        build.num_replicas, build.num_partitions, build.use_spmd_partitioning = 1, devices, True
        build.use_shardy_partitioner = True
        build.device_assignment = _jax.DeviceAssignment.create(np.arange(devices, dtype=np.int32).reshape(1, devices))
        options.env_option_overrides = list(dump.items())
        backend.compile_and_load(mlir, _jax.DeviceList(tuple(have[:devices])), options)

    try:
        name = re.match(r"HloModule ([^\s,]+)", text)
        return partitioner_output(compile_with, name.group(1) if name else "the module")
    except RuntimeError as exc:
        raise ValueError(str(exc).splitlines()[0]) from None
