"""The ``llm`` family's steps partitioned over several devices, as XLA's SPMD partitioner writes them.

Why: every real multi-GPU training or serving step is a partitioned program, one per device, with
collectives between the computation (all-gather, reduce-scatter, all-reduce, collective-permute,
all-to-all) and partition-id arithmetic. The single-device ``llm`` family has none of that, and a
policy trained on it recovered 13% of a search's gain on a real context-parallel LLaMA-3 step
(issue 31). This family is the same models (:class:`autotune.zoo.llm.LLMConfig`, every knob) with
two more: ``parallel``, how the step is sharded, and ``devices``, over how many. The module is the
partitioner's per-device output (:func:`autotune.zoo.common.partitioned_text`), which is what
XLA's optimization pipeline, and so the autotuner, works on.

Styles (the axis names are the mesh's):

* ``dp``: data parallel. Weights replicated, the batch (tokens, caches) split: the training step
  all-reduces its gradients.
* ``fsdp``: fully sharded data parallel (ZeRO-3, MaxText's default): the batch split and every
  weight and optimizer moment split along a dimension the mesh divides; weights are all-gathered
  at use and gradients reduce-scattered.
* ``tp``: tensor parallel (Megatron): query/key/value, up and gate projections split by columns
  (heads, feed-forward units), output and down projections by rows, the output head by vocabulary;
  the KV cache split by KV heads where they divide (replicated otherwise, as for MQA).
* ``sp``: sequence (context) parallel: tokens and the KV cache split along the sequence, weights
  replicated: attention over a sharded sequence needs the other devices' keys and values.
* ``ep``: expert parallel (MoE only): experts' weights split by expert, tokens by batch, so the
  routed tokens travel to their experts' devices (all-to-all or gathers, as the partitioner picks).
* ``cp``: context parallel as MaxText writes it: sharded like ``sp``, with the attention written
  by hand in ``jax.shard_map`` (each device's queries against keys and values all-gathered along
  the sequence); a manual region inside an automatically partitioned step. Train and prefill only
  (a decode step has one query), and not latent attention.
* ``ring``: context parallel as ring attention writes it (the form real long-context steps take):
  sharded like ``cp``, but keys and values are never gathered. Each device keeps its own block and
  passes it on to the next device (``ppermute``: a collective-permute per block and step), so after
  ``devices`` steps every query block has seen every key block; softmax is accumulated online (a
  running maximum and sum), and the mask's columns for the block in hand are cut at an offset
  computed from the device's index (partition-id arithmetic). Train and prefill only, not latent.
* ``dp_tp``: a 2-D mesh, ``data`` (devices / 2) x ``model`` (2), ``dp`` and ``tp`` at once.

``devices`` must divide what it splits (batch, heads, feed-forward, sequence, experts); a config
where it does not is refused when it is made (``ValueError``), never lowered unevenly.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from autotune.zoo import common, llm
from autotune.zoo.common import Program

FAMILY = "llm_spmd"
KINDS = llm.KINDS
STYLES = ("dp", "fsdp", "tp", "sp", "cp", "ep", "dp_tp", "ring")
#: Styles that split the sequence (tokens and the KV cache along it).
_SEQUENCE = frozenset({"sp", "cp", "ring"})
#: Styles that write attention by hand in ``shard_map`` over the sequence axis.
MANUAL_STYLES = frozenset({"cp", "ring"})

#: Weights split by output columns (tensor parallel), and by input rows; the rest is replicated.
_COLUMN = frozenset({"wq", "wk", "wv", "w_up", "w_gate", "w_ukv", "head"})
_ROW = frozenset({"wo", "w_down"})
_EXPERT = frozenset({"w_up", "w_down", "w_gate"})


@dataclass(frozen=True)
class SpmdConfig(llm.LLMConfig):
    """An :class:`~autotune.zoo.llm.LLMConfig` plus how its steps are partitioned and over how many devices."""

    parallel: str = "dp"
    devices: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.parallel not in STYLES:
            raise ValueError(f"unknown parallel style {self.parallel!r}; expected one of {STYLES}")
        n = self.devices
        if n < 2:
            raise ValueError(f"devices must be >= 2 for a partitioned step, got {n}")
        for what, size, divisor in self._splits():
            if size % divisor:
                raise ValueError(f"{self.parallel} over {n} devices splits {what} {divisor} ways, "
                                 f"but {what} is {size}")

    def _splits(self) -> list[tuple[str, int, int]]:
        """(what, its size, how many ways the style splits it)."""
        n, style = self.devices, self.parallel
        if style == "dp_tp":
            if n % 2:
                raise ValueError(f"dp_tp needs an even number of devices (2 model shards), got {n}")
            return [("batch", self.batch, n // 2), ("heads", self.heads, 2), ("ffn", self.ffn, 2)]
        if style == "tp":
            return [("heads", self.heads, n), ("ffn", self.ffn, n)]
        if style in _SEQUENCE:  # prefill writes seq // 2 tokens, split as well
            if style in MANUAL_STYLES and self.latent:
                raise ValueError(f"context parallelism ({style}) is written for grouped/multi-head attention, "
                                 "not latent")
            return [("seq // 2", self.seq // 2, n)]
        if style == "ep":
            if not self.experts:
                raise ValueError("expert parallelism needs a mixture of experts (experts > 0)")
            return [("experts", self.experts, n), ("batch", self.batch, n)]
        if style == "fsdp":
            return [("batch", self.batch, n), ("d_model", self.d_model, n)]
        return [("batch", self.batch, n)]

    def attention(self, q, k, v, mask):
        """``cp``: each device's queries against the keys and values of the whole sequence, gathered in
        ``shard_map`` (the rest of the step is partitioned automatically); ``ring``: the same attention
        with the key/value blocks passed around the ring (:func:`ring_attend`); otherwise ``llm.attend``."""
        if self.parallel not in MANUAL_STYLES:
            return super().attention(q, k, v, mask)
        seq = P(None, "seq")
        if self.parallel == "ring":
            ring = lambda q, k, v, mask: ring_attend(q, k, v, mask, self)  # noqa: E731
            return jax.shard_map(ring, in_specs=(seq, seq, seq, seq), out_specs=seq)(q, k, v, mask)

        def local(q, k, v, mask):
            k = jax.lax.all_gather(k, "seq", axis=1, tiled=True)
            v = jax.lax.all_gather(v, "seq", axis=1, tiled=True)
            return llm.attend(q, k, v, mask, self)

        return jax.shard_map(local, in_specs=(seq, seq, seq, seq), out_specs=seq)(q, k, v, mask)

    @property
    def mesh(self) -> tuple[tuple[str, int], ...]:
        if self.parallel == "dp_tp":
            return (("data", self.devices // 2), ("model", 2))
        return ((_AXIS[self.parallel], self.devices),)


_AXIS = {"dp": "data", "fsdp": "fsdp", "tp": "model", "sp": "seq", "cp": "seq", "ring": "seq", "ep": "expert"}


def ring_attend(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, cfg: SpmdConfig) -> jax.Array:
    """One device's part of ring attention, inside ``shard_map`` over ``seq``: ``q`` [b, sq/n, H, hd] and
    ``k``/``v`` [b, sk/n, KV, hd] are this device's blocks, ``mask`` [b, sq/n, sk] its queries' rows.

    At step ``t`` the device holds the key/value block of device ``(i - t) mod n``: it scores its
    queries against that block, folds the result into a running maximum, sum and weighted values (the
    online softmax of flash attention), then sends the block to device ``i + 1``. Masked scores are
    -1e30 as in :func:`~autotune.zoo.llm.attend`: while a row's running maximum is still -1e30 (its
    blocks so far all masked, e.g. a prefill query whose cache positions sit on another device) each
    masked key adds weight 1, and the row's first unmasked score rescales all of that by exp(-1e30) = 0;
    every row attends to at least its own position, so the result is the softmax's."""
    n = cfg.devices
    b, sq, heads, hd = q.shape
    kv, block = k.shape[2], k.shape[1]
    if kv != heads:  # grouped queries: every head its key/value head
        k = jnp.repeat(k, heads // kv, axis=2)
        v = jnp.repeat(v, heads // kv, axis=2)
    scale = jnp.float32(1.0 / math.sqrt(hd))
    index = jax.lax.axis_index("seq")
    ring = [(j, (j + 1) % n) for j in range(n)]
    top = jnp.full((b, heads, sq), -1e30, jnp.float32)
    total = jnp.zeros((b, heads, sq), jnp.float32)
    acc = jnp.zeros((b, heads, sq, hd), jnp.float32)
    for t in range(n):
        cols = jax.lax.dynamic_slice_in_dim(mask, ((index - t) % n) * block, block, axis=2)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) * scale
        scores = jnp.where(cols[:, None], scores, jnp.float32(-1e30))
        new_top = jnp.maximum(top, scores.max(axis=-1))
        weights = jnp.exp(scores - new_top[..., None])
        rescale = jnp.exp(top - new_top)
        total = total * rescale + weights.sum(axis=-1)
        acc = acc * rescale[..., None] + jnp.einsum("bhqk,bkhd->bhqd", weights.astype(v.dtype), v).astype(jnp.float32)
        top = new_top
        if t < n - 1:
            k, v = jax.lax.ppermute(k, "seq", ring), jax.lax.ppermute(v, "seq", ring)
    out = (acc / total[..., None]).astype(v.dtype)  # [b, H, sq, hd]
    return out.transpose(0, 2, 1, 3).reshape(b, sq, heads * hd)


def module_name(cfg: SpmdConfig, kind: str) -> str:
    """``llm_spmd_<kind>_<the llm slug>_<style><devices>``, e.g. ``..._bf16_tp4``."""
    return common.sanitize_name(f"{FAMILY}_{kind}_{llm.slug(cfg)}_{cfg.parallel}{cfg.devices}")


def supports(cfg: SpmdConfig, kind: str) -> bool:
    """Every kind, except a decode step under context parallelism, ``cp`` or ``ring`` (one query: no
    sequence to split)."""
    return llm.supports(cfg, kind) and not (cfg.parallel in MANUAL_STYLES and kind == "decode")


def canonical(cfg: SpmdConfig, kind: str) -> SpmdConfig:
    return llm.canonical(cfg, kind)


def group_key(cfg: SpmdConfig) -> dict[str, Any]:
    """The model, whatever it is partitioned over: one model's every style lands on one side."""
    out = llm.group_key(cfg)
    out.pop("parallel")
    out.pop("devices")
    return out


# --------------------------------------------------------------------------------------------
# Shardings
# --------------------------------------------------------------------------------------------


def _leaf_name(path: tuple[Any, ...]) -> str | None:
    """The weight a leaf is (its last dict key), also inside optimizer state that mirrors the params."""
    keys = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]
    return keys[-1] if keys else None


def _weight_spec(name: str | None, shape: tuple[int, ...], cfg: SpmdConfig) -> P:
    """Where a weight (or the optimizer moment of one) lives under ``cfg.parallel``."""
    rank = len(shape)
    spec: list[Any] = [None] * rank
    style = cfg.parallel
    ways = _axis_size(cfg, "model")  # 0 without a model axis
    if ways and rank >= 2 and name in _COLUMN and shape[-1] % ways == 0:
        if not (name in ("wk", "wv") and cfg.kv_heads % ways):  # too few KV heads: replicated
            spec[-1] = "model"
    elif ways and rank >= 2 and name in _ROW and shape[-2] % ways == 0:
        spec[-2] = "model"
    elif style == "ep" and name in _EXPERT and cfg.experts and rank >= 3:
        spec[-3] = "expert"
    elif style == "fsdp" and rank >= 1:
        for axis in (rank - 2, rank - 1) if rank >= 2 else (0,):
            if shape[axis] % cfg.devices == 0:
                spec[axis] = "fsdp"
                break
    return P(*spec)


def _axis_size(cfg: SpmdConfig, axis: str) -> int:
    """How many ways ``cfg``'s mesh splits along ``axis`` (0 when it has no such axis)."""
    return dict(cfg.mesh).get(axis, 0)


def _batch_axis(cfg: SpmdConfig) -> str | None:
    """The mesh axis the batch is split along (the data-parallel one, in its style's name), if any."""
    return next((axis for axis, _ in cfg.mesh if axis in ("data", "fsdp", "expert")), None)


def _cache_spec(shape: tuple[int, ...], cfg: SpmdConfig) -> P:
    """A KV cache ``[(layers,) batch, seq, kv_heads, head_dim]`` under ``cfg.parallel``."""
    spec: list[Any] = [None] * len(shape)
    batch, seq, heads = len(shape) - 4, len(shape) - 3, len(shape) - 2
    spec[batch] = _batch_axis(cfg)
    if cfg.parallel in _SEQUENCE and shape[seq] % cfg.devices == 0:
        spec[seq] = "seq"
    ways = _axis_size(cfg, "model")
    if ways and not cfg.latent and shape[heads] % ways == 0:
        spec[heads] = "model"
    return P(*spec)


def _token_spec(shape: tuple[int, ...], cfg: SpmdConfig) -> P:
    """Tokens ``[batch(, seq)]`` and per-sequence positions ``[batch]``; a scalar position is replicated."""
    if not shape:
        return P()
    spec: list[Any] = [_batch_axis(cfg)] + [None] * (len(shape) - 1)
    if cfg.parallel in _SEQUENCE and len(shape) == 2:
        spec[1] = "seq"
    return P(*spec)


def in_specs(cfg: SpmdConfig, kind: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """One ``PartitionSpec`` per leaf of ``args`` (the :func:`autotune.zoo.llm.program` arguments)."""
    weights = lambda tree: jax.tree_util.tree_map_with_path(  # noqa: E731
        lambda path, leaf: _weight_spec(_leaf_name(path), leaf.shape, cfg), tree)
    tokens = lambda tree: jax.tree.map(lambda leaf: _token_spec(leaf.shape, cfg), tree)  # noqa: E731
    if kind == "train":
        params, opt, toks, targets = args
        return weights(params), weights(opt), tokens(toks), tokens(targets)
    params, k_cache, v_cache, toks, pos = args
    caches = lambda tree: jax.tree.map(lambda leaf: _cache_spec(leaf.shape, cfg), tree)  # noqa: E731
    return weights(params), caches(k_cache), caches(v_cache), tokens(toks), tokens(pos)


def program(cfg: SpmdConfig, kind: str) -> Program:
    """The ``llm`` program of ``cfg``'s model with ``cfg``'s mesh and argument shardings."""
    cfg = canonical(cfg, kind)
    base = llm.program(cfg, kind)
    return dataclasses.replace(base, name=module_name(cfg, kind), mesh=cfg.mesh,
                               in_specs=in_specs(cfg, kind, base.args))
