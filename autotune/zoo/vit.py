"""Vision transformer (ViT) steps: image classification training and inference.

Why this family exists: vision encoders (ViT, the image towers of CLIP/SigLIP and of multimodal
LLMs) are transformers whose graphs start differently from a language model's: the image is cut
into patches by a **strided convolution** (``conv``, the reference implementations) or by
**reshapes and a transpose** into a dense layer (``linear``, how MLP-Mixer/Flax examples write it),
a learned class token is **concatenated** in front of the patch sequence, positions are a learned
table added whole (no gather), attention is bidirectional with no mask, and the head reads either
the class token (a slice) or the **mean over patches** (a reduction). None of that is in the
``llm`` family, and the ResNet family has convolutions but no attention.

Kinds: ``train`` (softmax cross-entropy on integer labels, gradient and optimizer update) and
``infer`` (logits and the predicted class). Pre-LN blocks, GELU MLP, layers unrolled or under
``lax.scan``. Lowered from ``jax.ShapeDtypeStruct`` arguments: nothing is allocated or executed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from autotune.zoo import common
from autotune.zoo.common import Program

FAMILY = "vit"
KINDS: tuple[str, ...] = ("train", "infer")
PATCH_EMBEDS = ("conv", "linear")
POOLS = ("cls", "gap")


@dataclass(frozen=True)
class ViTConfig:
    """Size and structure of a ViT and of the batch of images it is stepped on (NHWC)."""

    layers: int = 2
    d_model: int = 64
    heads: int = 4
    mlp_ratio: int = 4
    image: int = 32
    patch: int = 8
    channels: int = 3
    classes: int = 10
    batch: int = 2
    patch_embed: str = "conv"
    pool: str = "cls"
    scan: bool = False
    optimizer: str = "adam"
    dtype: str = "f32"

    def __post_init__(self) -> None:
        common.check_config(self, ("layers", "d_model", "heads", "mlp_ratio", "image", "patch", "channels",
                                   "classes", "batch"))
        for value, allowed, what in ((self.patch_embed, PATCH_EMBEDS, "patch_embed"), (self.pool, POOLS, "pool")):
            if value not in allowed:
                raise ValueError(f"unknown {what} {value!r}; expected one of {allowed}")
        if self.d_model % self.heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by heads {self.heads}")
        if self.image % self.patch:
            raise ValueError(f"image {self.image} is not divisible by patch {self.patch}")

    @property
    def patches(self) -> int:
        return (self.image // self.patch) ** 2

    @property
    def tokens(self) -> int:
        return self.patches + (self.pool == "cls")


_DEFAULT = ViTConfig()
_SLUG = {
    "layers": "l", "d_model": "d", "heads": "h", "mlp_ratio": "m?", "image": "i", "patch": "p", "channels": "c?",
    "classes": "k?", "batch": "b", "patch_embed": "", "pool": "", "scan": "scan", "optimizer": "?", "dtype": "",
}


def module_name(cfg: ViTConfig, kind: str) -> str:
    """Module/file name, e.g. ``vit_train_l2_d64_h4_i32_p8_b2_conv_cls_noscan_f32``."""
    return common.sanitize_name(f"{FAMILY}_{kind}_{common.config_slug(cfg, _SLUG, _DEFAULT)}")


def supports(cfg: ViTConfig, kind: str) -> bool:
    return kind in KINDS


def canonical(cfg: ViTConfig, kind: str) -> ViTConfig:
    """Inference has no optimizer."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r} for {FAMILY}; expected one of {KINDS}")
    return cfg if kind == "train" else dataclasses.replace(cfg, optimizer=_DEFAULT.optimizer)


def group_key(cfg: ViTConfig) -> dict[str, Any]:
    """The model, for the train/test split: everything but the optimizer."""
    out = dataclasses.asdict(cfg)
    out.pop("optimizer")
    return out


def _block_specs(cfg: ViTConfig) -> dict[str, jax.ShapeDtypeStruct]:
    key, dt, d = jax.random.PRNGKey(common.SEED), common.dtype_of(cfg.dtype), cfg.d_model
    return common.specs_of(lambda: (
        common.attention_params(key, d, dt, True, 0.02) | common.norm_params(d, dt, True, "ln1")
        | common.mlp_params(key, d, d * cfg.mlp_ratio, dt, True, 0.02) | common.norm_params(d, dt, True, "ln2")))


def param_specs(cfg: ViTConfig) -> dict[str, Any]:
    """Patch embedding (a conv kernel HWIO, or a dense layer over flattened patches), class token,
    position table, blocks (stacked when ``scan``), final norm and head."""
    dt, d, p, c = common.dtype_of(cfg.dtype), cfg.d_model, cfg.patch, cfg.channels
    block = _block_specs(cfg)
    out: dict[str, Any] = {
        "patch_w": common.spec((p, p, c, d) if cfg.patch_embed == "conv" else (p * p * c, d), dt),
        "patch_b": common.spec((d,), dt),
        "pos": common.spec((cfg.tokens, d), dt),
        "blocks": ({k: common.spec((cfg.layers, *v.shape), v.dtype) for k, v in block.items()} if cfg.scan
                   else [dict(block) for _ in range(cfg.layers)]),
        "norm_g": common.spec((d,), dt), "norm_b": common.spec((d,), dt),
        "head_w": common.spec((d, cfg.classes), dt), "head_b": common.spec((cfg.classes,), dt),
    }
    if cfg.pool == "cls":
        out["cls"] = common.spec((1, 1, d), dt)
    return out


def embed_patches(params: dict[str, Any], images: jax.Array, cfg: ViTConfig) -> jax.Array:
    """[b, H, W, C] -> [b, patches, d]: a convolution with stride ``patch``, or the patches cut out by
    reshape/transpose and projected by a dense layer."""
    b, n, p = images.shape[0], cfg.image // cfg.patch, cfg.patch
    if cfg.patch_embed == "conv":
        y = lax.conv_general_dilated(images, params["patch_w"], (p, p), "VALID",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return y.reshape(b, n * n, cfg.d_model) + params["patch_b"]
    x = images.reshape(b, n, p, n, p, cfg.channels).transpose(0, 1, 3, 2, 4, 5).reshape(b, n * n, -1)
    return common.dense(x, params["patch_w"], params["patch_b"])


def block(p: dict[str, jax.Array], x: jax.Array, heads: int) -> jax.Array:
    """Pre-LN encoder block: ``x + attn(ln(x))`` then ``x + mlp(ln(x))`` (no mask: every patch sees all)."""
    x = x + common.attention(p, common.layer_norm(x, p["ln1_g"], p["ln1_b"], 1e-6), heads, None)
    return x + common.mlp(p, common.layer_norm(x, p["ln2_g"], p["ln2_b"], 1e-6))


def logits_fn(params: dict[str, Any], images: jax.Array, cfg: ViTConfig) -> jax.Array:
    x = embed_patches(params, images.astype(params["patch_w"].dtype), cfg)
    if cfg.pool == "cls":
        x = jnp.concatenate([jnp.broadcast_to(params["cls"], (x.shape[0], 1, cfg.d_model)), x], axis=1)
    x = x + params["pos"][None]
    if cfg.scan:
        x, _ = lax.scan(lambda h, p: (block(p, h, cfg.heads), None), x, params["blocks"])
    else:
        for p in params["blocks"]:
            x = block(p, x, cfg.heads)
    x = common.layer_norm(x, params["norm_g"], params["norm_b"], 1e-6)
    pooled = x[:, 0] if cfg.pool == "cls" else jnp.mean(x, axis=1)
    return common.dense(pooled, params["head_w"], params["head_b"])


def train_step_fn(cfg: ViTConfig) -> Callable[..., Any]:
    """``(params, opt_state, images, labels) -> (params, opt_state, loss)``."""

    def loss_fn(params, images, labels):
        return common.cross_entropy(logits_fn(params, images, cfg), labels)

    def train_step(params, opt_state, images, labels):
        loss, grads = jax.value_and_grad(loss_fn)(params, images, labels)
        params, opt_state = common.optimizer_update(cfg.optimizer, params, grads, opt_state)
        return params, opt_state, loss

    return train_step


def program(cfg: ViTConfig, kind: str) -> Program:
    """The function and abstract arguments for ``kind`` of ``cfg`` (see :data:`KINDS`)."""
    cfg = canonical(cfg, kind)
    name = module_name(cfg, kind)
    params = param_specs(cfg)
    images = common.spec((cfg.batch, cfg.image, cfg.image, cfg.channels), jnp.float32)
    if kind == "train":
        labels = common.spec((cfg.batch,), jnp.int32)
        return Program(name, train_step_fn(cfg), (params, common.optimizer_specs(cfg.optimizer, params), images,
                                                  labels))

    def infer(params, images):
        logits = logits_fn(params, images, cfg)
        return logits, jnp.argmax(logits, axis=-1).astype(jnp.int32)

    return Program(name, infer, (params, images))
