"""Tools for plugin authors: check a strategy against the contract in seconds, without a compiler.

optuna runs every sampler's contract tests against a cheap objective in milliseconds; this is the
same idea. ``FakeEvaluate`` is an ``Evaluate`` over a synthetic landscape (a hidden target sequence:
cost = passes missing from it + a small length penalty; a "poison" pass fails the sequence), with
the tuner's budget accounting. ``check_strategy`` runs a strategy on it twice and asserts what every
strategy owes the tuner: it spends exactly the budget, stays inside the search space, and is
deterministic under its seed. The real-compiler contract tests (``tests/test_strategies.py``) stay;
this is the fast first check. ``autotune.testing.toy`` is a whole toy compiler backend.

    from autotune.testing import check_strategy
    check_strategy("my-strategy")          # raises AssertionError with what went wrong
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from autotune.strategy import BudgetExhausted, Evaluate, SearchSpace, Strategy, Trial, create
from autotune.core.metrics import Metrics

ACTIONS = tuple(f"pass{i:02d}" for i in range(24))
POISON = "pass23"


class FakeEvaluate(Evaluate):
    """A synthetic ``Evaluate`` with exact budget accounting (no compiler, no cache)."""

    def __init__(self, space: SearchSpace, budget: int, seed: int = 0):
        self.space = space
        self.budget = budget
        rng = random.Random(seed)
        self.target = tuple(rng.choice(space.actions[:-1]) for _ in range(min(4, space.max_length)))
        self.trials: list[Trial] = []

    def cost_of(self, sequence: tuple[str, ...]) -> tuple[float, bool]:
        if POISON in sequence:
            return self.failure_cost, False
        missing = sum(1 for p in self.target if p not in sequence)
        return missing + 0.01 * len(sequence), True

    def __call__(self, sequence: Sequence[str]) -> float:
        return self.many([sequence])[0]

    def many(self, sequences: Sequence[Sequence[str]]) -> list[float]:
        if self.remaining <= 0:
            raise BudgetExhausted()
        take = [tuple(s) for s in sequences[: self.remaining]]
        costs = []
        for seq in take:
            if not all(p in self.space.actions for p in seq) or not 1 <= len(seq) <= self.space.max_length:
                raise AssertionError(f"strategy asked for a sequence outside the search space: {seq}")
            cost, ok = self.cost_of(seq)
            self.trials.append(Trial(seq, cost, ok))
            costs.append(cost)
        if len(take) < len(sequences):
            raise BudgetExhausted()
        return costs

    @property
    def remaining(self) -> int:
        return self.budget - len(self.trials)

    @property
    def failure_cost(self) -> float:
        return 100.0

    @property
    def history(self) -> list[Trial]:
        return list(self.trials)

    @property
    def empty_cost(self) -> float:
        return float(len(self.target))

    @property
    def input_metrics(self):
        """Metrics of the synthetic module as it is (learning strategies read module features)."""
        return Metrics(instructions=100, flops=1e6, transcendentals=1e3, bytes_accessed=1e5,
                       opcodes=(("add", 60), ("multiply", 40)))

    def metrics(self, sequence: Sequence[str]):
        """Metrics after ``sequence``: every target pass present removes ten instructions."""
        from dataclasses import replace

        found = sum(1 for p in self.target if p in tuple(sequence))
        m = self.input_metrics
        return replace(m, instructions=m.instructions - 10 * found, opcodes=(("add", 60 - 10 * found), ("multiply", 40)))


def run_fake(strategy: str | Strategy, budget: int = 60, seed: int = 0, max_length: int = 6,
             options: dict | None = None) -> FakeEvaluate:
    """Run one strategy on the fake landscape; returns the evaluate (its ``trials``)."""
    strat = create(strategy, **(options or {})) if isinstance(strategy, str) else strategy
    space = SearchSpace(ACTIONS, max_length)
    evaluate = FakeEvaluate(space, budget, seed)
    try:
        strat.minimize(evaluate, space, seed)
    except BudgetExhausted:
        pass
    return evaluate


def check_strategy(strategy: str | Strategy, budget: int = 60, seed: int = 0, options: dict | None = None) -> None:
    """Assert the strategy contract on the fake landscape (AssertionError says what failed).

    ``strategy`` is a registered name (a fresh instance per run) or an instance (reused).
    """
    name = strategy if isinstance(strategy, str) else type(strategy).__name__
    first = run_fake(strategy, budget, seed, options=options)
    assert len(first.trials) == budget, (
        f"{name}: spent {len(first.trials)} of a budget of {budget} evaluations (must spend it exactly)")
    again = run_fake(strategy, budget, seed, options=options)
    assert [t.sequence for t in again.trials] == [t.sequence for t in first.trials], (
        f"{name}: not deterministic under seed {seed}")
    best = min(t.cost for t in first.trials)
    assert math.isfinite(best), f"{name}: no finite cost found"
