"""Exhaustive search over short pass sequences: the exact optimum within ``depth`` passes.

A breadth-first walk applies every action to every *distinct* module state, up to ``depth`` passes.
Sequences that reach the same module (most passes change nothing on a given module) share all later
work, so depth 3 over 57 actions (185,193 sequences) costs a few thousand compiled steps, not
185,193 sequences. Every distinct state is then followed by XLA's default pipeline (the
``final-ops`` objective) and the best is validated like any ``autotune run`` result.

Why it exists: when every strategy ties with XLA's default, this tells whether nothing better is
within reach or the searches missed it. It is also a strategy-free baseline for short sequences.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from autotune.core.module import Module
from autotune.core.observer import Observer

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
    compiled0, cached0 = ev.stats.steps_compiled, ev.stats.steps_cached
    root = ev.prepare(module)
    actions = list(ev.pipeline.passes())
    reached: dict[str, tuple[str, ...]] = {root.fingerprint: ()}  # state -> first (shortest) sequence
    final_ops: dict[str, int] = {}  # state -> instructions after XLA's default pipeline (ok finals only)

    def score(states: list[str]) -> None:
        for s, f in zip(states, ev.final_many(states)):
            if f.ok:
                final_ops[s] = f.metrics.instructions

    default = ev.default(root)
    if not default.ok:
        from autotune.errors import AutotuneError

        raise AutotuneError(f"XLA's default pipeline fails on this module: {default.message}")
    final_ops[root.fingerprint] = default_final = default.metrics.instructions
    frontier, levels = [root.fingerprint], []
    for d in range(1, depth + 1):
        pairs = [(s, a) for s in frontier for a in actions]
        new, failed = [], 0
        observer.on_run_start(len(pairs), f"depth {d}/{depth}")
        t_depth = time.perf_counter()
        for i in range(0, len(pairs), CHUNK):
            chunk = pairs[i:i + CHUNK]
            results = ev.steps(chunk)
            fresh = []
            for (src, action), r in zip(chunk, results):
                if not r.ok:
                    failed += 1
                elif r.state not in reached:
                    reached[r.state] = reached[src] + (action,)
                    fresh.append(r.state)
            score(fresh)
            new += fresh
            total = ev.stats.steps_compiled + ev.stats.steps_cached - compiled0 - cached0
            hits = (ev.stats.steps_cached - cached0) / total if total else 0.0
            rate = (i + len(chunk)) / max(time.perf_counter() - t_depth, 1e-9)
            observer.on_trial(i + len(chunk), min(final_ops.values()), rate, hits)
        observer.on_run_end()
        levels.append(Level(d, len(pairs), failed, len(new)))
        frontier = new
        if not frontier:
            break
    best_state = min(final_ops, key=lambda s: (final_ops[s], len(reached[s]), reached[s]))
    valid = message = None
    if validate and final_ops[best_state] < default_final:
        best_state, valid, message = _first_valid(ev, root, final_ops, reached, default_final)
    return Outcome(
        module=module.name, input_ops=ev.metrics(root.fingerprint).instructions,
        default_final_ops=default_final, best_final_ops=final_ops[best_state],
        best_raw_ops=ev.metrics(best_state).instructions, best_sequence=reached[best_state], depth=depth,
        sequences_covered=sum(len(actions) ** k for k in range(depth + 1)), distinct_states=len(reached),
        levels=tuple(levels), steps_compiled=ev.stats.steps_compiled - compiled0,
        seconds=time.perf_counter() - t0, valid=valid, validity_message=message,
    )


def _first_valid(ev, root: Module, final_ops: dict[str, int], reached: dict[str, tuple[str, ...]],
                 default_final: int, tries: int = 5) -> tuple[str, bool, str | None]:
    """The best state whose module passes validation, trying the ``tries`` best that beat the default.

    Validity is the tuner's check, cached per (module, state), so a module ``run`` already validated
    is not compiled again. Returns (state, valid, reason of the first failure); when none passes,
    the best state, False.
    """
    from autotune.core.tuner import validity_of

    ranked = sorted((s for s in final_ops if final_ops[s] < default_final),
                    key=lambda s: (final_ops[s], len(reached[s]), reached[s]))
    first_reason = None
    for state in ranked[:tries]:
        report = validity_of(ev, root, state)
        if report["ok"]:
            return state, True, None
        first_reason = first_reason or report.get("reason")
    return ranked[0], False, first_reason
