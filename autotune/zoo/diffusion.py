"""Diffusion model steps: a denoising training step and one sampling step, DiT or UNet denoiser.

Why this family exists: image and video generators are trained and served as diffusion models, and
their steps are built of constructs no other family has: a **noise schedule** computed from an iota
(cosine, Nichol & Dhariwal) and gathered at each sample's timestep, **sinusoidal timestep
embeddings** fed through an MLP, class conditioning with a **null class** for classifier-free
guidance (the sampling step runs the denoiser on the batch twice, conditional and unconditional,
concatenated, then splits and mixes the two predictions), and one of two denoisers:

* ``dit`` (Diffusion Transformer, Peebles & Xie): patchify by reshape/transpose, transformer blocks
  with **adaLN-Zero** (each block's norm shifted, scaled and its residual gated by six vectors
  computed from the conditioning), a final adaptive norm and an unpatchify;
* ``unet`` (DDPM/Stable Diffusion style): 3x3 convolutions, **group norm** (reshape into groups,
  statistics per group), SiLU, residual blocks that add the time embedding to every pixel, strided
  downsampling, nearest-neighbour upsampling (broadcast and reshape), **skip connections
  concatenated** along channels, and self-attention over pixels at the lowest resolution.

Kinds: ``train`` (noise a clean latent at a timestep per sample, predict the noise, mean squared
error, gradient and optimizer update; labels dropped to the null class where the batch says so)
and ``sample`` (one DDIM step from ``t`` to ``t_prev``, with classifier-free guidance when
``guidance``). Lowered from ``jax.ShapeDtypeStruct`` arguments: nothing is allocated or executed.
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

FAMILY = "diffusion"
KINDS: tuple[str, ...] = ("train", "sample")
ARCHS = ("dit", "unet")


@dataclass(frozen=True)
class DiffusionConfig:
    """A denoiser (DiT or UNet) over ``image`` x ``image`` latents with ``channels`` channels."""

    arch: str = "dit"
    layers: int = 2  # DiT blocks, or residual blocks per UNet level
    width: int = 64  # DiT model width, or the UNet's base channel count
    heads: int = 4
    image: int = 16
    channels: int = 4
    patch: int = 2  # DiT only
    levels: int = 2  # UNet only: resolutions (channels double at each)
    groups: int = 8  # UNet only: group-norm groups
    classes: int = 10
    guidance: bool = True
    batch: int = 2
    steps: int = 1000
    scan: bool = False  # DiT only
    optimizer: str = "adam"
    dtype: str = "f32"

    def __post_init__(self) -> None:
        common.check_config(self, ("layers", "width", "heads", "image", "channels", "patch", "levels", "groups",
                                   "classes", "batch", "steps"))
        if self.arch not in ARCHS:
            raise ValueError(f"unknown arch {self.arch!r}; expected one of {ARCHS}")
        if self.arch == "dit":
            if self.width % self.heads or self.image % self.patch:
                raise ValueError(f"dit needs width % heads == 0 and image % patch == 0, got width {self.width}, "
                                 f"heads {self.heads}, image {self.image}, patch {self.patch}")
        else:
            if self.image % 2 ** (self.levels - 1):
                raise ValueError(f"unet with {self.levels} levels needs image divisible by {2 ** (self.levels - 1)}")
            if self.width % self.groups or (self.width * 2 ** (self.levels - 1)) % self.heads:
                raise ValueError(f"unet needs width divisible by groups and its deepest width by heads, got width "
                                 f"{self.width}, groups {self.groups}, heads {self.heads}")


_DEFAULT = DiffusionConfig()
_SLUG = {
    "arch": "", "layers": "l", "width": "w", "heads": "h", "image": "i", "channels": "c?", "patch": "p?",
    "levels": "lv?", "groups": "g?", "classes": "k", "guidance": "cfg", "batch": "b", "steps": "T?",
    "scan": "scan?", "optimizer": "?", "dtype": "",
}


def module_name(cfg: DiffusionConfig, kind: str) -> str:
    """Module/file name, e.g. ``diffusion_train_dit_l2_w64_h4_i16_k10_cfg_b2_f32``."""
    return common.sanitize_name(f"{FAMILY}_{kind}_{common.config_slug(cfg, _SLUG, _DEFAULT)}")


def supports(cfg: DiffusionConfig, kind: str) -> bool:
    return kind in KINDS


def canonical(cfg: DiffusionConfig, kind: str) -> DiffusionConfig:
    """The fields an architecture or kind ignores reset: a UNet has no patch or scan, a DiT no levels or
    groups; sampling has no optimizer; training ignores guidance (it always drops labels by mask)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r} for {FAMILY}; expected one of {KINDS}")
    d = _DEFAULT
    if cfg.arch == "unet":
        cfg = dataclasses.replace(cfg, patch=d.patch, scan=d.scan)
    else:
        cfg = dataclasses.replace(cfg, levels=d.levels, groups=d.groups)
    if kind == "train":
        return dataclasses.replace(cfg, guidance=d.guidance)
    return dataclasses.replace(cfg, optimizer=d.optimizer)


def group_key(cfg: DiffusionConfig) -> dict[str, Any]:
    """The model, for the train/test split: everything but how it is trained or sampled."""
    out = dataclasses.asdict(canonical(cfg, "train"))
    for name in ("optimizer", "guidance"):
        out.pop(name)
    return out


# --------------------------------------------------------------------------------------------
# Shared pieces: schedule, timestep and class embeddings
# --------------------------------------------------------------------------------------------


def alphas_cumprod(steps: int) -> jax.Array:
    """The cosine schedule's cumulative alphas [steps], computed from an iota (no table in the module)."""
    t = jnp.arange(steps + 1, dtype=jnp.float32) / steps
    f = jnp.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
    return jnp.clip(f[1:] / f[0], 1e-5, 1.0)


def timestep_embedding(t: jax.Array, dim: int) -> jax.Array:
    """Sinusoidal embedding [b, dim] of integer timesteps [b] (DDPM/ADM's)."""
    half = dim // 2
    freq = jnp.exp(-math.log(10000.0) * jnp.arange(half, dtype=jnp.float32) / half)
    angle = t.astype(jnp.float32)[:, None] * freq[None]
    return jnp.concatenate([jnp.cos(angle), jnp.sin(angle)], axis=-1)


def _cond_specs(cfg: DiffusionConfig, dim: int) -> dict[str, jax.ShapeDtypeStruct]:
    dt = common.dtype_of(cfg.dtype)
    return {"t_w1": common.spec((dim, dim), dt), "t_b1": common.spec((dim,), dt),
            "t_w2": common.spec((dim, dim), dt), "t_b2": common.spec((dim,), dt),
            "y_embed": common.spec((cfg.classes + 1, dim), dt)}  # the last row: the null class


def conditioning(p: dict[str, jax.Array], t: jax.Array, labels: jax.Array, dim: int) -> jax.Array:
    """Timestep MLP plus the class embedding [b, dim]."""
    e = timestep_embedding(t, dim).astype(p["t_w1"].dtype)
    e = common.dense(jax.nn.silu(common.dense(e, p["t_w1"], p["t_b1"])), p["t_w2"], p["t_b2"])
    return e + p["y_embed"][labels]


# --------------------------------------------------------------------------------------------
# DiT
# --------------------------------------------------------------------------------------------


def _dit_block_specs(cfg: DiffusionConfig) -> dict[str, jax.ShapeDtypeStruct]:
    key, dt, d = jax.random.PRNGKey(common.SEED), common.dtype_of(cfg.dtype), cfg.width
    out = common.specs_of(lambda: common.attention_params(key, d, dt, True, 0.02)
                          | common.mlp_params(key, d, 4 * d, dt, True, 0.02))
    return out | {"ada_w": common.spec((d, 6 * d), dt), "ada_b": common.spec((6 * d,), dt)}


def _dit_specs(cfg: DiffusionConfig) -> dict[str, Any]:
    dt, d, pc = common.dtype_of(cfg.dtype), cfg.width, cfg.patch * cfg.patch * cfg.channels
    block = _dit_block_specs(cfg)
    n = (cfg.image // cfg.patch) ** 2
    return {
        "patch_w": common.spec((pc, d), dt), "patch_b": common.spec((d,), dt), "pos": common.spec((n, d), dt),
        "cond": _cond_specs(cfg, d),
        "blocks": ({k: common.spec((cfg.layers, *v.shape), v.dtype) for k, v in block.items()} if cfg.scan
                   else [dict(block) for _ in range(cfg.layers)]),
        "final_ada_w": common.spec((d, 2 * d), dt), "final_ada_b": common.spec((2 * d,), dt),
        "out_w": common.spec((d, pc), dt), "out_b": common.spec((pc,), dt),
    }


def _modulate(x: jax.Array, shift: jax.Array, scale: jax.Array) -> jax.Array:
    return common.layer_norm(x, jnp.ones((x.shape[-1],), x.dtype), None, 1e-6) * (1 + scale[:, None]) + shift[:, None]


def dit_block(p: dict[str, jax.Array], x: jax.Array, c: jax.Array, heads: int) -> jax.Array:
    """adaLN-Zero block: shift/scale/gate of attention and MLP from the conditioning ``c`` [b, d]."""
    mods = jnp.split(common.dense(jax.nn.silu(c), p["ada_w"], p["ada_b"]), 6, axis=-1)
    shift1, scale1, gate1, shift2, scale2, gate2 = mods
    x = x + gate1[:, None] * common.attention(p, _modulate(x, shift1, scale1), heads, None)
    return x + gate2[:, None] * common.mlp(p, _modulate(x, shift2, scale2))


def dit(params: dict[str, Any], x: jax.Array, t: jax.Array, labels: jax.Array, cfg: DiffusionConfig) -> jax.Array:
    """Predicted noise [b, H, W, C] of latents ``x`` at timesteps ``t`` for ``labels``."""
    b, n, p, ch = x.shape[0], cfg.image // cfg.patch, cfg.patch, cfg.channels
    h = x.astype(params["patch_w"].dtype).reshape(b, n, p, n, p, ch).transpose(0, 1, 3, 2, 4, 5).reshape(b, n * n, p * p * ch)
    h = common.dense(h, params["patch_w"], params["patch_b"]) + params["pos"][None]
    c = conditioning(params["cond"], t, labels, cfg.width)
    if cfg.scan:
        h, _ = lax.scan(lambda a, blk: (dit_block(blk, a, c, cfg.heads), None), h, params["blocks"])
    else:
        for blk in params["blocks"]:
            h = dit_block(blk, h, c, cfg.heads)
    shift, scale = jnp.split(common.dense(jax.nn.silu(c), params["final_ada_w"], params["final_ada_b"]), 2, axis=-1)
    h = common.dense(_modulate(h, shift, scale), params["out_w"], params["out_b"])
    return h.reshape(b, n, n, p, p, ch).transpose(0, 1, 3, 2, 4, 5).reshape(b, cfg.image, cfg.image, ch)


# --------------------------------------------------------------------------------------------
# UNet
# --------------------------------------------------------------------------------------------


def _widths(cfg: DiffusionConfig) -> list[int]:
    return [cfg.width * 2 ** i for i in range(cfg.levels)]


def _res_specs(cin: int, cout: int, temb: int, dt: Any) -> dict[str, jax.ShapeDtypeStruct]:
    out = {"gn1_g": common.spec((cin,), dt), "gn1_b": common.spec((cin,), dt),
           "conv1": common.spec((3, 3, cin, cout), dt), "t_w": common.spec((temb, cout), dt),
           "gn2_g": common.spec((cout,), dt), "gn2_b": common.spec((cout,), dt),
           "conv2": common.spec((3, 3, cout, cout), dt)}
    if cin != cout:
        out["skip"] = common.spec((1, 1, cin, cout), dt)
    return out


def _unet_specs(cfg: DiffusionConfig) -> dict[str, Any]:
    dt, temb, widths = common.dtype_of(cfg.dtype), 4 * cfg.width, _widths(cfg)
    down, up, chans, c = [], [], [widths[0]], widths[0]
    for i, w in enumerate(widths):
        for _ in range(cfg.layers):
            down.append(_res_specs(c, w, temb, dt))
            c = w
            chans.append(c)
        if i < len(widths) - 1:
            down.append({"down": common.spec((3, 3, c, c), dt)})
            chans.append(c)
    deep = widths[-1]
    key = jax.random.PRNGKey(common.SEED)
    mid = {"res1": _res_specs(deep, deep, temb, dt), "res2": _res_specs(deep, deep, temb, dt),
           "attn": common.specs_of(lambda: common.attention_params(key, deep, dt, True, 0.02)
                                   | common.norm_params(deep, dt, True, "gn"))}
    for i, w in reversed(list(enumerate(widths))):
        for _ in range(cfg.layers + 1):
            up.append(_res_specs(c + chans.pop(), w, temb, dt))
            c = w
        if i:
            up.append({"up": common.spec((3, 3, c, c), dt)})
    return {"conv_in": common.spec((3, 3, cfg.channels, widths[0]), dt), "cond": _cond_specs(cfg, temb),
            "down": down, "mid": mid, "up": up, "gn_out_g": common.spec((c,), dt), "gn_out_b": common.spec((c,), dt),
            "conv_out": common.spec((3, 3, c, cfg.channels), dt)}


def _conv(x: jax.Array, w: jax.Array, stride: int = 1) -> jax.Array:
    return lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def group_norm(x: jax.Array, g: jax.Array, b: jax.Array, groups: int) -> jax.Array:
    """Group norm of NHWC ``x``: statistics per (sample, group of channels), in float32."""
    n, h, w, c = x.shape
    xf = x.astype(jnp.float32).reshape(n, h, w, groups, c // groups)
    mean = jnp.mean(xf, axis=(1, 2, 4), keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=(1, 2, 4), keepdims=True)
    y = ((xf - mean) * lax.rsqrt(var + 1e-5)).reshape(n, h, w, c)
    return (y * g.astype(jnp.float32) + b.astype(jnp.float32)).astype(x.dtype)


def res_block(p: dict[str, jax.Array], x: jax.Array, temb: jax.Array, groups: int) -> jax.Array:
    h = _conv(jax.nn.silu(group_norm(x, p["gn1_g"], p["gn1_b"], groups)), p["conv1"])
    h = h + (jax.nn.silu(temb) @ p["t_w"])[:, None, None, :]
    h = _conv(jax.nn.silu(group_norm(h, p["gn2_g"], p["gn2_b"], groups)), p["conv2"])
    return h + (_conv(x, p["skip"]) if "skip" in p else x)


def unet(params: dict[str, Any], x: jax.Array, t: jax.Array, labels: jax.Array, cfg: DiffusionConfig) -> jax.Array:
    """Predicted noise [b, H, W, C]: down path, middle (res, attention over pixels, res), up path
    with the down path's activations concatenated, output convolution."""
    temb = conditioning(params["cond"], t, labels, 4 * cfg.width)
    h = _conv(x.astype(params["conv_in"].dtype), params["conv_in"])
    skips = [h]
    for p in params["down"]:
        h = _conv(h, p["down"], 2) if "down" in p else res_block(p, h, temb, cfg.groups)
        skips.append(h)
    mid = params["mid"]
    h = res_block(mid["res1"], h, temb, cfg.groups)
    b, hh, ww, c = h.shape
    a = group_norm(h, mid["attn"]["gn_g"], mid["attn"]["gn_b"], cfg.groups).reshape(b, hh * ww, c)
    h = h + common.attention(mid["attn"], a, cfg.heads, None).reshape(b, hh, ww, c)
    h = res_block(mid["res2"], h, temb, cfg.groups)
    for p in params["up"]:
        if "up" in p:
            n, hh, ww, c = h.shape
            h = jnp.broadcast_to(h[:, :, None, :, None], (n, hh, 2, ww, 2, c)).reshape(n, 2 * hh, 2 * ww, c)
            h = _conv(h, p["up"])
        else:
            h = res_block(p, jnp.concatenate([h, skips.pop()], axis=-1), temb, cfg.groups)
    h = jax.nn.silu(group_norm(h, params["gn_out_g"], params["gn_out_b"], cfg.groups))
    return _conv(h, params["conv_out"])


# --------------------------------------------------------------------------------------------
# Steps
# --------------------------------------------------------------------------------------------


def param_specs(cfg: DiffusionConfig) -> dict[str, Any]:
    return _dit_specs(cfg) if cfg.arch == "dit" else _unet_specs(cfg)


def denoiser(cfg: DiffusionConfig) -> Callable[..., jax.Array]:
    fn = dit if cfg.arch == "dit" else unet
    return lambda params, x, t, labels: fn(params, x, t, labels, cfg).astype(jnp.float32)


def train_step_fn(cfg: DiffusionConfig) -> Callable[..., Any]:
    """``(params, opt_state, x0, noise, t [b], labels [b], drop [b] bool) -> (params, opt_state, loss)``."""
    model = denoiser(cfg)

    def loss_fn(params, x0, noise, t, labels, drop):
        abar = alphas_cumprod(cfg.steps)[t][:, None, None, None]
        xt = jnp.sqrt(abar) * x0 + jnp.sqrt(1.0 - abar) * noise
        labels = jnp.where(drop, cfg.classes, labels)  # classifier-free guidance's label dropout
        return jnp.mean(jnp.square(model(params, xt, t, labels) - noise))

    def train_step(params, opt_state, x0, noise, t, labels, drop):
        loss, grads = jax.value_and_grad(loss_fn)(params, x0, noise, t, labels, drop)
        params, opt_state = common.optimizer_update(cfg.optimizer, params, grads, opt_state)
        return params, opt_state, loss

    return train_step


def sample_step_fn(cfg: DiffusionConfig) -> Callable[..., Any]:
    """``(params, x_t, t, t_prev, labels [b], scale) -> x_prev``: one deterministic DDIM step; with
    ``guidance`` the denoiser sees the batch twice (labels, then the null class) and the two noise
    predictions are mixed as ``uncond + scale * (cond - uncond)``."""
    model = denoiser(cfg)

    def sample_step(params, x, t, t_prev, labels, scale=None):
        b = x.shape[0]
        if cfg.guidance:
            both = model(params, jnp.concatenate([x, x]), jnp.full((2 * b,), t),
                         jnp.concatenate([labels, jnp.full((b,), cfg.classes, jnp.int32)]))
            cond, uncond = both[:b], both[b:]
            eps = uncond + scale * (cond - uncond)
        else:
            eps = model(params, x, jnp.full((b,), t), labels)
        abar = alphas_cumprod(cfg.steps)
        a_t, a_prev = abar[t], jnp.where(t_prev >= 0, abar[jnp.maximum(t_prev, 0)], 1.0)
        x0 = (x - jnp.sqrt(1.0 - a_t) * eps) / jnp.sqrt(a_t)
        return jnp.sqrt(a_prev) * x0 + jnp.sqrt(1.0 - a_prev) * eps

    return sample_step


def program(cfg: DiffusionConfig, kind: str) -> Program:
    """The function and abstract arguments for ``kind`` of ``cfg`` (see :data:`KINDS`)."""
    cfg = canonical(cfg, kind)
    name = module_name(cfg, kind)
    params = param_specs(cfg)
    b = cfg.batch
    latents = common.spec((b, cfg.image, cfg.image, cfg.channels), jnp.float32)
    ids = common.spec((b,), jnp.int32)
    if kind == "train":
        return Program(name, train_step_fn(cfg), (params, common.optimizer_specs(cfg.optimizer, params), latents,
                                                  latents, ids, ids, common.spec((b,), jnp.bool_)))
    scalar = common.spec((), jnp.int32)
    scale = (common.spec((), jnp.float32),) if cfg.guidance else ()  # an unused argument would be pruned
    return Program(name, sample_step_fn(cfg), (params, latents, scalar, scalar, ids, *scale))
