"""Weights at the price of parameters: the search runs on a surrogate with the large constants lifted
to parameters, and the reported best is re-established on the real module (real XLA, no mocks).

The hand-made module sums the rows of a 1 MiB constant matrix: XLA's ``constant_folding`` (in its
default pipeline) folds that reduce on the real module, and cannot on the surrogate, where the
matrix is a parameter. Surrogate and real module therefore disagree, and the run must say so and
report figures of the real module.
"""

from __future__ import annotations

import numpy as np
import pytest

from autotune.pipelines.xla import hlo
from autotune.pipelines.xla.loader import module_from_proto
from autotune.core.module import Module
from autotune.core.tuner import SURROGATE_MIN_BYTES, tune


def folding_module() -> Module:
    rows = ", ".join("{" + ", ".join(f"{v:.1f}" for v in np.arange(512 * i, 512 * (i + 1)) % 7) + "}"
                     for i in range(512))
    text = """HloModule folds

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[512] parameter(0)
  c = f32[512,512] constant(ROWS)
  z = f32[] constant(0)
  r = f32[512] reduce(c, z), dimensions={1}, to_apply=add
  ROOT s = f32[512] add(r, x)
}
""".replace("ROWS", "{" + rows + "}")
    return module_from_proto(hlo.parse_text(text).as_serialized_hlo_module_proto(), "folds")


@pytest.fixture(scope="module")
def folds(engine):
    return engine.prepare(folding_module())


def test_large_constants_are_lifted_to_parameters(pipeline, folds):
    surrogate, n, nbytes = pipeline.lift_constants(folds)
    assert n == 1 and nbytes == 512 * 512 * 4 >= SURROGATE_MIN_BYTES
    assert len(surrogate.proto) < len(folds.proto) / 50  # the data is gone ...
    specs = pipeline.parameter_specs(surrogate)
    assert [s.shape for s in specs] == [(512,), (512, 512)]  # ... and is an entry parameter instead
    assert pipeline.lift_constants(folds, min_bytes=8 << 20) is None  # nothing that large


def test_surrogate_disagreement_is_said_and_the_real_module_is_reported(engine, folds):
    result = tune(engine, folds, strategy="random", budget=8, seed=1)
    plain = tune(engine, folds, strategy="random", budget=8, seed=1, surrogate=False)
    info = result.surrogate
    assert plain.surrogate is None and info is not None and info["constants"] == 1
    # XLA's default folds the reduce of the constant on the real module only: 3 instructions vs 8
    assert info["agree"] is False and "disagree" in info["message"]
    assert "XLA's default 8 on the surrogate, 3 on the real module" in info["message"]
    assert info["rechecked"] and all(c["real_cost"] is not None for c in info["rechecked"])
    # what is reported is the real module: its fingerprint, its default, and a best found on it
    assert result.fingerprint == folds.fingerprint == plain.fingerprint
    assert result.default_cost == plain.default_cost == 3 and result.default.instructions == 3
    assert result.best is not None and result.best_cost == plain.best_cost
    # the state reported is one the search reached on the real module (``sequence`` is empty when it
    # only ties the default, ``found`` is what reached it)
    again = engine.evaluate(folds, list(result.best.sequence or result.best.found))
    assert again.ok and again.state == result.best.state
    assert result.validation_level in ("identical", "executed")
    assert dict(result.phases)["recheck"] >= 0 and "recheck" not in dict(plain.phases)


def test_a_module_without_large_constants_is_searched_as_it_is(engine, small_root):
    result = tune(engine, small_root, strategy="random", budget=4, seed=0)
    assert result.surrogate is None


def test_ctrl_c_while_rechecking_then_resume_reports_the_real_module(engine, folds):
    from autotune.core.observer import Observer
    from autotune.core.tuner import Interrupted

    class CtrlCInRecheck(Observer):
        def on_phase(self, phase, detail=None, estimate=None):
            if phase == "recheck":
                raise KeyboardInterrupt

    with pytest.raises(Interrupted) as info:
        tune(engine, folds, strategy="random", budget=5, seed=2, observer=CtrlCInRecheck())
    partial = info.value.partial
    assert partial.best is None and "interrupted before" in partial.surrogate["message"]  # no surrogate state as a result
    resumed = tune(engine, None, resume=info.value.run_id)
    assert resumed.status == "finished" and resumed.fingerprint == folds.fingerprint
    assert resumed.surrogate["rechecked"] and resumed.default_cost == 3
