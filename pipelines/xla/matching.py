"""Structural matching of HLO instructions, names ignored: what ``explain`` and the region check share.

Two modules are compared instruction by instruction by hashing each instruction bottom-up: its
opcode, shape and attributes (metadata excluded), its operands' hashes in order and the hashes of
the computations it calls; instruction and computation names never enter it. Equal hashes mean
the same computation of the same inputs.

``instruction_table`` reads a module once into per-instruction signatures; ``bottom_up`` computes
hashes over any dependency graph without recursion (modules are deep); ``structural_index`` is the
plain hash ``explain`` lists. ``pipelines/xla/region.py`` uses the same table and the same
bottom-up walk with one change: values that flow unchanged through a while loop are hashed as the
value that enters the loop (so hoisting a computation out of a loop is not a difference).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from autotune.pipelines.xla import hlo

#: An instruction's HLO text is cut at this many characters in listings (large constants).
TEXT_CAP = 300

_NAME = hlo.NAME_PATTERN
#: A shape's layout (``f32[4,8]{1,0}``): ignored when pairing "the same instruction, other inputs".
_LAYOUT = hlo.LAYOUT_PATTERN


@dataclass(frozen=True)
class Instr:
    """One instruction of a module, as a diff lists it."""

    computation: str
    name: str
    opcode: str
    text: str  # HLO text, metadata removed, cut at TEXT_CAP
    frontier: bool = False  # all its operands are matched: the difference starts here


@dataclass(frozen=True)
class Node:
    """One instruction with its two signatures (see ``structural_index``)."""

    hash: str  # the whole subgraph below it, names ignored
    local: str  # the instruction alone: opcode, shape, attributes, operand count, called computations
    operands: tuple[str, ...]  # operand hashes
    instr: Instr


@dataclass(frozen=True)
class Entry:
    """One instruction as ``instruction_table`` reads it (keys are ``(computation, instruction)``)."""

    sig: str  # its text without names (operands and called computations as placeholders)
    operands: tuple[tuple[str, str], ...]  # operand keys, in order
    called: tuple[str, ...]  # names of the computations it calls
    opcode: str
    inst: object  # the jaxlib HloInstruction


@dataclass(frozen=True)
class Table:
    """A module read once: every instruction's ``Entry`` in module order, each computation's root."""

    entries: dict
    order: tuple
    roots: dict  # computation name -> root key
    computations: tuple  # names, in module order (the entry computation last)


def clean(text: str) -> str:
    """An instruction's text without its metadata."""
    return hlo.strip_attr(text, "metadata").strip()


def digest(parts: list[str]) -> str:
    return hashlib.sha1("\x1f".join(parts).encode()).hexdigest()[:20]


def instruction_table(module) -> Table:
    """Read every instruction of ``module`` (a jaxlib HloModule): signature, operands, callees."""
    comps = list(module.computations())
    by_comp_name = {c.name: c for c in comps}
    entries: dict = {}
    order: list = []
    roots = _roots(hlo.elided_text(module))
    for comp in comps:
        insts = comp.instructions()
        names = {i.name for i in insts}
        for inst in insts:
            line = clean(inst.to_string())
            body = line.split(" = ", 1)[1] if " = " in line else line
            called = tuple(n for n in _NAME.findall(body) if n in by_comp_name and n not in names)
            # Literals (parameter(3), constant values, dimensions) stay; names become placeholders.
            sig = _NAME.sub(lambda m: "%" + ("C" if m.group(1) in by_comp_name and m.group(1) not in names else "?"), body)
            entries[(comp.name, inst.name)] = Entry(sig, tuple((comp.name, o.name) for o in inst.operands()), called,
                                                    hlo.opcode_name(inst), inst)
            order.append((comp.name, inst.name))
        if comp.name not in roots and insts:
            roots[comp.name] = (comp.name, insts[-1].name)
    return Table(entries, tuple(order), roots, tuple(c.name for c in comps))


def _roots(text: str) -> dict:
    """``{computation: (computation, root instruction)}`` (``hlo.computation_roots``)."""
    return {comp: (comp, name) for comp, name in hlo.computation_roots(text).items()}


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


def plain_hashes(table: Table) -> dict:
    """The structural hash of every instruction: signature, operands' hashes, callees' root hashes."""
    entries, roots = table.entries, table.roots

    def deps(key):
        e = entries[key]
        return [o for o in e.operands if o in entries] + [roots[c] for c in e.called if c in roots]

    def combine(key, hashes):
        e = entries[key]
        return digest([e.sig] + [hashes.get(o, "?") for o in e.operands]
                      + ["C" + hashes.get(roots.get(c), "?") for c in e.called])

    return bottom_up(table.order, deps, combine)


def structural_index(module) -> list[Node]:
    """A ``Node`` for every instruction of ``module`` (a jaxlib HloModule), in module order.

    The hash covers opcode, shape, attributes (metadata excluded), the operands' hashes in order and
    the called computations' hashes (a computation's hash is its root's); instruction and
    computation names never enter it. Computed bottom-up without recursion (deep modules).
    """
    table = instruction_table(module)
    hashes = plain_hashes(table)
    out = []
    for key in table.order:
        e = table.entries[key]
        text = clean(e.inst.to_string())
        if len(text) > TEXT_CAP:
            text = text[:TEXT_CAP] + " ..."
        local = digest([_LAYOUT.sub("]", e.sig)] + ["C" + hashes.get(table.roots.get(c), "?") for c in e.called])
        out.append(Node(hashes[key], local, tuple(hashes.get(o, "?") for o in e.operands),
                        Instr(key[0], key[1], e.opcode, text)))
    return out
