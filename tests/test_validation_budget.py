"""The validation phase's time budget (``--validate-seconds`` for the phase as a whole, issue 53).

Real XLA throughout, nothing mocked: the modules are made here and the verdicts come from the real
chain of checkers. No test times anything: each asserts on the decisions (which check was skipped,
why, what level that leaves). A spent budget or a given time left is made deterministic by handing
``PhaseBudget`` a clock that stands still (its ``clock`` argument), never by waiting.
"""

from __future__ import annotations

import json

import pytest

from autotune.core import precision
from autotune.core.checks.budget import EXECUTED_CHECK, MEMORY_CHECK, REGION_CHECK, PhaseBudget
from autotune.core.levels import Skip, Validation
from autotune.core.loop import PRUNE_SECONDS, prune
from autotune.core.module import Module
from autotune.core.outputs import compare_outputs
from autotune.core.precision import Stopped
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


@pytest.mark.slow
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


# ---- the f32 second opinion of a bf16/f16 region difference, within the phase's cap -----------------
def narrow_module(y: str, name: str) -> Module:
    """16 MiB of f32 inputs (``w``, reduced: whole execution declined under a 1 MiB limit) and a bf16
    value ``y`` of ``a``, ``b`` that the two variants round differently."""
    return text_module(f"""HloModule m
%add (p: f32[], q: f32[]) -> f32[] {{
  %p = f32[] parameter(0)
  %q = f32[] parameter(1)
  ROOT %s = f32[] add(%p, %q)
}}

ENTRY %main (w: f32[2048,2048], a: bf16[256], b: bf16[256]) -> (bf16[256], f32[2048]) {{
  %w = f32[2048,2048] parameter(0)
  %a = bf16[256] parameter(1)
  %b = bf16[256] parameter(2)
  %c = bf16[] constant(64)
  %cb = bf16[256] broadcast(%c), dimensions={{}}
  {y}
  %z = f32[] constant(0)
  %r = f32[2048] reduce(%w, %z), dimensions={{0}}, to_apply=%add
  ROOT %t = (bf16[256], f32[2048]) tuple(%y, %r)
}}
""", name)


#: XLA's default side rounds a*b + 64 to bf16 (ulp 0.5) before subtracting 64; the tuned side computes
#: a*b in f32 and rounds once: the same math, beyond bf16 tolerance of each other, no worse than the
#: default against f32 (``test_precision``'s region case, here inside a module the region check cuts).
ROUNDED = narrow_module("%m = bf16[256] multiply(%a, %b)\n  %s = bf16[256] add(%m, %cb)\n"
                        "  %y = bf16[256] subtract(%s, %cb)", "rounded")
ONCE = narrow_module("%af = f32[256] convert(%a)\n  %bf = f32[256] convert(%b)\n"
                     "  %mf = f32[256] multiply(%af, %bf)\n  %y = bf16[256] convert(%mf)", "once")


class SpentAfter:
    """A clock that stands at 0 for its first ``reads`` reads and at ``then`` after: the budget runs out
    at a chosen point of the chain (deterministic, no waiting; a read is one question the chain asks)."""

    def __init__(self, reads: int, then: float):
        self.left, self.then, self.reads = reads, then, 0

    def __call__(self) -> float:
        self.reads += 1
        self.left -= 1
        return 0.0 if self.left >= 0 else self.then


def test_the_second_opinions_runs_get_what_is_left_of_the_cap_and_none_starts_once_spent():
    """Each reference run (its compile included) gets what is left until twice the budget, an extra
    draw that or one execution's bound; once the budget is spent nothing starts: one skip line, and
    ``Stopped`` (no verdict) for the caller."""
    timeout = frozen(30, spent=10).second_opinion_timeout(REGION_CHECK, "region 2's f32 second opinion:", draw=30)
    assert timeout("the f32 reference run (seed 0)", True) == 50 and timeout("the extra draw (seed 1)", False) == 30
    late = frozen(30, spent=25)  # the cap nearer than a draw's own bound of 40 s
    assert late.second_opinion_timeout(REGION_CHECK, "x:", draw=40)("the extra draw (seed 1)", False) == 35
    spent = frozen(30, spent=31)
    with pytest.raises(Stopped, match=r"the extra draw \(seed 2\) was not started: the validation phase's 30 s"):
        spent.second_opinion_timeout(REGION_CHECK, "region 2's f32 second opinion:", 30)("the extra draw (seed 2)",
                                                                                         False)
    assert [s.describe() for s in spent.skipped] == [
        "executed-region check skipped: region 2's f32 second opinion: the extra draw (seed 2) was not started: "
        "the validation phase's 30 s budget (--validate-seconds) was spent (31 s so far)"]
    # a run of a second opinion begun in time may start late when its estimate (what the first reference
    # run took) ends within the cap, as the memory comparison may; still stopped there
    late_draw = spent.second_opinion_timeout(REGION_CHECK, "region 2's f32 second opinion:", 30)
    assert late_draw("the extra draw (seed 1)", False, 5.0) == 29 and late_draw("the f32 reference run", True, 5.0) == 29
    with pytest.raises(Stopped, match=r"at ~30 s it would end past twice the budget"):
        late_draw("the extra draw (seed 2)", False, 30.0)


def test_a_second_opinion_stopped_halfway_is_no_verdict(pipeline):
    """The real second opinion on a bf16 region difference: accepted with time; with no time left for
    its extra draw it raises ``Stopped`` instead of returning the strict (failed) comparison."""
    both = pipeline.regions(ROUNDED, ONCE).regions[0].modules()[0]
    outs = pipeline.execute(both, seed=0)
    d, t = outs[:len(outs) // 2], outs[len(outs) // 2:]
    strict = compare_outputs(d, t, seed=0)
    assert not strict.ok
    assert precision.second_opinion_paired(pipeline, both, strict, d, t, 0, "normal", 4).ok
    reference_only = lambda what, reference, estimate: 60.0 if reference else 0.0  # noqa: E731
    with pytest.raises(Stopped, match=r"the extra draw \(seed 1\) was not started: no time left"):
        precision.second_opinion_paired(pipeline, both, strict, d, t, 0, "normal", 4, timing=reference_only)


def levels_as_the_budget_runs_out(pipeline, then: float) -> list[Validation]:
    """The region check of ``ROUNDED`` vs ``ONCE`` with the budget's clock at 0 for its first 0, 1, 2, ...
    reads and at ``then`` after (the budget running out at each point of the chain in turn), until a
    point late enough that the whole check ran on a budget not yet spent."""
    verdicts = []
    for reads in range(0, 40):
        budget = PhaseBudget(30, started=0.0, clock=SpentAfter(reads, then))
        verdicts.append(establish(pipeline, ROUNDED, ONCE, finals=(ROUNDED, ONCE), budget=budget))
        if not budget.skipped and verdicts[-1].level == EXECUTED_REGION:
            return verdicts
    raise AssertionError("the clock was read more than 40 times")


def test_a_budget_spent_at_any_point_of_the_region_check_leaves_an_honest_level(monkeypatch, pipeline):
    """The region check of a bf16 difference that needs the second opinion, its budget running out
    at every point of the chain in turn: never ``invalid`` (the modules compute the same math).
    Spent right at the cap, anything not yet started is not (``compiled``, saying why), among them
    the second opinion's extra draw after its reference run; spent at 35 s of 30, a second opinion
    that began in time finishes (its runs end within the cap) and the check reaches ``executed-region``."""
    pipeline.execution_rates()  # calibrated before the limit that declines the whole execution
    monkeypatch.setenv("AUTOTUNE_MAX_EXEC_BYTES", "1M")
    full = establish(pipeline, ROUNDED, ONCE, finals=(ROUNDED, ONCE), budget=frozen(30, spent=0))
    assert full.level == EXECUTED_REGION and "narrow-float rounding" in full.reason, full.describe()
    at_cap = levels_as_the_budget_runs_out(pipeline, then=60 - 1e-9)
    for v in at_cap[:-1]:  # each says why: a skip, or a run stopped at the cap (a rung of the input ladder)
        assert v.level == COMPILED, v.describe()
        assert ("was spent (60 s so far" in v.skipped[-1].reason if v.skipped
                else "was stopped at the validation phase's cap" in v.reason), v.describe()
    halfway = [v for v in at_cap if "its f32 second opinion was stopped: the extra draw (seed 1) was not started"
               in (v.reason or "")]
    assert halfway and "it would end past twice the budget" in halfway[0].skipped[-1].reason, halfway
    late = levels_as_the_budget_runs_out(pipeline, then=35)
    assert {v.level for v in late} == {COMPILED, EXECUTED_REGION}, [v.describe() for v in late]
    assert len([v for v in late if v.level == COMPILED]) < len([v for v in at_cap if v.level == COMPILED])


def test_pruning_stops_at_its_time_limit_keeping_what_it_dropped():
    """``loop.prune`` (the sweep that drops passes that do not help) starts no evaluation once its
    time is up (a run's ``prune`` phase past ``PRUNE_SECONDS``); every removal made before was
    evaluated, so the shorter sequence stands and the passes not tried are kept."""
    tried = []

    def evaluate(candidate):  # every removal keeps the cost: the whole sweep would leave one pass
        tried.append(candidate)
        return candidate, 1.0

    assert prune(("a", "b", "c", "d"), 1.0, evaluate) == (("a",), ("a",), 1.0) and len(tried) == 3
    tried.clear()
    assert prune(("a", "b", "c", "d"), 1.0, evaluate, time_up=lambda: len(tried) >= 2) == (("a", "b"), ("a", "b"), 1.0)
    assert tried == [("a", "b", "c"), ("a", "b")]
    assert prune(("a", "b"), 1.0, evaluate, time_up=lambda: True) == (("a", "b"), None, 1.0)
    assert PRUNE_SECONDS == 30.0
