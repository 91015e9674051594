"""Delta debugging (ddmin, Zeller & Hildebrandt 2002) of a pass sequence, through the evaluator.

A search returns sequences padded with passes that do nothing *on their own* but also passes
that do something and still do not matter for the result (a pass whose effect the default
pipeline would have produced anyway). Dropping passes one at a time (``loop.prune``, what runs do) stops at
the first local optimum of a single sweep; ddmin finds a **1-minimal** subsequence: one that still
reaches the same result, and from which removing any single pass changes it.

"The same result" (``same=``):

* ``"final"`` (default): the same module after XLA's default pipeline (equal fingerprints), i.e.
  the backend sees exactly the same program;
* ``"state"``: the same module right after the sequence (no default pipeline);
* ``"cost"``: a final module at most as many instructions as the original sequence's (or the
  given ``cost`` function's value), for when the exact module cannot be kept;
* a callable ``(Result, final Result | None) -> bool`` for anything else.

Every candidate goes through ``Evaluator.evaluate_many`` and ``final_many``, i.e. the cache:
prefixes shared with what the search already tried are not compiled again, and each round's
subsets and complements are compiled in parallel. The minimisation spends no tuning budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autotune.core.evaluator import Evaluator, Result
from autotune.core.module import Module


@dataclass(frozen=True)
class DdminResult:
    """ddmin's answer: the 1-minimal subsequence, and what it took to find it."""

    sequence: tuple[str, ...]
    original: tuple[str, ...]
    same: str  # final | state | cost | custom
    tests: int  # candidate subsequences evaluated (cache hits included)
    reference_state: str | None  # the original's state (after the sequence)
    reference_final: str | None  # ... and after XLA's default pipeline


Same = str | Callable[[Result, Result | None], bool]


def ddmin(evaluator: Evaluator, root: Module, sequence: Sequence[str], same: Same = "final",
          cost: Callable[[Result, Result | None], float] | None = None) -> tuple[str, ...]:
    """The smallest subsequence of ``sequence`` (1-minimal) that gives the same result on ``root``."""
    return ddmin_result(evaluator, root, sequence, same, cost).sequence


def ddmin_result(evaluator: Evaluator, root: Module, sequence: Sequence[str], same: Same = "final",
                 cost: Callable[[Result, Result | None], float] | None = None) -> DdminResult:
    """``ddmin`` with its bookkeeping (tests run, the reference states)."""
    original = tuple(sequence)
    ref = evaluator.evaluate(root, original)
    if not ref.ok:
        raise ValueError(f"the sequence itself fails at step {ref.failed_at + 1}: {ref.message}")
    needs_final = same in ("final", "cost") or callable(same)
    ref_final = evaluator.final(ref.state) if needs_final else None
    if same == "final" and not (ref_final and ref_final.ok):
        raise ValueError("XLA's default pipeline fails after the sequence; minimise with same='state' or 'cost'")
    if cost is None:
        def cost(result: Result, final: Result | None) -> float:
            m = final.metrics if final is not None and final.ok else result.metrics
            return float(m.instructions)
    target = cost(ref, ref_final) if same == "cost" else None

    def holds(result: Result, final: Result | None) -> bool:
        if not result.ok:
            return False
        if callable(same):
            return bool(same(result, final))
        if same == "state":
            return result.state == ref.state
        if final is None or not final.ok:
            return False
        if same == "final":
            return final.state == ref_final.state
        if same == "cost":
            return cost(result, final) <= target
        raise ValueError(f"unknown same={same!r} (final, state, cost or a callable)")

    tests = 0
    memo: dict[tuple[str, ...], bool] = {}

    def test_many(cands: list[tuple[str, ...]]) -> list[bool]:
        nonlocal tests
        todo = [c for c in dict.fromkeys(cands) if c not in memo]
        if todo:
            results = evaluator.evaluate_many(root, todo)
            finals: dict[str, Result] = {}
            if needs_final:
                states = list(dict.fromkeys(r.state for r in results if r.ok))
                finals = dict(zip(states, evaluator.final_many(states))) if states else {}
            for c, r in zip(todo, results):
                memo[c] = holds(r, finals.get(r.state) if r.ok else None)
            tests += len(todo)
        return [memo[c] for c in cands]

    if test_many([()])[0]:  # nothing is needed (the sequence does not change the result at all)
        return DdminResult((), original, same if isinstance(same, str) else "custom", tests, ref.state,
                         ref_final.state if ref_final else None)
    current = ddmin_core(original, test_many)
    return DdminResult(current, original, same if isinstance(same, str) else "custom", tests, ref.state,
                     ref_final.state if ref_final else None)


def ddmin_core(items: Sequence, test_many: Callable[[list[tuple]], list[bool]]) -> tuple:
    """Zeller's ddmin over ``items`` with a batched test (``True``: the candidate still "fails"
    the way the whole does, i.e. keeps the result). Assumes the test holds for ``items`` and not
    for the empty tuple; returns a 1-minimal subsequence (order kept).

    One batch per round: every subset and complement is tested together (in parallel, through the
    cache), and the choice follows ddmin's order (subsets first, then complements), so the answer
    is the one the sequential algorithm gives.
    """
    current = tuple(items)
    n = 2
    while len(current) >= 2:
        chunks = _split(current, n)
        complements = [tuple(x for j, ch in enumerate(chunks) if j != i for x in ch) for i in range(len(chunks))]
        verdicts = test_many(chunks + complements)
        sub_ok, comp_ok = verdicts[: len(chunks)], verdicts[len(chunks):]
        if any(sub_ok):
            current, n = chunks[sub_ok.index(True)], 2
        elif any(comp_ok):
            current, n = complements[comp_ok.index(True)], max(n - 1, 2)
        elif n < len(current):
            n = min(2 * n, len(current))
        else:
            break
    return current


def _split(seq: tuple[str, ...], n: int) -> list[tuple[str, ...]]:
    """``seq`` cut into ``n`` contiguous chunks of near-equal length (order kept)."""
    out, start = [], 0
    for i in range(n):
        end = start + (len(seq) - start) // (n - i)
        out.append(seq[start:end])
        start = end
    return [c for c in out if c]
