"""GPT-2 style decoder: token + position embedding, pre-LN blocks with causal multi-head attention
and a GELU MLP, final layer norm, output head tied to the token embedding, cross-entropy loss.

Why this shape: it is the canonical training workload people tune compilers for, and its training
step contains everything the HLO pass pipeline has to deal with in one graph: a gather (embedding
lookup) whose gradient is a scatter-add, dot-heavy attention with reshapes/transposes, reductions
(softmax, layer norm, loss), elementwise chains (GELU, the optimizer) and many parameters.

Two knobs beyond the sizes come from nanoGPT's config and exist to vary graph *structure*, not
just shapes: ``bias`` (biases in linears and layer norms, as GPT-2 had) and ``mlp_ratio=0``
(attention-only blocks). ``layers=0`` is the "zero-layer transformer" (embedding straight into the
tied head), the smallest member of the family.
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

FAMILY = "gpt2"

#: What can be lowered from one config. ``train``: full training step; ``infer``: forward to
#: logits; the rest are one piece of the model, each as its own fwd + bwd + optimizer step.
KINDS: tuple[str, ...] = ("train", "infer", "block", "attention", "mlp", "loss")


@dataclass(frozen=True)
class GPT2Config:
    """Size of a GPT-2 style model and of the batch it is stepped on."""

    layers: int = 2
    d_model: int = 64
    heads: int = 2
    seq: int = 32
    batch: int = 2
    vocab: int = 128
    mlp_ratio: int = 4
    bias: bool = True
    optimizer: str = "adam"
    dtype: str = "f32"

    def __post_init__(self) -> None:
        common.check_config(self, ("d_model", "heads", "seq", "batch", "vocab"))
        if self.layers < 0 or self.mlp_ratio < 0:
            raise ValueError("layers and mlp_ratio must be >= 0")
        if self.d_model % self.heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by heads {self.heads}")


_DEFAULT = GPT2Config()
_SLUG = {
    "layers": "l", "d_model": "d", "heads": "h", "seq": "s", "batch": "b",
    "vocab": "v?", "mlp_ratio": "m?", "bias": "bias?", "optimizer": "?", "dtype": "",
}


def module_name(cfg: GPT2Config, kind: str) -> str:
    """Module/file name, e.g. ``gpt2_train_l2_d64_h2_s32_b2_f32`` (non-default extras spelled)."""
    return common.sanitize_name(f"{FAMILY}_{kind}_{common.config_slug(cfg, _SLUG, _DEFAULT)}")


def supports(cfg: GPT2Config, kind: str) -> bool:
    """Whether ``kind`` exists for ``cfg`` (no block without layers, no MLP when attention-only)."""
    if kind in ("block", "attention"):
        return cfg.layers >= 1
    if kind == "mlp":
        return cfg.layers >= 1 and cfg.mlp_ratio >= 1
    return kind in KINDS


def canonical(cfg: GPT2Config, kind: str) -> GPT2Config:
    """The config with every field that cannot change ``kind``'s graph reset to a fixed value.

    Sub-graphs do not depend on the layer count (nor, say, the MLP on the head count), so two
    model configs that differ only there would produce the same module twice under different
    names; the suite canonicalizes before de-duplicating so that cannot happen.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r} for {FAMILY}; expected one of {KINDS}")
    if not supports(cfg, kind):
        raise ValueError(f"{FAMILY} config {cfg} has no {kind!r} sub-graph")
    d = _DEFAULT
    if kind == "train":
        return cfg
    if kind == "infer":
        return dataclasses.replace(cfg, optimizer=d.optimizer)
    sub = dataclasses.replace(cfg, layers=1, vocab=d.vocab)
    if kind == "block":
        return sub
    if kind == "attention":
        return dataclasses.replace(sub, mlp_ratio=d.mlp_ratio)
    if kind == "mlp":
        return dataclasses.replace(sub, heads=1)
    return dataclasses.replace(cfg, layers=1, heads=1, mlp_ratio=d.mlp_ratio)  # loss: vocab matters


# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


def _out_std(cfg: GPT2Config) -> float:
    """GPT-2's scaled init of residual projections (0.02 / sqrt(2 * layers))."""
    return 0.02 / (2 * max(cfg.layers, 1)) ** 0.5


def _attn_params(cfg: GPT2Config, key: jax.Array) -> dict[str, jax.Array]:
    dt, d = common.dtype_of(cfg.dtype), cfg.d_model
    return common.norm_params(d, dt, cfg.bias) | common.attention_params(key, d, dt, cfg.bias, _out_std(cfg))


def _mlp_params(cfg: GPT2Config, key: jax.Array) -> dict[str, jax.Array]:
    dt, d = common.dtype_of(cfg.dtype), cfg.d_model
    hidden = d * cfg.mlp_ratio
    return common.norm_params(d, dt, cfg.bias) | common.mlp_params(key, d, hidden, dt, cfg.bias, _out_std(cfg))


def _block_params(cfg: GPT2Config, key: jax.Array) -> dict[str, dict[str, jax.Array]]:
    ka, km = jax.random.split(key)
    if not cfg.mlp_ratio:
        return {"attn": _attn_params(cfg, ka)}
    return {"attn": _attn_params(cfg, ka), "mlp": _mlp_params(cfg, km)}


def _head_params(cfg: GPT2Config, key: jax.Array) -> dict[str, jax.Array]:
    dt, d = common.dtype_of(cfg.dtype), cfg.d_model
    return common.norm_params(d, dt, cfg.bias) | {"wte": common.normal(key, (cfg.vocab, d), dt, 0.02)}


def init_params(cfg: GPT2Config, key: jax.Array | None = None) -> dict[str, Any]:
    """Seeded parameters: ``{"wte", "wpe", "blocks": [{"attn", "mlp"}, ...], "ln_f_g"[, "ln_f_b"]}``.

    ``wte`` is both the input embedding and the (tied) output projection, as in GPT-2.
    """
    key = jax.random.PRNGKey(common.SEED) if key is None else key
    dt, d = common.dtype_of(cfg.dtype), cfg.d_model
    k_wte, k_wpe, k_blocks = jax.random.split(key, 3)
    block_keys = jax.random.split(k_blocks, cfg.layers) if cfg.layers else []
    return {
        "wte": common.normal(k_wte, (cfg.vocab, d), dt, 0.02),
        "wpe": common.normal(k_wpe, (cfg.seq, d), dt, 0.01),
        "blocks": [_block_params(cfg, k) for k in block_keys],
        **common.norm_params(d, dt, cfg.bias, prefix="ln_f"),
    }


def param_specs(cfg: GPT2Config) -> PyTree:
    """Abstract parameters (shapes/dtypes of :func:`init_params`), no arrays created."""
    return common.specs_of(lambda: init_params(cfg))


# --------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------


def attention_sublayer(p: dict[str, jax.Array], x: jax.Array, heads: int) -> jax.Array:
    """Pre-LN causal self-attention with residual: ``x + attn(ln(x))``."""
    h = common.layer_norm(x, p["ln_g"], p.get("ln_b"))
    return x + common.attention(p, h, heads, common.causal_mask(x.shape[1])[None, None])


def mlp_sublayer(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    """Pre-LN GELU MLP with residual: ``x + proj(gelu(fc(ln(x))))``."""
    return x + common.mlp(p, common.layer_norm(x, p["ln_g"], p.get("ln_b")))


def block(p: dict[str, dict[str, jax.Array]], x: jax.Array, heads: int) -> jax.Array:
    """One transformer block (attention then MLP, both pre-LN residual; no MLP if ``mlp_ratio=0``)."""
    x = attention_sublayer(p["attn"], x, heads)
    return mlp_sublayer(p["mlp"], x) if "mlp" in p else x


def head_loss(p: dict[str, jax.Array], x: jax.Array, targets: jax.Array) -> jax.Array:
    """Final layer norm, tied output projection (``x @ wte.T``) and mean cross-entropy."""
    h = common.layer_norm(x, p["ln_g"], p.get("ln_b"))
    return common.cross_entropy(jnp.einsum("bsd,vd->bsv", h, p["wte"]), targets)


def _head(params: dict[str, Any]) -> dict[str, jax.Array]:
    head = {"ln_g": params["ln_f_g"], "wte": params["wte"]}
    if "ln_f_b" in params:
        head["ln_b"] = params["ln_f_b"]
    return head


def hidden(params: dict[str, Any], tokens: jax.Array, cfg: GPT2Config) -> jax.Array:
    """Embedding (a gather from ``wte``; its gradient is a scatter-add) plus positions, then blocks."""
    x = params["wte"][tokens] + params["wpe"][None]
    for p in params["blocks"]:
        x = block(p, x, cfg.heads)
    return x


def logits_fn(params: dict[str, Any], tokens: jax.Array, cfg: GPT2Config) -> jax.Array:
    """Forward pass to next-token logits [batch, seq, vocab]."""
    head = _head(params)
    h = common.layer_norm(hidden(params, tokens, cfg), head["ln_g"], head.get("ln_b"))
    return jnp.einsum("bsd,vd->bsv", h, head["wte"])


def loss_fn(params: dict[str, Any], tokens: jax.Array, targets: jax.Array, cfg: GPT2Config) -> jax.Array:
    """Mean next-token cross-entropy of the whole model."""
    return head_loss(_head(params), hidden(params, tokens, cfg), targets)


def train_step_fn(cfg: GPT2Config) -> Callable[..., tuple[PyTree, PyTree, jax.Array]]:
    """``(params, opt_state, tokens, targets) -> (params, opt_state, loss)``."""

    def train_step(params: PyTree, opt_state: PyTree, tokens: jax.Array, targets: jax.Array):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, targets, cfg)
        params, opt_state = common.optimizer_update(cfg.optimizer, params, grads, opt_state)
        return params, opt_state, loss

    return train_step


# --------------------------------------------------------------------------------------------
# Programs
# --------------------------------------------------------------------------------------------


def program(cfg: GPT2Config, kind: str) -> Program:
    """The function and abstract arguments for ``kind`` of ``cfg`` (see :data:`KINDS`)."""
    cfg = canonical(cfg, kind)
    name = module_name(cfg, kind)
    b, s, d = cfg.batch, cfg.seq, cfg.d_model
    tokens = common.spec((b, s), jnp.int32)
    act = common.spec((b, s, d), common.dtype_of(cfg.dtype))
    key = jax.random.PRNGKey(common.SEED)
    if kind == "infer":
        return Program(name, lambda p, t: logits_fn(p, t, cfg), (param_specs(cfg), tokens))
    if kind == "train":
        params = param_specs(cfg)
        opt = common.optimizer_specs(cfg.optimizer, params)
        return Program(name, train_step_fn(cfg), (params, opt, tokens, tokens))
    if kind == "loss":
        params = common.specs_of(lambda: _head_params(cfg, key))
        step = common.loss_train_step(head_loss, cfg.optimizer)
        return Program(name, step, (params, common.optimizer_specs(cfg.optimizer, params), act, tokens))
    fn: Callable[..., jax.Array]
    if kind == "block":
        params = common.specs_of(lambda: _block_params(cfg, key))
        fn = lambda p, x: block(p, x, cfg.heads)  # noqa: E731
    elif kind == "attention":
        params = common.specs_of(lambda: _attn_params(cfg, key))
        fn = lambda p, x: attention_sublayer(p, x, cfg.heads)  # noqa: E731
    else:  # mlp
        params = common.specs_of(lambda: _mlp_params(cfg, key))
        fn = mlp_sublayer
    step = common.subgraph_train_step(fn, cfg.optimizer)
    return Program(name, step, (params, common.optimizer_specs(cfg.optimizer, params), act, act))
