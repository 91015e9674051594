"""Generate real-model-shaped HLO modules with jax (CPU-only jaxlib, nothing big allocated).

Three classes of module that users bring and that a CPU-only machine cannot simply run:

* ``llm_train_step``: an LLM-shaped training step (embedding, attention, MLP, cross-entropy, an
  Adam-like update) lowered from abstract shapes (``jax.ShapeDtypeStruct``): few layers, huge
  dimensions. Its parameters, gradients' optimiser state and batch need tens of GiB, yet the
  module has a few hundred instructions and nothing is ever allocated.
* ``gpu_lu`` / ``gpu_eigh``: GPU-dumped-style modules from cross-platform lowering
  (``lowering_platforms=("cuda",)``) on the CPU-only jaxlib: ``cusolver_getrf_ffi`` and
  ``cu_lu_pivots_to_permutation`` from ``jax.scipy.linalg.lu_factor``, ``cusolver_syevd_ffi`` from
  ``jnp.linalg.eigh``, with surrounding arithmetic so passes have work. The CPU backend has no
  implementation of those custom calls.
* ``baked_weights``: a function that closes over its weights, printed with its constants
  embedded (``as_hlo_text(True)``), like a TF export or a jitted inference function.

``--size small`` (default) writes the versions shipped in ``tests/data/gen`` (small files, fast to
tune); ``--size big`` makes the LLM step bigger (tens of GiB of inputs, still a small file) and the
baked weights larger (a benchmark input, not for tests).

    python examples/generate_real.py --out tests/data/gen
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np


def _hlo_text(lowered, large_constants: bool = False) -> str:
    return lowered.compiler_ir("hlo").as_hlo_text(large_constants)


# ---- (a) LLM-shaped training step from abstract shapes ----------------------------------------------
def llm_train_step(vocab: int, d_model: int, d_ff: int, heads: int, layers: int, batch: int, seq: int,
                   dtype=jnp.float32) -> str:
    """A decoder-only transformer train step: forward, loss, grad, Adam update; lowered abstractly."""
    head_dim = d_model // heads

    def init_shapes():
        layer = {
            "wqkv": (d_model, 3 * d_model), "wo": (d_model, d_model),
            "w1": (d_model, d_ff), "w2": (d_ff, d_model), "ln1": (d_model,), "ln2": (d_model,),
        }
        return {"embed": (vocab, d_model), "layers": [dict(layer) for _ in range(layers)], "lnf": (d_model,)}

    def norm(x, g):
        return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g

    def forward(params, tokens):
        x = params["embed"][tokens]
        mask = jnp.tril(jnp.ones((seq, seq), bool))
        for lp in params["layers"]:
            h = norm(x, lp["ln1"])
            q, k, v = jnp.split(h @ lp["wqkv"], 3, axis=-1)
            q, k, v = (t.reshape(batch, seq, heads, head_dim) for t in (q, k, v))
            s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(head_dim)
            s = jnp.where(mask, s, -1e9)
            a = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v).reshape(batch, seq, d_model)
            x = x + a @ lp["wo"]
            x = x + jax.nn.gelu(norm(x, lp["ln2"]) @ lp["w1"]) @ lp["w2"]
        return norm(x, params["lnf"]) @ params["embed"].T

    def loss(params, tokens, labels):
        logits = forward(params, tokens)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], axis=-1))

    def step(params, m, v, tokens, labels):
        value, grads = jax.value_and_grad(loss)(params, tokens, labels)
        m = jax.tree.map(lambda a, g: 0.9 * a + 0.1 * g, m, grads)
        v = jax.tree.map(lambda a, g: 0.999 * a + 0.001 * g * g, v, grads)
        params = jax.tree.map(lambda p, a, b: p - 1e-3 * a * jax.lax.rsqrt(b + 1e-8), params, m, v)
        return params, m, v, value

    shapes = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s, dtype), init_shapes(),
                          is_leaf=lambda s: isinstance(s, tuple))
    ids = jax.ShapeDtypeStruct((batch, seq), jnp.int32)
    return _hlo_text(jax.jit(step).trace(shapes, shapes, shapes, ids, ids).lower())


# ---- (b) GPU-dumped-style modules (cross-platform lowering) --------------------------------------------
def gpu_lu(n: int = 8) -> str:
    """LU factorisation with arithmetic before and after: two cusolver_getrf_ffi and a
    cu_lu_pivots_to_permutation whose permutation gathers rows."""

    def f(a, b):
        x = a @ a.T + 0.5 * jnp.eye(n, dtype=a.dtype) * jnp.sum(b)
        lu, piv = jax.scipy.linalg.lu_factor(x)
        _, _, perm = jax.lax.linalg.lu(x * 2.0)
        y = jnp.tanh(lu) * 2.0 + b[perm][:, None] * 1.0
        return y @ y, jnp.sum(y, axis=0), piv

    spec = jax.ShapeDtypeStruct((n, n), jnp.float32), jax.ShapeDtypeStruct((n,), jnp.float32)
    return _hlo_text(jax.jit(f).trace(*spec).lower(lowering_platforms=("cuda",)))


def gpu_eigh(n: int = 8) -> str:
    """Symmetric eigendecomposition with arithmetic around it: cusolver_syevd_ffi."""

    def f(a, s):
        sym = (a + a.T) * 0.5 + jnp.diag(s)
        w, vecs = jnp.linalg.eigh(sym)
        proj = vecs * w[None, :] * 1.0
        return jnp.exp(-jnp.abs(proj)) + 0.0, jnp.max(w) - jnp.min(w), s * 2.0 * 3.0

    spec = jax.ShapeDtypeStruct((n, n), jnp.float32), jax.ShapeDtypeStruct((n,), jnp.float32)
    return _hlo_text(jax.jit(f).trace(*spec).lower(lowering_platforms=("cuda",)))


# ---- (c) weights baked in as constants -----------------------------------------------------------------
def baked_weights(rows: int = 256, width: int = 16, hidden: int = 32, seed: int = 0) -> str:
    """An embedding lookup + MLP closing over its weights: every weight is an HLO constant."""
    rng = np.random.default_rng(seed)
    table = jnp.asarray(rng.standard_normal((rows, width)), jnp.bfloat16)
    w1 = jnp.asarray(rng.standard_normal((width, hidden)) / np.sqrt(width), jnp.bfloat16)
    w2 = jnp.asarray(rng.standard_normal((hidden, 4)) / np.sqrt(hidden), jnp.float32)

    def f(ids, x):
        e = table[ids].astype(jnp.float32) * 1.0
        h = jax.nn.relu(e @ w1.astype(jnp.float32) + x)
        return jax.nn.softmax(h @ w2, axis=-1), jnp.sum(e, axis=0) * 2.0

    spec = jax.ShapeDtypeStruct((8,), jnp.int32), jax.ShapeDtypeStruct((8, hidden), jnp.float32)
    return _hlo_text(jax.jit(f).trace(*spec).lower(), large_constants=True)


SIZES = {
    # LLM: LLaMA-3-70B-like widths; the file's size depends on the layer count, not the widths.
    # small: 2 layers, ~29 GiB of parameters + Adam moments; big: 8 layers, ~98 GiB.
    "small": dict(llm=dict(vocab=128256, d_model=8192, d_ff=28672, heads=64, layers=2, batch=4, seq=1024),
                  baked=dict(rows=256, width=16, hidden=32)),
    "big": dict(llm=dict(vocab=128256, d_model=8192, d_ff=28672, heads=64, layers=8, batch=8, seq=2048),
                baked=dict(rows=56945, width=50, hidden=128)),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tests/data/gen", help="output directory")
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    size = SIZES[args.size]
    modules = {
        "llm_train_step": llm_train_step(**size["llm"]),
        "gpu_lu": gpu_lu(),
        "gpu_eigh": gpu_eigh(),
        "baked_weights": baked_weights(**size["baked"]),
    }
    for name, text in modules.items():
        path = out / f"{name}.hlo"
        path.write_text(text)
        print(f"{path}: {len(text.splitlines())} lines, {len(text)} bytes")


if __name__ == "__main__":
    main()
