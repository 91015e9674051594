"""The LLM family: it lowers and loads, its split never separates a model, and it has real headroom.

The headroom test runs real XLA passes through the engine on a small generated decode step (two
GQA layers under ``lax.scan``, rotary positions, KV cache written by dynamic-update-slice, bf16):
``cse`` then ``algsimp`` ends below XLA's default on final-ops, the win bench/llm_headroom.py
found across the family (results/llm_headroom.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.core.module import load
from autotune.zoo import LLMConfig, count_instructions, llm, lower, module_name
from autotune.pipelines.xla.structure import structure_counts
from autotune.zoo import suite

ROOT = Path(__file__).resolve().parent.parent
SMALL = dict(layers=2, d_model=32, heads=4, kv_heads=2, ffn=64, vocab=64, seq=16, batch=2)

#: Configs that between them use every structural option of the family.
VARIANTS = [
    LLMConfig(**SMALL),
    LLMConfig(**SMALL | dict(kv_heads=1, cache="scatter", experts=4, top_k=2, positions="learned", norm="layer",
                             mlp="gelu", dtype="f32")),
    LLMConfig(**SMALL | dict(kv_heads=4, scan=False, experts=4, top_k=1, remat=True, optimizer="sgd")),
    LLMConfig(**SMALL | dict(kv_repeat=True, cache="scatter", scan=False, remat=True)),
    LLMConfig(**SMALL | dict(attn_layout="transpose", experts=4, top_k=1)),
    LLMConfig(**SMALL | dict(dtype="mixed", cache="scatter", positions="learned", norm="layer", mlp="gelu")),
    LLMConfig(**SMALL | dict(latent=16, dtype="mixed")),
    LLMConfig(**SMALL | dict(latent=8, scan=False, cache="scatter", experts=4, top_k=2, remat=True)),
]


@pytest.mark.parametrize("cfg", VARIANTS, ids=[f"variant{i}" for i in range(len(VARIANTS))])
@pytest.mark.parametrize("kind", llm.KINDS)
def test_every_kind_lowers(cfg, kind):
    text = lower("llm", kind, cfg)
    assert text.startswith(f"HloModule {module_name('llm', kind, cfg)},")
    n = count_instructions(text)  # parsed by XLA itself
    assert suite.MIN_INSTRUCTIONS <= n <= 4000, n
    # The constructs the family exists for are in the HLO, not simplified away by the lowering.
    if cfg.scan:
        assert " while(" in text
    if kind != "train":
        assert ("scatter(" in text) == (cfg.cache == "scatter" or bool(cfg.experts))
        if not cfg.scan:  # (a scan writes its stacked outputs with dynamic-update-slice anyway)
            assert ("dynamic-update-slice(" in text) == (cfg.cache == "dus")
    if cfg.experts:
        assert " gather(" in text and "scatter(" in text  # routing into and out of expert buffers
    if cfg.positions == "rope":
        assert " cosine(" in text and " sine(" in text


def test_kinds_share_no_irrelevant_field():
    """Inference ignores the optimizer, training ignores the cache update: one program, one name."""
    a = LLMConfig(**SMALL, optimizer="sgd", remat=True)
    b = LLMConfig(**SMALL)
    assert llm.canonical(a, "decode") == llm.canonical(b, "decode")
    assert lower("llm", "decode", a) == lower("llm", "decode", b)
    c = dataclasses.replace(b, cache="scatter")
    assert llm.canonical(c, "train") == llm.canonical(b, "train")
    assert module_name("llm", "decode", c) != module_name("llm", "decode", b)


@pytest.mark.parametrize("bad", [dict(kv_heads=3), dict(experts=2, top_k=3), dict(cache="paged"), dict(seq=1),
                                 dict(latent=8, positions="learned"), dict(latent=-1)])
def test_bad_configs_are_refused(bad):
    with pytest.raises(ValueError):
        LLMConfig(**SMALL | bad)


def test_family_is_in_the_default_suite_and_split_by_model():
    entries = [e for e in suite.configs() if e.family == "llm"]
    assert len(entries) >= 300
    assert {e.kind for e in entries} == set(llm.KINDS)
    sides = suite.split(suite.configs())
    test = set(sides["test"])
    side_of_model: dict[str, set[str]] = {}
    for e in entries:
        side_of_model.setdefault(e.group(), set()).add("test" if e.name in test else "train")
    assert all(len(s) == 1 for s in side_of_model.values())  # no model on both sides
    n_test = sum(e.name in test for e in entries)
    assert 0.2 <= n_test / len(entries) <= 0.3
    # Every structural option reaches both sides.
    for field in ("scan", "cache", "experts", "positions", "norm", "dtype"):
        by_side = {s: {getattr(e.config, field) for e in entries if (e.name in test) == (s == "test")}
                   for s in ("train", "test")}
        assert by_side["train"] == by_side["test"], field
    latent = {s: {bool(e.config.latent) for e in entries if (e.name in test) == (s == "test")}
              for s in ("train", "test")}
    assert latent["train"] == latent["test"] == {False, True}


def test_latent_attention_leaves_the_other_models_split_as_it_was():
    """Adding latent attention (a field, and a fourth of the grid) changed no other model's split
    unit: a model without it has no ``latent`` in its key, and every test-split module of the grid
    without latent attention is still in the test split."""
    assert "latent" not in llm.group_key(LLMConfig(**SMALL))
    assert llm.group_key(LLMConfig(**SMALL | dict(latent=8)))["latent"] == 8
    entries = suite.configs()
    without = [e for e in entries if not (e.family == "llm" and e.config.latent)]
    assert len(without) < len(entries)
    before = {n for n in suite.split(without)["test"] if n.startswith("llm_")}
    assert before <= set(suite.split(entries)["test"])


@pytest.mark.parametrize("latent", [0, 8])
def test_cached_layer_with_a_full_cache_is_the_causal_layer(latent):
    """The inference layer, given a whole sequence from position 0 and empty caches, computes what
    the training layer computes with a causal mask: what it writes into the caches (K/V, or the
    latent and the rotary key) is what it attends over, for plain and latent attention alike."""
    import jax
    import numpy as np

    cfg = LLMConfig(**SMALL | dict(latent=latent, kv_heads=4 if latent else 2, dtype="f32", layers=1))
    layer = jax.tree.map(lambda s: 0.2 * jax.random.normal(jax.random.PRNGKey(s.size), s.shape),
                         llm._layer_specs(cfg))
    x = jax.random.normal(jax.random.PRNGKey(1), (cfg.batch, cfg.seq, cfg.d_model))
    k_cache, v_cache = (jax.numpy.zeros(c[0].shape) for c in llm.cache_specs(dataclasses.replace(cfg, scan=False)))
    cached, k_cache, v_cache = llm.cached_layer(layer, x, k_cache, v_cache, jax.numpy.int32(0), cfg)
    np.testing.assert_allclose(np.asarray(cached), np.asarray(llm.train_layer(layer, x, cfg)), rtol=2e-4, atol=2e-4)
    for cache in (k_cache, v_cache):  # every position of both caches was written
        assert (np.abs(np.asarray(cache)).sum(axis=(0, 2, 3)) > 0).all()
    assert k_cache.shape[-1] == (latent or cfg.head_dim)
    assert v_cache.shape[-1] == (cfg.rope_dim if latent else cfg.head_dim)


def test_generate_writes_llm_modules(tmp_path):
    manifest = suite.generate(tmp_path, limit=3, families=["llm"], jobs=1)
    assert [e.family for e in manifest.entries] == ["llm"] * 3 and not manifest.skipped
    assert {e.kind for e in manifest.entries} == set(llm.KINDS)
    assert len(suite.modules(tmp_path)) == 3
    for path in suite.modules(tmp_path):  # through the tuner's own loading (XLA parse, fingerprint)
        module = load(path)
        assert module.name == path.stem and module.fingerprint


@pytest.mark.parametrize("kv_heads,kv_repeat", [(4, False), (2, False), (1, False), (2, True)])
def test_transposed_attention_computes_the_einsum_attention(kv_heads, kv_repeat):
    """``attn_layout="transpose"`` is another spelling of the same attention (MHA, GQA, MQA, repeated
    K/V): only the layout of the HLO differs, which is what the variant exists for."""
    import jax
    import numpy as np

    cfg = LLMConfig(**SMALL | dict(kv_heads=kv_heads, kv_repeat=kv_repeat, dtype="f32"))
    hd = cfg.head_dim
    kq, kk, kv, km = jax.random.split(jax.random.PRNGKey(0), 4)
    q = jax.random.normal(kq, (2, 3, cfg.heads, hd))
    k = jax.random.normal(kk, (2, 5, kv_heads, hd))
    v = jax.random.normal(kv, (2, 5, kv_heads, hd))
    mask = jax.random.bernoulli(km, 0.7, (2, 3, 5))
    einsum = llm.attend(q, k, v, mask, cfg)
    transposed = llm.attend(q, k, v, mask, dataclasses.replace(cfg, attn_layout="transpose"))
    np.testing.assert_allclose(np.asarray(transposed), np.asarray(einsum), rtol=1e-5, atol=1e-5)
    text = lower("llm", "decode", dataclasses.replace(cfg, attn_layout="transpose"))
    assert "transpose(" in text and text != lower("llm", "decode", cfg)


def test_mixed_precision_stores_f32_weights_and_computes_in_bf16():
    """``dtype="mixed"`` (Flax's param_dtype=f32, dtype=bf16; how the real MaxText steps are written):
    every weight is an f32 parameter, the caches are bf16, and the layer loop's body converts the
    weights it uses (the converts inside a scan body the real steps have)."""
    import jax
    import jax.numpy as jnp

    cfg = LLMConfig(**SMALL | dict(dtype="mixed"))
    params = llm.param_specs(cfg)
    assert {leaf.dtype for leaf in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}
    assert {leaf.dtype for leaf in jax.tree.leaves(llm.cache_specs(cfg))} == {jnp.dtype(jnp.bfloat16)}
    text = lower("llm", "decode", cfg)
    bf16 = lower("llm", "decode", dataclasses.replace(cfg, dtype="bf16"))
    converts = [structure_counts(t).get("loop:convert", 0) for t in (text, bf16)]
    assert converts[0] > converts[1]
    with pytest.raises(ValueError, match="unknown dtype"):
        LLMConfig(**SMALL | dict(dtype="f16"))


def test_a_small_decode_step_beats_the_default(engine):
    root = engine.prepare(load(lower("llm", "decode", LLMConfig(**SMALL))))
    default = engine.default(root)
    assert default.ok
    tuned = engine.evaluate(root, ["cse", "algsimp"])
    assert tuned.ok
    final = engine.final(tuned.state)
    assert final.ok
    assert final.metrics.instructions < default.metrics.instructions


def test_lowering_is_deterministic_across_processes():
    """The same config gives the same bytes in a fresh interpreter (generation is reproducible)."""
    cfg = VARIANTS[1]
    code = (f"from autotune.zoo import lower, LLMConfig; import hashlib; "
            f"text = lower('llm', 'prefill', LLMConfig(**{dataclasses.asdict(cfg)!r})); "
            f"print(hashlib.sha256(text.encode()).hexdigest())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [hashlib.sha256(lower("llm", "prefill", cfg).encode()).hexdigest()]


def test_a_suite_from_another_grid_is_not_current():
    """Benchmarks regenerate (or refuse) a suite directory written from another grid, e.g. before
    latent attention joined it: the manifest must list exactly today's modules on today's sides."""
    entries = [e for e in suite.configs() if e.family == "llm"]
    side = {n: s for s, names in suite.split(suite.configs()).items() for n in names}

    def manifest(chosen, flip: str = "") -> suite.Manifest:
        return suite.Manifest(jax_version="x", entries=[
            suite.ManifestEntry(name=e.name, family="llm", kind=e.kind, config=e.config_dict(), instructions=1,
                                sha256="", split=("train" if side[e.name] == "test" else "test") if e.name == flip
                                else side[e.name], file=f"{e.name}.hlo", jax_version="x")
            for e in chosen])

    assert suite.is_current(manifest(entries), ["llm"])
    assert not suite.is_current(manifest([e for e in entries if not e.config.latent]), ["llm"])
    assert not suite.is_current(manifest(entries, flip=entries[0].name), ["llm"])
