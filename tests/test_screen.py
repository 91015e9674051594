"""The screen (``core/screen.py``): before a runtime search's strategy, every single option value is raced
against XLA's default, in the budget; a straddling one is timed further, within a cap; ``--no-screen``
skips it. Real XLA on the small ``mlp_train_step`` with a space of two options (four values), except the
cap's rule, which is checked on evidence built to straddle (real timings straddle only by chance)."""

from __future__ import annotations

import json
import math

import pytest

from autotune.core import screen as screen_mod
from autotune.core.module import load
from autotune.core.objectives import ObjectiveContext
from autotune.core.objectives.runtime import Runtime
from autotune.core.options import CompilerOptions, OptionDim
from autotune.core.runs import RunStore
from autotune.core.spec import RunSpec
from autotune.core.stats import RatioEvidence
from autotune.core.tuner import tune
from autotune.strategy import BudgetExhausted, Evaluate, SearchSpace
from conftest import DATA, run_cli

MLP = DATA / "mlp_train_step.hlo"
DIMS = (OptionDim("xla_cpu_use_xnnpack", ("True", "False")), OptionDim("xla_cpu_prefer_vector_width", ("128", "256")))
SINGLES = [CompilerOptions.of({d.name: v}) for d in DIMS for v in d.values]


def _quick() -> Runtime:
    """The runtime objective with short samples and few rounds: what is checked here is what gets timed,
    not how fast it is (the screen's own extensions keep their size)."""
    return Runtime(rounds=4, search_rounds=4, search_min_seconds=0.002, confirm_min_seconds=0.002, replicate=False)


@pytest.fixture
def two_options(engine, monkeypatch):
    monkeypatch.setattr(engine.pipeline, "option_space", lambda numerics=False, partitioned=False: DIMS)


def test_the_screen_races_every_single_value_first_within_the_budget(engine, two_options):
    """Budget 6: the four singles fit in two thirds of it, so they are the run's first four trials, each on the
    empty sequence; the strategy spends the rest (random spends all), and the notes say what was screened."""
    result = tune(engine, load(MLP), objective=_quick(), spec=RunSpec(
        strategy="random", budget=6, objective="runtime", space="options", seed=31, validate=False))
    trials = RunStore(engine.cache).trials(result.run_id)
    assert len(trials) == 6 == result.evaluations  # the screen's candidates are counted in the budget
    assert [t.options for t in trials[:4]] == SINGLES and all(t.sequence == () for t in trials[:4])
    notes = result.search_notes["screen"]
    assert notes["singles"] == 4 and notes["screened"] == 4 and notes["left_out"] == 0
    assert notes["evaluations"] == 4 + notes["combined"] and notes["evaluations"] <= 6
    assert [CompilerOptions.of(p["options"]) for p in notes["probes"][:4]] == SINGLES
    assert all(p["extra_rounds"] <= screen_mod.EXTRA_ROUNDS * screen_mod.MAX_EXTENSIONS for p in notes["probes"])
    assert result.phases[[name for name, _ in result.phases].index("screen") + 1][0] == "search"
    json.dumps(result.to_dict())  # the notes travel with the result


def test_a_small_budget_screens_what_fits_and_leaves_the_strategy_room():
    """Two thirds of the budget at most (ResNet-50's 51 values at budget 30: 20), all when they fit."""
    assert screen_mod.affordable(30, 51) == 20 and screen_mod.affordable(200, 51) == 51
    assert screen_mod.affordable(6, 4) == 4 and screen_mod.affordable(3, 4) == 2
    assert screen_mod.affordable(1, 51) == 0 and screen_mod.affordable(2, 1) == 1


def test_no_screen_skips_it(engine, two_options):
    result = tune(engine, load(MLP), objective=_quick(), spec=RunSpec(
        strategy="random", budget=2, objective="runtime", space="options", seed=33, validate=False, screen=False))
    assert "screen" not in (result.search_notes or {}) and "screen" not in dict(result.phases)
    trials = RunStore(engine.cache).trials(result.run_id)
    assert len(trials) == 2 and [t.options for t in trials] != SINGLES[:2]  # random's own draws
    done = run_cli("run", "--help")
    assert done.returncode == 0 and "--no-screen" in done.stdout


def test_sequential_confirmation_joins_real_rounds(engine):
    """``Runtime.extend`` times more interleaved rounds of a measured candidate and joins them to its
    search-time measurement: the evidence's rounds grow by exactly what was asked, the cached report too."""
    root = engine.prepare(load(MLP))
    obj = Runtime(race=False, search_rounds=4)
    ctx = ObjectiveContext(engine, root, engine.default(root), seed=34).with_options(SINGLES[3])
    cost = obj.cost(root.fingerprint, ctx)
    assert math.isfinite(cost)
    before = obj.evidence(root.fingerprint, ctx)
    assert before.rounds == 4 and before.low is None  # four rounds: too few for a 95% interval
    after = obj.extend(root.fingerprint, ctx, 4)
    assert after.rounds == 8 and after.low is not None and after.low <= after.ratio <= after.high
    assert obj.evidence(root.fingerprint, ctx) == after  # kept: a resumed run reads the joined figure


class _Budget(Evaluate):
    """A run's budget over a fixed cost per option set (the cap's rule only; no compiler here)."""

    def __init__(self, budget: int, costs: dict):
        self.left, self.costs, self.asked = budget, costs, []

    def __call__(self, sequence, options=None):
        return self.many([sequence], [options])[0]

    def many(self, sequences, options=None):
        if self.left <= 0:
            raise BudgetExhausted()
        self.left -= len(sequences)
        self.asked += list(options)
        return [self.costs.get(o, 100.0) for o in options]

    remaining = property(lambda self: self.left)
    failure_cost = property(lambda self: 1e9)
    history = property(lambda self: [])
    empty_cost = property(lambda self: 100.0)


class _Straddling:
    """Evidence that straddles 0.98 until ``settles`` extensions, then pays (``None``: never settles)."""

    def __init__(self, settles: int | None):
        self.settles, self.extensions = settles, []

    def evidence(self, options):
        return RatioEvidence(0.97, 0.9, 1.05, 16)

    def extend(self, options, rounds):
        self.extensions.append(rounds)
        if self.settles is not None and len(self.extensions) >= self.settles:
            return RatioEvidence(0.95, 0.93, 0.97, 16 + rounds * len(self.extensions))
        return RatioEvidence(0.97, 0.9, 1.05, 16 + rounds * len(self.extensions))


@pytest.mark.parametrize("settles, extensions, paid", [(None, 2, False), (1, 1, True)])
def test_a_straddler_is_timed_further_up_to_the_cap(settles, extensions, paid):
    space = SearchSpace(("dce",), 1, options=DIMS[:1])
    judge = _Straddling(settles)
    done = screen_mod.screen(_Budget(10, {o: 97.0 for o in SINGLES[:2]}), space, judge, 0.98, 100.0,
                             max_extensions=2, extra_rounds=16)
    assert judge.extensions == [16] * extensions * 2  # both values, each at most the cap
    assert all(p.extra_rounds == 16 * extensions for p in done.probes)
    assert (done.best is not None) == paid and len(done.paid) == (2 if paid else 0)
