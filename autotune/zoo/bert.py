"""BERT style encoder: word + position + token-type embeddings with layer norm, post-LN blocks with
bidirectional (padding-masked) multi-head attention and a GELU MLP, and an MLM head (dense, GELU,
layer norm, decoder tied to the word embedding plus an output bias) with a weighted masked-LM loss.

Why it is in the zoo next to GPT-2: the same building blocks in a different arrangement give the
pass pipeline a different graph. Post-LN puts the normalization after the residual add (so the
backward pass chains differently), the mask is data (a [batch, seq] argument broadcast into the
scores, not an iota pattern), there are three embedding gathers/scatters instead of one, and the
loss is a weighted sum over selected positions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from autotune.zoo import common
from autotune.zoo.common import Program, PyTree

FAMILY = "bert"

#: Same kinds as GPT-2: full training step, forward to MLM logits, and single pieces as their own
#: fwd + bwd + optimizer step (``loss`` is the MLM head plus loss).
KINDS: tuple[str, ...] = ("train", "infer", "block", "attention", "mlp", "loss")


@dataclass(frozen=True)
class BertConfig:
    """Size of a BERT style encoder and of the batch it is stepped on."""

    layers: int = 2
    d_model: int = 64
    heads: int = 2
    seq: int = 32
    batch: int = 2
    vocab: int = 128
    type_vocab: int = 2
    mlp_ratio: int = 4
    optimizer: str = "adam"
    dtype: str = "f32"

    def __post_init__(self) -> None:
        common.check_config(self, ("layers", "d_model", "heads", "seq", "batch", "vocab", "type_vocab", "mlp_ratio"))
        if self.d_model % self.heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by heads {self.heads}")


_DEFAULT = BertConfig()
_SLUG = {
    "layers": "l", "d_model": "d", "heads": "h", "seq": "s", "batch": "b",
    "vocab": "v?", "type_vocab": "t?", "mlp_ratio": "m?", "optimizer": "?", "dtype": "",
}


def module_name(cfg: BertConfig, kind: str) -> str:
    """Module/file name, e.g. ``bert_train_l2_d64_h2_s32_b2_f32``."""
    return common.sanitize_name(f"{FAMILY}_{kind}_{common.config_slug(cfg, _SLUG, _DEFAULT)}")


def supports(cfg: BertConfig, kind: str) -> bool:
    """Every kind exists for every valid BERT config."""
    return kind in KINDS


def canonical(cfg: BertConfig, kind: str) -> BertConfig:
    """Reset the fields that cannot change ``kind``'s graph (see :func:`gpt2.canonical` for why)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r} for {FAMILY}; expected one of {KINDS}")
    d = _DEFAULT
    if kind == "train":
        return cfg
    if kind == "infer":
        return dataclasses.replace(cfg, optimizer=d.optimizer)
    sub = dataclasses.replace(cfg, layers=1, vocab=d.vocab, type_vocab=d.type_vocab)
    if kind == "block":
        return sub
    if kind == "attention":
        return dataclasses.replace(sub, mlp_ratio=d.mlp_ratio)
    if kind == "mlp":
        return dataclasses.replace(sub, heads=1)
    # loss: the MLM head depends on width, vocab, batch and seq only.
    return dataclasses.replace(cfg, layers=1, heads=1, mlp_ratio=d.mlp_ratio, type_vocab=d.type_vocab)


# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


def _attn_params(cfg: BertConfig, key: jax.Array) -> dict[str, jax.Array]:
    dt, d = common.dtype_of(cfg.dtype), cfg.d_model
    return common.attention_params(key, d, dt, True, 0.02) | common.norm_params(d, dt, True)


def _mlp_params(cfg: BertConfig, key: jax.Array) -> dict[str, jax.Array]:
    dt, d = common.dtype_of(cfg.dtype), cfg.d_model
    return common.mlp_params(key, d, d * cfg.mlp_ratio, dt, True, 0.02) | common.norm_params(d, dt, True)


def _block_params(cfg: BertConfig, key: jax.Array) -> dict[str, dict[str, jax.Array]]:
    ka, km = jax.random.split(key)
    return {"attn": _attn_params(cfg, ka), "mlp": _mlp_params(cfg, km)}


def _mlm_params(cfg: BertConfig, key: jax.Array) -> dict[str, jax.Array]:
    """MLM head: transform (dense + GELU + LN) and the decoder's output bias (weights are tied)."""
    dt, d = common.dtype_of(cfg.dtype), cfg.d_model
    return {
        "dense_w": common.normal(key, (d, d), dt, 0.02),
        "dense_b": jnp.zeros((d,), dt),
        **common.norm_params(d, dt, True),
        "out_b": jnp.zeros((cfg.vocab,), dt),
    }


def init_params(cfg: BertConfig, key: jax.Array | None = None) -> dict[str, Any]:
    """Seeded parameters: ``{"embed": {...}, "blocks": [...], "mlm": {...}}``."""
    key = jax.random.PRNGKey(common.SEED) if key is None else key
    dt, d = common.dtype_of(cfg.dtype), cfg.d_model
    kw, kp, kt, kb, km = jax.random.split(key, 5)
    return {
        "embed": {
            "word": common.normal(kw, (cfg.vocab, d), dt, 0.02),
            "pos": common.normal(kp, (cfg.seq, d), dt, 0.02),
            "type": common.normal(kt, (cfg.type_vocab, d), dt, 0.02),
            **common.norm_params(d, dt, True),
        },
        "blocks": [_block_params(cfg, k) for k in jax.random.split(kb, cfg.layers)],
        "mlm": _mlm_params(cfg, km),
    }


def param_specs(cfg: BertConfig) -> PyTree:
    """Abstract parameters (shapes/dtypes of :func:`init_params`), no arrays created."""
    return common.specs_of(lambda: init_params(cfg))


# --------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------


def _mask(attention_mask: jax.Array) -> jax.Array:
    """[batch, seq] 0/1 padding mask -> boolean [batch, 1, 1, seq] (every query sees the same keys)."""
    return (attention_mask > 0)[:, None, None, :]


def attention_sublayer(p: dict[str, jax.Array], x: jax.Array, attention_mask: jax.Array, heads: int) -> jax.Array:
    """Post-LN bidirectional self-attention: ``ln(x + attn(x))``."""
    return common.layer_norm(x + common.attention(p, x, heads, _mask(attention_mask)), p["ln_g"], p["ln_b"], 1e-12)


def mlp_sublayer(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    """Post-LN GELU MLP: ``ln(x + proj(gelu(fc(x))))``."""
    return common.layer_norm(x + common.mlp(p, x), p["ln_g"], p["ln_b"], 1e-12)


def block(p: dict[str, dict[str, jax.Array]], x: jax.Array, attention_mask: jax.Array, heads: int) -> jax.Array:
    """One encoder block: attention then MLP, each post-LN."""
    return mlp_sublayer(p["mlp"], attention_sublayer(p["attn"], x, attention_mask, heads))


def mlm_logits(p: dict[str, jax.Array], word: jax.Array, x: jax.Array) -> jax.Array:
    """MLM head: dense + GELU + LN, then the tied decoder ``x @ word.T + out_b``."""
    h = common.layer_norm(common.gelu(common.dense(x, p["dense_w"], p["dense_b"])), p["ln_g"], p["ln_b"], 1e-12)
    return jnp.einsum("bsd,vd->bsv", h, word) + p["out_b"]


def head_loss(p: dict[str, Any], x: jax.Array, labels: jax.Array, weights: jax.Array) -> jax.Array:
    """MLM head plus cross-entropy weighted by ``weights`` (1 at masked positions, 0 elsewhere)."""
    return common.cross_entropy(mlm_logits(p["mlm"], p["word"], x), labels, weights)


def encode(
    params: dict[str, Any], tokens: jax.Array, types: jax.Array, attention_mask: jax.Array, cfg: BertConfig
) -> jax.Array:
    """Embeddings (three gathers, summed, layer-normed) followed by every block."""
    e = params["embed"]
    x = e["word"][tokens] + e["pos"][None] + e["type"][types]
    x = common.layer_norm(x, e["ln_g"], e["ln_b"], 1e-12)
    for p in params["blocks"]:
        x = block(p, x, attention_mask, cfg.heads)
    return x


def loss_fn(params: dict[str, Any], batch: dict[str, jax.Array], cfg: BertConfig) -> jax.Array:
    """Masked-LM loss of the whole model on ``batch`` (see :func:`batch_specs`)."""
    x = encode(params, batch["tokens"], batch["types"], batch["attention_mask"], cfg)
    head = {"mlm": params["mlm"], "word": params["embed"]["word"]}
    return head_loss(head, x, batch["labels"], batch["weights"])


def train_step_fn(cfg: BertConfig) -> Callable[..., tuple[PyTree, PyTree, jax.Array]]:
    """``(params, opt_state, batch) -> (params, opt_state, loss)``."""

    def train_step(params: PyTree, opt_state: PyTree, batch: dict[str, jax.Array]):
        loss, grads = jax.value_and_grad(loss_fn)(params, batch, cfg)
        params, opt_state = common.optimizer_update(cfg.optimizer, params, grads, opt_state)
        return params, opt_state, loss

    return train_step


def batch_specs(cfg: BertConfig) -> dict[str, jax.ShapeDtypeStruct]:
    """Abstract MLM batch: token/type ids, padding mask, labels and per-position loss weights."""
    ids = common.spec((cfg.batch, cfg.seq), jnp.int32)
    return {
        "attention_mask": ids, "labels": ids, "tokens": ids, "types": ids,
        "weights": common.spec((cfg.batch, cfg.seq), jnp.float32),
    }


# --------------------------------------------------------------------------------------------
# Programs
# --------------------------------------------------------------------------------------------


def program(cfg: BertConfig, kind: str) -> Program:
    """The function and abstract arguments for ``kind`` of ``cfg`` (see :data:`KINDS`)."""
    cfg = canonical(cfg, kind)
    name = module_name(cfg, kind)
    dt = common.dtype_of(cfg.dtype)
    act = common.spec((cfg.batch, cfg.seq, cfg.d_model), dt)
    ids = common.spec((cfg.batch, cfg.seq), jnp.int32)
    key = jax.random.PRNGKey(common.SEED)
    if kind == "infer":
        def infer(params: PyTree, tokens: jax.Array, types: jax.Array, attention_mask: jax.Array) -> jax.Array:
            x = encode(params, tokens, types, attention_mask, cfg)
            return mlm_logits(params["mlm"], params["embed"]["word"], x)

        return Program(name, infer, (param_specs(cfg), ids, ids, ids))
    if kind == "train":
        params = param_specs(cfg)
        opt = common.optimizer_specs(cfg.optimizer, params)
        return Program(name, train_step_fn(cfg), (params, opt, batch_specs(cfg)))
    if kind == "loss":
        params = common.specs_of(
            lambda: {"mlm": _mlm_params(cfg, key), "word": common.normal(key, (cfg.vocab, cfg.d_model), dt, 0.02)}
        )
        step = common.loss_train_step(head_loss, cfg.optimizer)
        weights = common.spec((cfg.batch, cfg.seq), jnp.float32)
        return Program(name, step, (params, common.optimizer_specs(cfg.optimizer, params), act, ids, weights))
    fn: Callable[..., jax.Array]
    if kind == "block":
        params = common.specs_of(lambda: _block_params(cfg, key))
        fn = lambda p, x, m: block(p, x, m, cfg.heads)  # noqa: E731
        extra: tuple[Any, ...] = (ids,)
    elif kind == "attention":
        params = common.specs_of(lambda: _attn_params(cfg, key))
        fn = lambda p, x, m: attention_sublayer(p, x, m, cfg.heads)  # noqa: E731
        extra = (ids,)
    else:  # mlp
        params = common.specs_of(lambda: _mlp_params(cfg, key))
        fn = mlp_sublayer
        extra = ()
    step = common.subgraph_train_step(fn, cfg.optimizer)
    return Program(name, step, (params, common.optimizer_specs(cfg.optimizer, params), act, act, *extra))
