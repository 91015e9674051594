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
    assert listed["decisions_drop_donation"] is False  # nothing donated here, on any jaxlib
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


#: A library fusion of a subgraph as XLA's pre-scheduler stage prints one: two dots and the elementwise
#: work between them in one ``__ynn_fusion``, six operands (XLA marks the sixth ``/*index=5*/``).
SUBGRAPH = """HloModule m

%fsub (p0: f32[64,32], p1: f32[32,48], p2: f32[64,48], p3: f32[48,16], p4: f32[64,16], p5: f32[64,16]) -> f32[64,16] {
  %p0 = f32[64,32]{1,0} parameter(0)
  %p1 = f32[32,48]{1,0} parameter(1)
  %dot.a = f32[64,48]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %p2 = f32[64,48]{1,0} parameter(2)
  %add.a = f32[64,48]{1,0} add(%dot.a, %p2)
  %p3 = f32[48,16]{1,0} parameter(3)
  %dot.b = f32[64,16]{1,0} dot(%add.a, %p3), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %p4 = f32[64,16]{1,0} parameter(4)
  %mul.b = f32[64,16]{1,0} multiply(%dot.b, %p4)
  %p5 = f32[64,16]{1,0} parameter(5)
  ROOT %add.b = f32[64,16]{1,0} add(%mul.b, %p5)
}

ENTRY %main (a: f32[64,32], b: f32[32,48], c: f32[64,48], d: f32[48,16], e: f32[64,16], f: f32[64,16]) -> f32[64,16] {
  %a = f32[64,32]{1,0} parameter(0)
  %b = f32[32,48]{1,0} parameter(1)
  %c = f32[64,48]{1,0} parameter(2)
  %d = f32[48,16]{1,0} parameter(3)
  %e = f32[64,16]{1,0} parameter(4)
  %f = f32[64,16]{1,0} parameter(5)
  ROOT %ynn_fusion = f32[64,16]{1,0} fusion(%a, %b, %c, %d, %e, /*index=5*/%f), kind=kCustom, calls=%fsub, backend_config={"outer_dimension_partitions":[],"fusion_config":{"kind":"__ynn_fusion"}}
}
"""


def test_a_subgraph_library_fusion_is_a_site_split_or_taken_apart_on_text():
    """A library fusion of several dots is one site, named by its largest dot (as the profile names the
    fusion's time), with three choices: as XLA fused it, each dot a library fusion of its own with the rest
    XLA's (``split``), or all XLA's own code (``xla``). Either rewrite is a module XLA parses."""
    from autotune.pipelines.xla import hlo

    (site,) = sites.find_sites(SUBGRAPH)
    assert (site.name, site.default, site.choices) == ("dot.a", sites.AS_LIBRARY, sites.SUBGRAPH_CHOICES)
    split = sites.rewrite(SUBGRAPH, {"dot.a": sites.SPLIT})
    assert split.applied == ("dot.a",)
    body = split.text.split("ENTRY", 1)[1]
    # Each dot a one-op library fusion, the elementwise work plain, the fusion's parameters its operands
    # (the sixth one too: XLA's index comment is no operand), the root under the fusion's name.
    assert body.count("kind=kCustom, calls=%autotune_split_") == 2
    assert "%add.a = f32[64,48]{1,0} add(%dot.a, %c)" in body
    assert "ROOT %ynn_fusion = f32[64,16]{1,0} add(%mul.b, %f)" in body
    assert "fusion(%a, %b)" in body and "fusion(%add.a, %d)" in body
    hlo.parse_text(split.text)
    apart = sites.rewrite(SUBGRAPH, {"dot.a": sites.AS_XLA})
    body = apart.text.split("ENTRY", 1)[1]
    assert apart.applied == ("dot.a",) and "kCustom" not in body
    assert "%dot.a = f32[64,48]{1,0} dot(%a, %b)" in body and "%dot.b = f32[64,16]{1,0} dot(%add.a, %d)" in body
    hlo.parse_text(apart.text)
    assert sites.rewrite(SUBGRAPH, {"dot.a": sites.AS_LIBRARY}).unchanged == ("dot.a",)


def _resnet_tail(channels: int = 512, mid: int = 128):
    """Two bottleneck blocks at 7x7 with batch-norm scales, as a ResNet ends: YNNPACK takes the whole
    stack as one library fusion at these widths (jaxlib 0.10-0.12). The weights are scaled inside, so
    that random normal inputs keep activations near 1."""
    import jax
    import jax.numpy as jnp

    def conv(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def f(x, w1, w2, w3, s):
        for _ in range(2):
            y = jnp.maximum(conv(x, w1 * channels ** -0.5) * s, 0.0)
            y = jnp.maximum(conv(y, w2 * (9 * mid) ** -0.5), 0.0)
            x = jnp.maximum(conv(y, w3 * mid ** -0.5) + x, 0.0)
        return jnp.mean(x, axis=(1, 2))

    S = jax.ShapeDtypeStruct
    args = (S((1, 7, 7, channels), jnp.float32), S((1, 1, channels, mid), jnp.float32),
            S((3, 3, mid, mid), jnp.float32), S((1, 1, mid, channels), jnp.float32), S((mid,), jnp.float32))
    return jax.jit(f).lower(*args)


def test_a_subgraph_decision_compiles_and_computes_what_the_default_computes(engine, pipeline):
    import autotune
    from autotune.core.outputs import compare_outputs

    module = engine.prepare(autotune.load(_resnet_tail()))
    (site,) = [s for s in pipeline.sites(module) if s.choices == sites.SUBGRAPH_CHOICES]
    assert site.opcode == "convolution"
    want = [pipeline.execute(module, seed=k) for k in (0, 1)]
    for choice in (sites.SPLIT, sites.AS_XLA):
        decided = module.with_options({site.option: choice})
        after = pipeline.sites(decided)
        assert not any(s.choices == sites.SUBGRAPH_CHOICES for s in after), choice
        convs = [s for s in after if s.opcode == "convolution" and s.default == sites.AS_LIBRARY]
        assert len(convs) == (6 if choice == sites.SPLIT else 0), (choice, after)
        for k in (0, 1):
            verdict = compare_outputs(want[k], pipeline.execute(decided, seed=k), seed=k)
            assert verdict.ok, (choice, verdict)


def _bn_tail():
    """Two bottleneck blocks whose batch norm divides by the square root of a variance input: drawn N(0, 1),
    the variance is negative and the norm NaN, which XLA's YNNPACK fusion of the stage turns into 0 at its
    ReLUs (HLO's ``maximum`` propagates NaN)."""
    import jax
    import jax.numpy as jnp

    def conv(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def f(x, w1, w2, w3, var):
        for _ in range(2):
            y = jnp.maximum(conv(x, w1) * jax.lax.rsqrt(var), 0.0)
            y = jnp.maximum(conv(y, w2), 0.0)
            x = jnp.maximum(conv(y, w3) + x, 0.0)
        return jnp.mean(x, axis=(1, 2))

    S = jax.ShapeDtypeStruct
    args = (S((1, 7, 7, 512), jnp.float32), S((1, 1, 512, 128), jnp.float32), S((3, 3, 128, 128), jnp.float32),
            S((1, 1, 128, 512), jnp.float32), S((128,), jnp.float32))
    return jax.jit(f).lower(*args)


def test_a_nan_only_a_library_swallowed_is_judged_on_inputs_in_the_working_range(engine, pipeline):
    """XLA's default returns numbers where a decision (HLO's semantics) returns NaN, because YNNPACK's fused
    ReLU swallowed the NaN of a negative variance: XLA compiled without libraries returns NaN there too, so the
    draw decides nothing and the comparison is made on ``scaled`` inputs (finite for both), where they agree."""
    import autotune
    from autotune.core import execution
    from autotune.core.outputs import compare_outputs

    module = engine.prepare(autotune.load(_bn_tail()))
    (site,) = [s for s in pipeline.sites(module) if s.choices == sites.SUBGRAPH_CHOICES]
    decided = module.with_options({site.option: sites.AS_XLA})
    default, tuned = pipeline.execute(module, seed=0), pipeline.execute(decided, seed=0)
    assert not compare_outputs(default, tuned, seed=0).ok  # on N(0, 1) inputs they differ: NaN against numbers
    assert execution.nonfinite(default) == 0 and execution.nonfinite(tuned) > 0
    verdict = execution.validate(pipeline, module, decided, seed=0)
    assert verdict.ok and verdict.inputs.startswith("floats=scaled"), verdict


def test_a_nan_where_xla_itself_computes_numbers_stays_wrong(engine, tmp_path):
    """The same rule never excuses a tuned module that returns NaN where XLA's own semantics (no libraries)
    returns numbers: a module of the same signature computing log(-1 - |x|) against relu(x)."""
    from autotune.core import execution

    base = "HloModule m\n\nENTRY e {\n  x = f32[64,32] parameter(0)\n  w = f32[32,16] parameter(1)\n" \
           "  d = f32[64,16] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n{body}}\n"
    relu = base.replace("{body}", "  z = f32[] constant(0)\n  b = f32[64,16] broadcast(z), dimensions={}\n"
                                  "  ROOT r = f32[64,16] maximum(d, b)\n")
    nan = base.replace("{body}", "  a = f32[64,16] abs(d)\n  o = f32[] constant(-1)\n"
                                 "  ob = f32[64,16] broadcast(o), dimensions={}\n  s = f32[64,16] subtract(ob, a)\n"
                                 "  ROOT r = f32[64,16] log(s)\n")
    (tmp_path / "relu.hlo").write_text(relu)
    (tmp_path / "nan.hlo").write_text(nan)
    original, wrong = (engine.prepare(load(tmp_path / f"{n}.hlo")) for n in ("relu", "nan"))
    verdict = execution.validate(engine.pipeline, original, wrong, seed=0)
    assert not verdict.ok and "NaN or Inf where the original's are finite" in verdict.reason
