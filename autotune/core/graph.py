"""Hashing a dependency graph bottom-up: what structural matching needs, backend-neutral.

``explain`` (over any backend's ``Instruction`` list) and the XLA region check
(``pipelines/xla/matching.py``) both hash every instruction from its signature and its operands'
hashes; modules are thousands of instructions deep, so the walk is iterative, not recursive.
"""

from __future__ import annotations

import hashlib


def digest(parts: list[str]) -> str:
    """A short stable hash of ``parts`` (joined with a separator no signature contains)."""
    return hashlib.sha1("\x1f".join(parts).encode()).hexdigest()[:20]


def bottom_up(order, deps, combine) -> dict:
    """``{key: combine(key, hashes)}`` for every key, each after its ``deps(key)``, without recursion.

    ``hashes`` is the dict being filled (a dependency on a cycle, impossible in valid HLO, reads
    as missing rather than looping)."""
    hashes: dict = {}
    for start in order:
        if start in hashes:
            continue
        stack = [(start, False)]
        on_path: set = set()
        while stack:
            key, expanded = stack.pop()
            if key in hashes:
                continue
            if expanded:
                hashes[key] = combine(key, hashes)
                on_path.discard(key)
                continue
            if key in on_path:
                continue
            on_path.add(key)
            stack.append((key, True))
            stack.extend((d, False) for d in deps(key) if d not in hashes)
    return hashes
