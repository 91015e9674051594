"""The encoder-decoder (T5), vision-transformer and diffusion families compute what they claim.

Lowering and sizes are checked for every family in test_zoo.py; here the steps are run on real
arrays (small configs, CPU) so that a wrong cache index, bias or patch order fails a test rather than
hiding in a module that only gets tuned: a T5 decode step fed token by token agrees with the
teacher-forced decoder, the two patch embeddings of a ViT are the same map, classifier-free guidance
at scale 1 is the conditional step, and one module of each family is tuned end to end by real XLA
passes with its answer validated by execution.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from autotune.api import Session
from autotune.zoo import DiffusionConfig, T5Config, ViTConfig, diffusion, lower, t5, vit


def _random(specs, seed: int = 0, std: float = 0.3):
    """Real arrays for abstract float arguments (normal, ``std``)."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s: jnp.asarray(rng.normal(0.0, std, s.shape), s.dtype), specs)


def _reference_bucket(relative: int, bidirectional: bool, buckets: int, max_distance: int) -> int:
    """Mesh TensorFlow's ``_relative_position_bucket``, one integer at a time in plain Python."""
    ret, n = 0, -relative
    if bidirectional:
        buckets //= 2
        ret += (n < 0) * buckets
        n = abs(n)
    else:
        n = max(n, 0)
    exact = buckets // 2
    if n < exact:
        return ret + n
    large = exact + int(math.log(n / exact) / math.log(max_distance / exact) * (buckets - exact))
    return ret + min(large, buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_relative_buckets_match_the_reference_rule(bidirectional):
    relative = np.arange(-300, 301)
    got = np.asarray(t5.relative_bucket(jnp.asarray(relative, jnp.int32), bidirectional, 32, 128))
    want = [_reference_bucket(int(r), bidirectional, 32, 128) for r in relative]
    assert got.tolist() == want
    # every bucket is reached, but the upper half's first (a key 0 positions ahead is the lower half's 0)
    assert set(want) == (set(range(32)) - {16} if bidirectional else set(range(32)))


@pytest.mark.parametrize("scan", [False, True])
def test_t5_decode_step_by_step_agrees_with_teacher_forcing(scan):
    cfg = T5Config(enc_layers=2, dec_layers=2, d_model=32, heads=4, ffn=64, vocab=48, seq=12, tgt=6, batch=2,
                   buckets=8, max_distance=16, scan=scan, dtype="f32")
    rng = np.random.default_rng(1)
    params = _random(t5.param_specs(cfg))
    src = jnp.asarray(rng.integers(0, cfg.vocab, (cfg.batch, cfg.seq)), jnp.int32)
    src_mask = jnp.asarray(np.arange(cfg.seq)[None] < np.array([[cfg.seq], [cfg.seq - 4]]), jnp.int32)
    tgt = jnp.asarray(rng.integers(0, cfg.vocab, (cfg.batch, cfg.tgt)), jnp.int32)

    enc_out = t5.encode(params, src, src_mask, cfg)
    forced = jnp.argmax(t5.decode_train(params, enc_out, src_mask, tgt, cfg), axis=-1)

    encode = jax.jit(t5.program(cfg, "encode").fn)
    decode = jax.jit(t5.program(cfg, "decode").fn)
    enc_params = t5.serving_params(params, cfg, "encode")
    enc2, cross_k, cross_v = encode(enc_params, src, src_mask)
    np.testing.assert_allclose(enc2, enc_out, rtol=1e-4, atol=1e-5)
    cache = jnp.zeros((cfg.dec_layers, cfg.batch, cfg.tgt, cfg.heads, cfg.head_dim), jnp.float32)
    k_cache, v_cache = cache, cache
    dec_params = t5.serving_params(params, cfg, "decode")
    for i in range(cfg.tgt):
        nxt, k_cache, v_cache = decode(dec_params, k_cache, v_cache, cross_k, cross_v, src_mask, tgt[:, i],
                                       jnp.int32(i))
        assert nxt.tolist() == forced[:, i].tolist(), f"position {i}"


def test_vit_patch_embeddings_by_convolution_and_by_reshape_are_the_same_map():
    conv = ViTConfig(layers=1, d_model=16, heads=2, image=16, patch=4, channels=3, batch=2, patch_embed="conv")
    linear = dataclasses.replace(conv, patch_embed="linear")
    params = _random(vit.param_specs(conv))
    flat = dict(params, patch_w=params["patch_w"].reshape(-1, conv.d_model))  # HWIO flattened as (h, w, c)
    images = _random(jax.ShapeDtypeStruct((2, 16, 16, 3), jnp.float32), seed=3, std=1.0)
    np.testing.assert_allclose(vit.embed_patches(params, images, conv), vit.embed_patches(flat, images, linear),
                               rtol=1e-5, atol=1e-5)
    assert vit.logits_fn(params, images, conv).shape == (2, conv.classes)


@pytest.mark.parametrize("arch", ["dit", "unet"])
def test_guidance_at_scale_one_is_the_conditional_sampling_step(arch):
    guided = DiffusionConfig(arch=arch, layers=1, width=16, heads=2, image=8, channels=4, groups=4, batch=2,
                             guidance=True)
    plain = dataclasses.replace(guided, guidance=False)
    params = _random(diffusion.param_specs(guided), std=0.2)
    x = _random(jax.ShapeDtypeStruct((2, 8, 8, 4), jnp.float32), seed=5, std=1.0)
    labels = jnp.asarray([3, 7], jnp.int32)
    t, t_prev = jnp.int32(500), jnp.int32(400)
    # jitted: one compile each instead of op-by-op dispatch (UNet 9 s -> 2 s), the same values
    guided_step, plain_step = jax.jit(diffusion.sample_step_fn(guided)), jax.jit(diffusion.sample_step_fn(plain))
    a = guided_step(params, x, t, t_prev, labels, jnp.float32(1.0))
    b = plain_step(params, x, t, t_prev, labels)
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    c = guided_step(params, x, t, t_prev, labels, jnp.float32(4.0))
    assert float(jnp.max(jnp.abs(c - b))) > 1e-3  # guidance does something at another scale
    abar = np.asarray(diffusion.alphas_cumprod(guided.steps))
    assert abar[0] > 0.99 and abar[-1] < 1e-3 and np.all(np.diff(abar) <= 0)  # non-increasing (clipped at the end)


@pytest.mark.parametrize("family,kind,cfg", [
    ("t5", "decode", T5Config(enc_layers=1, dec_layers=2, d_model=32, heads=2, ffn=64, vocab=64, seq=16, tgt=8,
                              batch=2, dtype="f32")),
    ("vit", "infer", ViTConfig(layers=2, d_model=32, heads=2, image=16, patch=4, batch=2, pool="gap")),
    ("diffusion", "sample", DiffusionConfig(layers=1, width=32, heads=2, image=8, batch=2)),
])
def test_each_new_family_tunes_end_to_end_with_a_validated_answer(tmp_path, family, kind, cfg):
    path = tmp_path / f"{family}.hlo"
    path.write_text(lower(family, kind, cfg))
    with Session(cache=tmp_path / "cache.db", workers=1) as session:
        result = session.tune(path, strategy="random", budget=6, seed=0)
    assert result.evaluations >= 6 and result.default_cost > 0
    assert result.best is None or result.best.cost <= result.default_cost
    # whatever the search returned was checked: by execution, or it is the default itself
    assert result.validation_level in ("executed", "identical"), result.validation_level
