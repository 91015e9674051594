"""Nevergrad: any optimiser of nevergrad's registry over the fixed-length slot encoding.

Encoding. ``max_length`` slots, each taking a value among the action indices plus ``stop``
(``SearchSpace.stop``); ``SearchSpace.decode`` reads the slots up to the first ``stop``, so one
vector stands for a sequence of any length ``1..max_length``. The slots are one nevergrad
parameter with ``repetitions=max_length``, of one of two kinds (option ``encoding``):

* ``transition`` (default): ``ng.p.TransitionChoice``, one bounded coordinate per slot whose
  integer part is the code. nevergrad's discrete optimisers (``DiscreteOnePlusOne`` and its
  relatives, the portfolios, ``NGOpt`` on a discrete space) mutate a few coordinates per child,
  so a child is its parent with one or two slots redrawn: a real local search. The order of the
  codes carries no meaning, and the discrete mutations do not rely on it: they redraw a slot.
* ``choice``: ``ng.p.Choice``, a softmax over the ``n_actions + 1`` codes per slot (the textbook
  encoding of a nominal variable, suited to the continuous optimisers: CMA, DE, PSO ...). A
  stochastic ``Choice`` draws every slot from its softmax afresh at each ask, which turns a
  (1+1) optimiser into random search: on a toy problem of this shape (16 slots x 58 values,
  Hamming distance to a hidden sequence, 2,000 evaluations) ``DiscreteOnePlusOne`` changed 15.7 of
  16 slots per child and ended 13 slots off, exactly like ``RandomSearch``, against 1.6 slots
  per child and 5 off with ``TransitionChoice``. Hence the default.

Duplicates. Many vectors decode to the same sequence (slots after ``stop`` are ignored, a
mutation may hit an unused slot). A sequence already scored is told its known cost at once
without spending budget; ``ask`` keeps asking (up to ``max_retries`` nevergrad candidates per wanted
one) for fresh sequences and only falls back to re-scoring known ones (cache hits) when the
optimiser offers nothing new, so a run always spends its budget.

Compiler options (``SearchSpace.options``, ``--space options|both``): the parametrization becomes an
``ng.p.Dict`` of the slots and one choice per option (same kind as the slots), each starting at XLA's
default, so a (1+1) optimiser mutates the sequence and the options alike, a few coordinates per child.

Options: ``optimizer`` (a name from ``ng.optimizers.registry``, default ``DiscreteOnePlusOne``;
case-insensitive), ``encoding`` (transition | choice), ``batch_size`` (candidates asked per
round, passed to the optimiser as ``num_workers``, default 4; optimisers that cannot run in
parallel get 1), ``max_retries`` (default 20). The evaluation budget is passed to the
optimiser, and the seed through the parametrization's random state, so a run is deterministic
under its seed.
"""

from __future__ import annotations

import warnings

import nevergrad as ng
import numpy as np

from autotune.errors import BadInput, UnknownName
from autotune.core.options import EMPTY, CompilerOptions
from autotune.strategy import ArchiveAskTell, Evaluate, SearchSpace, positive_int

DEFAULT_OPTIMIZER = "DiscreteOnePlusOne"
ENCODINGS = ("transition", "choice")


class NevergradSearch(ArchiveAskTell):
    name = "nevergrad"
    description = "nevergrad optimiser over per-slot choices (default DiscreteOnePlusOne; --optimizer NAME)"
    options_by = "nevergrad's optimiser, one choice per option beside the slots (ng.p.Dict)"

    def __init__(self, optimizer: str = DEFAULT_OPTIMIZER, encoding: str = "transition", batch_size: int = 4,
                 max_retries: int = 20, **rest):
        super().__init__(**rest)
        if encoding not in ENCODINGS:
            raise UnknownName("nevergrad encoding", str(encoding), ENCODINGS)
        self.encoding = encoding
        optimizer = str(optimizer)
        registry = ng.optimizers.registry
        if optimizer not in registry:
            by_lower = {k.lower(): k for k in registry}
            if optimizer.lower() not in by_lower:
                raise UnknownName("nevergrad optimizer", optimizer, sorted(registry))
            optimizer = by_lower[optimizer.lower()]
        self.optimizer_name = optimizer
        self.batch_size = positive_int("nevergrad", "batch_size", batch_size)
        self.max_retries = positive_int("nevergrad", "max_retries", max_retries)

    def setup(self, space: SearchSpace, seed: int, budget: int) -> None:
        self.space = space
        factory = ng.optimizers.registry[self.optimizer_name]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # nevergrad's InefficientSettingsWarning and friends
            if getattr(factory, "no_parallelization", False):
                self.batch_size = 1  # a sequential optimiser: one candidate per round
            try:
                try:
                    self.optimizer = factory(parametrization=self._parametrization(seed), budget=budget,
                                             num_workers=self.batch_size)
                except ValueError as exc:
                    if "parallel" not in str(exc) or self.batch_size == 1:
                        raise
                    self.batch_size = 1  # a sequential optimiser wrapped in a family
                    self.optimizer = factory(parametrization=self._parametrization(seed), budget=budget,
                                             num_workers=1)
            except Exception as exc:  # e.g. an optional dependency of that optimiser is missing
                raise BadInput(f"nevergrad optimizer {self.optimizer_name} cannot run: "
                               f"{type(exc).__name__}: {exc}") from None

    def _parametrization(self, seed: int):
        space = self.space
        codes = list(range(space.n_actions + 1))  # the actions' indices, then stop
        kind = ng.p.TransitionChoice if self.encoding == "transition" else ng.p.Choice
        param = kind(codes, repetitions=space.max_length)
        if space.options:  # the sequence's slots and one choice per compiler option, one point
            param = ng.p.Dict(passes=param, **{f"option{i}": self._option_param(kind, d) for i, d in
                                               enumerate(space.options)})
        param.random_state = np.random.RandomState(seed % 2**32)
        return param

    @staticmethod
    def _option_param(kind, dim):
        """A compiler option's choice: XLA's default (None) first and the starting value, so a local
        optimiser starts from the default and moves one option at a time."""
        param = kind(list(dim.choices))
        param.value = dim.choices[0]
        return param

    def warm_up(self, start) -> None:
        """The warm start's option set, with the slots as they start, as the first candidate
        (``optimizer.suggest``): a (1+1) optimiser then mutates from there."""
        if not self.space.options or not start.options:
            return
        chosen = start.options.as_dict()
        value = dict(self.optimizer.parametrization.value)
        value.update({f"option{i}": chosen.get(d.name) for i, d in enumerate(self.space.options)})
        self.optimizer.suggest(value)

    def minimize(self, evaluate: Evaluate, space: SearchSpace, seed: int) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            super().minimize(evaluate, space, seed)

    def _internal_ask(self):
        return self.optimizer.ask()

    def _internal_sequence(self, token) -> tuple[str, ...]:
        value = token.value
        return self.space.decode(value["passes"] if isinstance(value, dict) else value)

    def _internal_options(self, token) -> CompilerOptions:
        value = token.value
        if not isinstance(value, dict):
            return EMPTY
        return self.space.options_from({d.name: value[f"option{i}"] for i, d in enumerate(self.space.options)})

    def _internal_tell(self, token, cost: float) -> None:
        self.optimizer.tell(token, cost)
