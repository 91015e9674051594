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
from autotune.core.options import EMPTY, CompilerOptions, OptionDim

ACTIONS = tuple(f"pass{i:02d}" for i in range(24))
POISON = "pass23"
#: Compiler options of the fake landscape (``--space options|both``): the last value of the first one is
#: worth a whole pass of the hidden target; ``crash`` fails the candidate, as an option that kills XLA would.
OPTION_DIMS = (OptionDim("opt_fusion", ("none", "dot", "reduce")), OptionDim("opt_width", ("128", "256", "512")),
               OptionDim("opt_crash", ("crash",)))
#: Evaluations every strategy must spend with the fake options alone (its 32 option sets, of which a
#: coordinate descent with restarts reaches at least this many).
OPTION_POINTS = 20


class FakeEvaluate(Evaluate):
    """A synthetic ``Evaluate`` with exact budget accounting (no compiler, no cache)."""

    def __init__(self, space: SearchSpace, budget: int, seed: int = 0):
        self.space = space
        self.budget = budget
        rng = random.Random(seed)
        self.target = tuple(rng.choice(space.actions[:-1]) for _ in range(min(4, space.max_length)))
        self.trials: list[Trial] = []

    def cost_of(self, sequence: tuple[str, ...], options: CompilerOptions = EMPTY) -> tuple[float, bool]:
        if POISON in sequence or "opt_crash" in options.names:
            return self.failure_cost, False
        missing = sum(1 for p in self.target if p in self.space.actions and p not in sequence) if self.space.passes else 0
        if self.space.options:
            name, best = self.space.options[0].name, self.space.options[0].values[-1]
            missing += 0 if options.as_dict().get(name) == best else 1
        return missing + 0.01 * len(sequence) + 0.001 * len(options), True

    def __call__(self, sequence: Sequence[str], options: CompilerOptions | None = None) -> float:
        return self.many([sequence], None if options is None else [options])[0]

    def many(self, sequences: Sequence[Sequence[str]], options: Sequence[CompilerOptions] | None = None) -> list[float]:
        if self.remaining <= 0:
            raise BudgetExhausted()
        take = [tuple(s) for s in sequences[: self.remaining]]
        opts = [EMPTY] * len(take) if options is None else [CompilerOptions.of(o) for o in list(options)[: len(take)]]
        costs = []
        for seq, opt in zip(take, opts):
            self._check(seq, opt)
            cost, ok = self.cost_of(seq, opt)
            self.trials.append(Trial(seq, cost, ok, opt))
            costs.append(cost)
        if len(take) < len(sequences):
            raise BudgetExhausted()
        return costs

    def _check(self, seq: tuple[str, ...], opt: CompilerOptions) -> None:
        space = self.space
        if space.passes and (not all(p in space.actions for p in seq) or not 1 <= len(seq) <= space.max_length):
            raise AssertionError(f"strategy asked for a sequence outside the search space: {seq}")
        if not space.passes and seq:
            raise AssertionError(f"strategy asked for a sequence {seq} where only compiler options are searched")
        dims = {d.name: d for d in space.options}
        for name, value in opt.items:
            if name not in dims or value not in dims[name].values:
                raise AssertionError(f"strategy asked for a compiler option outside the search space: {name}={value}")

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
        return self.cost_of(())[0] if not self.space.passes or self.space.options else float(len(self.target))

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
             options: dict | None = None, space: str = "passes") -> FakeEvaluate:
    """Run one strategy on the fake landscape; returns the evaluate (its ``trials``). ``space``: what is
    searched, as ``autotune run --space`` says it (``options`` and ``both`` add ``OPTION_DIMS``)."""
    strat = create(strategy, **(options or {})) if isinstance(strategy, str) else strategy
    space = SearchSpace(ACTIONS, max_length, options=OPTION_DIMS if space != "passes" else (),
                        passes=space != "options")
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
    for space in ("passes", "both", "options"):  # the pass order alone, with compiler options, options alone
        spend = budget if space != "options" else min(budget, OPTION_POINTS)  # options alone: a small space
        first = run_fake(strategy, spend, seed, options=options, space=space)
        assert len(first.trials) == spend, (
            f"{name}: spent {len(first.trials)} of a budget of {budget} evaluations with --space {space} (must "
            f"spend {spend})")
        again = run_fake(strategy, spend, seed, options=options, space=space)
        assert [(t.sequence, t.options) for t in again.trials] == [(t.sequence, t.options) for t in first.trials], (
            f"{name}: not deterministic under seed {seed} with --space {space}")
    best = min(t.cost for t in first.trials)
    assert math.isfinite(best), f"{name}: no finite cost found"
