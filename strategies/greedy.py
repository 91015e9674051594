"""Greedy construction: the classic compiler-autotuning baseline.

Start from the empty sequence, whose cost is known for free (``Evaluate.empty_cost``: the module
as it is, i.e. XLA's default ordering under the final-ops objective). At each position, score
appending every action to the current sequence (one ``evaluate.many`` call over the whole
candidate batch, so the workers compile the extensions in parallel) and take the best
extension; ties go to the first action in the search space's order, so a run is deterministic
(the seed is not used).

A position *improves* when its best extension is strictly cheaper than the best cost so far
(initially the empty sequence's). After ``patience`` positions in a row without improvement the
search stops; while patience remains, the best (non-improving) extension is still kept so that
a later position can build on it (a pass that only pays off after another one). The search also
stops at ``max_length``, or when ``evaluate.many`` raises ``BudgetExhausted`` (the tuner catches
it). Each position costs ``len(actions)`` evaluations.

Restarts (``restarts=True``, the default): when a descent stops with budget left, greedy starts
again from the cheapest evaluated prefix it has not descended from yet (ties: earliest). Plain
greedy commits to its first choice forever (on the DLRM module it takes ``algsimp`` first and never
sees ``call-inliner,algsimp``); restarting from the runners-up spends the rest of the budget on the
next most promising branches instead of stopping early. ``restarts=False`` is the textbook
algorithm, which may finish before its budget is spent.

Compiler options (``SearchSpace.options``, ``--space options|both``): after the sequence (without
restarts, which would spend the whole budget on sequences), coordinate descent over the options: each in
turn tried at every value with the others held, the best kept, sweeps until one changes nothing.

Options: ``patience`` (int >= 1, default 1), ``restarts`` (bool, default true).
"""

from __future__ import annotations

from autotune.core.options import EMPTY, CompilerOptions
from autotune.errors import BadInput
from autotune.strategy import Evaluate, SearchSpace, Strategy, coordinate_descent, finite, positive_int


class GreedySearch(Strategy):
    name = "greedy"
    description = "append the best pass at each position until no improvement (classic baseline)"
    options_by = "coordinate descent after the sequence"

    def __init__(self, patience: int = 1, restarts: bool = True, **rest):
        super().__init__(**rest)
        positive_int("greedy", "patience", patience)
        if not isinstance(restarts, bool):
            raise BadInput(f"greedy: restarts must be true or false, not {restarts!r}")
        self.patience = patience
        self.restarts = restarts

    def minimize(self, evaluate: Evaluate, space: SearchSpace, seed: int) -> None:
        # A warm start (the screen's best option set, ``Strategy.warm``): the order is built under its options,
        # and the options' descent begins from them.
        options = self.start.options if self.start is not None and space.options else EMPTY
        sequence, cost = (), self.start.cost if options else evaluate.empty_cost
        if space.passes:
            # With options to search after it, no restarts: they would spend the whole budget on sequences.
            sequence, cost = self._sequences(evaluate, space, self.restarts and not space.options, options, cost)
        if space.options:
            coordinate_descent(evaluate, space, sequence, cost, options)

    def _sequences(self, evaluate: Evaluate, space: SearchSpace, restarts: bool, options: CompilerOptions = EMPTY,
                   empty: float | None = None) -> tuple[tuple[str, ...], float]:
        """Greedy construction (with restarts) under ``options`` (``empty``: the cost of the empty sequence
        with them); the best sequence found and its cost."""
        self._options = options
        best_cost = empty = evaluate.empty_cost if empty is None else empty
        scored: dict[tuple[str, ...], tuple[float, int]] = {}  # prefix -> (cost, order evaluated)
        expanded: set[tuple[str, ...]] = set()
        start: tuple[str, ...] | None = ()
        while start is not None:
            best_cost = self._descend(start, best_cost, evaluate, space, scored, expanded)
            if not restarts:
                break
            frontier = [(c, o, p) for p, (c, o) in scored.items() if p not in expanded and len(p) < space.max_length]
            start = min(frontier)[2] if frontier else None
        cost, _, best = min(((c, o, p) for p, (c, o) in scored.items()), default=(empty, 0, ()))
        return (best, cost) if cost < empty else ((), empty)

    def _descend(self, current, best_cost, evaluate, space, scored, expanded) -> float:
        stale = 0  # positions in a row without improvement
        while len(current) < space.max_length:
            expanded.add(current)
            candidates = [current + (action,) for action in space.actions]
            opts = [self._options] * len(candidates) if self._options else None
            costs = evaluate.many(candidates, opts)  # raises BudgetExhausted when spent
            costs = [finite(c, evaluate.failure_cost) for c in costs]
            for cand, cost in zip(candidates, costs):
                scored.setdefault(cand, (cost, len(scored)))
            k = min(range(len(costs)), key=lambda i: (costs[i], i))  # first in action order on ties
            current = candidates[k]
            if costs[k] < best_cost:
                best_cost = costs[k]
                stale = 0
            else:
                stale += 1
                if stale >= self.patience:
                    break
        return best_cost
