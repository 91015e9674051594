"""Structural matching of HLO instructions, names ignored: what ``explain`` and the region check share.

Two modules are compared instruction by instruction by hashing each instruction bottom-up: its
opcode, shape and attributes (metadata excluded), its operands' hashes in order and the hashes of
the computations it calls; instruction and computation names never enter it. Equal hashes mean
the same computation of the same inputs.

``instruction_table`` reads a module once into per-instruction signatures; ``core.graph.bottom_up``
computes hashes over any dependency graph without recursion (modules are deep), the walk
``explain``'s structural index uses too. ``pipelines/xla/region.py`` hashes this table with one change: values that flow unchanged through a while loop are hashed as the
value that enters the loop (so hoisting a computation out of a loop is not a difference).
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.pipelines.xla import hlo

_NAME = hlo.NAME_PATTERN


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
