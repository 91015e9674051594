"""Which compiler options make a measured win: each option alone, and a ddmin-minimal set, judged by time.

A pass sequence's effect can be read off the module (``explain``'s structural diff); a compiler option's
cannot: it changes what XLA's code generator or a library does with the same HLO. So the options of a
runtime win are explained by measurement, the search's own (an interleaved A/B against XLA's default
executable in one worker, ``Backend.time_ab``): the whole set's ratio, each option's alone, and a 1-minimal
subset (``core.ddmin.ddmin_core``) that keeps at least ``KEEP`` of the whole set's gain. Nothing here
claims a win: the run's confirmation did that; this says which option it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from autotune.core.ddmin import ddmin_core
from autotune.core.options import CompilerOptions
from autotune.errors import PassFailed

#: A subset of the options "keeps the win" when it keeps at least this share of the whole set's gain.
KEEP = 0.8
#: Interleaved rounds per measurement (the search's own number).
ROUNDS = 10


@dataclass(frozen=True)
class OptionsEffect:
    """The options of a win: the whole set's measured ratio to XLA's default, each option's alone, and a
    1-minimal subset keeping ``KEEP`` of the gain (``tests``: measurements it took)."""

    options: dict
    ratio: float | None
    alone: dict = field(default_factory=dict)  # name -> ratio with that option alone (None: fails alone)
    minimal: dict = field(default_factory=dict)
    tests: int = 0
    note: str | None = None

    def to_dict(self) -> dict:
        return {"options": dict(self.options), "ratio": self.ratio, "alone": dict(self.alone),
                "minimal": dict(self.minimal), "keep": KEEP, "tests": self.tests, "note": self.note}

    def markdown(self, baseline: str) -> list[str]:
        lines = ["## Compiler options", "",
                 f"Compiled with `{CompilerOptions.of(self.options).describe()}`; measured against {baseline}'s "
                 f"executable, interleaved ({ROUNDS} rounds each; the run's confirmation is the claim):", "",
                 "| options | time / default |", "|---|---:|",
                 f"| all of them | {_ratio(self.ratio)} |"]
        lines += [f"| `{name}={value}` alone | {_ratio(self.alone.get(name))} |" for name, value in self.options.items()]
        if self.minimal != self.options:
            lines += ["", f"Minimal (ddmin, keeps {KEEP:.0%} of the gain): `{CompilerOptions.of(self.minimal).describe()}`"]
        if self.note:
            lines += ["", f"Note: {self.note}"]
        lines += ["", "These options change XLA's compile after its HLO pipeline (code generation, library calls): the "
                  "HLO diff above cannot show them. Apply them with `XLA_FLAGS=\"" +
                  " ".join(f"--{k}={v}" for k, v in self.minimal.items()) + "\"` or from JAX as "
                  "`.lower(...).compile(compiler_options={...})`.", ""]
        return lines


def _ratio(r) -> str:
    return "fails" if r is None else f"{r:.3f}"


def explain_options(evaluator, root, state: str, options: CompilerOptions, seed: int = 0,
                    ratio: float | None = None) -> OptionsEffect:
    """``state`` (a tuned module of ``root``) compiled with ``options``: see the module docstring. ``ratio``:
    the whole set's ratio when the caller has it (a run's confirmation), else measured here."""
    backend = evaluator.pipeline
    module = evaluator.module(state, root.name)
    memo: dict[CompilerOptions, float | None] = {}

    def measure(opts: CompilerOptions) -> float | None:
        if opts not in memo:
            try:
                timing = backend.time_ab(root, module.with_options(opts), seed=seed, rounds=ROUNDS, warmup=1,
                                         min_seconds=0.005)
                memo[opts] = float(np.median(np.asarray(timing["b"]) / np.asarray(timing["a"])))
            except PassFailed:
                memo[opts] = None
        return memo[opts]

    whole = ratio if ratio is not None else measure(options)
    alone = {name: measure(CompilerOptions.of({name: value})) for name, value in options.items}
    if whole is None or whole >= 1.0:
        return OptionsEffect(options.as_dict(), whole, alone, options.as_dict(), len(memo),
                             "the whole set is not faster than the default here: nothing to minimise")
    target = 1.0 - KEEP * (1.0 - whole)

    def holds(subsets: list[tuple]) -> list[bool]:
        out = []
        for items in subsets:
            r = measure(CompilerOptions(tuple(items))) if items else 1.0
            out.append(r is not None and r <= target)
        return out

    minimal = ddmin_core(options.items, holds) if len(options) > 1 else options.items
    return OptionsEffect(options.as_dict(), whole, alone, dict(minimal), len(memo))
