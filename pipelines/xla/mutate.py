"""A wrong rewrite injected into HLO text: the miscompile that validation must catch.

Used by the tests and by ``bench/region.py`` to check that the region check and the whole-module
check both reject a module that differs from a correct one in exactly one instruction.
"""

from __future__ import annotations

import re

from autotune.pipelines.xla import standins

HOWS = ("swap", "constant")


def mutate(text: str, name: str, how: str) -> str | None:
    """``text`` with instruction ``name`` changed: ``swap`` exchanges its first two operands (wrong
    for a non-commutative op), ``constant`` scales a scalar constant (``x * 1.5 + 1``). None when
    ``text`` has no instruction ``name``."""
    if how not in HOWS:
        raise ValueError(f"how must be one of {HOWS}, not {how!r}")
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = standins.INSTRUCTION.match(line)
        if not m or m.group(3).lstrip("%") != name:
            continue
        indent, root, nm, type_str, opcode, rest = m.groups()
        if how == "swap":
            ops, tail = standins.split_operands(rest)
            rest_ops = ", " + ", ".join(ops[2:]) if ops[2:] else ""
            lines[i] = f"{indent}{root or ''}{nm} = {type_str} {opcode}({ops[1]}, {ops[0]}{rest_ops}){tail}"
        else:
            value = float(re.match(r"\s*([-0-9.einf]+)\)", rest).group(1))
            lines[i] = f"{indent}{root or ''}{nm} = {type_str} {opcode}({value * 1.5 + 1.0!r})"
        return "\n".join(lines) + "\n"
    return None
