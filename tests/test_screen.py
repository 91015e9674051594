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
from autotune.core import stats
from autotune.core.stats import RatioEvidence
from autotune.core.tuner import tune
from autotune import strategy as strategy_mod
from autotune.strategy import BudgetExhausted, Evaluate, SearchSpace, Trial

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
    result = tune(engine, load(MLP), objective=_quick(), spec=RunSpec(sites=0, 
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
    result = tune(engine, load(MLP), objective=_quick(), spec=RunSpec(sites=0, 
        strategy="random", budget=2, objective="runtime", space="options", seed=33, validate=False, screen=False))
    assert "screen" not in (result.search_notes or {}) and "screen" not in dict(result.phases)
    trials = RunStore(engine.cache).trials(result.run_id)
    assert len(trials) == 2 and [t.options for t in trials] != SINGLES[:2]  # random's own draws
    done = run_cli("run", "--help")
    assert done.returncode == 0 and "--no-screen" in done.stdout


def test_sequential_confirmation_joins_real_rounds(engine):
    """``Runtime.extend`` times more interleaved rounds of a measured candidate and joins them to its
    search-time measurement: the evidence's rounds grow by exactly what was asked; a screen's measurement
    that straddles its bar is extended before it is cached, within the cap."""
    root = engine.prepare(load(MLP))
    obj = Runtime(race=False, search_rounds=4)
    ctx = ObjectiveContext(engine, root, engine.default(root), seed=34).with_options(SINGLES[3])
    assert math.isfinite(obj.cost(root.fingerprint, ctx))
    before = obj.evidence(root.fingerprint, ctx)
    assert before.rounds == 4 and before.low is None and before.extended == 0  # too few for a 95% interval
    report = obj._report(root.fingerprint, ctx)
    joined = obj.extend(ctx, ctx.candidate(root.fingerprint), report, 4)
    assert len(joined["ratios"]) == 8 and joined["extended"] == 4 and joined["ratios"][:4] == report["ratios"]
    after = obj._evidence(joined)
    assert after.low is not None and after.low <= after.ratio <= after.high

    # during a screen: four rounds never decide at 95%, so the candidate straddles and is extended
    screening = ObjectiveContext(engine, root, engine.default(root), seed=35)
    screening.shared["screening"] = {"bar": 0.98, "rounds": 4, "extensions": 2}
    view = screening.with_options(SINGLES[2])
    obj.cost(root.fingerprint, view)
    found = obj.evidence(root.fingerprint, view)
    assert found.extended in (4, 8) and found.rounds == 4 + found.extended
    assert found.extended == 8 or not found.straddles(0.98)  # it stops only at the cap or once decided


@pytest.mark.parametrize("settles, calls, paid", [(None, 2, False), (1, 1, True), (0, 0, False)])
def test_a_straddler_is_timed_further_up_to_the_cap(settles, calls, paid):
    """``stats.sequential``: more rounds while the interval straddles the bar, never past the cap (the
    rounds already added, e.g. by an earlier run, count)."""
    asked = []

    def more(rounds):
        asked.append(rounds)
        extended = rounds * len(asked)
        if settles is not None and len(asked) >= settles:
            return RatioEvidence(0.95, 0.93, 0.97, 16 + extended, extended=extended)
        return RatioEvidence(0.97, 0.9, 1.05, 16 + extended, extended=extended)

    start = (RatioEvidence(0.97, 0.9, 1.05, 16) if settles != 0
             else RatioEvidence(0.97, 0.9, 1.05, 48, extended=32))  # already extended to the cap
    found = stats.sequential(start, more, 0.98, 16, 2)
    assert asked == [16] * calls and found.paid(0.98) == paid
    assert found.extended <= 32


class _Synthetic(Evaluate):
    """A budget over a synthetic cost (the warm start's options cost 50, anything else 100): strategies are
    real, the compiler is not needed to see where they start."""

    def __init__(self, budget: int, good: CompilerOptions, history: list[Trial]):
        self.left, self.good, self.trials = budget, good, list(history)

    def __call__(self, sequence, options=None):
        return self.many([sequence], None if options is None else [options])[0]

    def many(self, sequences, options=None):
        if self.left <= 0:
            raise BudgetExhausted()
        options = list(options or [CompilerOptions()] * len(sequences))[: self.left]
        costs = [50.0 if all(o.as_dict().get(k) == v for k, v in self.good.items) else 100.0 for o in options]
        self.trials += [Trial(tuple(s), c, True, o) for s, c, o in zip(sequences, costs, options)]
        self.left -= len(options)
        if len(options) < len(sequences):
            raise BudgetExhausted()
        return costs

    remaining = property(lambda self: self.left)
    failure_cost = property(lambda self: 1e9)
    history = property(lambda self: list(self.trials))
    empty_cost = property(lambda self: 100.0)


@pytest.mark.parametrize("name", ["random", "nevergrad", "optuna", "greedy"])
def test_every_strategy_starts_from_the_screens_best(name):
    """``Strategy.warm``: the screen's best option set is among the strategy's first candidates (with the
    pass order searched beside it), and the screened point itself is never paid for again."""
    space = SearchSpace(("dce", "cse", "algsimp"), 2, options=DIMS)
    good = SINGLES[3]
    screened = [Trial((), 100.0, True, o) for o in SINGLES[:3]] + [Trial((), 50.0, True, good)]
    evaluate = _Synthetic(6, good, screened)
    strat = strategy_mod.create(name)
    strat.warm(screened[-1])
    try:
        strat.minimize(evaluate, space, seed=3)
    except BudgetExhausted:
        pass
    fresh = evaluate.trials[len(screened):]
    assert fresh and any(t.options.as_dict().get(DIMS[1].name) == "256" for t in fresh[:4]), fresh
    assert ((), good) not in [(t.sequence, t.options) for t in fresh]


def test_the_screens_best_is_confirmed_first():
    """A strategy's candidate ranked above the screen's best on one raced median is often the luckier draw:
    the screen's best (its interval below the bar) is the first candidate validated and confirmed."""
    from autotune.core.runs import TrialRecord
    from autotune.core.tuner import _screened_first

    screened = TrialRecord(0, (), 90.0, "ok", "s", False, None, SINGLES[0])
    lucky = TrialRecord(1, ("dce",), 80.0, "ok", "t", False, None, SINGLES[2])
    assert _screened_first([lucky, screened], Trial((), 90.0, True, SINGLES[0])) == [screened, lucky]
    assert _screened_first([lucky, screened], None) == [lucky, screened]
