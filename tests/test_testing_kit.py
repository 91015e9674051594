"""``autotune.testing``: the fast strategy contract check a plugin author runs first."""

from __future__ import annotations

import pytest

from autotune.strategy import Strategy, available
from autotune.testing import check_strategy, run_fake


@pytest.mark.parametrize("strategy", sorted(available()))
def test_every_registered_strategy_passes_the_fast_contract_check(strategy):
    options = {"n_steps": 16, "batch_size": 8} if strategy == "ppo" else None
    check_strategy(strategy, budget=40, options=options)


class StopsEarly(Strategy):
    name = "stops-early"

    def minimize(self, evaluate, space, seed):
        evaluate(space.actions[:1])


class Wanders(Strategy):
    name = "wanders"

    def minimize(self, evaluate, space, seed):
        while True:
            evaluate(("not-a-pass",))


def test_the_check_catches_a_strategy_that_leaves_budget_unspent():
    with pytest.raises(AssertionError, match="spent 1 of a budget of 40"):
        check_strategy(StopsEarly(), budget=40)


def test_the_check_catches_a_strategy_that_leaves_the_search_space():
    with pytest.raises(AssertionError, match="outside the search space"):
        run_fake(Wanders(), budget=5)


def test_the_fake_landscape_rewards_the_hidden_target():
    ev = run_fake("random", budget=200, seed=4, max_length=6)
    assert min(t.cost for t in ev.trials) < ev.empty_cost  # random search finds part of the target
    assert any(not t.ok for t in ev.trials)  # the poison pass fails sequences, like a crashing pass


@pytest.mark.parametrize("strategy", ["greedy", "optuna", "nevergrad"])
def test_strategies_find_the_option_that_pays_on_the_fake_landscape(strategy):
    """With options alone (20 evaluations over 32 option sets), each model-based or systematic strategy
    finds the hidden option value worth a pass and never proposes an option outside the space."""
    ev = run_fake(strategy, budget=20, seed=0, space="options")
    best = min(ev.trials, key=lambda t: t.cost)
    assert best.options.as_dict().get("opt_fusion") == "reduce" and best.sequence == ()
