"""LLM steps written the way LLM serving and training stacks write them: decode, prefill and train.

Why this family exists: the GPT-2/BERT/ResNet suite has no headroom at all (every short pass
sequence ends at XLA's default count), so nothing can be learned from it. Real LLM steps do have
headroom, in the constructs LLM stacks emit and the older families lack: layers under ``lax.scan``,
KV caches updated in place (``dynamic_update_slice`` or a scatter), grouped key/value heads, rotary
embeddings, multi-head latent attention, MoE routing and greedy sampling. This module writes those
in plain ``jax.numpy``/``jax.lax`` with the knobs real models vary (``LLMConfig``): ``kv_heads`` and
``kv_repeat`` (MHA/GQA/MQA), ``attn_layout`` (einsum or the transpose/matmul reference form),
``latent`` (MLA), ``positions``, ``norm``, ``mlp``, ``dtype`` (``f32``, ``bf16``, ``mixed``: f32
weights cast to bf16 at use), ``experts``/``top_k``, ``scan`` and ``cache``. Each knob, what it
emits and why it is in the family (with the measurements that put it there) is in
``docs/llm-family.md``.

Kinds: ``decode`` (one token per sequence against a cache of ``seq`` positions, greedy next
token), ``prefill`` (a chunk of ``seq // 2`` tokens written into the cache at a dynamic offset;
next token of the last position) and ``train`` (next-token cross-entropy, gradient and optimizer
update; ``remat`` recomputes each layer in the backward pass).

Everything is lowered from ``jax.ShapeDtypeStruct`` arguments: no parameter or cache is
allocated, nothing is executed.
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

FAMILY = "llm"

#: ``decode``: one generation step; ``prefill``: a prompt chunk into the cache; ``train``: a
#: training step (loss, gradient, optimizer update).
KINDS: tuple[str, ...] = ("decode", "prefill", "train")

POSITIONS = ("rope", "learned")
NORMS = ("rms", "layer")
MLPS = ("swiglu", "gelu")
CACHES = ("dus", "scatter")
ATTN_LAYOUTS = ("einsum", "transpose")
#: ``mixed``: f32 weights cast to bf16 at use, bf16 activations and caches (see the module docstring).
LLM_DTYPES = ("f32", "bf16", "mixed")


@dataclass(frozen=True)
class LLMConfig(common.MixedPrecision):
    """Size and structure of a decoder-only LLM and of the batch it is stepped on."""

    layers: int = 4
    d_model: int = 64
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 128
    experts: int = 0
    top_k: int = 2
    vocab: int = 256
    seq: int = 32
    batch: int = 2
    positions: str = "rope"
    norm: str = "rms"
    mlp: str = "swiglu"
    scan: bool = True
    cache: str = "dus"
    kv_repeat: bool = False
    attn_layout: str = "einsum"
    latent: int = 0
    remat: bool = False
    optimizer: str = "adam"
    dtype: str = "bf16"

    def __post_init__(self) -> None:
        common.check_config(self, ("layers", "d_model", "heads", "kv_heads", "ffn", "vocab", "seq", "batch"),
                            dtypes=LLM_DTYPES)
        for value, allowed, what in (
            (self.positions, POSITIONS, "positions"), (self.norm, NORMS, "norm"), (self.mlp, MLPS, "mlp"),
            (self.cache, CACHES, "cache"), (self.attn_layout, ATTN_LAYOUTS, "attn_layout"),
        ):
            if value not in allowed:
                raise ValueError(f"unknown {what} {value!r}; expected one of {allowed}")
        if self.d_model % self.heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by heads {self.heads}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} is not divisible by kv_heads {self.kv_heads}")
        if (self.d_model // self.heads) % 2 and self.positions == "rope":
            raise ValueError("rotary positions need an even head dimension")
        if self.experts < 0 or (self.experts and not 1 <= self.top_k <= self.experts):
            raise ValueError(f"need experts >= 0 and 1 <= top_k <= experts, got {self.experts}/{self.top_k}")
        if self.seq < 2:
            raise ValueError("seq must be >= 2 (prefill writes seq // 2 tokens)")
        if self.latent < 0 or (self.latent and (self.positions != "rope" or self.head_dim % 4)):
            raise ValueError("latent attention needs latent >= 0, rotary positions and a head dimension "
                             f"divisible by 4, got latent={self.latent}, positions={self.positions!r}, "
                             f"head_dim={self.head_dim}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    def attention(self, q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
        """The (non-latent) attention of a layer: :func:`attend`; a partitioned config may write it
        another way (``llm_spmd``'s context parallelism gathers keys and values in ``shard_map``)."""
        return attend(q, k, v, mask, self)

    @property
    def rope_dim(self) -> int:
        """Latent attention: the per-head width of the decoupled rotary part of queries and keys."""
        return self.head_dim // 2


_DEFAULT = LLMConfig()
_SLUG = {
    "layers": "l", "d_model": "d", "heads": "h", "kv_heads": "kv", "ffn": "f", "experts": "e?", "top_k": "k?",
    "vocab": "v", "seq": "s", "batch": "b", "positions": "", "norm": "", "mlp": "", "scan": "scan", "cache": "?",
    "kv_repeat": "rep?", "attn_layout": "?", "latent": "mla?", "remat": "remat?", "optimizer": "?", "dtype": "",
}


def slug(cfg: LLMConfig) -> str:
    """The model's part of a module name (a knob at its default is left out)."""
    return common.config_slug(cfg, _SLUG, _DEFAULT)


def module_name(cfg: LLMConfig, kind: str) -> str:
    """Module/file name, e.g. ``llm_decode_l4_d64_h4_kv2_f128_v256_s32_b2_rope_rms_swiglu_scan_bf16``; a
    KV cache updated by scatter adds ``_scatter``."""
    return common.sanitize_name(f"{FAMILY}_{kind}_{slug(cfg)}")


def supports(cfg: LLMConfig, kind: str) -> bool:
    """Every config has all three kinds."""
    return kind in KINDS


def canonical(cfg: LLMConfig, kind: str) -> LLMConfig:
    """The config with the fields ``kind`` ignores reset (inference has no optimizer or remat;
    training has no cache; latent attention has no KV-head grouping), so that no program is
    generated twice under two names."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r} for {FAMILY}; expected one of {KINDS}")
    d = _DEFAULT
    if cfg.latent:  # every head has its own keys and values, re-expanded from the latent
        cfg = dataclasses.replace(cfg, kv_heads=cfg.heads, kv_repeat=False, attn_layout=d.attn_layout)
    if kind == "train":
        return dataclasses.replace(cfg, cache=d.cache)
    out = dataclasses.replace(cfg, optimizer=d.optimizer, remat=d.remat)
    return out if out.experts else dataclasses.replace(out, top_k=d.top_k)


def group_key(cfg: LLMConfig) -> dict[str, Any]:
    """The model a config describes, for the train/test split: everything but how it is trained
    (optimizer, remat) or served (cache update). All kinds of one model land on one side."""
    out = dataclasses.asdict(cfg)
    for name in ("optimizer", "remat", "cache"):
        out.pop(name)
    if not cfg.experts:
        out.pop("top_k")
    if not cfg.latent:  # absent, not 0: the key (and the split) of models without latent attention
        out.pop("latent")  # is what it was before latent attention existed
    return out


# --------------------------------------------------------------------------------------------
# Parameters (abstract only)
# --------------------------------------------------------------------------------------------


def _norm_specs(cfg: LLMConfig, prefix: str) -> dict[str, jax.ShapeDtypeStruct]:
    dt = cfg.param_dtype
    out = {f"{prefix}_g": common.spec((cfg.d_model,), dt)}
    if cfg.norm == "layer":
        out[f"{prefix}_b"] = common.spec((cfg.d_model,), dt)
    return out


def _layer_specs(cfg: LLMConfig) -> dict[str, jax.ShapeDtypeStruct]:
    """One layer's weights (Llama naming): attention projections, norms, and the feed-forward."""
    dt = cfg.param_dtype
    d, hd, f = cfg.d_model, cfg.head_dim, cfg.ffn
    out = _norm_specs(cfg, "attn_norm") | _norm_specs(cfg, "mlp_norm") | {
        "wq": common.spec((d, cfg.heads * hd), dt),
        "wk": common.spec((d, cfg.kv_heads * hd), dt),
        "wv": common.spec((d, cfg.kv_heads * hd), dt),
        "wo": common.spec((cfg.heads * hd, d), dt),
    }
    if cfg.latent:
        r, rd = cfg.latent, cfg.rope_dim
        del out["wk"], out["wv"]
        out |= {
            "wq": common.spec((d, cfg.heads * (hd + rd)), dt),  # per head: [no-rope | rope]
            "w_dkv": common.spec((d, r + rd), dt),  # down: the latent and the shared rotary key
            "kv_norm_g": common.spec((r,), dt),
            "w_ukv": common.spec((r, cfg.heads * 2 * hd), dt),  # up: per head [key no-rope | value]
        }
    e = (cfg.experts,) if cfg.experts else ()
    out["w_up"] = common.spec((*e, d, f), dt)
    out["w_down"] = common.spec((*e, f, d), dt)
    if cfg.mlp == "swiglu":
        out["w_gate"] = common.spec((*e, d, f), dt)
    if cfg.experts:
        out["router"] = common.spec((d, cfg.experts), dt)
    return out


def _stack(spec: jax.ShapeDtypeStruct, n: int) -> jax.ShapeDtypeStruct:
    return common.spec((n, *spec.shape), spec.dtype)


def param_specs(cfg: LLMConfig) -> dict[str, Any]:
    """Abstract parameters: embedding, optional position table, layers (stacked on a leading axis
    when ``scan``, a list otherwise), final norm and an untied output head."""
    dt = cfg.param_dtype
    layer = _layer_specs(cfg)
    layers: Any = (
        {k: _stack(v, cfg.layers) for k, v in layer.items()} if cfg.scan else [dict(layer) for _ in range(cfg.layers)]
    )
    out: dict[str, Any] = {
        "embed": common.spec((cfg.vocab, cfg.d_model), dt),
        "layers": layers,
        "head": common.spec((cfg.d_model, cfg.vocab), dt),
        **_norm_specs(cfg, "final_norm"),
    }
    if cfg.positions == "learned":
        out["wpe"] = common.spec((cfg.seq, cfg.d_model), dt)
    return out


def cache_specs(cfg: LLMConfig) -> tuple[Any, Any]:
    """K and V caches [layers, batch, seq, kv_heads, head_dim] (stacked) or one per layer.

    Latent attention caches the compressed latent [.., seq, 1, latent] in the first and the shared
    rotary key [.., seq, 1, rope_dim] in the second (MaxText's and DeepSeek-V2's MLA cache).
    """
    if cfg.latent:
        shapes = (cfg.batch, cfg.seq, 1, cfg.latent), (cfg.batch, cfg.seq, 1, cfg.rope_dim)
    else:
        shapes = ((cfg.batch, cfg.seq, cfg.kv_heads, cfg.head_dim),) * 2
    dt = cfg.compute_dtype
    if cfg.scan:
        k, v = (common.spec((cfg.layers, *shape), dt) for shape in shapes)
        return k, v
    return tuple([common.spec(shape, dt) for _ in range(cfg.layers)] for shape in shapes)  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------
# Numerics
# --------------------------------------------------------------------------------------------


def rms_norm(x: jax.Array, gamma: jax.Array, eps: float = 1e-6) -> jax.Array:
    """RMSNorm (Llama), statistics in float32."""
    xf = x.astype(jnp.float32)
    y = xf * lax.rsqrt(jnp.mean(jnp.square(xf), axis=-1, keepdims=True) + eps)
    return (y * gamma.astype(jnp.float32)).astype(x.dtype)


def _norm(p: dict[str, jax.Array], prefix: str, x: jax.Array, cfg: LLMConfig) -> jax.Array:
    if cfg.norm == "rms":
        return rms_norm(x, p[f"{prefix}_g"])
    return common.layer_norm(x, p[f"{prefix}_g"], p[f"{prefix}_b"])


def rope(x: jax.Array, positions: jax.Array) -> jax.Array:
    """Rotary embedding (rotate-half form) of ``x`` [b, s, h, hd] at ``positions`` [b, s].

    Frequencies come from an iota, so no table is baked into the module.
    """
    half = x.shape[-1] // 2
    freq = jnp.exp(-math.log(10000.0) * jnp.arange(half, dtype=jnp.float32) / half)
    angle = positions.astype(jnp.float32)[..., None] * freq  # [b, s, half]
    cos, sin = jnp.cos(angle)[:, :, None, :], jnp.sin(angle)[:, :, None, :]
    xf = x.astype(jnp.float32)
    x1, x2 = xf[..., :half], xf[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def attend(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, cfg: LLMConfig) -> jax.Array:
    """Softmax attention of ``q`` [b, sq, H, hd] over ``k``/``v`` [b, sk, KV, hd].

    ``mask`` [b, sq, sk] (True = attend). With fewer KV heads than query heads, either K/V are
    repeated to every head (``kv_repeat``) or the queries are grouped per KV head.
    """
    b, sq, heads, hd = q.shape
    kv = k.shape[2]
    scale = jnp.float32(1.0 / math.sqrt(hd))
    if cfg.attn_layout == "transpose":
        return _attend_transposed(q, k, v, mask, cfg, scale)
    if kv == heads or cfg.kv_repeat:
        if kv != heads:
            k = jnp.repeat(k, heads // kv, axis=2)
            v = jnp.repeat(v, heads // kv, axis=2)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) * scale
        scores = jnp.where(mask[:, None], scores, jnp.float32(-1e30))
        probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
        return jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, sq, heads * hd)
    qg = q.reshape(b, sq, kv, heads // kv, hd)
    scores = jnp.einsum("bqkgd,btkd->bkgqt", qg, k).astype(jnp.float32) * scale
    scores = jnp.where(mask[:, None, None], scores, jnp.float32(-1e30))
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bkgqt,btkd->bqkgd", probs, v).reshape(b, sq, heads * hd)


def _attend_transposed(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, cfg: LLMConfig,
                       scale: jax.Array) -> jax.Array:
    """``attend`` as the PyTorch/HF reference code writes it: heads to the front by reshape and
    transpose (queries grouped per KV head, ``[b, KV, groups * sq, hd]``), scores and values by
    batched ``jnp.matmul``, the output transposed back."""
    b, sq, heads, hd = q.shape
    kv, sk = k.shape[2], k.shape[1]
    if kv != heads and cfg.kv_repeat:
        k = jnp.repeat(k, heads // kv, axis=2)
        v = jnp.repeat(v, heads // kv, axis=2)
        kv = heads
    g = heads // kv
    qh = q.reshape(b, sq, kv, g, hd).transpose(0, 2, 3, 1, 4).reshape(b, kv, g * sq, hd)
    scores = jnp.matmul(qh, k.transpose(0, 2, 3, 1)).astype(jnp.float32) * scale  # [b, KV, g*sq, sk]
    scores = jnp.where(mask[:, None, None], scores.reshape(b, kv, g, sq, sk), jnp.float32(-1e30))
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype).reshape(b, kv, g * sq, sk)
    out = jnp.matmul(probs, v.transpose(0, 2, 1, 3))  # [b, KV, g*sq, hd]
    return out.reshape(b, kv, g, sq, hd).transpose(0, 3, 1, 2, 4).reshape(b, sq, heads * hd)


def _dense_ffn(p: dict[str, jax.Array], x: jax.Array, cfg: LLMConfig) -> jax.Array:
    up = x @ p["w_up"]
    h = jax.nn.silu(x @ p["w_gate"]) * up if cfg.mlp == "swiglu" else common.gelu(up)
    return h @ p["w_down"]


def _moe_ffn(p: dict[str, jax.Array], x: jax.Array, cfg: LLMConfig) -> jax.Array:
    """Top-k MoE, GShard style: route, scatter tokens into per-expert capacity buffers, run every
    expert as one batched matmul, gather the results back and combine with the routing weights."""
    shape = x.shape
    tokens = x.reshape(-1, shape[-1])  # [T, d]
    t, d = tokens.shape
    e, k = cfg.experts, cfg.top_k
    logits = (tokens @ p["router"]).astype(jnp.float32)
    weights, idx = lax.top_k(logits, k)  # [T, k]
    weights = jax.nn.softmax(weights, axis=-1)
    flat = idx.reshape(-1)  # [T*k]
    onehot = jax.nn.one_hot(flat, e, dtype=jnp.int32)
    slot = jnp.sum((jnp.cumsum(onehot, axis=0) - 1) * onehot, axis=-1)  # place within its expert
    capacity = max(1, math.ceil(1.25 * t * k / e))
    slot = jnp.where(slot < capacity, slot, capacity)  # overflow: out of range, dropped below
    src = jnp.repeat(tokens, k, axis=0)
    buf = jnp.zeros((e, capacity, d), x.dtype).at[flat, slot].set(src, mode="drop")
    up = jnp.einsum("ecd,edf->ecf", buf, p["w_up"])
    if cfg.mlp == "swiglu":
        h = jax.nn.silu(jnp.einsum("ecd,edf->ecf", buf, p["w_gate"])) * up
    else:
        h = common.gelu(up)
    out = jnp.einsum("ecf,efd->ecd", h, p["w_down"])
    back = out.at[flat, slot].get(mode="fill", fill_value=0)  # [T*k, d]
    y = jnp.sum(back.reshape(t, k, d).astype(jnp.float32) * weights[..., None], axis=1)
    return y.astype(x.dtype).reshape(shape)


def ffn(p: dict[str, jax.Array], x: jax.Array, cfg: LLMConfig) -> jax.Array:
    return _moe_ffn(p, x, cfg) if cfg.experts else _dense_ffn(p, x, cfg)


# --------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------


def _qkv(p: dict[str, jax.Array], h: jax.Array, positions: jax.Array, cfg: LLMConfig):
    b, s, _ = h.shape
    q = (h @ p["wq"]).reshape(b, s, cfg.heads, cfg.head_dim)
    k = (h @ p["wk"]).reshape(b, s, cfg.kv_heads, cfg.head_dim)
    v = (h @ p["wv"]).reshape(b, s, cfg.kv_heads, cfg.head_dim)
    if cfg.positions == "rope":
        q, k = rope(q, positions), rope(k, positions)
    return q, k, v


def _write_cache(cache: jax.Array, new: jax.Array, start: jax.Array, cfg: LLMConfig) -> jax.Array:
    """Write ``new`` [b, s, KV, hd] into ``cache`` [b, S, KV, hd] at ``start``.

    ``dus``: one dynamic-update-slice at a scalar offset. ``scatter``: ``start`` is one offset per
    sequence ([b]) and the rows are scattered (``.at[rows, cols].set``).
    """
    new = new.astype(cache.dtype)
    if cfg.cache == "dus":
        zero = jnp.zeros((), jnp.int32)
        return lax.dynamic_update_slice(cache, new, (zero, start, zero, zero))
    b, s = new.shape[:2]
    cols = start[:, None] + jnp.arange(s, dtype=jnp.int32)[None]  # [b, s]
    rows = jnp.broadcast_to(jnp.arange(b, dtype=jnp.int32)[:, None], (b, s))
    return cache.at[rows, cols].set(new, mode="drop")


def _latent_q(p: dict[str, jax.Array], h: jax.Array, positions: jax.Array, cfg: LLMConfig) -> jax.Array:
    """Latent attention's queries [b, s, H, hd + rope_dim]: the rotary part rotated in place."""
    b, s, _ = h.shape
    q = (h @ p["wq"]).reshape(b, s, cfg.heads, cfg.head_dim + cfg.rope_dim)
    return jnp.concatenate([q[..., :cfg.head_dim], rope(q[..., cfg.head_dim:], positions)], axis=-1)


def _latent_kv(p: dict[str, jax.Array], h: jax.Array, positions: jax.Array, cfg: LLMConfig):
    """The compressed latent [b, s, 1, latent] (normed) and the shared rotary key [b, s, 1, rope_dim]."""
    kv = h @ p["w_dkv"]
    c = rms_norm(kv[..., :cfg.latent], p["kv_norm_g"])[:, :, None, :]
    return c, rope(kv[..., None, cfg.latent:], positions)


def _latent_attend(p: dict[str, jax.Array], q: jax.Array, c: jax.Array, k_rope: jax.Array, mask: jax.Array,
                   cfg: LLMConfig) -> jax.Array:
    """Multi-head latent attention (DeepSeek-V2) in the non-absorbed form MaxText writes: keys and
    values of every head re-expanded from the latent [b, S, 1, latent], the shared rotary key
    broadcast to every head and concatenated to the keys."""
    b, sk = c.shape[:2]
    hd = cfg.head_dim
    kv = (c[:, :, 0] @ p["w_ukv"]).reshape(b, sk, cfg.heads, 2 * hd)
    k_rope = jnp.broadcast_to(k_rope, (b, sk, cfg.heads, cfg.rope_dim))
    k = jnp.concatenate([kv[..., :hd], k_rope], axis=-1)
    scale = jnp.float32(1.0 / math.sqrt(hd + cfg.rope_dim))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) * scale
    scores = jnp.where(mask[:, None], scores, jnp.float32(-1e30))
    probs = jax.nn.softmax(scores, axis=-1).astype(kv.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, kv[..., hd:]).reshape(q.shape[0], q.shape[1], cfg.heads * hd)


def cached_layer(
    p: dict[str, jax.Array], x: jax.Array, k_cache: jax.Array, v_cache: jax.Array, start: jax.Array, cfg: LLMConfig
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One pre-norm decoder layer for inference: new K/V (latent attention: the latent and the
    rotary key) written into the caches, the queries attend to every cached position up to their
    own."""
    p = _at_use(p, cfg)
    b, s, _ = x.shape
    starts = start if start.ndim else jnp.broadcast_to(start, (b,))
    positions = starts[:, None] + jnp.arange(s, dtype=jnp.int32)[None]  # [b, s]
    # (Traced in the order the layer had before latent attention existed, so that the other
    # modules lower to the same bytes.)
    h = _norm(p, "attn_norm", x, cfg)
    if cfg.latent:
        c, k = _latent_kv(p, h, positions, cfg)  # the latent, and the shared rotary key
        q = _latent_q(p, h, positions, cfg)
        k_cache = _write_cache(k_cache, c, start, cfg)
        v_cache = _write_cache(v_cache, k, start, cfg)
    else:
        q, k, v = _qkv(p, h, positions, cfg)
        k_cache = _write_cache(k_cache, k, start, cfg)
        v_cache = _write_cache(v_cache, v, start, cfg)
    key_pos = jnp.arange(cfg.seq, dtype=jnp.int32)
    mask = key_pos[None, None, :] <= positions[:, :, None]  # [b, s, S]
    attn = (_latent_attend(p, q, k_cache, v_cache, mask, cfg) if cfg.latent
            else cfg.attention(q, k_cache, v_cache, mask))
    x = x + attn @ p["wo"]
    x = x + ffn(p, _norm(p, "mlp_norm", x, cfg), cfg)
    return x, k_cache, v_cache


def train_layer(p: dict[str, jax.Array], x: jax.Array, cfg: LLMConfig) -> jax.Array:
    """One pre-norm decoder layer over a whole sequence with a causal mask (no cache)."""
    p = _at_use(p, cfg)
    b, s, _ = x.shape
    positions = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32)[None], (b, s))
    h = _norm(p, "attn_norm", x, cfg)
    if cfg.latent:
        c, k_rope = _latent_kv(p, h, positions, cfg)
        q = _latent_q(p, h, positions, cfg)
    else:
        q, k, v = _qkv(p, h, positions, cfg)
    mask = jnp.broadcast_to(common.causal_mask(s)[None], (b, s, s))
    attn = _latent_attend(p, q, c, k_rope, mask, cfg) if cfg.latent else cfg.attention(q, k, v, mask)
    x = x + attn @ p["wo"]
    return x + ffn(p, _norm(p, "mlp_norm", x, cfg), cfg)


def _at_use(p: Any, cfg: LLMConfig) -> Any:
    """Weights (one array or a dict of them) as a layer computes with them: cast to the compute
    dtype (``mixed``), else as stored."""
    if cfg.param_dtype == cfg.compute_dtype:
        return p
    if isinstance(p, dict):
        return {k: v.astype(cfg.compute_dtype) for k, v in p.items()}
    return p.astype(cfg.compute_dtype)


def _embed(params: dict[str, Any], tokens: jax.Array, positions: jax.Array, cfg: LLMConfig) -> jax.Array:
    x = _at_use(params["embed"], cfg)[tokens]
    if cfg.positions == "learned":
        x = x + _at_use(params["wpe"], cfg)[positions]
    return x


def _logits(params: dict[str, Any], x: jax.Array, cfg: LLMConfig) -> jax.Array:
    p = _at_use({k: params[k] for k in params if k.startswith("final_norm") or k == "head"}, cfg)
    return _norm(p, "final_norm", x, cfg) @ p["head"]


# --------------------------------------------------------------------------------------------
# Steps
# --------------------------------------------------------------------------------------------


def _run_cached(params, x, k_cache, v_cache, start, cfg: LLMConfig):
    """All layers with their caches: one ``lax.scan`` over stacked weights/caches, or a loop."""
    if cfg.scan:
        def body(h, layer):
            p, kc, vc = layer
            h, kc, vc = cached_layer(p, h, kc, vc, start, cfg)
            return h, (kc, vc)

        x, (k_cache, v_cache) = lax.scan(body, x, (params["layers"], k_cache, v_cache))
        return x, k_cache, v_cache
    ks, vs = [], []
    for p, kc, vc in zip(params["layers"], k_cache, v_cache, strict=True):
        x, kc, vc = cached_layer(p, x, kc, vc, start, cfg)
        ks.append(kc)
        vs.append(vc)
    return x, ks, vs


def decode_step_fn(cfg: LLMConfig) -> Callable[..., Any]:
    """``(params, k_cache, v_cache, tokens [b], pos) -> (next_tokens [b], k_cache, v_cache)``;
    ``pos`` is a scalar (``dus``) or one position per sequence (``scatter``)."""

    def decode_step(params, k_cache, v_cache, tokens, pos):
        b = tokens.shape[0]
        positions = (pos if pos.ndim else jnp.broadcast_to(pos, (b,)))[:, None]
        x = _embed(params, tokens[:, None], positions, cfg)
        x, k_cache, v_cache = _run_cached(params, x, k_cache, v_cache, pos, cfg)
        logits = _logits(params, x[:, -1], cfg)
        return jnp.argmax(logits, axis=-1).astype(jnp.int32), k_cache, v_cache

    return decode_step


def prefill_step_fn(cfg: LLMConfig) -> Callable[..., Any]:
    """``(params, k_cache, v_cache, tokens [b, seq//2], start) -> (next_tokens, k_cache, v_cache)``."""

    def prefill_step(params, k_cache, v_cache, tokens, start):
        b, s = tokens.shape
        starts = start if start.ndim else jnp.broadcast_to(start, (b,))
        positions = jnp.minimum(starts[:, None] + jnp.arange(s, dtype=jnp.int32)[None], cfg.seq - 1)
        x = _embed(params, tokens, positions, cfg)
        x, k_cache, v_cache = _run_cached(params, x, k_cache, v_cache, start, cfg)
        logits = _logits(params, x[:, -1], cfg)
        return jnp.argmax(logits, axis=-1).astype(jnp.int32), k_cache, v_cache

    return prefill_step


def loss_fn(params: dict[str, Any], tokens: jax.Array, targets: jax.Array, cfg: LLMConfig) -> jax.Array:
    """Mean next-token cross-entropy (layers scanned or unrolled, optionally rematerialized)."""
    b, s = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32)[None], (b, s))
    x = _embed(params, tokens, positions, cfg)
    layer = lambda p, h: train_layer(p, h, cfg)  # noqa: E731
    if cfg.remat:
        layer = jax.checkpoint(layer)
    if cfg.scan:
        x, _ = lax.scan(lambda h, p: (layer(p, h), None), x, params["layers"])
    else:
        for p in params["layers"]:
            x = layer(p, x)
    return common.cross_entropy(_logits(params, x, cfg), targets)


def train_step_fn(cfg: LLMConfig) -> Callable[..., Any]:
    """``(params, opt_state, tokens, targets) -> (params, opt_state, loss)``."""

    def train_step(params, opt_state, tokens, targets):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, targets, cfg)
        params, opt_state = common.optimizer_update(cfg.optimizer, params, grads, opt_state)
        return params, opt_state, loss

    return train_step


def program(cfg: LLMConfig, kind: str) -> Program:
    """The function and abstract arguments for ``kind`` of ``cfg`` (see :data:`KINDS`)."""
    cfg = canonical(cfg, kind)
    name = module_name(cfg, kind)
    params = param_specs(cfg)
    b = cfg.batch
    if kind == "train":
        tokens = common.spec((b, cfg.seq), jnp.int32)
        opt = common.optimizer_specs(cfg.optimizer, params)
        return Program(name, train_step_fn(cfg), (params, opt, tokens, tokens))
    k_cache, v_cache = cache_specs(cfg)
    pos = common.spec((b,) if cfg.cache == "scatter" else (), jnp.int32)
    if kind == "decode":
        return Program(name, decode_step_fn(cfg), (params, k_cache, v_cache, common.spec((b,), jnp.int32), pos))
    tokens = common.spec((b, cfg.seq // 2), jnp.int32)
    return Program(name, prefill_step_fn(cfg), (params, k_cache, v_cache, tokens, pos))
