"""Real-scale modules for bench/realscale.py and tests, lowered from abstract shapes (nothing allocated).

* ``llama_train_step(layers, ...)``: a LLaMA-like training step (RMSNorm, causal attention, SwiGLU
  MLP, cross-entropy, gradients, SGD update), its layers unrolled so the instruction count grows
  with ``layers`` (about 260 instructions a layer). With the default sizes the inputs need tens of
  GiB; with ``batch=1024`` the attention scores are f32[1024,32,4096,4096] (2 TiB for one array).
* ``embedded_weights(constants=True|False)``: a function that closes over a bf16[56945,50] table and
  a bf16[50,128] matrix, printed with its constants (weights baked in), or the same function with
  the weights as parameters: the side-by-side pair behind the "constant data must not dominate"
  figure.

Everything is returned as HLO text (``lowered.compiler_ir("hlo").as_hlo_text(True)``: large
constants printed in full, as a user would dump them).
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def llama_train_step(layers: int = 2, batch: int = 8, seq: int = 4096, d_model: int = 4096, heads: int = 32,
                     ffn: int = 11008, vocab: int = 32000) -> str:
    import jax
    import jax.numpy as jnp

    head_dim = d_model // heads

    def rms(x, w):
        return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w

    def block(x, p):
        h = rms(x, p["n1"])
        q = (h @ p["wq"]).reshape(batch, seq, heads, head_dim)
        k = (h @ p["wk"]).reshape(batch, seq, heads, head_dim)
        v = (h @ p["wv"]).reshape(batch, seq, heads, head_dim)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / jnp.sqrt(head_dim)
        mask = jnp.tril(jnp.ones((seq, seq), bool))
        s = jnp.where(mask, s, -1e9)
        a = jax.nn.softmax(s, axis=-1).astype(x.dtype)
        o = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(batch, seq, d_model)
        x = x + o @ p["wo"]
        h = rms(x, p["n2"])
        return x + (jax.nn.silu(h @ p["w1"]) * (h @ p["w3"])) @ p["w2"]

    def loss(params, tokens, labels):
        x = params["emb"][tokens]
        for p in params["layers"]:
            x = block(x, p)
        logits = (rms(x, params["norm"]) @ params["head"]).astype(jnp.float32)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], axis=-1))

    def step(params, tokens, labels):
        value, grads = jax.value_and_grad(loss)(params, tokens, labels)
        return value, jax.tree_util.tree_map(lambda w, g: w - 1e-4 * g.astype(w.dtype), params, grads)

    bf16 = jnp.bfloat16
    S = jax.ShapeDtypeStruct
    layer = {"n1": S((d_model,), bf16), "n2": S((d_model,), bf16), "wq": S((d_model, d_model), bf16),
             "wk": S((d_model, d_model), bf16), "wv": S((d_model, d_model), bf16), "wo": S((d_model, d_model), bf16),
             "w1": S((d_model, ffn), bf16), "w3": S((d_model, ffn), bf16), "w2": S((ffn, d_model), bf16)}
    params = {"emb": S((vocab, d_model), bf16), "norm": S((d_model,), bf16), "head": S((d_model, vocab), bf16),
              "layers": [dict(layer) for _ in range(layers)]}
    tokens = S((batch, seq), jnp.int32)
    lowered = jax.jit(step).trace(params, tokens, tokens).lower()
    return lowered.compiler_ir("hlo").as_hlo_text(True)


#: Layers giving about 1k, 5k, 10k and 20k instructions (after XLA's import round trip).
SCALE_LAYERS = {"1k": 3, "5k": 18, "10k": 37, "20k": 75}


def embedded_weights(constants: bool, rows: int = 56945, width: int = 50, out: int = 128, seed: int = 0) -> str:
    """A lookup-and-project function with its weights baked in as constants, or as parameters."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(seed)
    table = jnp.asarray(rng.standard_normal((rows, width)), jnp.bfloat16)
    matrix = jnp.asarray(rng.standard_normal((width, out)), jnp.bfloat16)
    ids = jax.ShapeDtypeStruct((64,), jnp.int32)

    def project(ids, table, matrix):
        return jnp.tanh(table[ids] @ matrix).sum(axis=-1)

    if constants:
        lowered = jax.jit(lambda ids: project(ids, table, matrix)).lower(ids)
    else:
        lowered = jax.jit(project).lower(ids, jax.ShapeDtypeStruct(table.shape, table.dtype),
                                         jax.ShapeDtypeStruct(matrix.shape, matrix.dtype))
    return lowered.compiler_ir("hlo").as_hlo_text(True)
