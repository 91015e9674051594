"""Decisions per loop (pipelines/xla/loops.py): a counted while loop of the input module unrolled by a
factor or fully, carried as ``site:unroll:<while>`` options. Real XLA on small modules made here."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.core.module import load
from autotune.errors import BadInput
from autotune.pipelines.xla import hlo, loops, sites

#: A scan-like loop (4 trips: h = tanh(h @ w[i]) over stacked weights) and a data-dependent loop (not counted).
LOOPS = """HloModule loops

cond {
  p = (s32[], f32[8,16], f32[4,16,16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], f32[8,16], f32[4,16,16]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  h = f32[8,16] get-tuple-element(p), index=1
  ws = f32[4,16,16] get-tuple-element(p), index=2
  z = s32[] constant(0)
  w3 = f32[1,16,16] dynamic-slice(ws, i, z, z), dynamic_slice_sizes={1,16,16}
  w = f32[16,16] reshape(w3)
  d = f32[8,16] dot(h, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[8,16] tanh(d)
  one = s32[] constant(1)
  next = s32[] add(i, one)
  ROOT out = (s32[], f32[8,16], f32[4,16,16]) tuple(next, t, ws)
}

wcond {
  q = (f32[], f32[]) parameter(0)
  a = f32[] get-tuple-element(q), index=0
  lim = f32[] get-tuple-element(q), index=1
  ROOT lt = pred[] compare(a, lim), direction=LT
}

wbody {
  q = (f32[], f32[]) parameter(0)
  a = f32[] get-tuple-element(q), index=0
  lim = f32[] get-tuple-element(q), index=1
  two = f32[] constant(2)
  m = f32[] multiply(a, two)
  ROOT o = (f32[], f32[]) tuple(m, lim)
}

ENTRY main {
  x = f32[8,16] parameter(0)
  ws = f32[4,16,16] parameter(1)
  s = f32[] parameter(2)
  zero = s32[] constant(0)
  init = (s32[], f32[8,16], f32[4,16,16]) tuple(zero, x, ws)
  loop = (s32[], f32[8,16], f32[4,16,16]) while(init), condition=cond, body=body
  h = f32[8,16] get-tuple-element(loop), index=1
  one = f32[] constant(1)
  a0 = f32[] add(s, one)
  hundred = f32[] constant(100)
  winit = (f32[], f32[]) tuple(a0, hundred)
  grow = (f32[], f32[]) while(winit), condition=wcond, body=wbody
  g = f32[] get-tuple-element(grow), index=0
  ROOT r = (f32[8,16], f32[]) tuple(h, g)
}
"""


def _text() -> str:
    return hlo.to_text(hlo.parse_text(LOOPS))


def _compiled(text: str):
    """The module compiled by XLA's CPU pipeline in this process (jax's client), and its optimised text."""
    from jax._src import xla_bridge
    from jax._src.lib import _jax

    backend = xla_bridge.get_backend("cpu")
    mlir = _jax.mlir.hlo_to_stablehlo(hlo.parse_text(text).as_serialized_hlo_module_proto())
    ex = backend.compile_and_load(mlir, _jax.DeviceList(tuple(backend.devices()[:1])), _jax.CompileOptions())
    return ex, ex.hlo_modules()[0].to_string()


def _run(ex, args):
    import jax

    from autotune.pipelines.xla import runner

    dev = jax.devices("cpu")[0]
    return [np.asarray(o) for o in runner.run(ex, [jax.device_put(a, dev) for a in args])]


def test_counted_loops_are_found_with_their_trips_and_others_are_not():
    found = loops.find_loops(_text())
    assert [(f.name, f.trips) for f in found] == [("loop", 4)]  # the data-dependent loop is no site
    assert found[0].choices == ("2", "full")  # 4 divides 4 but is the full unroll
    assert found[0].factor("full") == 4 and found[0].factor("2") == 2 and found[0].factor("3") is None
    # A long loop (a generation loop of 1000 trips): partial factors only, never 1000 copies of its body.
    long = loops.Loop("gen", 1000, "b", "c", body_size=100)
    assert long.choices == ("2", "4") and long.factor("full") is None


def test_jax_scans_and_fori_loops_are_counted_loops():
    """The loops jax emits: ``lax.scan`` (counter from 0) and ``fori_loop`` with bounds (from 2 to 8)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    def f(h, ws):
        h, _ = lax.scan(lambda c, w: (jnp.tanh(c @ w), None), h, ws)
        return lax.fori_loop(2, 8, lambda i, c: c * 1.5 + i, h)

    h, ws = jnp.ones((8, 16)), jnp.ones((6, 16, 16)) * 0.01
    found = loops.find_loops(hlo.to_text(hlo.parse_text(jax.jit(f).lower(h, ws).as_text(dialect="hlo"))))
    assert sorted(f.trips for f in found) == [6, 6], found


@pytest.mark.parametrize("choice", ["2", "full"])
def test_unrolled_module_computes_the_same_and_full_removes_the_loop(choice):
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((8, 16)).astype(np.float32), (rng.standard_normal((4, 16, 16)) * 0.3).astype(np.float32),
            np.float32(1.5)]
    text = _text()
    result = loops.unroll(text, {"loop": choice})
    assert result.applied == ("loop",) and not result.missing
    plain, plain_opt = _compiled(text)
    unrolled, opt = _compiled(result.text)
    for a, b in zip(_run(plain, args), _run(unrolled, args), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # XLA's pipeline took it from there: fully unrolled, only the data-dependent loop is left.
    assert plain_opt.count(" while(") == 2
    assert opt.count(" while(") == (1 if choice == "full" else 2)


def test_a_factor_that_does_not_divide_the_trips_or_a_missing_loop_changes_nothing():
    text = _text()
    result = loops.unroll(text, {"loop": "3", "grow": "full", "nothing": "2"})
    assert result.applied == () and set(result.missing) == {"loop", "grow", "nothing"}
    assert result.text == text
    kept = loops.unroll(text, {"loop": loops.AS_WRITTEN})
    assert kept.unchanged == ("loop",) and kept.text == text


def test_the_tool_lists_applies_and_refuses_loop_decisions(engine, pipeline, tmp_path):
    """Through the workers: the loop is a site of kind unroll, always in the site space, applied by a
    full compile (same outputs as XLA's default), and a malformed decision is one line of BadInput."""
    path = tmp_path / "loops.hlo"
    path.write_text(LOOPS)
    root = engine.prepare(load(path))
    site = next(s for s in pipeline.sites(root) if s.kind == loops.UNROLL)
    # (named as in the normalised module the tool compiles: ``loop.5`` or the like)
    assert site.name.startswith("loop") and (site.opcode, site.default, site.shape) == ("while", loops.AS_WRITTEN, "4 trips")
    assert site.option == f"site:unroll:{site.name}" and "full" in site.choices
    assert [s.name for s in pipeline.sites(root) if s.kind == loops.UNROLL] == [site.name]  # not the other loop
    dims = pipeline.site_space(root, only=[], limit=0)  # no library site asked for: the loop still is
    assert [d.name for d in dims] == [site.option]
    want = pipeline.execute(root, seed=3)
    for choice in ("2", "full"):
        got = pipeline.execute(root.with_options({site.option: choice}), seed=3)
        for a, b in zip(want, got, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for bad in ({site.option: "twice"}, {"site:unrol:loop": "2"}):
        with pytest.raises(BadInput) as err:
            pipeline.check_options(bad)
        assert "\n" not in str(err.value)
    assert sites.split([("site:unroll:loop", "2"), ("site:library:d", "xla"), ("xla_x", "1")]) == (
        [("xla_x", "1")], {"d": "xla"}, {"loop": "2"})


def test_the_jax_hook_applies_a_record_that_unrolls_a_loop(tmp_path):
    """A record whose answer unrolls a jitted function's scan, applied by ``autotune.jax.use``: the module
    rewritten before XLA compiles it (``loops_applied`` says which loop), the same outputs as plain jit."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    import autotune.jax
    from autotune.api import Session
    from autotune.core.record import TuningRecord

    def f(h, ws):
        return lax.scan(lambda c, w: (jnp.tanh(c @ w), None), h, ws)[0]

    h = jnp.linspace(-1, 1, 8 * 16, dtype=jnp.float32).reshape(8, 16)
    ws = jnp.linspace(0.5, -0.5, 4 * 16 * 16, dtype=jnp.float32).reshape(4, 16, 16)
    with Session(tmp_path / "c.db", 1) as s:
        root = s.normalize(jax.jit(f).lower(h, ws))
        loop = next(site for site in s.evaluator.pipeline.sites(root) if site.kind == loops.UNROLL)
        record = TuningRecord(module="f", fingerprint=root.fingerprint, sequence=(), objective="runtime",
                              pipeline_version=s.evaluator.version, xla_version="", autotune_version="",
                              metrics={}, valid=True, compiler_options={loop.option: "full"})
    with autotune.jax.use([record], cache=tmp_path / "c.db", strict=True) as stats:
        out = jax.jit(f)(h, ws)
    assert stats.applied_via == {root.fingerprint: "site-decisions"}, stats
    assert stats.loops_applied[root.fingerprint] == (loop.name,) and "1 loop(s) unrolled" in stats.summary()
    np.testing.assert_allclose(np.asarray(out), np.asarray(jax.jit(f)(h, ws)), rtol=1e-5, atol=1e-6)
