"""The benchmark suite: a fixed grid of zoo modules, a leak-free train/test split, and a generator.

Why a fixed grid: strategies are compared (and learned strategies trained) on the suite, so the
set of modules must be the same on every machine and every run for a given jax version. The grid
is written out below, not sampled; :func:`configs` only canonicalizes and de-duplicates it.

Why a grouped split: a learned strategy evaluated on a module whose model configuration it was
trained on (the same model's ``infer`` graph, say) measures memorization. :func:`split` assigns
whole model configurations (all kinds of one config) to one side.

The LLM family (decode, prefill and train steps; see :mod:`autotune.zoo.llm`) is the part of the
suite with headroom (results/llm_headroom.md); its grid crosses the structural axes that headroom
comes from and is split on its own (:data:`OWN_SPLIT`), with every kind of a model on one side.

Instruction counts: every grid entry lowers to 100..20,000 instructions (checked by the tests on a
sample and by :func:`generate` on everything it writes); sizes that matter to the count (layers,
blocks, optimizer, dtype, bias/MLP variants) are varied on purpose, while shapes (width, heads,
sequence, batch, vocabulary, image) vary alongside so that no two modules are the same program.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import itertools
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MIN_INSTRUCTIONS = 100
MAX_INSTRUCTIONS = 20_000

OPTIMIZERS = ("adam", "sgd", "adam_flat", "sgd_flat")
DTYPES = ("f32", "bf16")

#: Families split on their own rather than in the shared pool of the original three families.
OWN_SPLIT = frozenset({"llm", "llm_spmd", "t5", "vit", "diffusion"})


@dataclass(frozen=True)
class SuiteEntry:
    """One module of the suite: ``name`` is also the module name and the file stem."""

    name: str
    family: str
    kind: str
    config: Any  # a family config dataclass (frozen, hashable)

    def config_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self.config)

    def group(self) -> str:
        """The model configuration this entry belongs to, ignoring the kind (the split's unit).

        A family may define ``group_key(config)`` to say which fields make the model (the LLM
        family leaves out the optimizer and the cache update, so a model's decode, prefill and
        train steps always land on one side); otherwise the whole config is the model.
        """
        from autotune.zoo import family

        fam = family(self.family)
        key = fam.group_key(self.config) if hasattr(fam, "group_key") else self.config_dict()
        return json.dumps({"family": self.family, "config": key}, sort_keys=True)


@dataclass(frozen=True)
class ManifestEntry:
    """What :func:`generate` wrote for one entry."""

    name: str
    family: str
    kind: str
    config: dict[str, Any]
    instructions: int
    sha256: str
    split: str
    file: str
    jax_version: str


@dataclass
class Manifest:
    """Everything :func:`generate` wrote (``entries``) and skipped (with the reason)."""

    jax_version: str
    entries: list[ManifestEntry] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "jax_version": self.jax_version,
            "count": len(self.entries),
            "entries": [dataclasses.asdict(e) for e in self.entries],
            "skipped": self.skipped,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        return cls(
            jax_version=data["jax_version"],
            entries=[ManifestEntry(**e) for e in data["entries"]],
            skipped=list(data.get("skipped", [])),
        )


def load_manifest(out_dir: str | os.PathLike[str]) -> Manifest:
    """Read ``manifest.json`` of a generated suite directory."""
    return Manifest.from_json(json.loads((Path(out_dir) / "manifest.json").read_text(encoding="utf-8")))


def modules(out_dir: str | os.PathLike[str], side: str | None = None) -> list[Path]:
    """Paths of a generated suite's modules, optionally only one side of the split ('train'/'test')."""
    if side not in (None, "train", "test"):
        raise ValueError(f"side must be 'train', 'test' or None, got {side!r}")
    manifest = load_manifest(out_dir)
    return [Path(out_dir) / e.file for e in manifest.entries if side is None or e.split == side]


# --------------------------------------------------------------------------------------------
# The grid
# --------------------------------------------------------------------------------------------

# Shapes cycle independently of the structural axes (different cycle lengths), so every depth is
# seen with several widths/sequence lengths and every optimizer/dtype with several shapes.
_GPT2_SHAPES: tuple[dict[str, int], ...] = (
    {"d_model": 64, "heads": 2, "seq": 32, "batch": 2, "vocab": 128},
    {"d_model": 128, "heads": 4, "seq": 64, "batch": 4, "vocab": 256},
    {"d_model": 256, "heads": 8, "seq": 128, "batch": 2, "vocab": 512},
    {"d_model": 96, "heads": 3, "seq": 48, "batch": 8, "vocab": 384},
    {"d_model": 192, "heads": 6, "seq": 32, "batch": 4, "vocab": 1024},
)
_GPT2_VARIANTS: tuple[dict[str, Any], ...] = ({}, {"bias": False}, {"mlp_ratio": 2}, {"mlp_ratio": 0, "bias": False})
_GPT2_LAYERS = (0, 1, 2, 3, 4, 6, 8, 12, 16)

_BERT_SHAPES: tuple[dict[str, int], ...] = (
    {"d_model": 64, "heads": 2, "seq": 32, "batch": 2, "vocab": 128},
    {"d_model": 128, "heads": 4, "seq": 64, "batch": 4, "vocab": 512},
    {"d_model": 256, "heads": 4, "seq": 128, "batch": 2, "vocab": 1024},
    {"d_model": 192, "heads": 6, "seq": 48, "batch": 8, "vocab": 256},
    {"d_model": 96, "heads": 2, "seq": 64, "batch": 4, "vocab": 384, "type_vocab": 4},
)
_BERT_VARIANTS: tuple[dict[str, Any], ...] = ({}, {"mlp_ratio": 2})
_BERT_LAYERS = (1, 2, 3, 4, 6, 8, 12)

_RESNET_SHAPES: tuple[dict[str, int], ...] = (
    {"width": 8, "image": 16, "batch": 2},
    {"width": 16, "image": 32, "batch": 4},
    {"width": 12, "image": 24, "batch": 8, "classes": 100},
    {"width": 32, "image": 32, "batch": 2},
    {"width": 8, "image": 64, "batch": 4, "channels": 1},
)
_RESNET_DEPTHS = ((1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (3, 2), (3, 3), (4, 1), (4, 2), (4, 4))

#: Model configurations per depth. Each config contributes every kind it supports.
_PER_DEPTH = 5

# LLM: every combination of the structural axes that the real LLM headroom comes from (attention
# grouping x feed-forward x scan x KV-cache update) appears _LLM_REPEATS times, each time with
# another shape, depth, normalization, position scheme, dtype and optimizer (independent cycles).
# The attention is written with einsum throughout: ``attn_layout="transpose"`` (see autotune.zoo.llm)
# is not in the grid; crossed into half of it, it made the policy trained on the family worse on
# the real LLM steps (measured, see the module's docstring).
_LLM_ATTENTION = ("mha", "gqa", "mqa")  # and latent attention (MLA), see _llm_configs
_LLM_EXPERTS = ((0, 2), (4, 1), (0, 2), (8, 2))  # (experts, top_k); dense half the time
_LLM_SCAN = (True, False)
_LLM_CACHE = ("dus", "scatter")
_LLM_REPEATS = 3
_LLM_SHAPES: tuple[dict[str, int], ...] = (
    {"d_model": 64, "heads": 4, "ffn": 128, "vocab": 256, "seq": 32, "batch": 2},
    {"d_model": 128, "heads": 8, "ffn": 256, "vocab": 512, "seq": 64, "batch": 1},
    {"d_model": 96, "heads": 6, "ffn": 192, "vocab": 384, "seq": 48, "batch": 4},
    {"d_model": 32, "heads": 4, "ffn": 96, "vocab": 128, "seq": 16, "batch": 8},
    {"d_model": 128, "heads": 4, "ffn": 512, "vocab": 1024, "seq": 32, "batch": 2},
    {"d_model": 48, "heads": 4, "ffn": 64, "vocab": 200, "seq": 24, "batch": 3},
    {"d_model": 160, "heads": 8, "ffn": 320, "vocab": 320, "seq": 40, "batch": 2},
)
_LLM_LAYERS_SCAN = (2, 4, 8, 16, 32, 6)
_LLM_LAYERS_UNROLLED = (1, 2, 3, 2, 3, 1)
_LLM_STYLE = (
    {"norm": "rms", "mlp": "swiglu", "positions": "rope"},
    {"norm": "layer", "mlp": "gelu", "positions": "learned"},
    {"norm": "rms", "mlp": "swiglu", "positions": "learned"},
    {"norm": "layer", "mlp": "gelu", "positions": "rope"},
    {"norm": "rms", "mlp": "gelu", "positions": "rope"},
)
_LLM_DTYPES = ("mixed", "bf16", "f32")


def _llm_kv_heads(attention: str, heads: int, j: int) -> int:
    if attention == "mha":
        return heads
    if attention == "mqa":
        return 1
    options = [k for k in (2, 3, 4) if heads % k == 0 and k < heads]
    return options[j % len(options)]


def _llm_configs() -> list[Any]:
    """The LLM grid: each structural combination, _LLM_REPEATS times with varied sizes/styles.

    Latent attention (DeepSeek-V2's MLA) comes after the rest, so that the configs before it kept
    their sizes and styles when it joined: every feed-forward x scan x cache combination
    _LLM_REPEATS times, the latent half or a quarter of d_model, rotary positions always (MLA's
    decoupled rope).
    """
    from autotune.zoo import LLMConfig

    def combinations(attentions):
        return itertools.product(range(_LLM_REPEATS), attentions, _LLM_EXPERTS, _LLM_SCAN, _LLM_CACHE)

    out = []
    grid = [*combinations(_LLM_ATTENTION), *combinations(("mla",))]
    for j, (rep, attention, (experts, top_k), scan, cache) in enumerate(grid):
        structure = dict(experts=experts, top_k=top_k, scan=scan, cache=cache)
        shape = _LLM_SHAPES[j % len(_LLM_SHAPES)]
        layers = _LLM_LAYERS_SCAN if scan else _LLM_LAYERS_UNROLLED
        style = dict(_LLM_STYLE[(j // 3) % len(_LLM_STYLE)])
        if attention == "mla":
            heads = dict(kv_heads=shape["heads"], latent=shape["d_model"] // (4 if (j // 2) % 2 else 2))
            style["positions"] = "rope"
        else:
            kv = _llm_kv_heads(attention, shape["heads"], j // len(_LLM_SHAPES))
            heads = dict(kv_heads=kv, kv_repeat=kv != shape["heads"] and (j // 5) % 2 == 1)
        out.append(LLMConfig(
            layers=layers[(j // 4) % len(layers)], **shape, **heads, **structure, **style,
            remat=(j + rep) % 3 == 2, optimizer=OPTIMIZERS[(j // 3) % len(OPTIMIZERS)],
            dtype=_LLM_DTYPES[(j // 5) % len(_LLM_DTYPES)],
        ))
    return out


# The partitioned LLM steps (autotune.zoo.llm_spmd): every parallel style over two or three device
# counts, each _SPMD_REPEATS times with another model (attention, feed-forward, scan, cache update,
# style, dtype and size cycle independently). Shapes are chosen so that 8 devices divide what every
# style splits (batch, heads, feed-forward, half the sequence, d_model); ep's models have 8 experts.
_SPMD_MESHES = (("dp", 2), ("dp", 8), ("fsdp", 4), ("fsdp", 8), ("tp", 2), ("tp", 4), ("tp", 8), ("sp", 2),
                ("sp", 4), ("sp", 8), ("dp_tp", 4), ("dp_tp", 8), ("ep", 4), ("ep", 8))
_SPMD_REPEATS = 2
_SPMD_SHAPES: tuple[dict[str, int], ...] = (
    {"d_model": 64, "heads": 8, "ffn": 128, "vocab": 256, "seq": 32, "batch": 8},
    {"d_model": 128, "heads": 8, "ffn": 256, "vocab": 512, "seq": 64, "batch": 8},
    {"d_model": 96, "heads": 8, "ffn": 192, "vocab": 384, "seq": 32, "batch": 16},
)
_SPMD_ATTENTION = ({"kv_heads": 2}, {"kv_heads": 8}, {"kv_heads": 4, "kv_repeat": True}, {"kv_heads": 1},
                   {"kv_heads": 8, "latent": 32})
_SPMD_EXPERTS = ((0, 2), (4, 1), (0, 2))
#: Context parallelism written in shard_map (``cp``: train and prefill, not latent attention), after the
#: rest so that the entries above kept their models when it joined; ring attention (``ring``: the key/value
#: blocks passed around the devices by collective-permute) after that, for the same reason.
_SPMD_MANUAL = (("cp", 2), ("cp", 4), ("cp", 8))
_SPMD_RING = (("ring", 2), ("ring", 4), ("ring", 8))


def _llm_spmd_configs() -> list[Any]:
    """The partitioned LLM grid (see the comment above)."""
    from autotune.zoo import SpmdConfig
    from autotune.zoo.llm_spmd import MANUAL_STYLES

    out = []
    grid = [*itertools.product(range(_SPMD_REPEATS), _SPMD_MESHES),
            *itertools.product(range(_SPMD_REPEATS), _SPMD_MANUAL), *itertools.product(range(_SPMD_REPEATS), _SPMD_RING)]
    for j, (rep, (style, devices)) in enumerate(grid):
        experts, top_k = (8, 2) if style == "ep" else _SPMD_EXPERTS[j % len(_SPMD_EXPERTS)]
        scan = (j + rep) % 2 == 0
        attention = dict(_SPMD_ATTENTION[j % (len(_SPMD_ATTENTION) - (style in MANUAL_STYLES))])  # not latent
        style_knobs = dict(_LLM_STYLE[j % len(_LLM_STYLE)])
        if attention.get("latent"):
            style_knobs["positions"] = "rope"
        out.append(SpmdConfig(
            layers=((2, 4) if scan else (1, 2))[(j // 3) % 2], **_SPMD_SHAPES[j % len(_SPMD_SHAPES)], **attention,
            experts=experts, top_k=top_k, scan=scan, cache=_LLM_CACHE[(j // 2) % 2], **style_knobs,
            remat=j % 3 == 1, optimizer=OPTIMIZERS[j % len(OPTIMIZERS)], dtype=_LLM_DTYPES[j % len(_LLM_DTYPES)],
            parallel=style, devices=devices,
        ))
    return out


# The encoder-decoder, vision and diffusion families (autotune.zoo.t5 / vit / diffusion): each family's
# structural axes crossed, _OTHER_REPEATS times, with shapes, depths, dtypes and optimizers cycling
# independently. Why they exist: issue 31 (learning that generalises beyond decoder-only LLM steps).
_OTHER_REPEATS = 3
_T5_SHAPES: tuple[dict[str, int], ...] = (
    {"d_model": 64, "heads": 4, "ffn": 128, "vocab": 256, "seq": 32, "tgt": 16, "batch": 2},
    {"d_model": 128, "heads": 8, "ffn": 256, "vocab": 512, "seq": 64, "tgt": 32, "batch": 1},
    {"d_model": 96, "heads": 6, "ffn": 192, "vocab": 384, "seq": 48, "tgt": 16, "batch": 4},
    {"d_model": 48, "heads": 4, "ffn": 128, "vocab": 200, "seq": 24, "tgt": 24, "batch": 3},
    {"d_model": 160, "heads": 8, "ffn": 320, "vocab": 320, "seq": 40, "tgt": 20, "batch": 2},
)
_T5_LAYERS_SCAN = ((2, 2), (4, 4), (6, 2), (8, 8), (3, 6))
_T5_LAYERS_UNROLLED = ((1, 1), (2, 2), (3, 1), (2, 3))
_T5_BUCKETS = ({"buckets": 32, "max_distance": 128}, {"buckets": 16, "max_distance": 64})
_VIT_SHAPES: tuple[dict[str, int], ...] = (
    {"image": 32, "patch": 8, "d_model": 64, "heads": 4, "batch": 4},
    {"image": 32, "patch": 4, "d_model": 96, "heads": 6, "batch": 2, "classes": 100},
    {"image": 64, "patch": 16, "d_model": 128, "heads": 8, "batch": 2},
    {"image": 48, "patch": 8, "d_model": 48, "heads": 3, "batch": 8, "channels": 1},
    {"image": 56, "patch": 14, "d_model": 192, "heads": 6, "batch": 2, "classes": 1000},
)
_VIT_LAYERS_SCAN = (2, 4, 6, 8, 12)
_VIT_LAYERS_UNROLLED = (1, 2, 3, 4)
_DIT_SHAPES: tuple[dict[str, int], ...] = (
    {"image": 16, "channels": 4, "patch": 2, "width": 64, "heads": 4, "batch": 2},
    {"image": 32, "channels": 4, "patch": 4, "width": 96, "heads": 6, "batch": 4, "classes": 1000},
    {"image": 8, "channels": 8, "patch": 2, "width": 128, "heads": 8, "batch": 2},
)
_UNET_SHAPES: tuple[dict[str, int], ...] = (
    {"image": 16, "channels": 4, "width": 32, "groups": 8, "heads": 4, "batch": 2},
    {"image": 32, "channels": 3, "width": 16, "groups": 4, "heads": 2, "batch": 2, "classes": 1000},
    {"image": 8, "channels": 4, "width": 64, "groups": 16, "heads": 8, "batch": 4},
)
_UNET_DEPTHS = ((2, 1), (2, 2), (3, 1))  # (levels, residual blocks per level)


def _t5_configs() -> list[Any]:
    """Scan x feed-forward x tied head, each _OTHER_REPEATS times with another shape and depth."""
    from autotune.zoo import T5Config

    out = []
    grid = itertools.product(range(_OTHER_REPEATS), (True, False), ("gated_gelu", "relu"), (False, True))
    for j, (_, scan, ffn_kind, tied) in enumerate(grid):
        layers = _T5_LAYERS_SCAN if scan else _T5_LAYERS_UNROLLED
        enc, dec = layers[(j // 2) % len(layers)]
        out.append(T5Config(enc_layers=enc, dec_layers=dec, **_T5_SHAPES[j % len(_T5_SHAPES)],
                            **_T5_BUCKETS[(j // 3) % 2], ffn_kind=ffn_kind, tied=tied, scan=scan,
                            optimizer=OPTIMIZERS[j % len(OPTIMIZERS)], dtype=_LLM_DTYPES[(j // 5) % len(_LLM_DTYPES)]))
    return out


def _vit_configs() -> list[Any]:
    """Patch embedding x pooling x scan, each _OTHER_REPEATS times with another shape and depth."""
    from autotune.zoo import ViTConfig

    out = []
    grid = itertools.product(range(_OTHER_REPEATS), ("conv", "linear"), ("cls", "gap"), (True, False))
    for j, (_, patch_embed, pool, scan) in enumerate(grid):
        layers = _VIT_LAYERS_SCAN if scan else _VIT_LAYERS_UNROLLED
        out.append(ViTConfig(layers=layers[(j // 2) % len(layers)], **_VIT_SHAPES[j % len(_VIT_SHAPES)],
                             mlp_ratio=(4, 4, 2)[(j // 3) % 3], patch_embed=patch_embed, pool=pool, scan=scan,
                             **_cycle(j)))
    return out


def _diffusion_configs() -> list[Any]:
    """DiT (guidance x scan) and UNet (guidance x depth), each _OTHER_REPEATS times with another shape."""
    from autotune.zoo import DiffusionConfig

    out = []
    dit = itertools.product(range(_OTHER_REPEATS), (True, False), (True, False))
    for j, (_, guidance, scan) in enumerate(dit):
        out.append(DiffusionConfig(arch="dit", layers=(2, 4, 3, 6)[(j // 3) % 4] * (1 + scan),
                                   **_DIT_SHAPES[j % len(_DIT_SHAPES)], guidance=guidance, scan=scan, **_cycle(j)))
    unet = itertools.product(range(2 * _OTHER_REPEATS), (True, False))
    for j, (_, guidance) in enumerate(unet):
        levels, blocks = _UNET_DEPTHS[(j // 2) % len(_UNET_DEPTHS)]
        out.append(DiffusionConfig(arch="unet", layers=blocks, levels=levels, **_UNET_SHAPES[j % len(_UNET_SHAPES)],
                                   guidance=guidance, **_cycle(j + 1)))
    return out


def _excluded(family_name: str, cfg: Any, kind: str) -> bool:
    """Grid points left out because they fall below MIN_INSTRUCTIONS by construction.

    A zero-layer GPT-2's forward pass is one gather and one dot (~60 instructions); its training
    step and loss sub-graph are large enough and stay in.
    """
    return family_name == "gpt2" and kind == "infer" and cfg.layers == 0



def _cycle(j: int) -> dict[str, Any]:
    """Optimizer and dtype of the j-th config of a family: all 8 pairs in every 8 consecutive j."""
    return {"optimizer": OPTIMIZERS[j % len(OPTIMIZERS)], "dtype": DTYPES[(j // len(OPTIMIZERS)) % len(DTYPES)]}


def _model_configs() -> list[tuple[str, Any]]:
    """The raw grid: (family, model config) in a fixed order, before kinds and de-duplication."""
    from autotune.zoo import BertConfig, GPT2Config, ResNetConfig

    out: list[tuple[str, Any]] = []
    j = 0
    for layers in _GPT2_LAYERS:
        for _ in range(_PER_DEPTH):
            shape = _GPT2_SHAPES[j % len(_GPT2_SHAPES)]
            variant = _GPT2_VARIANTS[(j // 2) % len(_GPT2_VARIANTS)]
            out.append(("gpt2", GPT2Config(layers=layers, **shape, **variant, **_cycle(j))))
            j += 1
    j = 0
    for layers in _BERT_LAYERS:
        for _ in range(_PER_DEPTH):
            shape = _BERT_SHAPES[j % len(_BERT_SHAPES)]
            variant = _BERT_VARIANTS[(j // 3) % len(_BERT_VARIANTS)]
            out.append(("bert", BertConfig(layers=layers, **shape, **variant, **_cycle(j))))
            j += 1
    j = 0
    for stages, blocks in _RESNET_DEPTHS:
        for _ in range(_PER_DEPTH):
            shape = _RESNET_SHAPES[j % len(_RESNET_SHAPES)]
            out.append(("resnet", ResNetConfig(stages=stages, blocks=blocks, **shape, **_cycle(j))))
            j += 1
    out.extend(("llm", cfg) for cfg in _llm_configs())
    out.extend(("llm_spmd", cfg) for cfg in _llm_spmd_configs())
    out.extend(("t5", cfg) for cfg in _t5_configs())
    out.extend(("vit", cfg) for cfg in _vit_configs())
    out.extend(("diffusion", cfg) for cfg in _diffusion_configs())
    return out


def configs() -> list[SuiteEntry]:
    """Every suite entry, in a fixed order (no lowering happens here).

    Each model configuration contributes each kind its family supports, canonicalized (sub-graphs
    do not depend on e.g. the layer count); an entry whose canonical form was already produced by
    an earlier configuration is the same program and is kept only once.
    """
    from autotune.zoo import family

    entries: list[SuiteEntry] = []
    seen: set[tuple[str, str, Any]] = set()
    for fam_name, cfg in _model_configs():
        fam = family(fam_name)
        for kind in fam.KINDS:
            if not fam.supports(cfg, kind) or _excluded(fam_name, cfg, kind):
                continue
            canon = fam.canonical(cfg, kind)
            key = (fam_name, kind, canon)
            if key in seen:
                continue
            seen.add(key)
            entries.append(SuiteEntry(fam.module_name(canon, kind), fam_name, kind, canon))
    names = [e.name for e in entries]
    if len(set(names)) != len(names):  # module names are file names: they must be unique
        raise AssertionError("suite module names are not unique")
    return entries


def split(entries: Sequence[SuiteEntry], seed: int = 0, test_fraction: float = 0.25) -> dict[str, list[str]]:
    """Seeded train/test split of entry names that never splits a model configuration.

    Entries are grouped by :meth:`SuiteEntry.group` (family + config, kind ignored). Groups are
    ordered by a seeded hash of their key (so a group's place does not depend on which other
    groups exist) and taken into ``test`` in that order until it holds ``test_fraction`` of the
    modules; everything else is ``train``. Both lists are sorted by name.

    Families in :data:`OWN_SPLIT` are split among themselves (their test share holds within the
    family, and adding them left the split of the older families exactly as it was), and so are the
    late styles of ``llm_spmd`` (:data:`_LATE_STYLES`).
    """
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"test_fraction must be within [0, 1], got {test_fraction}")
    pools: dict[str, list[SuiteEntry]] = {}
    for e in entries:
        pools.setdefault(_pool(e), []).append(e)
    test: list[str] = []
    train: list[str] = []
    for pool in pools.values():
        sides = _split_pool(pool, seed, test_fraction)
        train.extend(sides["train"])
        test.extend(sides["test"])
    return {"train": sorted(train), "test": sorted(test)}


#: Parallel styles that joined ``llm_spmd`` after policies were trained on its split: split among
#: themselves, so that the older entries keep their sides (a module a shipped policy trained on must
#: never move into the test split).
_LATE_STYLES = frozenset({"ring"})


def _pool(e: SuiteEntry) -> str:
    """The pool :func:`split` splits ``e`` in: its family for :data:`OWN_SPLIT`, a late style of
    ``llm_spmd`` on its own, everything else together."""
    if e.family not in OWN_SPLIT:
        return ""
    style = getattr(e.config, "parallel", None)
    return f"{e.family}:{style}" if e.family == "llm_spmd" and style in _LATE_STYLES else e.family


def _split_pool(entries: Sequence[SuiteEntry], seed: int, test_fraction: float) -> dict[str, list[str]]:
    """:func:`split`'s rule on one pool of entries (unsorted lists)."""
    groups: dict[str, list[str]] = {}
    for e in entries:
        groups.setdefault(e.group(), []).append(e.name)

    def rank(key: str) -> str:
        return hashlib.sha256(f"{seed}\0{key}".encode()).hexdigest()

    target = test_fraction * len(entries)
    test: list[str] = []
    train: list[str] = []
    for key in sorted(groups, key=rank):
        names = groups[key]
        if len(test) < target and len(test) + len(names) / 2 <= target:
            test.extend(names)
        else:
            train.extend(names)
    return {"train": train, "test": test}


# --------------------------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------------------------


def lower_entry(family_name: str, kind: str, config: dict[str, Any]) -> str:
    """Lower one entry given as plain data (picklable, so it can run in a worker process)."""
    from autotune.zoo import config_from_dict, lower

    return lower(family_name, kind, config_from_dict(family_name, config))


def _lower_args(e: SuiteEntry) -> tuple[str, str, dict[str, Any]]:
    return (e.family, e.kind, e.config_dict())


def _lowered(entries: Sequence[SuiteEntry], jobs: int) -> Iterable[tuple[SuiteEntry, str]]:
    """(entry, HLO text) in entry order, lowered in ``jobs`` worker processes (or inline for 1)."""
    if jobs <= 1 or len(entries) <= 1:
        for e in entries:
            yield e, lower_entry(*_lower_args(e))
        return
    import multiprocessing

    # spawn: forking a process that has already initialized JAX's runtime threads is unsafe.
    ctx = multiprocessing.get_context("spawn")
    from autotune.zoo import init_lowering_process

    # Every worker starts with the CPU devices partitioned programs are lowered over.
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=init_lowering_process) as pool:
        futures = [pool.submit(lower_entry, *_lower_args(e)) for e in entries]
        for e, fut in zip(entries, futures, strict=True):
            yield e, fut.result()


def generate(
    out_dir: str | os.PathLike[str],
    limit: int | None = None,
    families: Iterable[str] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    jobs: int | None = None,
    seed: int = 0,
    test_fraction: float = 0.25,
    devices: int | None = None,
) -> Manifest:
    """Write ``<name>.hlo`` for each suite entry plus ``manifest.json`` into ``out_dir``.

    ``families`` keeps only those families; ``limit`` keeps the first N entries after that. The
    split is computed over the whole suite (not the selection), so a module's side never depends on
    which subset was generated. An entry whose instruction count falls outside
    [MIN_INSTRUCTIONS, MAX_INSTRUCTIONS] (possible only with another jax version) is not written
    and is listed under ``skipped``. ``progress(done, total, name)`` is called after each module.
    ``devices`` partitions every chosen partitioned entry (``llm_spmd``) over that many devices instead
    of its grid's; an entry it cannot partition (the count does not divide what its style splits) is a
    ``ValueError`` naming it, raised before anything is written.
    """
    import jax

    start = time.perf_counter()
    out = Path(out_dir)
    everything = configs()
    sides = split(everything, seed=seed, test_fraction=test_fraction)
    side_of = {n: side for side, names in sides.items() for n in names}
    chosen = everything
    if families is not None:
        wanted = set(families)
        from autotune.zoo import FAMILIES

        unknown = sorted(wanted - set(FAMILIES))
        if unknown:
            raise ValueError(f"unknown model families {unknown}; expected some of {sorted(FAMILIES)}")
        chosen = [e for e in chosen if e.family in wanted]
    if limit is not None:
        chosen = chosen[: max(limit, 0)]
    if devices is not None:  # a model's side does not depend on its devices (SuiteEntry.group)
        moved = _repartitioned(chosen, devices)
        side_of |= {new.name: side_of[old.name] for old, new in zip(chosen, moved, strict=True)}
        chosen = moved
    jobs = min(os.cpu_count() or 1, 4) if jobs is None else jobs
    out.mkdir(parents=True, exist_ok=True)

    from autotune.zoo.common import count_instructions, sha256_text

    manifest = Manifest(jax_version=jax.__version__)
    for i, (e, text) in enumerate(_lowered(chosen, jobs), 1):
        count = count_instructions(text)
        if not MIN_INSTRUCTIONS <= count <= MAX_INSTRUCTIONS:
            manifest.skipped.append({"name": e.name, "instructions": count, "reason": "instruction count out of range"})
        else:
            path = out / f"{e.name}.hlo"
            path.write_text(text, encoding="utf-8")
            manifest.entries.append(
                ManifestEntry(
                    name=e.name, family=e.family, kind=e.kind, config=e.config_dict(), instructions=count,
                    sha256=sha256_text(text), split=side_of[e.name], file=path.name, jax_version=jax.__version__,
                )
            )
        if progress is not None:
            progress(i, len(chosen), e.name)
    manifest.seconds = time.perf_counter() - start
    text = json.dumps(manifest.to_json(), indent=1) + "\n"
    (out / "manifest.json").write_text(text, encoding="utf-8")
    return manifest


def _repartitioned(entries: Sequence[SuiteEntry], devices: int) -> list[SuiteEntry]:
    """``entries`` with every partitioned one moved to ``devices`` devices (see :func:`generate`)."""
    from autotune.zoo import LOWERING_DEVICES, family

    if not 2 <= devices <= LOWERING_DEVICES:
        raise ValueError(f"devices must be within 2..{LOWERING_DEVICES} for a partitioned step, got {devices}")
    out = []
    for e in entries:
        if hasattr(e.config, "devices"):
            try:
                cfg = dataclasses.replace(e.config, devices=devices)
            except ValueError as exc:
                raise ValueError(f"{e.name} cannot be partitioned over {devices} devices: {exc}") from None
            e = SuiteEntry(family(e.family).module_name(cfg, e.kind), e.family, e.kind, cfg)
        out.append(e)
    return out


def is_current(manifest: Manifest, families: Iterable[str]) -> bool:
    """Whether ``manifest`` holds exactly today's grid of ``families`` (names and split sides, the
    skipped entries counted as present). Why: a suite generated before the grid changed (a family
    gained a variant) silently benchmarks yesterday's modules; benchmark scripts regenerate instead."""
    wanted = set(families)
    everything = configs()
    entries = [e for e in everything if e.family in wanted]
    side_of = {n: side for side, names in split(everything).items() for n in names}
    have = {e.name: e.split for e in manifest.entries if e.family in wanted}
    skipped = {s["name"] for s in manifest.skipped}
    return {e.name for e in entries} == set(have) | skipped and all(side_of[n] == s for n, s in have.items())


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m autotune.zoo.suite DIR [--limit N] [--family F] [--jobs J]``."""
    parser = argparse.ArgumentParser(prog="python -m autotune.zoo.suite", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="directory to write <name>.hlo files and manifest.json into")
    parser.add_argument("--limit", type=int, default=None, help="generate only the first N entries")
    parser.add_argument("--family", action="append", dest="families", help="only this family (repeatable)")
    parser.add_argument("--jobs", type=int, default=None, help="worker processes (default: CPUs, at most 4)")
    parser.add_argument("--seed", type=int, default=0, help="split seed (default 0)")
    parser.add_argument("--list", action="store_true", help="print the entries and their split, generate nothing")
    parser.add_argument("--quiet", action="store_true", help="no per-module progress on stderr")
    args = parser.parse_args(argv)
    if args.list:
        entries = configs()
        sides = split(entries, seed=args.seed)
        side_of = {n: s for s, names in sides.items() for n in names}
        for e in entries:
            print(f"{side_of[e.name]:5} {e.family:6} {e.kind:9} {e.name}")
        return 0

    def report(done: int, total: int, name: str) -> None:
        print(f"[{done}/{total}] {name}", file=sys.stderr, flush=True)

    try:
        manifest = generate(
            args.out_dir, limit=args.limit, families=args.families, jobs=args.jobs, seed=args.seed,
            progress=None if args.quiet else report,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    counts = [e.instructions for e in manifest.entries]
    span = f"{min(counts)}..{max(counts)} instructions" if counts else "nothing"
    print(
        f"wrote {len(manifest.entries)} modules ({span}, {len(manifest.skipped)} skipped) to {args.out_dir} "
        f"in {manifest.seconds:.1f}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
