"""Shared building blocks for the model zoo: numerics, optimizers, argument specs and lowering.

Why a hand-written zoo at all: the autotuner needs many realistic HLO modules (training steps with
backward passes and optimizer updates, forward-only graphs, and the sub-graphs that make them up)
that can be regenerated bit-for-bit on any machine without downloading a model or a framework.
Everything here is plain ``jax.numpy``/``jax.lax`` so that the only moving part is the pinned
``jax``/``jaxlib`` version.

Reproducibility rules every family follows:

* Parameters and optimizer state are *arguments* of the lowered function, described by
  ``jax.ShapeDtypeStruct`` (via ``jax.eval_shape`` of a seeded initializer). No array is ever
  closed over, so no large constant is baked into the HLO and no real data is materialized.
* The lowered text carries no source locations (``debug_info=False``), so the bytes do not depend
  on the checkout path; the module is renamed to a sanitized config name.
* Pytrees are plain dicts (flattened in sorted-key order) and lists, so argument order is stable.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jaxlib import _hlo

PyTree = Any

#: Config spelling of each supported element type -> JAX dtype. Short names keep module names short.
DTYPES: dict[str, Any] = {"f32": jnp.float32, "bf16": jnp.bfloat16}

#: Optimizers every training-style kind can use. Written by hand so the update is visible as HLO.
OPTIMIZERS: tuple[str, ...] = ("adam", "sgd", "adam_flat", "sgd_flat")

#: Seed of every parameter initializer. Only shapes reach the HLO, but a fixed seed keeps
#: ``init_params`` (used when someone wants to run a step for real) reproducible too.
SEED = 0


def check_config(cfg: Any, positive: tuple[str, ...], dtypes: tuple[str, ...] | None = None) -> None:
    """The checks every family's config shares: ``positive`` fields >= 1, a known dtype (one of
    ``dtypes``, by default those of :data:`DTYPES`) and optimizer."""
    for field in positive:
        if getattr(cfg, field) < 1:
            raise ValueError(f"{field} must be >= 1, got {getattr(cfg, field)}")
    if dtypes is None:
        dtype_of(cfg.dtype)
    elif cfg.dtype not in dtypes:
        raise ValueError(f"unknown dtype {cfg.dtype!r}; expected one of {sorted(dtypes)}")
    if cfg.optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {cfg.optimizer!r}; expected one of {OPTIMIZERS}")


def dtype_of(name: str) -> Any:
    """Map a config dtype spelling ('f32', 'bf16') to the JAX dtype; reject anything else early."""
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; expected one of {sorted(DTYPES)}") from None


# --------------------------------------------------------------------------------------------
# Numerics
# --------------------------------------------------------------------------------------------


def layer_norm(x: jax.Array, gamma: jax.Array, beta: jax.Array | None, eps: float = 1e-5) -> jax.Array:
    """Layer norm over the last axis, statistics in float32 (as mixed-precision training does).

    Computing the mean/variance in f32 and casting back is what makes bf16 graphs differ from f32
    ones beyond the element type: the converts are real work the pass pipeline sees.
    """
    dtype = x.dtype
    xf = x.astype(jnp.float32)
    centered = xf - jnp.mean(xf, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(centered), axis=-1, keepdims=True)
    y = centered * lax.rsqrt(var + eps) * gamma.astype(jnp.float32)
    if beta is not None:
        y = y + beta.astype(jnp.float32)
    return y.astype(dtype)


def gelu(x: jax.Array) -> jax.Array:
    """GELU, tanh approximation (GPT-2 and BERT both use it)."""
    return jax.nn.gelu(x, approximate=True)


class MixedPrecision:
    """``param_dtype`` / ``compute_dtype`` of a config whose ``dtype`` may be ``mixed``: weights stored
    in f32 and cast to bf16 where they are used, activations in bf16 (Flax's ``param_dtype=float32,
    dtype=bfloat16``, MaxText's default); otherwise both are ``dtype``."""

    dtype: str

    @property
    def param_dtype(self) -> Any:
        """What weights are stored in (f32 for ``mixed``)."""
        return jnp.float32 if self.dtype == "mixed" else dtype_of(self.dtype)

    @property
    def compute_dtype(self) -> Any:
        """What activations, caches and the weights at their use are in (bf16 for ``mixed``)."""
        return jnp.bfloat16 if self.dtype == "mixed" else dtype_of(self.dtype)


def cast_floats(tree: Any, dtype: Any) -> Any:
    """Every floating-point array of ``tree`` in ``dtype`` (weights stored in f32 and computed with in
    bf16, as mixed-precision models do: the converts are part of the graph)."""
    return jax.tree.map(lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a, tree)


def dense(x: jax.Array, w: jax.Array, b: jax.Array | None = None) -> jax.Array:
    """``x @ w + b`` contracting the last axis of ``x``; batch axes are kept as they are."""
    y = jnp.einsum("...i,io->...o", x, w)
    return y if b is None else y + b


def cross_entropy(logits: jax.Array, labels: jax.Array, weights: jax.Array | None = None) -> jax.Array:
    """Mean (or weighted mean) softmax cross-entropy against integer labels, in float32.

    Labels are picked with ``take_along_axis``, as ``optax.softmax_cross_entropy_with_integer_labels``
    does: a batched gather whose gradient is a batched scatter. Both are deliberate, since
    gather/scatter handling is where several XLA passes differ (and some fail outright).
    """
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    nll = -jnp.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]
    if weights is None:
        return jnp.mean(nll)
    w = weights.astype(jnp.float32)
    return jnp.sum(nll * w) / jnp.maximum(jnp.sum(w), 1.0)


def causal_mask(seq: int) -> jax.Array:
    """Boolean [seq, seq] lower-triangular mask built from iotas (no constant array in the HLO)."""
    row = lax.broadcasted_iota(jnp.int32, (seq, seq), 0)
    col = lax.broadcasted_iota(jnp.int32, (seq, seq), 1)
    return row >= col


def multi_head_attention(
    x: jax.Array,
    w_qkv: jax.Array,
    b_qkv: jax.Array | None,
    w_out: jax.Array,
    b_out: jax.Array | None,
    heads: int,
    mask: jax.Array | None,
) -> jax.Array:
    """Multi-head self-attention on ``x`` [batch, seq, d] with one fused QKV projection.

    ``mask`` broadcasts to [batch, heads, seq, seq] (True = attend). Softmax runs in float32 and the
    result is cast back, as mixed-precision implementations do.
    """
    b, s, d = x.shape
    hd = d // heads
    qkv = dense(x, w_qkv, b_qkv).reshape(b, s, 3, heads, hd)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / jnp.sqrt(jnp.float32(hd))
    if mask is not None:
        scores = jnp.where(mask, scores, jnp.float32(-1e9))
    probs = jax.nn.softmax(scores, axis=-1).astype(x.dtype)
    ctx = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, s, d)
    return dense(ctx, w_out, b_out)


def normal(key: jax.Array, shape: tuple[int, ...], dtype: Any, std: float) -> jax.Array:
    """Seeded normal initializer (used by every family's ``init_params``)."""
    return (std * jax.random.normal(key, shape, jnp.float32)).astype(dtype)


def norm_params(d: int, dtype: Any, bias: bool, prefix: str = "ln") -> dict[str, jax.Array]:
    """Layer-norm gain (ones) and, when ``bias``, shift (zeros) named ``<prefix>_g``/``<prefix>_b``."""
    out = {f"{prefix}_g": jnp.ones((d,), dtype)}
    if bias:
        out[f"{prefix}_b"] = jnp.zeros((d,), dtype)
    return out


def attention_params(key: jax.Array, d: int, dtype: Any, bias: bool, out_std: float) -> dict[str, jax.Array]:
    """Fused QKV projection ``qkv_w`` [d, 3d] and output projection ``out_w`` [d, d] (+ biases)."""
    k1, k2 = jax.random.split(key)
    out = {"qkv_w": normal(k1, (d, 3 * d), dtype, 0.02), "out_w": normal(k2, (d, d), dtype, out_std)}
    if bias:
        out |= {"qkv_b": jnp.zeros((3 * d,), dtype), "out_b": jnp.zeros((d,), dtype)}
    return out


def mlp_params(key: jax.Array, d: int, hidden: int, dtype: Any, bias: bool, out_std: float) -> dict[str, jax.Array]:
    """Two-layer MLP weights ``fc_w`` [d, hidden] and ``proj_w`` [hidden, d] (+ biases)."""
    k1, k2 = jax.random.split(key)
    out = {"fc_w": normal(k1, (d, hidden), dtype, 0.02), "proj_w": normal(k2, (hidden, d), dtype, out_std)}
    if bias:
        out |= {"fc_b": jnp.zeros((hidden,), dtype), "proj_b": jnp.zeros((d,), dtype)}
    return out


def attention(p: Mapping[str, jax.Array], x: jax.Array, heads: int, mask: jax.Array | None) -> jax.Array:
    """:func:`multi_head_attention` with weights from an :func:`attention_params` dict."""
    return multi_head_attention(x, p["qkv_w"], p.get("qkv_b"), p["out_w"], p.get("out_b"), heads, mask)


def mlp(p: Mapping[str, jax.Array], x: jax.Array) -> jax.Array:
    """``proj(gelu(fc(x)))`` with weights from an :func:`mlp_params` dict."""
    return dense(gelu(dense(x, p["fc_w"], p.get("fc_b"))), p["proj_w"], p.get("proj_b"))


# --------------------------------------------------------------------------------------------
# Optimizers (hand-written so the update itself is part of the graph)
# --------------------------------------------------------------------------------------------


def adam_init(params: PyTree) -> dict[str, PyTree]:
    """Adam state: first/second moments in float32 (even for bf16 params) and an int32 step."""
    zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
    return {"m": zeros, "v": zeros, "step": jnp.zeros((), jnp.int32)}


def adam_update(
    params: PyTree,
    grads: PyTree,
    state: Mapping[str, PyTree],
    lr: float = 1e-3,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
) -> tuple[PyTree, dict[str, PyTree]]:
    """One bias-corrected Adam(W) step; the update is computed in f32 and cast back to each param."""
    step = state["step"] + 1
    t = step.astype(jnp.float32)
    bc1 = 1.0 - jnp.power(jnp.float32(b1), t)
    bc2 = 1.0 - jnp.power(jnp.float32(b2), t)
    m = jax.tree.map(lambda m, g: b1 * m + (1.0 - b1) * g.astype(jnp.float32), state["m"], grads)
    v = jax.tree.map(lambda v, g: b2 * v + (1.0 - b2) * jnp.square(g.astype(jnp.float32)), state["v"], grads)

    def upd(p: jax.Array, m: jax.Array, v: jax.Array) -> jax.Array:
        pf = p.astype(jnp.float32)
        delta = (m / bc1) / (jnp.sqrt(v / bc2) + eps)
        if weight_decay:
            delta = delta + weight_decay * pf
        return (pf - lr * delta).astype(p.dtype)

    new_params = jax.tree.map(upd, params, m, v)
    return new_params, {"m": m, "v": v, "step": step}


def sgd_init(params: PyTree) -> dict[str, PyTree]:
    """SGD-with-momentum state: one float32 velocity per parameter."""
    return {"momentum": jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)}


def sgd_update(
    params: PyTree,
    grads: PyTree,
    state: Mapping[str, PyTree],
    lr: float = 0.1,
    momentum: float = 0.9,
    weight_decay: float = 1e-4,
) -> tuple[PyTree, dict[str, PyTree]]:
    """One SGD step with (heavy-ball) momentum and L2 weight decay, in float32."""

    def vel(p: jax.Array, g: jax.Array, u: jax.Array) -> jax.Array:
        return momentum * u + g.astype(jnp.float32) + weight_decay * p.astype(jnp.float32)

    velocity = jax.tree.map(vel, params, grads, state["momentum"])
    new_params = jax.tree.map(lambda p, u: (p.astype(jnp.float32) - lr * u).astype(p.dtype), params, velocity)
    return new_params, {"momentum": velocity}


def _flatten_f32(tree: PyTree) -> jax.Array:
    """All leaves raveled, cast to float32 and concatenated (leaf order = pytree order)."""
    return jnp.concatenate([jnp.ravel(x).astype(jnp.float32) for x in jax.tree.leaves(tree)])


def _unflatten_like(flat: jax.Array, like: PyTree) -> PyTree:
    """Inverse of :func:`_flatten_f32`: slice, reshape and cast back to each leaf of ``like``."""
    leaves, treedef = jax.tree.flatten(like)
    out, offset = [], 0
    for leaf in leaves:
        n = math.prod(leaf.shape)
        out.append(flat[offset : offset + n].reshape(leaf.shape).astype(leaf.dtype))
        offset += n
    return jax.tree.unflatten(treedef, out)


def _split_name(name: str) -> tuple[str, bool]:
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; expected one of {OPTIMIZERS}")
    base, _, flat = name.partition("_")
    return base, bool(flat)


def optimizer_init(name: str, params: PyTree) -> dict[str, PyTree]:
    """Optimizer state for ``name`` (see :data:`OPTIMIZERS`).

    The ``*_flat`` variants keep one float32 vector per state slot for the whole model, as
    ``optax.flatten`` or multi-tensor "fused" optimizers do: the update is then one long elementwise
    chain plus a concatenate and per-parameter slices, instead of one short chain per tensor.
    """
    base, flat = _split_name(name)
    if flat:
        size = sum(math.prod(p.shape) for p in jax.tree.leaves(params))
        params = {"flat": jax.ShapeDtypeStruct((size,), jnp.float32)}
    return adam_init(params) if base == "adam" else sgd_init(params)


def optimizer_update(
    name: str, params: PyTree, grads: PyTree, state: Mapping[str, PyTree]
) -> tuple[PyTree, dict[str, PyTree]]:
    """Apply optimizer ``name`` with its default hyper-parameters (constants in the graph)."""
    base, flat = _split_name(name)
    update = adam_update if base == "adam" else sgd_update
    if not flat:
        return update(params, grads, state)
    new_flat, new_state = update({"flat": _flatten_f32(params)}, {"flat": _flatten_f32(grads)}, state)
    return _unflatten_like(new_flat["flat"], params), new_state


# --------------------------------------------------------------------------------------------
# Argument specs and sub-graph steps
# --------------------------------------------------------------------------------------------


def spec(shape: tuple[int, ...], dtype: Any) -> jax.ShapeDtypeStruct:
    """Shorthand for an abstract argument: only shape and dtype reach the lowering."""
    return jax.ShapeDtypeStruct(tuple(shape), dtype)


def specs_of(fn: Callable[[], PyTree]) -> PyTree:
    """Abstract (ShapeDtypeStruct) pytree of what ``fn()`` would return, without computing it.

    Used on seeded initializers so parameters get exactly the shapes/dtypes ``init_params`` would
    produce, at no cost and with no random numbers actually drawn.
    """
    return jax.eval_shape(fn)


def optimizer_specs(name: str, param_specs: PyTree) -> PyTree:
    """Abstract optimizer state matching ``param_specs``."""
    return jax.eval_shape(lambda p: optimizer_init(name, p), param_specs)


def subgraph_train_step(
    fn: Callable[..., jax.Array], optimizer: str
) -> Callable[..., tuple[PyTree, PyTree, jax.Array, jax.Array]]:
    """Wrap a layer ``fn(params, x, *extra) -> y`` into its own training step.

    The sub-graph kinds (block/attention/mlp/...) are the pieces a full training step is made of:
    forward, backward (``jax.vjp`` with the output cotangent ``dy`` as an argument, which is what
    the surrounding model would feed in) and the optimizer update of that piece's parameters.
    Returning ``dx`` keeps the input gradient alive, as it would be in the full model. ``extra``
    are non-differentiated inputs such as an attention mask.
    """

    def step(params: PyTree, opt_state: PyTree, x: jax.Array, dy: jax.Array, *extra: jax.Array):
        y, vjp = jax.vjp(lambda p, h: fn(p, h, *extra), params, x)
        dparams, dx = vjp(dy)
        new_params, new_state = optimizer_update(optimizer, params, dparams, opt_state)
        return new_params, new_state, y, dx

    return step


def loss_train_step(
    fn: Callable[..., jax.Array], optimizer: str
) -> Callable[..., tuple[PyTree, PyTree, jax.Array, jax.Array]]:
    """Like :func:`subgraph_train_step` for a piece that ends in a scalar loss (no cotangent)."""

    def step(params: PyTree, opt_state: PyTree, x: jax.Array, *batch: jax.Array):
        loss, (dparams, dx) = jax.value_and_grad(fn, argnums=(0, 1))(params, x, *batch)
        new_params, new_state = optimizer_update(optimizer, params, dparams, opt_state)
        return new_params, new_state, loss, dx

    return step


# --------------------------------------------------------------------------------------------
# Programs and lowering
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Program:
    """A function plus the abstract arguments to lower it with, and the module name to give it."""

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    #: A multi-device program: the device mesh as ``((axis, size), ...)`` and a pytree of
    #: ``PartitionSpec`` matching ``args`` (how ``jax.jit`` in_shardings place each argument).
    #: Empty: a single-device program.
    mesh: tuple[tuple[str, int], ...] = ()
    in_specs: tuple[Any, ...] | None = None

    @property
    def devices(self) -> int:
        return math.prod(size for _, size in self.mesh) if self.mesh else 1


_NAME_BAD = re.compile(r"[^A-Za-z0-9_]+")


def sanitize_name(name: str) -> str:
    """Make ``name`` a safe HLO module / file name: [A-Za-z0-9_] only, no leading digit."""
    clean = _NAME_BAD.sub("_", name).strip("_") or "module"
    return clean if not clean[0].isdigit() else f"m_{clean}"


def config_slug(cfg: Any, fields: Mapping[str, str], defaults: Any | None = None) -> str:
    """Short, unique spelling of a config: ``prefix+value`` for each field in ``fields``.

    Fields mapped to a prefix ending in '?' are only spelled when they differ from ``defaults``,
    which keeps the common names short (``gpt2_train_l2_d64_h2_s32_b2_f32``) while still making
    every distinct config a distinct name. A prefix of '' spells the bare value (dtype); a boolean
    is spelled as the prefix itself or ``no<prefix>`` (``bias`` / ``nobias``).
    """
    parts: list[str] = []
    for field, prefix in fields.items():
        value = getattr(cfg, field)
        if prefix.endswith("?"):
            if defaults is not None and getattr(defaults, field) == value:
                continue
            prefix = prefix[:-1]
        if isinstance(value, bool):
            parts.append(prefix if value else f"no{prefix}")
        else:
            parts.append(f"{prefix}{value}")
    return "_".join(parts)


_MODULE_LINE = re.compile(r"^HloModule [^\s,]+")


def lower_to_hlo(program: Program) -> str:
    """Lower ``program`` with ``jax.jit(...).lower(...)`` and return HLO text named after it.

    Lowering only (no XLA compile): fast, and exactly the unoptimized module the autotuner starts
    from. ``debug_info=False`` keeps source paths out of the text; the ``HloModule`` line is
    renamed from ``jit_<fn>`` to the sanitized program name. A multi-device program (``mesh``)
    goes through :func:`partitioned_text` instead.
    """
    if program.mesh:
        text = partitioned_text(program)
    else:
        lowered = jax.jit(program.fn).lower(*program.args)
        text = lowered.as_text(dialect="hlo", debug_info=False)
    name = sanitize_name(program.name)
    renamed, n = _MODULE_LINE.subn(f"HloModule {name}", text, count=1)
    if n != 1:
        raise RuntimeError(f"unexpected HLO text header: {text[:80]!r}")
    return renamed


#: XLA names the module it dumps right after SPMD partitioning so (GSPMD and Shardy alike).
_PARTITIONED_DUMP = "*.after_spmd-partitioning.*.txt"


def partitioned_text(program: Program) -> str:
    """The per-device module XLA's SPMD partitioner makes of a multi-device ``program``, as HLO text.

    Why this module and not the lowered one: a multi-device step as it runs (and as a dump of a
    real multi-GPU job shows it) is the partitioner's output, one program per device with its
    collectives (all-gather, reduce-scatter, all-reduce, collective-permute, all-to-all) and
    partition-id arithmetic, and that is what XLA's optimization pipeline (the part the autotuner
    orders) works on; the lowered module carries only sharding annotations. jax exposes no
    partitioner on its own, so the program is compiled over a mesh of this process's CPU devices
    with a dump of the pass's output, which is read back and printed without metadata (no source
    paths: the text is the same on every machine). Needs ``mesh``'s device count in this process
    (``jax_num_cpu_devices``; :func:`autotune.zoo.lower` provides a process that has them).
    """
    have = jax.devices()
    if len(have) < program.devices:
        raise ValueError(f"{program.name} is partitioned over {program.devices} devices; this process has "
                         f"{len(have)} (set jax_num_cpu_devices before jax starts)")
    names = tuple(axis for axis, _ in program.mesh)
    mesh = Mesh(np.array(have[: program.devices]).reshape([size for _, size in program.mesh]), names)
    shardings = jax.tree.map(lambda s: NamedSharding(mesh, s), program.in_specs,
                             is_leaf=lambda x: isinstance(x, PartitionSpec))
    with jax.set_mesh(mesh):  # the mesh a shard_map inside the step (``cp``) partitions over
        lowered = jax.jit(program.fn, in_shardings=shardings).lower(*program.args)
    return partitioner_output(lambda dump: lowered.compile(compiler_options=dump), program.name)


def partitioner_output(compile_with: Callable[[dict[str, Any]], Any], name: str) -> str:
    """The module XLA's SPMD partitioner wrote during ``compile_with(options)``, as HLO text without metadata.

    ``compile_with`` compiles with the given compiler options (a dump of the ``spmd-partitioning``
    pass's output, and the cheapest LLVM settings: the compile after the dump is only the price of
    the dump). What fails after the partitioner (a later pass, jax reading back output shardings)
    does not touch the module wanted here, so a failure counts only when no module was written.
    """
    with tempfile.TemporaryDirectory(prefix="autotune-spmd-") as tmp:
        failure = None
        try:
            compile_with({
                "xla_dump_to": tmp, "xla_dump_hlo_as_text": True, "xla_dump_hlo_pass_re": "spmd-partitioning",
                "xla_llvm_disable_expensive_passes": True, "xla_backend_optimization_level": 0,
            })
        except Exception as exc:  # noqa: BLE001 - any failure; reported below if no module was written
            failure = exc
        dumps = sorted(Path(tmp).glob(_PARTITIONED_DUMP))
        if not dumps:
            raise RuntimeError(f"XLA wrote no module after SPMD partitioning for {name}: {failure}")
        text = dumps[0].read_text(encoding="utf-8")
    options = _hlo.HloPrintOptions()
    options.print_metadata = False
    return _hlo.hlo_module_from_text(text).to_string(options)


def count_instructions(hlo_text: str) -> int:
    """Number of HLO instructions in all computations (entry and nested), parsed by XLA itself.

    Same definition as the autotuner's ``instructions`` metric, so suite size limits mean the same
    thing the tuner measures.
    """
    module = _hlo.hlo_module_from_text(hlo_text)
    return sum(len(c.instructions()) for c in module.computations())


def sha256_text(text: str) -> str:
    """Hex sha256 of the UTF-8 bytes of ``text`` (what a written ``.hlo`` file hashes to)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def config_dict(cfg: Any) -> dict[str, Any]:
    """Config dataclass -> plain JSON-able dict (field order preserved)."""
    return dataclasses.asdict(cfg)
