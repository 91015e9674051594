"""Encoder-decoder (T5-style) steps: training with teacher forcing, encoding a source, one decode step.

Why this family exists: the ``llm`` family is decoder-only, and a policy trained on it has only ever
seen one stack of self-attention layers. Translation, summarisation and speech models (T5, mT5,
Flan-T5, Whisper's decoder) are encoder-decoders, and their steps carry constructs the family lacks:
a **relative position bias** (positions bucketed by a log rule computed from iotas, a bias table
gathered per (query, key) pair and shared by every layer of a stack), **cross-attention** from the
decoder to the encoder's output (keys and values computed once per source at serving time and read
by every decode step), two stacks with separate masks (bidirectional with source padding, causal in
the decoder), T5's RMS norm without a bias, unscaled attention logits and gated-GELU feed-forwards
(T5 v1.1) or ReLU (v1.0), and optionally an output head tied to the embedding (scaled by
``d_model ** -0.5``, as T5 v1.0 does).

Kinds:

* ``train``: encode the source, decode the shifted target with teacher forcing, cross-entropy
  weighted by the target's padding, gradient and optimizer update.
* ``encode``: the serving side's first call: the encoder's output and every decoder layer's
  cross-attention keys and values ([layers, batch, seq, heads, head_dim]).
* ``decode``: one token per sequence: self-attention against a cache of ``tgt`` positions written
  by ``dynamic_update_slice`` at a scalar position, cross-attention over the cached encoder keys
  and values, greedy next token.

Everything is lowered from ``jax.ShapeDtypeStruct`` arguments: nothing is allocated or executed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from autotune.zoo import common
from autotune.zoo.common import Program
from autotune.zoo.llm import LLM_DTYPES, rms_norm

FAMILY = "t5"
KINDS: tuple[str, ...] = ("train", "encode", "decode")
FFNS = ("gated_gelu", "relu")


@dataclass(frozen=True)
class T5Config(common.MixedPrecision):
    """Size and structure of a T5-style encoder-decoder and of the batch it is stepped on."""

    enc_layers: int = 2
    dec_layers: int = 2
    d_model: int = 64
    heads: int = 4
    ffn: int = 128
    vocab: int = 256
    seq: int = 32  # source length
    tgt: int = 16  # target length: the training target and the decode step's self-attention cache
    batch: int = 2
    buckets: int = 32
    max_distance: int = 128
    ffn_kind: str = "gated_gelu"
    tied: bool = False
    scan: bool = False
    optimizer: str = "adam"
    dtype: str = "bf16"

    def __post_init__(self) -> None:
        common.check_config(self, ("enc_layers", "dec_layers", "d_model", "heads", "ffn", "vocab", "seq", "tgt",
                                   "batch", "buckets", "max_distance"), dtypes=LLM_DTYPES)
        if self.ffn_kind not in FFNS:
            raise ValueError(f"unknown ffn_kind {self.ffn_kind!r}; expected one of {FFNS}")
        if self.d_model % self.heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by heads {self.heads}")
        if self.buckets < 4 or self.max_distance <= self.buckets // 4:
            raise ValueError(f"need buckets >= 4 and max_distance > buckets // 4, got {self.buckets}/"
                             f"{self.max_distance}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads


_DEFAULT = T5Config()
_SLUG = {
    "enc_layers": "e", "dec_layers": "dl", "d_model": "d", "heads": "h", "ffn": "f", "vocab": "v", "seq": "s",
    "tgt": "t", "batch": "b", "buckets": "rb?", "max_distance": "md?", "ffn_kind": "", "tied": "tied?",
    "scan": "scan", "optimizer": "?", "dtype": "",
}


def module_name(cfg: T5Config, kind: str) -> str:
    """Module/file name, e.g. ``t5_train_e2_dl2_d64_h4_f128_v256_s32_t16_b2_gated_gelu_noscan_bf16``."""
    return common.sanitize_name(f"{FAMILY}_{kind}_{common.config_slug(cfg, _SLUG, _DEFAULT)}")


def supports(cfg: T5Config, kind: str) -> bool:
    """Every config has all three kinds."""
    return kind in KINDS


def canonical(cfg: T5Config, kind: str) -> T5Config:
    """The config with the fields ``kind`` ignores reset: serving has no optimizer; ``encode`` has no
    decoder self-attention (its target length and the output head's tying do not reach it); ``decode``
    has no encoder layers (it reads the encoder's cached keys and values)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r} for {FAMILY}; expected one of {KINDS}")
    d = _DEFAULT
    if kind == "train":
        return cfg
    out = dataclasses.replace(cfg, optimizer=d.optimizer)
    if kind == "encode":
        return dataclasses.replace(out, tgt=d.tgt, tied=d.tied)
    return dataclasses.replace(out, enc_layers=d.enc_layers)


def group_key(cfg: T5Config) -> dict[str, Any]:
    """The model, for the train/test split: everything but the optimizer (all kinds on one side)."""
    out = dataclasses.asdict(cfg)
    out.pop("optimizer")
    return out


# --------------------------------------------------------------------------------------------
# Parameters (abstract only)
# --------------------------------------------------------------------------------------------


def _ffn_specs(cfg: T5Config) -> dict[str, jax.ShapeDtypeStruct]:
    dt, d, f = cfg.param_dtype, cfg.d_model, cfg.ffn
    out = {"wi": common.spec((d, f), dt), "wo_ff": common.spec((f, d), dt), "ff_norm_g": common.spec((d,), dt)}
    if cfg.ffn_kind == "gated_gelu":
        out["wi_gate"] = common.spec((d, f), dt)
    return out


def _attn_specs(cfg: T5Config, prefix: str) -> dict[str, jax.ShapeDtypeStruct]:
    dt, d = cfg.param_dtype, cfg.d_model
    return {f"{prefix}_{w}": common.spec((d, d), dt) for w in ("q", "k", "v", "o")} | {
        f"{prefix}_norm_g": common.spec((d,), dt)}


def _layers(layer: dict[str, jax.ShapeDtypeStruct], n: int, scan: bool) -> Any:
    if scan:
        return {k: common.spec((n, *v.shape), v.dtype) for k, v in layer.items()}
    return [dict(layer) for _ in range(n)]


def encoder_specs(cfg: T5Config) -> dict[str, Any]:
    dt = cfg.param_dtype
    return {"layers": _layers(_attn_specs(cfg, "self") | _ffn_specs(cfg), cfg.enc_layers, cfg.scan),
            "rel_bias": common.spec((cfg.buckets, cfg.heads), dt), "final_norm_g": common.spec((cfg.d_model,), dt)}


def decoder_specs(cfg: T5Config) -> dict[str, Any]:
    dt = cfg.param_dtype
    layer = _attn_specs(cfg, "self") | _attn_specs(cfg, "cross") | _ffn_specs(cfg)
    out = {"layers": _layers(layer, cfg.dec_layers, cfg.scan), "rel_bias": common.spec((cfg.buckets, cfg.heads), dt),
           "final_norm_g": common.spec((cfg.d_model,), dt)}
    if not cfg.tied:
        out["head"] = common.spec((cfg.d_model, cfg.vocab), dt)
    return out


def param_specs(cfg: T5Config) -> dict[str, Any]:
    """Shared embedding, encoder and decoder stacks (stacked on a leading axis when ``scan``)."""
    return {"embed": common.spec((cfg.vocab, cfg.d_model), cfg.param_dtype), "encoder": encoder_specs(cfg),
            "decoder": decoder_specs(cfg)}


# --------------------------------------------------------------------------------------------
# Numerics
# --------------------------------------------------------------------------------------------


def relative_bucket(relative: jax.Array, bidirectional: bool, buckets: int, max_distance: int) -> jax.Array:
    """T5's bucket of ``key position - query position``: exact below ``buckets // 4`` (per direction),
    logarithmic up to ``max_distance``, clipped after (Mesh TensorFlow's ``_relative_position_bucket``)."""
    out = jnp.zeros_like(relative)
    if bidirectional:
        buckets //= 2
        out = out + (relative > 0).astype(jnp.int32) * buckets
        distance = jnp.abs(relative)
    else:
        distance = -jnp.minimum(relative, 0)
    exact = buckets // 2
    scaled = jnp.log(jnp.maximum(distance, 1).astype(jnp.float32) / exact) / math.log(max_distance / exact)
    large = jnp.minimum(exact + (scaled * (buckets - exact)).astype(jnp.int32), buckets - 1)
    return out + jnp.where(distance < exact, distance, large)


def position_bias(table: jax.Array, queries: jax.Array, keys: jax.Array, bidirectional: bool,
                  cfg: T5Config) -> jax.Array:
    """[heads, q, k] bias gathered from ``table`` [buckets, heads] at the (query, key) buckets."""
    bucket = relative_bucket(keys[None, :] - queries[:, None], bidirectional, cfg.buckets, cfg.max_distance)
    return jnp.transpose(table[bucket], (2, 0, 1)).astype(jnp.float32)


def _heads(x: jax.Array, cfg: T5Config) -> jax.Array:
    return x.reshape(*x.shape[:-1], cfg.heads, cfg.head_dim)


def attend(q: jax.Array, k: jax.Array, v: jax.Array, bias: jax.Array | None, mask: jax.Array) -> jax.Array:
    """Unscaled softmax attention (T5 folds the scale into the initialisation) of ``q`` [b, sq, h, hd]
    over ``k``/``v`` [b, sk, h, hd]; ``bias`` [h, sq, sk], ``mask`` [b, 1, sq|1, sk] (True = attend)."""
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32)
    if bias is not None:
        s = s + bias
    p = jax.nn.softmax(jnp.where(mask, s, -1e9), axis=-1).astype(v.dtype)
    out = jnp.einsum("bhqk,bkhd->bqhd", p, v)
    return out.reshape(*out.shape[:2], -1)


def ffn(p: dict[str, jax.Array], x: jax.Array, cfg: T5Config) -> jax.Array:
    h = rms_norm(x, p["ff_norm_g"])
    up = h @ p["wi"]
    up = common.gelu(h @ p["wi_gate"]) * up if cfg.ffn_kind == "gated_gelu" else jax.nn.relu(up)
    return x + up @ p["wo_ff"]


def self_attention(p: dict[str, jax.Array], x: jax.Array, bias: jax.Array, mask: jax.Array,
                   cfg: T5Config) -> jax.Array:
    h = rms_norm(x, p["self_norm_g"])
    q, k, v = (_heads(h @ p[f"self_{w}"], cfg) for w in "qkv")
    return x + attend(q, k, v, bias, mask) @ p["self_o"]


def cross_kv(p: dict[str, jax.Array], enc: jax.Array, cfg: T5Config) -> tuple[jax.Array, jax.Array]:
    """One decoder layer's keys and values of the encoder output (what serving computes once)."""
    return _heads(enc @ p["cross_k"], cfg), _heads(enc @ p["cross_v"], cfg)


def cross_attention(p: dict[str, jax.Array], x: jax.Array, k: jax.Array, v: jax.Array, src_mask: jax.Array,
                    cfg: T5Config) -> jax.Array:
    q = _heads(rms_norm(x, p["cross_norm_g"]) @ p["cross_q"], cfg)
    return x + attend(q, k, v, None, src_mask[:, None, None, :] > 0) @ p["cross_o"]


def _stack(layers: Any, x: jax.Array, step: Callable[..., Any], scan: bool, extra: Any = None) -> tuple[Any, Any]:
    """Run ``step(p, x, extra_i) -> (x, out_i)`` over a layer stack (``lax.scan`` or a loop)."""
    if scan:
        return lax.scan(lambda h, pe: step(pe[0], h, pe[1]), x, (layers, extra))
    outs = []
    for i, p in enumerate(layers):
        x, out = step(p, x, None if extra is None else jax.tree.map(lambda a, i=i: a[i], extra))
        outs.append(out)
    return x, (None if outs[0] is None else jax.tree.map(lambda *a: jnp.stack(a), *outs))


def _at_use(tree: Any, cfg: T5Config) -> Any:
    return common.cast_floats(tree, cfg.compute_dtype)


def encode(params: dict[str, Any], src: jax.Array, src_mask: jax.Array, cfg: T5Config) -> jax.Array:
    """The encoder: embedding, bidirectional self-attention with the shared bias, feed-forwards."""
    enc = _at_use(params["encoder"], cfg)
    x = _at_use(params["embed"], cfg)[src]
    pos = jnp.arange(cfg.seq, dtype=jnp.int32)
    bias = position_bias(enc["rel_bias"], pos, pos, True, cfg)
    mask = src_mask[:, None, None, :] > 0

    def layer(p, h, _):
        return ffn(p, self_attention(p, h, bias, mask, cfg), cfg), None

    x, _ = _stack(enc["layers"], x, layer, cfg.scan)
    return rms_norm(x, enc["final_norm_g"])


def _logits(params: dict[str, Any], x: jax.Array, cfg: T5Config) -> jax.Array:
    dec = params["decoder"]
    x = rms_norm(x, _at_use(dec["final_norm_g"], cfg))
    if cfg.tied:
        return (x * cfg.d_model ** -0.5) @ _at_use(params["embed"], cfg).T
    return x @ _at_use(dec["head"], cfg)


def decode_train(params: dict[str, Any], enc_out: jax.Array, src_mask: jax.Array, tgt_in: jax.Array,
                 cfg: T5Config) -> jax.Array:
    """The decoder over a whole target (teacher forcing): causal self-attention, cross-attention."""
    dec = _at_use(params["decoder"], cfg)
    x = _at_use(params["embed"], cfg)[tgt_in]
    pos = jnp.arange(cfg.tgt, dtype=jnp.int32)
    bias = position_bias(dec["rel_bias"], pos, pos, False, cfg)
    causal = common.causal_mask(cfg.tgt)[None, None]

    def layer(p, h, _):
        h = self_attention(p, h, bias, causal, cfg)
        return ffn(p, cross_attention(p, h, *cross_kv(p, enc_out, cfg), src_mask, cfg), cfg), None

    x, _ = _stack(dec["layers"], x, layer, cfg.scan)
    return _logits(params, x, cfg)


# --------------------------------------------------------------------------------------------
# Steps
# --------------------------------------------------------------------------------------------


def loss_fn(params: dict[str, Any], batch: dict[str, jax.Array], cfg: T5Config) -> jax.Array:
    enc_out = encode(params, batch["src"], batch["src_mask"], cfg)
    logits = decode_train(params, enc_out, batch["src_mask"], batch["tgt_in"], cfg)
    return common.cross_entropy(logits, batch["tgt_out"], batch["tgt_mask"])


def train_step_fn(cfg: T5Config) -> Callable[..., Any]:
    """``(params, opt_state, batch) -> (params, opt_state, loss)``."""

    def train_step(params, opt_state, batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, batch, cfg)
        params, opt_state = common.optimizer_update(cfg.optimizer, params, grads, opt_state)
        return params, opt_state, loss

    return train_step


def encode_step_fn(cfg: T5Config) -> Callable[..., Any]:
    """``(params, src, src_mask) -> (enc_out, cross_k, cross_v)``; keys and values per decoder layer."""

    def encode_step(params, src, src_mask):
        enc_out = encode(params, src, src_mask, cfg)
        layers = _at_use(params["decoder"]["layers"], cfg)
        _, (k, v) = _stack(layers, enc_out, lambda p, h, _: (h, cross_kv(p, h, cfg)), cfg.scan)
        return enc_out, k, v

    return encode_step


def decode_step_fn(cfg: T5Config) -> Callable[..., Any]:
    """``(params, self_k, self_v, cross_k, cross_v, src_mask, tokens [b], pos) -> (next, self_k, self_v)``."""

    def decode_step(params, self_k, self_v, cross_k, cross_v, src_mask, tokens, pos):
        dec = _at_use(params["decoder"], cfg)
        x = _at_use(params["embed"], cfg)[tokens[:, None]]
        keys = jnp.arange(cfg.tgt, dtype=jnp.int32)
        bias = position_bias(dec["rel_bias"], pos[None], keys, False, cfg)
        visible = (keys <= pos)[None, None, None, :]

        def layer(p, h, caches):
            kc, vc, ck, cv = caches
            hn = rms_norm(h, p["self_norm_g"])
            q, k, v = (_heads(hn @ p[f"self_{w}"], cfg) for w in "qkv")
            zero = jnp.zeros((), jnp.int32)
            kc = lax.dynamic_update_slice(kc, k.astype(kc.dtype), (zero, pos, zero, zero))
            vc = lax.dynamic_update_slice(vc, v.astype(vc.dtype), (zero, pos, zero, zero))
            h = h + attend(q, kc, vc, bias, visible) @ p["self_o"]
            h = ffn(p, cross_attention(p, h, ck, cv, src_mask, cfg), cfg)
            return h, (kc, vc)

        x, (self_k, self_v) = _stack(dec["layers"], x, layer, cfg.scan, (self_k, self_v, cross_k, cross_v))
        logits = _logits(params, x[:, -1], cfg)
        return jnp.argmax(logits, axis=-1).astype(jnp.int32), self_k, self_v

    return decode_step


def serving_params(params: dict[str, Any], cfg: T5Config, kind: str) -> dict[str, Any]:
    """The part of the whole model's ``params`` (:func:`param_specs`' tree, real or abstract) that
    ``encode`` or ``decode`` reads. The cross-attention key and value projections are the split
    point: ``encode`` runs them once over the encoder's output (and needs nothing else of the
    decoder), ``decode`` reads their results from the cache and gets the decoder without them. A
    serving stack passes no more (unused arguments would be pruned from the module anyway)."""
    cross = ("cross_k", "cross_v")

    def keep(layer: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in layer.items() if (k in cross) == (kind == "encode")}

    layers = params["decoder"]["layers"]
    layers = keep(layers) if cfg.scan else [keep(p) for p in layers]
    if kind == "decode":
        return {"embed": params["embed"], "decoder": dict(params["decoder"], layers=layers)}
    return {"embed": params["embed"], "encoder": params["encoder"], "decoder": {"layers": layers}}


def program(cfg: T5Config, kind: str) -> Program:
    """The function and abstract arguments for ``kind`` of ``cfg`` (see :data:`KINDS`)."""
    cfg = canonical(cfg, kind)
    name = module_name(cfg, kind)
    b, dt = cfg.batch, cfg.compute_dtype
    src = common.spec((b, cfg.seq), jnp.int32)
    if kind == "train":
        params = param_specs(cfg)
        tgt = common.spec((b, cfg.tgt), jnp.int32)
        batch = {"src": src, "src_mask": src, "tgt_in": tgt, "tgt_out": tgt,
                 "tgt_mask": common.spec((b, cfg.tgt), jnp.float32)}
        return Program(name, train_step_fn(cfg), (params, common.optimizer_specs(cfg.optimizer, params), batch))
    params = serving_params(param_specs(cfg), cfg, kind)
    if kind == "encode":
        return Program(name, encode_step_fn(cfg), (params, src, src))
    cache = common.spec((cfg.dec_layers, b, cfg.tgt, cfg.heads, cfg.head_dim), dt)
    cross = common.spec((cfg.dec_layers, b, cfg.seq, cfg.heads, cfg.head_dim), dt)
    return Program(name, decode_step_fn(cfg), (params, cache, cache, cross, cross, src,
                                               common.spec((b,), jnp.int32), common.spec((), jnp.int32)))
