"""Exhaustive search over short pass sequences: the exact optimum within ``depth`` passes.

A breadth-first walk applies every action to every *distinct* module state, up to ``depth`` passes.
Sequences that reach the same module (most passes change nothing on a given module) share all later
work, so depth 3 over 57 actions (185,193 sequences) costs a few thousand compiled steps, not
185,193 sequences. Every distinct state is then followed by XLA's default pipeline (the
``final-ops`` objective) and the best is validated like any ``autotune run`` result: the walk is an
enumerator, its states are handed to the run loop's one "validate the best, then the next best"
path (``loop.choose``, through ``WalkSearch``).

Why it exists: when every strategy ties with XLA's default, this tells whether nothing better is
within reach or the searches missed it. It is also a strategy-free baseline for short sequences.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autotune.core.loop import Search, choose, validity_of
from autotune.core.module import Module
from autotune.core.observer import Observer
from autotune.core.runs import TrialRecord
from autotune.core.spec import RunSpec
from autotune.errors import AutotuneError

if TYPE_CHECKING:
    from autotune.core.validation import Validation

CHUNK = 128  # (state, action) pairs per batch: big enough to keep every worker busy, small for progress


@dataclass(frozen=True)
class Level:
    """One depth of the walk."""

    depth: int
    steps: int  # (state, action) pairs tried
    failed: int  # of which the pass failed
    new_states: int  # distinct modules first reached at this depth


@dataclass(frozen=True)
class Outcome:
    """What the walk found on one module."""

    module: str
    input_ops: int
    default_final_ops: int
    best_final_ops: int
    best_raw_ops: int  # instructions right after the best sequence (before the default pipeline)
    best_sequence: tuple[str, ...]  # a shortest sequence reaching the best final-ops; () = XLA's default itself
    depth: int
    sequences_covered: int  # every sequence of length <= depth
    distinct_states: int
    levels: tuple[Level, ...]
    steps_compiled: int
    seconds: float
    valid: bool | None  # the best sequence's validity; None when nothing beat the default or not checked
    validity_message: str | None

    @property
    def improved(self) -> bool:
        return self.best_final_ops < self.default_final_ops

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return {**asdict(self), "improved": self.improved}


def explore(ev, module: Module, depth: int = 2, observer: Observer | None = None, validate: bool = True) -> Outcome:
    """Walk every sequence of up to ``depth`` actions on ``module`` (see the module docstring)."""
    if depth < 1:
        raise ValueError("depth must be at least 1")
    observer = observer or Observer()
    t0 = time.perf_counter()
    compiled0 = ev.stats.steps_compiled
    root = ev.prepare(module)
    actions = list(ev.pipeline.passes())
    default = ev.default(root)
    if not default.ok:
        raise AutotuneError(f"{ev.pipeline.baseline} pipeline fails on this module: {default.message}")
    walk = _Walk(ev, root, default.metrics.instructions, observer)
    levels = walk.run(actions, depth)
    reached, final_ops, default_final = walk.reached, walk.final_ops, walk.default_final
    best_state = min(final_ops, key=lambda s: (final_ops[s], len(reached[s]), reached[s]))
    valid = message = None
    if validate and final_ops[best_state] < default_final:
        best_state, valid, message = _first_valid(WalkSearch(ev, root, walk))
    return Outcome(
        module=module.name, input_ops=ev.metrics(root.fingerprint).instructions,
        default_final_ops=default_final, best_final_ops=final_ops[best_state],
        best_raw_ops=ev.metrics(best_state).instructions, best_sequence=reached[best_state], depth=depth,
        sequences_covered=sum(len(actions) ** k for k in range(depth + 1)), distinct_states=len(reached),
        levels=tuple(levels), steps_compiled=ev.stats.steps_compiled - compiled0,
        seconds=time.perf_counter() - t0, valid=valid, validity_message=message,
    )


class _Walk:
    """The breadth-first walk: every distinct state reached (with its first, shortest sequence) and
    the final-ops of each (instructions after XLA's default pipeline; ok finals only)."""

    def __init__(self, ev, root: Module, default_final: int, observer: Observer):
        self.ev, self.observer, self.default_final = ev, observer, default_final
        self.reached: dict[str, tuple[str, ...]] = {root.fingerprint: ()}
        self.final_ops: dict[str, int] = {root.fingerprint: default_final}
        self.compiled0, self.cached0 = ev.stats.steps_compiled, ev.stats.steps_cached

    def run(self, actions: list[str], depth: int) -> list[Level]:
        frontier, levels = list(self.reached), []
        for d in range(1, depth + 1):
            pairs = [(s, a) for s in frontier for a in actions]
            self.observer.on_run_start(len(pairs), f"depth {d}/{depth}")
            new, failed = self.level(pairs)
            self.observer.on_run_end()
            levels.append(Level(d, len(pairs), failed, len(new)))
            frontier = new
            if not frontier:
                break
        return levels

    def level(self, pairs: list[tuple[str, str]]) -> tuple[list[str], int]:
        """Apply every (state, action) pair, in chunks; the states first reached, and failures."""
        ev, new, failed, t0 = self.ev, [], 0, time.perf_counter()
        for i in range(0, len(pairs), CHUNK):
            chunk = pairs[i:i + CHUNK]
            fresh = []
            for (src, action), r in zip(chunk, ev.steps(chunk)):
                if not r.ok:
                    failed += 1
                elif r.state not in self.reached:
                    self.reached[r.state] = self.reached[src] + (action,)
                    fresh.append(r.state)
            for s, f in zip(fresh, ev.final_many(fresh)):
                if f.ok:
                    self.final_ops[s] = f.metrics.instructions
            new += fresh
            total = ev.stats.steps_compiled + ev.stats.steps_cached - self.compiled0 - self.cached0
            hits = (ev.stats.steps_cached - self.cached0) / total if total else 0.0
            rate = (i + len(chunk)) / max(time.perf_counter() - t0, 1e-9)
            self.observer.on_trial(i + len(chunk), min(self.final_ops.values()), rate, hits)
        return new, failed


class WalkSearch(Search):
    """The walk's states as the run loop's candidates, so its best is validated on the one "validate
    the best, then the next best" path (``loop.choose``) that every run uses."""

    objective = None  # no pruning: the walk's sequences are already the shortest to their state

    def __init__(self, ev, root: Module, walk: _Walk):
        super().__init__(ev, RunSpec(strategy="", budget=1), "", [], Observer())  # validation only: no budget to spend
        self.root, self.walk, self.default_cost = root, walk, float(walk.default_final)

    def ranked(self, recheck: bool) -> list[TrialRecord]:
        w = self.walk
        states = sorted((s for s in w.final_ops if w.final_ops[s] < w.default_final),
                        key=lambda s: (w.final_ops[s], len(w.reached[s]), w.reached[s]))
        return [TrialRecord(n, w.reached[s], float(w.final_ops[s]), "ok", s, True) for n, s in enumerate(states)]

    def key(self, rec: TrialRecord):
        return rec.state

    def check(self, rec: TrialRecord, n: int, seed: int) -> tuple[Validation, str | None]:
        report = validity_of(self.ev, self.root, rec.state, seed)
        return report, None if report.ok else (report.reason or "outputs differ")

    def unchecked(self) -> None:
        return None


def _first_valid(search: WalkSearch) -> tuple[str, bool, str | None]:
    """The best state whose module passes validation (``loop.choose``, validity cached per (module,
    state), so a module ``run`` already validated is not compiled again). Returns (state, valid,
    reason of the first failure); when none passes, the best state, False."""
    ranked = search.ranked(recheck=False)
    choice, invalid = choose(search, ranked, validate=True, validation_seed=0, prune=False)
    if choice is not None:
        return choice.rec.state, True, None
    return ranked[0].state, False, invalid[0][1] if invalid else None
