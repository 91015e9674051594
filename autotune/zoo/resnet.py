"""ResNet style image classifier, NHWC: a 3x3 stem conv, stages of basic residual blocks (two 3x3
convs, each followed by batch normalization; a strided 1x1 projection shortcut where the shape
changes), global average pooling and a linear classifier with softmax cross-entropy.

Why it is in the zoo: convolutions, batch-norm statistics (reductions over batch and space, with
running averages carried as state), and residual adds make a graph whose shape is unlike the
transformers': few large dots, many reductions, and layout-sensitive convolutions whose backward
pass is more convolutions. Plain SGD with momentum is the classic optimizer for it.
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
from autotune.zoo.common import Program, PyTree

FAMILY = "resnet"

#: ``block`` is one residual block (the first of stage 2 when there is one, i.e. the strided
#: block with a projection shortcut); ``stem`` is the first conv + norm + ReLU; ``loss`` is global
#: pooling + classifier + loss. Transformer-only kinds (attention, mlp) do not exist here.
KINDS: tuple[str, ...] = ("train", "infer", "block", "stem", "loss")

_BN_MOMENTUM = 0.9
_BN_EPS = 1e-5


@dataclass(frozen=True)
class ResNetConfig:
    """Size of a ResNet style model and of the batch it is stepped on.

    ``stages`` stages of ``blocks`` basic blocks each; stage ``i`` has ``width * 2**i`` channels
    and (for ``i > 0``) halves the spatial size.
    """

    stages: int = 2
    blocks: int = 1
    width: int = 8
    image: int = 16
    batch: int = 2
    classes: int = 10
    channels: int = 3
    optimizer: str = "sgd"
    dtype: str = "f32"

    def __post_init__(self) -> None:
        common.check_config(self, ("stages", "blocks", "width", "image", "batch", "classes", "channels"))
        if self.image % 2 ** (self.stages - 1):
            raise ValueError(f"image {self.image} cannot be halved {self.stages - 1} times")


_DEFAULT = ResNetConfig()
_SLUG = {
    "stages": "st", "blocks": "bl", "width": "w", "image": "i", "batch": "b",
    "classes": "c?", "channels": "ch?", "optimizer": "?", "dtype": "",
}


def module_name(cfg: ResNetConfig, kind: str) -> str:
    """Module/file name, e.g. ``resnet_train_st2_bl1_w8_i16_b2_f32``."""
    return common.sanitize_name(f"{FAMILY}_{kind}_{common.config_slug(cfg, _SLUG, _DEFAULT)}")


def supports(cfg: ResNetConfig, kind: str) -> bool:
    """Every kind exists for every valid ResNet config."""
    return kind in KINDS


def canonical(cfg: ResNetConfig, kind: str) -> ResNetConfig:
    """Reset the fields that cannot change ``kind``'s graph (see :func:`gpt2.canonical` for why)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r} for {FAMILY}; expected one of {KINDS}")
    d = _DEFAULT
    if kind == "train":
        return cfg
    if kind == "infer":
        return dataclasses.replace(cfg, optimizer=d.optimizer)
    if kind == "block":  # only whether a stage 2 exists matters
        return dataclasses.replace(cfg, stages=min(cfg.stages, 2), blocks=1, classes=d.classes, channels=d.channels)
    if kind == "stem":
        return dataclasses.replace(cfg, stages=1, blocks=1, classes=d.classes)
    # loss: only the final feature map (width * 2**(stages-1) channels, image / 2**(stages-1)
    # pixels) and the classes matter; spell it as the one-stage model with that feature map.
    scale = 2 ** (cfg.stages - 1)
    return dataclasses.replace(
        cfg, stages=1, blocks=1, width=cfg.width * scale, image=cfg.image // scale, channels=d.channels
    )


# --------------------------------------------------------------------------------------------
# Parameters and batch-norm state
# --------------------------------------------------------------------------------------------


def _conv_w(key: jax.Array, k: int, cin: int, cout: int, dtype: Any) -> jax.Array:
    """He-normal HWIO kernel."""
    return common.normal(key, (k, k, cin, cout), dtype, (2.0 / (k * k * cin)) ** 0.5)


def _norm(c: int, dtype: Any) -> dict[str, jax.Array]:
    return {"scale": jnp.ones((c,), dtype), "bias": jnp.zeros((c,), dtype)}


def _block_params(key: jax.Array, cin: int, cout: int, dtype: Any) -> dict[str, Any]:
    k1, k2, k3 = jax.random.split(key, 3)
    p: dict[str, Any] = {
        "conv1": _conv_w(k1, 3, cin, cout, dtype), "norm1": _norm(cout, dtype),
        "conv2": _conv_w(k2, 3, cout, cout, dtype), "norm2": _norm(cout, dtype),
    }
    if cin != cout:
        p |= {"proj": _conv_w(k3, 1, cin, cout, dtype), "proj_norm": _norm(cout, dtype)}
    return p


def _stage_widths(cfg: ResNetConfig) -> list[int]:
    return [cfg.width * 2**i for i in range(cfg.stages)]


def _stem_params(cfg: ResNetConfig, key: jax.Array) -> dict[str, Any]:
    dt = common.dtype_of(cfg.dtype)
    return {"conv": _conv_w(key, 3, cfg.channels, cfg.width, dt), "norm": _norm(cfg.width, dt)}


def _head_params(cfg: ResNetConfig, key: jax.Array) -> dict[str, jax.Array]:
    dt, c = common.dtype_of(cfg.dtype), _stage_widths(cfg)[-1]
    return {"w": common.normal(key, (c, cfg.classes), dt, c**-0.5), "b": jnp.zeros((cfg.classes,), dt)}


def init_params(cfg: ResNetConfig, key: jax.Array | None = None) -> dict[str, Any]:
    """Seeded parameters: ``{"stem", "stages": [[block, ...], ...], "head"}``."""
    key = jax.random.PRNGKey(common.SEED) if key is None else key
    dt = common.dtype_of(cfg.dtype)
    k_stem, k_stages, k_head = jax.random.split(key, 3)
    stages, cin = [], cfg.width
    for cout, ks in zip(_stage_widths(cfg), jax.random.split(k_stages, cfg.stages), strict=True):
        blocks = []
        for kb in jax.random.split(ks, cfg.blocks):
            blocks.append(_block_params(kb, cin, cout, dt))
            cin = cout
        stages.append(blocks)
    return {"stem": _stem_params(cfg, k_stem), "stages": stages, "head": _head_params(cfg, k_head)}


def init_state(params: PyTree) -> PyTree:
    """Batch-norm running statistics (float32 mean 0 / var 1), one per norm in ``params``.

    Mirrors the parameter tree (``stem``/``stages``/``head``) so the forward pass can walk both
    together; the head has no norm and gets an empty dict.
    """

    def stats(norm: dict[str, jax.Array]) -> dict[str, jax.Array]:
        shape = norm["scale"].shape
        return {"mean": jnp.zeros(shape, jnp.float32), "var": jnp.ones(shape, jnp.float32)}

    def block_state(p: dict[str, Any]) -> dict[str, Any]:
        return {k: stats(v) for k, v in p.items() if k.startswith("norm") or k == "proj_norm"}

    return {
        "stem": {"norm": stats(params["stem"]["norm"])},
        "stages": [[block_state(p) for p in blocks] for blocks in params["stages"]],
        "head": {},
    }


def param_specs(cfg: ResNetConfig) -> PyTree:
    """Abstract parameters (shapes/dtypes of :func:`init_params`), no arrays created."""
    return common.specs_of(lambda: init_params(cfg))


def state_specs(params: PyTree) -> PyTree:
    """Abstract batch-norm state matching ``params``."""
    return jax.eval_shape(init_state, params)


# --------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------


def conv(x: jax.Array, w: jax.Array, stride: int = 1) -> jax.Array:
    """NHWC x HWIO convolution with SAME padding."""
    return lax.conv_general_dilated(
        x, w, (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )


def batch_norm(
    x: jax.Array, p: dict[str, jax.Array], state: dict[str, jax.Array] | None, train: bool
) -> tuple[jax.Array, dict[str, jax.Array] | None]:
    """Batch norm over (N, H, W) in float32.

    Training uses batch statistics and returns updated running averages (if ``state`` is given);
    inference uses the running averages. Returning the state keeps the update in the graph.
    """
    xf = x.astype(jnp.float32)
    if train:
        mean = jnp.mean(xf, axis=(0, 1, 2))
        var = jnp.mean(jnp.square(xf - mean), axis=(0, 1, 2))
        new_state = None
        if state is not None:
            m = _BN_MOMENTUM
            new_state = {
                "mean": m * state["mean"] + (1 - m) * lax.stop_gradient(mean),
                "var": m * state["var"] + (1 - m) * lax.stop_gradient(var),
            }
    else:
        assert state is not None, "inference needs running statistics"
        mean, var, new_state = state["mean"], state["var"], state
    y = (xf - mean) * lax.rsqrt(var + _BN_EPS) * p["scale"].astype(jnp.float32) + p["bias"].astype(jnp.float32)
    return y.astype(x.dtype), new_state


def residual_block(
    p: dict[str, Any], x: jax.Array, state: dict[str, Any] | None, train: bool, stride: int
) -> tuple[jax.Array, dict[str, Any] | None]:
    """Basic block: ``relu(bn(conv(relu(bn(conv(x))))) + shortcut(x))``."""
    s = state or {}
    new: dict[str, Any] = {}
    h, new["norm1"] = batch_norm(conv(x, p["conv1"], stride), p["norm1"], s.get("norm1"), train)
    h, new["norm2"] = batch_norm(conv(jax.nn.relu(h), p["conv2"]), p["norm2"], s.get("norm2"), train)
    shortcut = x
    if "proj" in p:
        shortcut, new["proj_norm"] = batch_norm(conv(x, p["proj"], stride), p["proj_norm"], s.get("proj_norm"), train)
    return jax.nn.relu(h + shortcut), (new if state is not None else None)


def stem(p: dict[str, Any], x: jax.Array, state: dict[str, Any] | None, train: bool) -> tuple[jax.Array, Any]:
    """3x3 conv, batch norm, ReLU."""
    h, new = batch_norm(conv(x, p["conv"]), p["norm"], None if state is None else state["norm"], train)
    return jax.nn.relu(h), (None if state is None else {"norm": new})


def head_logits(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    """Global average pool over H, W (in f32), then the linear classifier."""
    pooled = jnp.mean(x.astype(jnp.float32), axis=(1, 2)).astype(x.dtype)
    return common.dense(pooled, p["w"], p["b"])


def head_loss(p: dict[str, jax.Array], x: jax.Array, labels: jax.Array) -> jax.Array:
    """Pool + classifier + mean softmax cross-entropy."""
    return common.cross_entropy(head_logits(p, x), labels)


def features(params: dict[str, Any], state: PyTree, x: jax.Array, train: bool) -> tuple[jax.Array, PyTree]:
    """Stem and every stage; returns the last feature map and the new batch-norm state."""
    h, stem_state = stem(params["stem"], x, state["stem"], train)
    stages_state = []
    for i, (blocks, bstates) in enumerate(zip(params["stages"], state["stages"], strict=True)):
        out = []
        for j, (p, st) in enumerate(zip(blocks, bstates, strict=True)):
            h, ns = residual_block(p, h, st, train, stride=2 if (i > 0 and j == 0) else 1)
            out.append(ns)
        stages_state.append(out)
    return h, {"stem": stem_state, "stages": stages_state, "head": state["head"]}


def loss_fn(params: dict[str, Any], state: PyTree, images: jax.Array, labels: jax.Array) -> tuple[jax.Array, PyTree]:
    """Training-mode loss and the updated running statistics (as ``has_aux``)."""
    h, new_state = features(params, state, images, train=True)
    return head_loss(params["head"], h, labels), new_state


def train_step_fn(cfg: ResNetConfig) -> Callable[..., tuple[PyTree, PyTree, PyTree, jax.Array]]:
    """``(params, bn_state, opt_state, images, labels) -> (params, bn_state, opt_state, loss)``."""

    def train_step(params: PyTree, bn_state: PyTree, opt_state: PyTree, images: jax.Array, labels: jax.Array):
        (loss, bn_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, bn_state, images, labels)
        params, opt_state = common.optimizer_update(cfg.optimizer, params, grads, opt_state)
        return params, bn_state, opt_state, loss

    return train_step


# --------------------------------------------------------------------------------------------
# Programs
# --------------------------------------------------------------------------------------------


def program(cfg: ResNetConfig, kind: str) -> Program:
    """The function and abstract arguments for ``kind`` of ``cfg`` (see :data:`KINDS`)."""
    cfg = canonical(cfg, kind)
    name = module_name(cfg, kind)
    dt = common.dtype_of(cfg.dtype)
    images = common.spec((cfg.batch, cfg.image, cfg.image, cfg.channels), dt)
    labels = common.spec((cfg.batch,), jnp.int32)
    key = jax.random.PRNGKey(common.SEED)
    widths = _stage_widths(cfg)
    if kind in ("train", "infer"):
        params = param_specs(cfg)
        state = state_specs(params)
        if kind == "infer":
            def infer(params: PyTree, bn_state: PyTree, images: jax.Array) -> jax.Array:
                return head_logits(params["head"], features(params, bn_state, images, train=False)[0])

            return Program(name, infer, (params, state, images))
        opt = common.optimizer_specs(cfg.optimizer, params)
        return Program(name, train_step_fn(cfg), (params, state, opt, images, labels))
    fn: Callable[..., jax.Array]
    if kind == "loss":
        params = common.specs_of(lambda: _head_params(cfg, key))
        size = cfg.image // 2 ** (cfg.stages - 1)
        feats = common.spec((cfg.batch, size, size, widths[-1]), dt)
        step = common.loss_train_step(head_loss, cfg.optimizer)
        return Program(name, step, (params, common.optimizer_specs(cfg.optimizer, params), feats, labels))
    if kind == "stem":
        params = common.specs_of(lambda: _stem_params(cfg, key))
        x, y = images, common.spec((cfg.batch, cfg.image, cfg.image, cfg.width), dt)
        fn = lambda p, h: stem(p, h, None, True)[0]  # noqa: E731
    else:  # block: the strided projection block opening stage 2, or an identity block
        cin, cout, stride = widths[0], widths[-1], 2 if cfg.stages > 1 else 1
        params = common.specs_of(lambda: _block_params(key, cin, cout, dt))
        x = common.spec((cfg.batch, cfg.image, cfg.image, cin), dt)
        y = common.spec((cfg.batch, cfg.image // stride, cfg.image // stride, cout), dt)
        fn = lambda p, h: residual_block(p, h, None, True, stride)[0]  # noqa: E731
    step = common.subgraph_train_step(fn, cfg.optimizer)
    return Program(name, step, (params, common.optimizer_specs(cfg.optimizer, params), x, y))
