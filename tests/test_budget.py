"""Validation within a time budget: estimated before executing, stopped at the bound when it overruns.

Real XLA throughout: the estimate is XLA's cost analysis over this machine's calibrated rates, the
bound is a real worker killed by the pool. The modules are made here: a large matrix product whose
cost analysis says it is slow, and a while loop whose trip count depends on its input (cost
analysis counts a loop body once, so only the bound can stop it).
"""

from __future__ import annotations

import json
import os
import time

import pytest

from autotune.pipelines.xla import hlo
from autotune.pipelines.xla.loader import module_from_proto
from autotune.core.limits import duration, validate_seconds
from autotune.core.module import Module
from autotune.core.validation import (COMPILED, DECLINED, EXECUTED, ExecutionPlan, establish, execution_plan,
                                      is_declined)
from autotune.errors import BadInput
from conftest import SMALL, run_cli

#: 2 x 2048^3 = 17 GFLOP: seconds on one core, far over a bound of a few milliseconds.
BIG_DOT = """HloModule big_dot

ENTRY main {
  a = f32[2048,2048] parameter(0)
  b = f32[2048,2048] parameter(1)
  ROOT d = f32[2048,2048] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""

#: Runs (n + 1) * 10^9 iterations of sin(acc) + x, n a random integer parameter: cost analysis
#: sees one iteration (microseconds), the run would take hours.
LONG_LOOP = """HloModule long_loop

cond {
  s = (s64[], s64[], f32[], f32[]) parameter(0)
  i = s64[] get-tuple-element(s), index=0
  n = s64[] get-tuple-element(s), index=1
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  s = (s64[], s64[], f32[], f32[]) parameter(0)
  i = s64[] get-tuple-element(s), index=0
  n = s64[] get-tuple-element(s), index=1
  acc = f32[] get-tuple-element(s), index=2
  x = f32[] get-tuple-element(s), index=3
  one = s64[] constant(1)
  i2 = s64[] add(i, one)
  sn = f32[] sine(acc)
  acc2 = f32[] add(sn, x)
  ROOT t = (s64[], s64[], f32[], f32[]) tuple(i2, n, acc2, x)
}

ENTRY main {
  k = s64[] parameter(0)
  x = f32[] parameter(1)
  one = s64[] constant(1)
  big = s64[] constant(1000000000)
  k1 = s64[] add(k, one)
  n = s64[] multiply(k1, big)
  zero = s64[] constant(0)
  fzero = f32[] constant(0)
  init = (s64[], s64[], f32[], f32[]) tuple(zero, n, fzero, x)
  w = (s64[], s64[], f32[], f32[]) while(init), condition=cond, body=body
  ROOT r = f32[] get-tuple-element(w), index=2
}
"""


def text_module(text: str, name: str) -> Module:
    return module_from_proto(hlo.parse_text(text).as_serialized_hlo_module_proto(), name)


class CountingPipeline:
    """The real pipeline, counting the executions validation asks of it."""

    def __init__(self, pipeline):
        self._pipeline = pipeline
        self.executed = []

    def execute(self, module, *args, **kwargs):
        self.executed.append(module.name)
        return self._pipeline.execute(module, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._pipeline, name)


def test_bound_from_option_or_environment(monkeypatch):
    monkeypatch.delenv("AUTOTUNE_VALIDATE_SECONDS", raising=False)
    assert validate_seconds() == 30.0 and validate_seconds(2.5) == 2.5
    monkeypatch.setenv("AUTOTUNE_VALIDATE_SECONDS", "7")
    assert validate_seconds() == 7.0
    monkeypatch.setenv("AUTOTUNE_VALIDATE_SECONDS", "soon")
    with pytest.raises(BadInput, match="not a number"):
        validate_seconds()
    with pytest.raises(BadInput, match="positive"):
        validate_seconds(0)
    assert duration(14 * 60) == "14 min" and duration(0.25) == "0.2 s" and duration(45) == "45 s"


def test_estimate_scales_with_the_work(pipeline):
    small = pipeline.execution_estimate(text_module(SMALL.read_text(), "small"))
    big = pipeline.execution_estimate(text_module(BIG_DOT, "big"))
    assert small is not None and big is not None
    assert big > 100 * small and big > 0.01  # 17 GFLOP: not milliseconds on a CPU core
    rates = pipeline.execution_rates()
    assert rates["flops_per_s"] > 1e8 and rates["bytes_per_s"] > 1e7


def test_a_module_estimated_over_the_bound_is_not_executed(pipeline):
    module = text_module(BIG_DOT, "big")
    counting = CountingPipeline(pipeline)
    plan = execution_plan(counting, module, module, pipeline.parameter_specs(module), bound_seconds=0.005)
    assert isinstance(plan, ExecutionPlan) and not plan.fits and plan.estimate_seconds > 0.005
    assert plan.reason.startswith(f"{DECLINED}: execution would take ~") and "on this machine" in plan.reason
    started = time.perf_counter()
    v = establish(counting, module, module, bound_seconds=0.005)
    assert v.level == COMPILED and is_declined(v.reason), v.reason
    assert "execution would take ~" in v.reason and "bound 5 ms" in v.reason
    assert counting.executed == []  # decided before anything ran
    assert time.perf_counter() - started < 30
    # the same module within a generous bound is executed
    assert establish(counting, module, module, bound_seconds=600).level == EXECUTED
    assert counting.executed


def test_an_execution_that_overruns_is_stopped_and_costs_one_worker(pipeline):
    module = text_module(LONG_LOOP, "long_loop")
    assert pipeline.execution_estimate(module) < 0.1  # cost analysis sees one iteration
    pool = pipeline.pool
    timeouts = pool.timeouts
    handed = []  # the pid of every worker the pool hands a job to
    pool.on_start = lambda key, pid: handed.append(pid)
    started = time.perf_counter()
    try:
        v = establish(pipeline, module, module, bound_seconds=1.0)
    finally:
        pool.on_start = None
    took = time.perf_counter() - started
    assert v.level == COMPILED and is_declined(v.reason), v.reason
    assert "stopped at the 1.0 s bound" in v.reason and "worker was replaced" in v.reason
    assert pool.timeouts == timeouts + 1  # exactly one worker killed ...

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    killed = [pid for pid in set(handed) if not alive(pid)]
    assert len(killed) == 1 and killed[0] not in pool.pids()
    assert took < 60
    # ... and the pool goes on (a fresh worker where needed)
    small = text_module(SMALL.read_text(), "small")
    assert establish(pipeline, small, small, bound_seconds=30).level == EXECUTED


def test_run_reports_the_decline_and_time_per_phase(tmp_path):
    path = tmp_path / "big_dot.hlo"
    path.write_text(BIG_DOT)
    proc = run_cli("run", "--strategy", "random", "--budget", "3", str(path), "--validate-seconds", "0.005",
                   "--json", db=tmp_path / "c.db")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    phases = data["phases"]
    assert list(phases)[:4] == ["load", "normalise", "default", "search"] and "validation" in phases
    assert all(sec >= 0 for sec in phases.values())
    if data["validation_level"] != "identical":  # a candidate that differs from XLA's default was validated
        assert data["validation_level"] == COMPILED and is_declined(data["validity"]["reason"])
    bad = run_cli("run", str(path), "--validate-seconds", "-1", db=tmp_path / "c.db")
    assert bad.returncode == 2 and "positive" in bad.stderr and "Traceback" not in bad.stderr


def test_ctrl_c_during_validation_keeps_the_run_resumable(engine, small_root):
    from autotune.core.observer import Observer
    from autotune.core.runs import RunStore
    from autotune.core.tuner import Interrupted, tune

    class CtrlCInValidation(Observer):
        """Delivers Ctrl-C the moment validation starts (what a user pressing it then causes)."""

        def __init__(self):
            self.phases = []

        def on_phase(self, phase, detail=None, estimate=None):
            self.phases.append(phase)
            if phase == "validation":
                raise KeyboardInterrupt

    observer = CtrlCInValidation()
    with pytest.raises(Interrupted) as info:
        tune(engine, small_root, strategy="random", budget=6, seed=3, observer=observer)
    assert "validation" in observer.phases and "search" in observer.phases
    run_id = info.value.run_id
    assert RunStore(engine.cache).get(run_id).status == "interrupted" and f"--resume {run_id}" in str(info.value)
    resumed = tune(engine, None, resume=run_id)
    assert resumed.status == "finished" and resumed.evaluations == 6 and resumed.validation_level is not None
    assert dict(resumed.phases)["search"] >= 0 and "validation" in dict(resumed.phases)
