"""The validation phase's time budget (``--validate-seconds`` for the phase as a whole, issue 53).

Real XLA throughout, nothing mocked: the modules are made here and the verdicts come from the real
chain of checkers. No test times anything: each asserts on the decisions (which check was skipped,
why, what level that leaves). A spent budget or a given time left is made deterministic by handing
``PhaseBudget`` a clock that stands still (its ``clock`` argument), never by waiting.
"""

from __future__ import annotations

import json

from autotune.core.checks.budget import EXECUTED_CHECK, MEMORY_CHECK, REGION_CHECK, PhaseBudget
from autotune.core.levels import Skip, Validation
from autotune.core.module import Module
from autotune.core.validation import (COMPILED, EXECUTED, EXECUTED_REGION, establish, execution_plan,
                                      is_declined)
from autotune.pipelines.xla import hlo
from autotune.pipelines.xla.loader import module_from_proto
from conftest import run_cli, value_and_reduce_hlo


def text_module(text: str, name: str) -> Module:
    return module_from_proto(hlo.parse_text(text).as_serialized_hlo_module_proto(), name)


DEFAULT = text_module(value_and_reduce_hlo("multiply(%x, %b)"), "default")
SAME = text_module(value_and_reduce_hlo("add(%x, %x)"), "same")  # x*2 == x+x: the region check passes it


def frozen(seconds: float, spent: float) -> PhaseBudget:
    """A budget of ``seconds`` of which exactly ``spent`` is spent, whenever it is asked."""
    return PhaseBudget(seconds, started=0.0, clock=lambda: spent)


def test_a_spent_budget_skips_every_execution_and_keeps_the_compile(pipeline):
    """Spent before the chain starts: neither the whole execution nor the region runs, each says why
    in one line, and the full compile still establishes ``compiled`` (never skipped)."""
    budget = frozen(30, spent=35)
    v = establish(pipeline, DEFAULT, SAME, finals=(DEFAULT, SAME), budget=budget)
    assert v.level == COMPILED and is_declined(v.reason), v.describe()
    assert [s.check for s in v.skipped] == [EXECUTED_CHECK, REGION_CHECK]
    assert all("30 s budget (--validate-seconds) was spent (35 s so far)" in s.reason for s in v.skipped)
    assert "\n" not in "".join(s.describe() for s in v.skipped)
    assert "no region check: the validation phase's 30 s budget" in v.reason
    assert v.budget_seconds == 30
    # the same pair with time left is executed whole: the budget made the difference
    ran = establish(pipeline, DEFAULT, SAME, finals=(DEFAULT, SAME), budget=frozen(30, spent=0))
    assert ran.level == EXECUTED and ran.skipped == (), ran.describe()


def test_an_execution_estimated_past_twice_the_budget_is_skipped_before_it_runs(pipeline):
    """The whole execution's own estimate (XLA's cost analysis, the longer of the two modules) against
    the phase's cap (twice the budget): a budget of a quarter of the estimate, nearly spent, skips it
    (the region, far cheaper, runs instead); a budget of the estimate itself lets it run."""
    plan = execution_plan(pipeline, DEFAULT, SAME, pipeline.parameter_specs(DEFAULT), bound_seconds=30)
    assert plan.fits and plan.estimate_seconds is not None and plan.estimate_seconds > 0
    estimate = plan.estimate_seconds
    v = establish(pipeline, DEFAULT, SAME, finals=(DEFAULT, SAME), bound_seconds=30,
                  budget=frozen(estimate / 4, spent=0.99 * estimate / 4))
    assert v.skipped and v.skipped[0].check == EXECUTED_CHECK, v.describe()
    assert "the longer module's execution would take ~" in v.skipped[0].reason
    assert "budget (--validate-seconds): past twice the budget" in v.skipped[0].reason
    # the region (microseconds) fits what is left: it runs instead, and says why the whole did not
    assert v.level == EXECUTED_REGION and "not executed: not tried: the longer module's execution" in v.reason
    ran = establish(pipeline, DEFAULT, SAME, finals=(DEFAULT, SAME), bound_seconds=30,
                    budget=frozen(estimate, spent=0))
    assert ran.level == EXECUTED and ran.skipped == (), ran.describe()


def test_a_region_estimated_past_the_cap_or_the_bound_is_not_run(monkeypatch, pipeline):
    """Whole execution declined for memory; the changed region is cut (no compile), then its run's
    estimate is set against the phase's cap and the per-execution bound: not started when it does
    not fit, run when it does."""
    pipeline.execution_rates()  # calibrated (it runs two small modules) before the limit that declines
    region = pipeline.regions(DEFAULT, SAME).regions[0]
    estimate = pipeline.execution_estimate(region.modules()[0])  # 32 bytes in, a few flops: microseconds
    assert estimate is not None and 0 < estimate < 0.01
    monkeypatch.setenv("AUTOTUNE_MAX_EXEC_BYTES", "1M")
    v = establish(pipeline, DEFAULT, SAME, finals=(DEFAULT, SAME),
                  budget=frozen(estimate / 4, spent=0.99 * estimate / 4))
    assert v.level == COMPILED, v.describe()
    assert [s.check for s in v.skipped] == [REGION_CHECK]
    assert v.skipped[0].reason.startswith("region 1 (") and "'s run would take ~" in v.skipped[0].reason
    assert v.skipped[0].reason.endswith("past twice the budget")
    assert "inputs need 16.0 MiB, 1.0 MiB available" in v.reason and "no region check: region 1" in v.reason
    # a region estimated over one execution's bound would be stopped there: not started either
    over = establish(pipeline, DEFAULT, SAME, finals=(DEFAULT, SAME), bound_seconds=estimate / 10,
                     budget=frozen(1000, spent=0))
    assert over.level == COMPILED and [s.check for s in over.skipped] == [REGION_CHECK], over.describe()
    assert "'s run would take ~" in over.skipped[0].reason
    assert "on this machine (bound 0 ms per execution, --validate-seconds)" in over.skipped[0].reason
    ran = establish(pipeline, DEFAULT, SAME, finals=(DEFAULT, SAME), budget=frozen(30, spent=0))
    assert ran.level == EXECUTED_REGION and ran.skipped == (), ran.describe()


def test_a_run_shares_one_budget_and_reports_the_phase_total_beside_it(tmp_path):
    """``autotune run`` (real CLI, real DLRM train step): with a budget too small for anything the
    executions and the memory comparison are skipped, said in the JSON and in the report, and the
    validation phase's total is printed beside the budget."""
    model = "tests/data/real/xla_dlrm_train_step.hlo"
    args = ("run", "--strategy", "random", "--budget", "3", "--seed", "0", model, "--validate-seconds", "0.001")
    proc = run_cli(*args, "--json", db=tmp_path / "c.db")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    v = Validation.from_dict(data["validity"])
    assert v.level == COMPILED and v.budget_seconds == 0.001, v.describe()
    checks = [s.check for s in v.skipped]
    assert checks[-2:] == [REGION_CHECK, MEMORY_CHECK], checks
    # the whole execution: skipped as spent, or (when a millisecond was left) declined by its estimate
    assert checks[:-2] == [EXECUTED_CHECK] or "execution would take ~" in v.reason, v.describe()
    assert data["memory"] is None and "validation" in data["phases"]
    text = run_cli(*args, db=tmp_path / "c.db")  # the same cache: its search is all hits
    assert text.returncode == 0, text.stderr
    out = " ".join(text.stdout.split())  # rich wraps long lines
    assert "validation: compiled in " in out and " s (budget 0.001 s): whole execution declined" in out
    assert "memory check skipped: comparing memory (a full compile of the original) would take ~" in out
    assert "past twice the budget" in out  # timed by the tuned module's compile: past the 2 ms cap


def test_skips_and_the_budget_survive_the_stored_result():
    v = Validation(COMPILED, "why", skipped=(Skip(REGION_CHECK, "spent"),), budget_seconds=30.0)
    back = Validation.from_dict(json.loads(json.dumps(v.to_dict())))
    assert back == v and back.skipped[0].describe() == "executed-region check skipped: spent"
    old = {"level": "compiled", "ok": True, "reason": "why", "stand_ins": 0, "report": None}
    assert Validation.from_dict(old) == Validation(COMPILED, "why")  # stored before the budget existed


def test_a_run_is_bounded_by_the_phase_cap_only_late_in_the_phase():
    """One run's bound: the per-execution bound while the cap (twice the budget) is farther, what is
    left of the cap after that, nothing once it is reached; nothing starts once the budget is spent,
    except a late check whose estimate ends within the cap (the memory comparison)."""
    assert frozen(30, spent=5).run_bound(30) == 30 and frozen(30, spent=50).run_bound(30) == 10
    assert frozen(30, spent=70).run_bound(30) == 0 and frozen(30, spent=70).run_bound(None) is None
    late = frozen(30, spent=40)
    assert late.refuse(EXECUTED_CHECK, estimate=1) is not None  # spent: not started, however short
    assert late.refuse(MEMORY_CHECK, estimate=5, late=True) is None  # ends at 45 s, within 60 s
    skip = late.refuse(MEMORY_CHECK, estimate=25, what="comparing memory", late=True)
    assert skip is not None and skip.reason.endswith("past twice the budget") and "~25 s, 40 s into" in skip.reason
    assert late.refuse(MEMORY_CHECK, late=True) is not None  # no estimate: as any other check
    assert [s.check for s in late.skipped] == [EXECUTED_CHECK, MEMORY_CHECK, MEMORY_CHECK]
