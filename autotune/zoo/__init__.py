"""Model zoo: GPT-2, BERT, ResNet, LLM (decode/prefill/train step), T5, ViT and diffusion models in plain JAX,
lowered to HLO text.

Why it exists: the autotuner needs realistic, reproducible HLO modules to tune and to train/test
search strategies on, in numbers, without downloading models. Each family module
(:mod:`~autotune.zoo.gpt2`, :mod:`~autotune.zoo.bert`, :mod:`~autotune.zoo.resnet`,
:mod:`~autotune.zoo.llm`, :mod:`~autotune.zoo.llm_spmd`, :mod:`~autotune.zoo.t5`, :mod:`~autotune.zoo.vit`,
:mod:`~autotune.zoo.diffusion`) exposes the
same small interface, which this package dispatches on:

* a frozen config dataclass (sizes, dtype, optimizer),
* ``KINDS``: what can be lowered (``train``, ``infer`` and sub-graphs such as ``block``),
* ``program(cfg, kind) -> Program`` (a function plus ``jax.ShapeDtypeStruct`` arguments),
* ``canonical(cfg, kind)`` / ``supports(cfg, kind)`` / ``module_name(cfg, kind)``.

Example::

    from autotune.zoo import lower, GPT2Config
    text = lower("gpt2", "train", GPT2Config(layers=2))   # HLO text, module gpt2_train_l2_...
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys
from types import ModuleType
from typing import Any

from autotune.core.child import python_code_command
from autotune.quiet import cuda_plugin_lines_filtered

with cuda_plugin_lines_filtered():  # the CUDA plugin's "Could not find cuda drivers" lines (autotune.quiet)
    import jax
from jax._src import xla_bridge

from autotune.zoo import bert, diffusion, gpt2, llm, llm_spmd, resnet, t5, vit
from autotune.zoo.bert import BertConfig
from autotune.zoo.common import Program, count_instructions, lower_to_hlo
from autotune.zoo.diffusion import DiffusionConfig
from autotune.zoo.gpt2 import GPT2Config
from autotune.zoo.llm import LLMConfig
from autotune.zoo.llm_spmd import SpmdConfig
from autotune.zoo.resnet import ResNetConfig
from autotune.zoo.t5 import T5Config
from autotune.zoo.vit import ViTConfig

#: Family name -> module implementing it.
FAMILIES: dict[str, ModuleType] = {"gpt2": gpt2, "bert": bert, "resnet": resnet, "llm": llm, "llm_spmd": llm_spmd,
                                   "t5": t5, "vit": vit, "diffusion": diffusion}

#: Family name -> its config dataclass.
CONFIGS: dict[str, type] = {"gpt2": GPT2Config, "bert": BertConfig, "resnet": ResNetConfig, "llm": LLMConfig,
                            "llm_spmd": SpmdConfig, "t5": T5Config, "vit": ViTConfig, "diffusion": DiffusionConfig}

Config = GPT2Config | BertConfig | ResNetConfig | LLMConfig | SpmdConfig | T5Config | ViTConfig | DiffusionConfig

#: CPU devices of a process that lowers partitioned programs: the largest mesh anything here asks for
#: is checked against it (:func:`lower`).
LOWERING_DEVICES = 16


def family(name: str) -> ModuleType:
    """The family module for ``name``; a clear error for an unknown one."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown model family {name!r}; expected one of {sorted(FAMILIES)}") from None


def kinds(name: str) -> tuple[str, ...]:
    """Kinds the family can lower (``train``, ``infer``, then its sub-graphs)."""
    return family(name).KINDS


def config_from_dict(name: str, data: dict[str, Any]) -> Config:
    """Rebuild a family's config from :func:`dataclasses.asdict` output (e.g. a manifest entry)."""
    cls = CONFIGS[family(name).FAMILY]
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown {name} config fields: {unknown}")
    return cls(**data)


def program(name: str, kind: str, cfg: Config) -> Program:
    """The :class:`Program` (function + abstract args + module name) for one family/kind/config."""
    return family(name).program(cfg, kind)


def module_name(name: str, kind: str, cfg: Config) -> str:
    """Sanitized module name of ``kind`` of ``cfg`` (after canonicalization)."""
    fam = family(name)
    return fam.module_name(fam.canonical(cfg, kind), kind)


def lower(name: str, kind: str, cfg: Config) -> str:
    """HLO text of one family/kind/config (lowering only, no compile; a partitioned program is
    compiled over CPU devices to read the partitioner's output, see ``llm_spmd``).

    A partitioned program needs as many CPU devices as its mesh, which a jax process fixes when
    its backend starts: unless this process already has them, the program is lowered in a fresh
    process started with :data:`LOWERING_DEVICES` (:func:`init_lowering_process`).
    """
    if xla_bridge.backends_are_initialized():
        return _lower(name, kind, cfg)
    with cuda_plugin_lines_filtered():  # the first program starts jax's backends (autotune.quiet)
        return _lower(name, kind, cfg)


def _lower(name: str, kind: str, cfg: Config) -> str:
    prog = program(name, kind, cfg)
    if prog.devices > LOWERING_DEVICES:
        raise ValueError(f"{prog.name} asks for {prog.devices} devices; at most {LOWERING_DEVICES} are lowered here")
    if prog.devices > 1 and not _has_cpu_devices(prog.devices):
        return _lower_in_child(name, kind, cfg)
    return lower_to_hlo(prog)


def remesh(text: str, sizes: dict[str, int]) -> str:
    """The per-device program of the module ``text`` on its Shardy mesh with axes resized to ``sizes``
    (``{"tensor": 4}``), partitioned by XLA from the shardings the module carries
    (:mod:`autotune.zoo.reshard`); in a fresh process with :data:`LOWERING_DEVICES` CPU devices unless
    this one has enough. ``ValueError`` (one line) for a module or mesh that cannot be partitioned so."""
    from autotune.zoo import reshard

    _, devices = reshard.resized(text, sizes)
    if devices > LOWERING_DEVICES:
        raise ValueError(f"the mesh has {devices} devices; at most {LOWERING_DEVICES} are partitioned here")
    if _has_cpu_devices(devices):
        return reshard.remeshed_here(text, sizes)
    return _in_child("remesh", text, dict(sizes))


def _lower_in_child(name: str, kind: str, cfg: Config) -> str:
    """:func:`lower` in a fresh ``python`` (see :func:`_in_child`)."""
    return _in_child("lower", name, kind, cfg)


def _in_child(job: str, *args: Any) -> str:
    """``job`` (``lower`` or ``remesh``) in a fresh ``python`` started with the CPU devices (a subprocess,
    not multiprocessing: no ``__main__`` guard is asked of the caller's script); its ``ValueError``s come
    back as this process's."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(python_code_command("from autotune.zoo import _child_main; _child_main()"),
                          input=pickle.dumps((job, args)), capture_output=True, env=env)
    if proc.returncode:
        tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        what = module_name(*args) if job == "lower" else "the module"
        raise RuntimeError(f"{job} of {what} failed in its process: {tail[0]}")
    ok, payload = pickle.loads(proc.stdout)
    if not ok:
        raise ValueError(payload)
    return payload


def _child_main() -> None:
    init_lowering_process()
    job, args = pickle.loads(sys.stdin.buffer.read())
    try:
        if job == "remesh":
            from autotune.zoo.reshard import remeshed_here

            result = (True, remeshed_here(*args))
        else:
            result = (True, lower_to_hlo(program(*args)))
    except ValueError as exc:
        result = (False, str(exc))
    sys.stdout.buffer.write(pickle.dumps(result))


def _has_cpu_devices(n: int) -> bool:
    """Whether this process's jax already runs with ``n`` CPU devices (never starts a backend)."""
    return xla_bridge.backends_are_initialized() and len(jax.devices("cpu")) >= n


def init_lowering_process() -> None:
    """Start-up of a process that lowers partitioned programs: CPU only, :data:`LOWERING_DEVICES` devices."""
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", LOWERING_DEVICES)
    with cuda_plugin_lines_filtered():
        jax.devices("cpu")  # started now: lower() in this process sees the devices and lowers here


__all__ = [
    "CONFIGS", "FAMILIES", "LOWERING_DEVICES", "BertConfig", "Config", "DiffusionConfig", "GPT2Config", "LLMConfig",
    "Program", "ResNetConfig", "SpmdConfig", "T5Config", "ViTConfig", "config_from_dict", "count_instructions", "family", "init_lowering_process",
    "kinds", "lower", "lower_to_hlo", "module_name", "program", "remesh",
]
