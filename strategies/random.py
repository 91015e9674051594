"""Random search: uniform sequences of uniform random length up to the maximum.

With compiler options in the space (``--space options|both``), each candidate also draws an option set
(``SearchSpace.random_options``: about 1.5 options changed, each to a uniform value): most options leave
a module alone or slow it down, so a draw that changed every one at once would say little.

The baseline every other strategy must beat at equal budget; also the strategy whose evaluations
parallelise perfectly (a whole batch is independent).
"""

from __future__ import annotations

import random

from autotune.core.options import CompilerOptions
from autotune.strategy import AskTellStrategy, SearchSpace


class RandomSearch(AskTellStrategy):
    name = "random"
    description = "uniform random sequences of random length (baseline)"
    options_by = "random draws beside the sequence (about 1.5 options changed per candidate)"
    #: Nothing is learned between batches, so a large batch costs nothing and keeps every worker
    #: busy while the slowest sequence of a batch finishes (bench: 2 workers 1.39x -> 1.77x over 1).
    batch_size = 16

    def setup(self, space: SearchSpace, seed: int, budget: int) -> None:
        self.space = space
        self.rng = random.Random(seed)
        self._drawn = 0

    def ask(self, n: int) -> list[tuple]:
        return [(self.space.random_sequence(self.rng), self._options()) for _ in range(n)]

    def _options(self) -> CompilerOptions:
        """A random option set; with a warm start (``Strategy.warm``: the screen's best), the first draw is
        that set itself (beside a random order) and every other draw after it that set with a random draw on
        top (the order and one or two options tried around it)."""
        drawn = self.space.random_options(self.rng)
        self._drawn += 1
        if self.start is None or not self.start.options or self._drawn % 2 == 0:
            return drawn
        return self.start.options if self._drawn == 1 else self.start.options.merged(drawn)

    def sequence_of(self, candidate) -> tuple[str, ...]:
        return candidate[0]

    def options_of(self, candidate) -> CompilerOptions:
        return candidate[1]

    def tell(self, candidate, cost: float) -> None:
        pass
