"""Decisions per site (pipelines/xla/sites.py): which convolution, dot or reduce runs as a YNNPACK library
fusion and which as XLA's own code, decided one instruction at a time through the pre-scheduler hook, carried
as ``site:library:<instruction>`` compiler options. Real XLA on a small module made here."""

from __future__ import annotations

import re

import numpy as np
import pytest

from autotune.core.module import load
from autotune.core.options import CompilerOptions
from autotune.errors import BadInput
from autotune.pipelines.xla import sites
from tests.conftest import assert_one_line_error, run_cli

#: A convolution, a reduce and a dot that XLA 0.10-0.12 hands to YNNPACK by default on the CPU.
SMALL_SITES = """HloModule small_sites

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[1,32,32,16] parameter(0)
  k = f32[3,3,16,32] parameter(1)
  w = f32[32,64] parameter(2)
  c = f32[1,32,32,32] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  r = f32[1,1024,32] reshape(c)
  z = f32[] constant(0)
  s = f32[1,32] reduce(r, z), dimensions={1}, to_apply=add
  h = f32[1024,32] reshape(c)
  d = f32[1024,64] dot(h, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[1024,64] tanh(d)
  ROOT o = (f32[1,32], f32[1024,64]) tuple(s, t)
}
"""


@pytest.fixture(scope="module")
def root(engine, tmp_path_factory):
    path = tmp_path_factory.mktemp("sites") / "small_sites.hlo"
    path.write_text(SMALL_SITES)
    return engine.prepare(load(path)), path


def _flip(site) -> str:
    return next(c for c in site.choices if c != site.default)


def test_each_decision_is_applied_and_computes_what_the_default_computes(pipeline, root):
    module, _ = root
    found = {s.name: s for s in pipeline.sites(module)}
    # The convolution, the reduce and the dot: a library fusion each, by XLA's own choice.
    assert {s.opcode for s in found.values()} >= {"convolution", "reduce", "dot"}
    assert all(s.default == sites.AS_LIBRARY for s in found.values())
    want = pipeline.execute(module, seed=2)
    for site in found.values():
        decided = module.with_options({site.option: _flip(site)})
        after = {s.name: s for s in pipeline.sites(decided)}
        # Applied: the site is no library fusion any more (a plain Eigen call or a loop fusion)...
        assert site.name not in after or after[site.name].default == sites.AS_XLA, site
        # ...and the others are untouched.
        assert set(found) - {site.name} <= set(after), (site, after)
        for a, b in zip(want, pipeline.execute(decided, seed=2)):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_a_decision_on_a_site_the_module_lacks_changes_nothing(pipeline, root):
    module, _ = root
    ghost = module.with_options({sites.option_name(sites.LIBRARY, "no_such_instruction"): sites.AS_XLA})
    assert [s.id for s in pipeline.sites(ghost)] == [s.id for s in pipeline.sites(module)]
    for a, b in zip(pipeline.execute(module, seed=1), pipeline.execute(ghost, seed=1)):
        np.testing.assert_array_equal(a, b)


def test_the_site_space_is_option_dims_and_bad_decisions_are_one_line(pipeline, root):
    module, _ = root
    dims = pipeline.site_space(module, limit=2)
    assert len(dims) == 2 and all(d.name.startswith("site:library:") and d.values == ("xla",) for d in dims)
    # The largest results first where no profile orders them.
    sizes = [next(s for s in pipeline.sites(module) if s.option == d.name).elements for d in dims]
    assert sizes == sorted(sizes, reverse=True)
    assert pipeline.check_options(CompilerOptions.of({dims[0].name: "xla", "xla_cpu_use_xnnpack": "False"}))
    with pytest.raises(BadInput, match="takes one of ynn, xla"):
        pipeline.check_options(CompilerOptions.of({dims[0].name: "maybe"}))
    with pytest.raises(BadInput, match=re.escape("site:<library|unroll>:<instruction>")):
        pipeline.check_options(CompilerOptions.of({"site:tile:c.0": "xla"}))


def test_rewrite_rules_on_text():
    """The two directions on a module printed as XLA's pre-scheduler stage prints it."""
    text = """HloModule m

%fc (p0: f32[64,32], p1: f32[32,16]) -> f32[64,16] {
  %p0 = f32[64,32]{1,0} parameter(0)
  %p1 = f32[32,16]{1,0} parameter(1)
  ROOT %dot.1 = f32[64,16]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (a: f32[64,32], b: f32[32,16], c: f32[16,8]) -> f32[64,8] {
  %a = f32[64,32]{1,0} parameter(0)
  %b = f32[32,16]{1,0} parameter(1)
  %c = f32[16,8]{1,0} parameter(2)
  %ynn_fusion = f32[64,16]{1,0} fusion(%a, %b), kind=kCustom, calls=%fc, backend_config={"outer_dimension_partitions":[],"fusion_config":{"kind":"__ynn_fusion"}}
  ROOT %dot.2 = f32[64,8]{1,0} dot(%ynn_fusion, %c), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
    found = {s.name: s for s in sites.find_sites(text)}
    assert found["dot.1"].default == sites.AS_LIBRARY and found["dot.2"].default == sites.AS_XLA
    out = sites.rewrite(text, {"dot.1": "xla", "dot.2": "ynn", "gone": "xla"})
    assert out.applied == ("dot.1", "dot.2") and out.missing == ("gone",)
    assert "%ynn_fusion = f32[64,16]{1,0} dot(%a, %b), lhs_contracting_dims={1}" in out.text
    assert "ROOT %dot.2 = f32[64,8]{1,0} fusion(%ynn_fusion, %c), kind=kCustom, calls=%autotune_site_" in out.text
    assert sites.rewrite(text, {"dot.1": "ynn"}).unchanged == ("dot.1",)


def test_sites_cli_lists_and_refuses_bad_input(root, db_path):
    _, path = root
    proc = run_cli("sites", str(path), "--json", db=db_path)
    assert proc.returncode == 0, proc.stderr
    import json

    listed = json.loads(proc.stdout)
    assert listed["count"] >= 3 and {"site", "option", "default", "choices"} <= set(listed["sites"][0])
    assert_one_line_error(run_cli("sites", str(path), "--compiler-option", "site:library:c.0=perhaps", db=db_path))


def test_the_jax_process_transformation_applies_decisions_to_its_own_compiles():
    """``site_hook``: in a JAX program's own process, a decision is applied to the compile inside
    ``deciding`` (and only there), with the same outputs."""
    import jax
    import jax.numpy as jnp

    from autotune.pipelines.xla import site_hook

    def f(x, k):
        return jax.lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    x = jnp.ones((1, 32, 32, 16), jnp.float32) * 0.5
    k = jnp.linspace(-1, 1, 3 * 3 * 16 * 32, dtype=jnp.float32).reshape(3, 3, 16, 32)
    plain = jax.jit(f).lower(x, k).compile()
    conv = next(s for s in sites.find_sites(plain.as_text()) if s.opcode == "convolution")
    assert conv.default == sites.AS_LIBRARY
    with site_hook.deciding({conv.name: sites.AS_XLA}) as report:
        decided = jax.jit(lambda a, b: f(a, b)).lower(x, k).compile()
    assert report and report[0].applied == (conv.name,)
    assert not any(s.name == conv.name and s.default == sites.AS_LIBRARY for s in sites.find_sites(decided.as_text()))
    np.testing.assert_allclose(np.asarray(plain(x, k)), np.asarray(decided(x, k)), rtol=1e-4, atol=1e-4)
    # Outside the block the transformation passes compiles through.
    again = jax.jit(lambda a, b: f(a, b) + 0.0).lower(x, k).compile()
    assert any(s.opcode == "convolution" and s.default == sites.AS_LIBRARY for s in sites.find_sites(again.as_text()))


def test_the_jax_hook_applies_a_record_with_site_decisions(tmp_path):
    """A record whose answer is a per-site decision, applied by ``autotune.jax.use`` to the matching jitted
    function: compiled from the normalised module with the decision made (``applied_via`` says so), the
    same outputs as plain jit."""
    import jax
    import jax.numpy as jnp

    import autotune.jax
    from autotune.api import Session
    from autotune.core.record import TuningRecord

    def f(x, w):
        return jnp.tanh(x @ w)

    x = jnp.linspace(-1, 1, 256 * 64, dtype=jnp.float32).reshape(256, 64)
    w = jnp.linspace(1, -1, 64 * 128, dtype=jnp.float32).reshape(64, 128)
    lowered = jax.jit(f).lower(x, w)
    with Session(tmp_path / "c.db", 1) as s:
        root = s.normalize(lowered)
        dot = next(site for site in s.evaluator.pipeline.sites(root) if site.opcode == "dot")
        record = TuningRecord(module="f", fingerprint=root.fingerprint, sequence=(), objective="runtime",
                              pipeline_version=s.evaluator.version, xla_version="", autotune_version="",
                              metrics={}, valid=True, compiler_options={dot.option: _flip(dot)})
    with autotune.jax.use([record], cache=tmp_path / "c.db", strict=True) as stats:
        out = jax.jit(f)(x, w)
    assert stats.applied_via == {root.fingerprint: "site-decisions"}, stats
    assert stats.sites_applied[root.fingerprint] == (dot.name,) and not stats.sites_missing[root.fingerprint]
    np.testing.assert_allclose(np.asarray(out), np.asarray(jax.jit(f)(x, w)), rtol=1e-4, atol=1e-4)
