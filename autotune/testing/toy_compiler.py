"""The toy compiler itself: sums of products rewritten by passes, in pure Python.

``toy.py`` adapts it to autotune's Backend contract, as ``pipelines/xla`` adapts XLA; keeping the two
apart shows what a backend is: the adapter, not the compiler. A program is a sum of terms, each a
product of factors (``x*1 + 0 + y*2 + x + x``); the passes are described in ``toy.py``.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter

from autotune.core.backend import DEFAULT, IDENTITY
from autotune.errors import BadInput

PASSES = ("fold-one", "drop-zero", "combine", "split", "canon", "shuffle-bug", "abort")
DEFAULT_ORDER = ("canon", "fold-one", "drop-zero", "combine", "canon")


def parse(text: str) -> list[list[str]]:
    """``"x*1 + 0"`` -> ``[["x", "1"], ["0"]]``; BadInput for anything that is not a sum of products."""
    terms = []
    for raw in text.replace(" ", "").replace("\n", "").split("+"):
        factors = raw.split("*")
        if not raw or any(not f or not (f.isalnum() or f.isdigit()) for f in factors):
            raise BadInput(f"not a toy program: {text[:60]!r}")
        terms.append(factors)
    return terms


def show(terms: list[list[str]]) -> str:
    return " + ".join("*".join(t) for t in terms) if terms else "0"


def _canon(terms):
    return sorted((sorted(t, key=lambda f: (not f.isdigit(), f)) for t in terms), key=lambda t: ("*".join(t)))


def _fold_one(terms):
    out = []
    for t in terms:
        kept = [f for f in t if f != "1"]
        out.append(kept or ["1"])
    return out


def _drop_zero(terms):
    return [t for t in terms if "0" not in t] or [["0"]]


def _combine(terms):
    counts = Counter(tuple(t) for t in terms)
    out = []
    for t, n in counts.items():
        out.append(([str(n)] if n > 1 else []) + list(t))
    return out


def _split(terms):
    out = []
    for t in terms:
        if len(t) > 1 and t[0].isdigit() and 1 < int(t[0]) <= 4:
            out.extend([t[1:]] * int(t[0]))
        else:
            out.append(t)
    return out


def _shuffle_bug(terms):
    out = []
    for t in terms:
        names = [f for f in t if not f.isdigit()]
        if len(names) >= 2:
            out.extend([[f] for f in t])  # x*y -> x + y: a wrong answer, not a crash
        else:
            out.append(t)
    return out


REWRITES = {"fold-one": _fold_one, "drop-zero": _drop_zero, "combine": _combine, "split": _split,
            "canon": _canon, "shuffle-bug": _shuffle_bug}


def apply_pass(name: str, text: str) -> str:
    if name == "abort":
        if "boom" in text:
            os.abort()  # what an XLA CHECK failure does to the process
        return text
    if name == IDENTITY:
        return show(parse(text))
    if name == DEFAULT:
        for p in DEFAULT_ORDER:
            text = apply_pass(p, text)
        return text
    return show(REWRITES[name](parse(text)))


def fingerprint(text: str) -> str:
    return hashlib.sha256(show(parse(text)).encode()).hexdigest()[:32]


def metrics(text: str) -> dict:
    terms = parse(text)
    ops = Counter()
    for t in terms:
        for f in t:
            ops["constant" if f.isdigit() else "parameter"] += 1
        ops["multiply"] += len(t) - 1
    ops["add"] += len(terms) - 1
    return {"instructions": sum(ops.values()), "opcodes": dict(ops), "flops": float(ops["multiply"] + ops["add"]),
            "transcendentals": 0.0, "bytes_accessed": float(8 * sum(ops.values()))}


def variables(text: str) -> list[str]:
    return sorted({f for t in parse(text) for f in t if not f.isdigit()})


def evaluate(text: str, values: dict[str, float]) -> float:
    total = 0.0
    for t in parse(text):
        prod = 1.0
        for f in t:
            prod *= float(f) if f.isdigit() else values[f]
        total += prod
    return total
