"""Model zoo: GPT-2, BERT, ResNet and LLM (decode/prefill/train step) models in plain JAX, lowered to HLO text.

Why it exists: the autotuner needs realistic, reproducible HLO modules to tune and to train/test
search strategies on, in numbers, without downloading models. Each family module
(:mod:`~autotune.zoo.gpt2`, :mod:`~autotune.zoo.bert`, :mod:`~autotune.zoo.resnet`,
:mod:`~autotune.zoo.llm`) exposes the
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
from types import ModuleType
from typing import Any

from autotune.zoo import bert, gpt2, llm, resnet
from autotune.zoo.bert import BertConfig
from autotune.zoo.common import Program, count_instructions, lower_to_hlo
from autotune.zoo.gpt2 import GPT2Config
from autotune.zoo.llm import LLMConfig
from autotune.zoo.resnet import ResNetConfig

#: Family name -> module implementing it.
FAMILIES: dict[str, ModuleType] = {"gpt2": gpt2, "bert": bert, "resnet": resnet, "llm": llm}

#: Family name -> its config dataclass.
CONFIGS: dict[str, type] = {"gpt2": GPT2Config, "bert": BertConfig, "resnet": ResNetConfig, "llm": LLMConfig}

Config = GPT2Config | BertConfig | ResNetConfig | LLMConfig


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
    """HLO text of one family/kind/config (lowering only, no compile)."""
    return lower_to_hlo(program(name, kind, cfg))


__all__ = [
    "CONFIGS", "FAMILIES", "BertConfig", "Config", "GPT2Config", "LLMConfig", "Program", "ResNetConfig",
    "config_from_dict", "count_instructions", "family", "kinds", "lower", "lower_to_hlo",
    "module_name", "program",
]
