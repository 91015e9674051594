"""Cut the changed region(s) out of two final modules, so a win on a module too big to run can be
checked by executing only what changed.

Inputs: XLA's default final module and the tuned final module (both after XLA's default pipeline).
Their instructions are matched structurally (``matching.py``, the hashing ``explain`` uses) with
one extension that makes the match about *values*: a while loop's state is looked through.

* A loop-state element that the body passes through unchanged (``ROOT tuple(..., gte(p, i), ...)``)
  is, in the body and after the loop, the value that entered the loop: it is hashed as that value.
  So a computation hoisted out of a loop in one module and kept inside it in the other is the same
  value on both sides, not a difference.
* An element the body changes is a loop-carried value: it gets a label (its type and the hash of
  its initial value; elements that always hold the same value share one, found by partition
  refinement), and the labels of the two modules' loops are paired (``_pair_loops``).

Every instruction whose value hash is not found in the other module is *changed*. The changed
instructions of each side, with the plumbing (loop-state tuples, while instructions, the
parameters' get-tuple-elements) left out, form the regions: inputs are values both modules compute
identically (found on both sides) and independent of each other (``_close_inputs``), outputs are
the values sitting where both modules consume them in the same role (an entry output, the next
value of a loop-carried element, the initial value of one, a loop condition). Connected changed instructions form one region; unrelated changes are
separate regions (each small enough to run on its own). Each side of a region becomes a standalone
HLO module (``ENTRY`` with one parameter per input, the changed instructions, the computations they
call, and a tuple of the outputs) with the *same* parameter list on both sides, and both sides are
also put side by side in one module (``Region.both``) so that one run on one draw of seeded random
inputs at the real shapes computes both.

What it proves: for those inputs, the changed instructions of the tuned module compute the same
outputs as the default's (see docs/validation-levels.md). Inputs are random at the region's
boundary, not the values the full program would feed it.

This module only parses and prints HLO (``jaxlib._hlo``): it runs in the driver, like ``explain``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from autotune.pipelines.xla import hlo, matching, standins
from autotune.pipelines.xla.region_values import Side, element_type, shape_bytes
from autotune.core.limits import gib
from autotune.pipelines.xla.loader import module_from_proto

#: Instructions of each side a region's description lists (a region can hold hundreds).
LIST_CAP = 12

class CannotCut(Exception):
    """No region could be cut (the reason is the message)."""


@dataclass(frozen=True)
class Region:
    """One changed region: a standalone module per side, both taking the same parameters.

    ``default``/``tuned``: serialized ``HloModuleProto`` bytes; ``both`` holds the two sides side
    by side in one module (the same parameters feed both), which is what the check runs. ``outputs`` names the role of each
    output (``entry output 0``, ``loop-carried element 3 (next)``...). ``listing`` is the changed
    instructions as HLO text (capped), for a person reading a mismatch.
    """

    index: int
    default: bytes
    tuned: bytes
    both: bytes  # one module computing both sides: the default's outputs, then the tuned one's
    default_instructions: int
    tuned_instructions: int
    computations: tuple[str, ...]  # where the default side's instructions live
    inputs: int
    input_bytes: int
    output_bytes: int
    outputs: tuple[str, ...]
    listing: str
    default_members: tuple[tuple[str, str], ...] = ()  # (computation, instruction) of each changed one
    tuned_members: tuple[tuple[str, str], ...] = ()

    @property
    def instructions(self) -> int:
        return self.default_instructions + self.tuned_instructions

    def modules(self):
        """``(both, tuned)`` as ``Module``s (what validation stands in and runs): the engine handles
        modules, never a backend's bytes."""
        return (module_from_proto(self.both, f"region{self.index}"),
                module_from_proto(self.tuned, f"region{self.index}-tuned"))

    def describe(self) -> str:
        where = ", ".join(f"`{c}`" for c in self.computations[:3]) + (" ..." if len(self.computations) > 3 else "")
        return (f"region {self.index} (in {where}: {self.default_instructions} instruction(s) of XLA's default, "
                f"{self.tuned_instructions} of the tuned module; {self.inputs} input(s), {len(self.outputs)} output(s))")


@dataclass(frozen=True)
class Cut:
    """The regions of two modules; ``matched``: instructions whose value both compute."""

    regions: tuple[Region, ...]
    matched: int
    default_total: int
    tuned_total: int


# ---- cutting -------------------------------------------------------------------------------------------
#: Seconds cutting may take before it gives up with a reason. A change spread over every layer of
#: a 10k-instruction train step (``algsimp`` on a 37-layer LLaMA step) makes ~150 regions of ~2,000
#: instructions each, whose inputs (every layer's weights) exceed any execution limit anyway.
CUT_SECONDS = 20.0


def cut(default_proto: bytes, tuned_proto: bytes, max_seconds: float = CUT_SECONDS,
        max_input_bytes: int | None = None) -> Cut:
    """The regions where ``tuned`` differs from ``default`` (serialized final modules).

    Raises ``CannotCut`` with the reason when no sound cut exists (a changed value consumed in a
    role the other module has no counterpart for, or an input only one module computes), or when
    building the regions takes longer than ``max_seconds``, or at the first region whose inputs
    exceed ``max_input_bytes`` (it could not run here, so the rest need not be built)."""
    deadline = time.monotonic() + max_seconds
    d = Side(hlo.parse_proto(default_proto))
    t = Side(hlo.parse_proto(tuned_proto))
    overrides = _pair_loops(d, t)
    if overrides:
        t.relabel(overrides)
    cd, ct = d.changed(t.values), t.changed(d.values)
    sd, st = d.sinks(), t.sinks()
    outputs = []  # (role, default value key, tuned value key)
    for role in sorted(set(sd) | set(st)):
        kd, kt = sd.get(role), st.get(role)
        if kd is not None and kt is not None and d.hashes[kd] == t.hashes[kt]:
            continue
        if kd is None or kt is None:
            if (kd in cd) or (kt in ct):
                raise CannotCut(f"a changed value is the {role} of only one module")
            continue
        outputs.append((role, kd, kt))
    # components: changed instructions linked by operands, and across sides by a shared output role
    parent: dict = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a, b):
        parent[find(a)] = find(b)

    for side, changed, tag in ((d, cd, "d"), (t, ct, "t")):
        for k in changed:
            find((tag, k))
            for o in side.operands(k):
                if o in changed:
                    union((tag, k), (tag, o))
    groups: dict = {}
    for role, kd, kt in outputs:
        ends = [x for x, ch in ((("d", kd), cd), (("t", kt), ct)) if x[1] in ch]
        if not ends:  # both sides route a value they compute identically? then the hashes would agree
            raise CannotCut(f"the {role} differs but no changed instruction computes it")
        for x in ends[1:]:
            union(ends[0], x)
        groups.setdefault(find(ends[0]), []).append((role, kd, kt))
    by_rep: dict = {}  # component -> its changed instructions per side, in module order
    for tag, side, changed in (("d", d, cd), ("t", t, ct)):
        for k in side.table.order:
            if k in changed:
                by_rep.setdefault(find((tag, k)), {"d": [], "t": []})[tag].append(k)
    regions, ordered = [], sorted(groups.items(), key=lambda g: sorted(r for r, _, _ in g[1]))
    for n, (rep, outs) in enumerate(ordered, 1):
        if time.monotonic() > deadline:
            raise CannotCut(f"cutting stopped after {max_seconds:.0f} s at region {n} of {len(ordered)} "
                            f"({len(cd)} of {len(d.table.order)} instructions of XLA's default changed)")
        parts = by_rep.get(find(rep), {"d": [], "t": []})
        members = {"d": _topological(d, parts["d"]), "t": _topological(t, parts["t"])}
        regions.append(_region(n, d, t, members, outs))
        if max_input_bytes is not None and regions[-1].input_bytes > max_input_bytes:
            raise CannotCut(f"{regions[-1].describe()} needs {gib(regions[-1].input_bytes)} of inputs, "
                            f"{gib(max_input_bytes)} available (its outputs depend on all of them)")
    return Cut(tuple(regions), len(d.table.order) - len(cd), len(d.table.order), len(t.table.order))


def _pair_loops(d: Side, t: Side) -> dict:
    """Labels for the tuned module's loop-carried elements that make them the default's.

    Loops pair in module order (passes rarely add or remove loops); within a pair, equal labels
    (same type, initial value and refinement) pair first, then the rest pair by type in order
    (an element whose initial value is itself a changed value). Labels only name roles: a wrong
    pairing can make equal modules look different (an outputs mismatch), never hide a difference,
    because the values themselves are compared by execution."""
    overrides = {}
    if len(d.loop_keys) != len(t.loop_keys):
        return overrides
    for number, (wd, wt) in enumerate(zip(d.loop_keys, t.loop_keys)):
        ld, lt = d.loops[wd].labels, t.loops[wt].labels
        exact = set(ld.values()) & set(lt.values())
        rest_d = list(dict.fromkeys((ld[i], element_type(d.table.entries[wd].sig, i)) for i in sorted(ld)
                                    if ld[i] not in exact))
        rest_t = list(dict.fromkeys((lt[i], element_type(t.table.entries[wt].sig, i)) for i in sorted(lt)
                                    if lt[i] not in exact))
        for label, typ in rest_t:
            match = next((x for x in rest_d if x[1] == typ), None)
            if match is not None:
                rest_d.remove(match)
                for i in lt:
                    if lt[i] == label:
                        overrides[(number, i)] = match[0]
    return overrides


def _topological(side: Side, keys: list) -> list:
    """``keys`` with every operand before its user (operands resolved through loops cross computations)."""
    members, out, done = set(keys), [], set()
    for start in keys:
        stack = [(start, False)]
        while stack:
            k, expanded = stack.pop()
            if k in done:
                continue
            if expanded:
                done.add(k)
                out.append(k)
                continue
            stack.append((k, True))
            stack.extend((o, False) for o in side.operands(k) if o in members and o not in done)
    return out


def _reads(side: Side, keys: list, outs: list, tag: str) -> dict:
    """``{value hash: key}`` of the values ``keys`` read from outside (and outputs they do not compute)."""
    mine, out = set(keys), {}
    for k in keys:
        for o in side.operands(k):
            if o not in mine:
                out.setdefault(side.hashes[o], o)
    for _, kd, kt in outs:
        k = kd if tag == "d" else kt
        if k not in mine:
            out.setdefault(side.hashes[k], k)
    return out


def _is_free_leaf(side: Side, key) -> bool:
    return key in side.label_of or side.table.entries[key].opcode == "parameter"


def _reaches_free(side: Side, key, memo: dict) -> bool:
    """Does ``key`` depend on anything free (a parameter or a loop-carried element)? Memoised per
    side: the graph does not change while the inputs are closed."""
    stack = [key]
    while stack:
        k = stack[-1]
        if k in memo:
            stack.pop()
            continue
        if _is_free_leaf(side, k):
            memo[k] = True
            stack.pop()
            continue
        ops = side.operands(k)
        todo = [o for o in ops if o not in memo]
        if todo:
            stack.extend(todo)
            continue
        memo[k] = any(memo[o] for o in ops)
        stack.pop()
    return memo[key]


def _conflicts(where: dict, free_memo: dict) -> set:
    """The inputs (value hashes) the region must compute itself: those computed from constants
    only, those that depend on another input, and those that share a computed ancestor with
    another input. One walk over the graph: each input walks its cone until it meets a value an
    earlier input's walk owns (a shared ancestor: both are pulled, and everything below was walked
    already). Before, every input walked its whole cone in every round: minutes on a 10k-instruction
    train step whose region is most of the module."""
    pull, owner = set(), {}
    for h, (side, key) in where.items():
        memo = free_memo.setdefault(id(side), {})
        seen, stack, free = set(), [key], False
        while stack:
            k = stack.pop()
            if k in seen:
                continue
            seen.add(k)
            if _is_free_leaf(side, k):
                free = True
                continue
            ops = side.operands(k)
            if k != key and ops:
                hk = side.hashes[k]
                if hk in where:
                    pull.add(h)
                first = owner.setdefault(hk, h)
                if first != h:
                    pull.update({h, first})
                    free = free or _reaches_free(side, k, memo)
                    continue
            stack.extend(ops)
        if not free:  # a constant, or computed from constants only: the region computes it
            pull.add(h)
    return pull


def _close_inputs(d: Side, t: Side, members: dict, outs: list, rounds: int = 64) -> int:
    """Make the region's inputs free of each other; returns how many instructions that added.

    Random inputs are only sound when no input is a function of the others: if one module reads
    ``x`` and the other ``-x`` (computed outside the region, identically in both), drawing both
    at random breaks the relation the program guarantees, and equal programs would disagree.
    So an input that depends on another input, or shares a computed ancestor with one, is
    computed inside the region instead (on both sides), until the inputs depend only on leaves
    (parameters, loop-carried elements). Constants are never drawn at random: a reduction's
    zero, a mask's bound are computed in the region."""
    added, free_memo = 0, {}
    known = {tag: {side.hashes[k] for k in side.table.order} for tag, side in (("d", d), ("t", t))}
    for _ in range(rounds):
        reads = {"d": _reads(d, members["d"], outs, "d"), "t": _reads(t, members["t"], outs, "t")}
        where = {}
        for tag, side in (("d", d), ("t", t)):
            for h, k in reads[tag].items():
                where.setdefault(h, (side, k))
        pull = _conflicts(where, free_memo)
        if not pull:
            return added
        for tag, side in (("d", d), ("t", t)):
            present = set(members[tag])
            for h in pull:
                if h in reads[tag] and h in known[tag]:
                    k = reads[tag][h]
                    if k not in present and k not in side.plumbing:
                        members[tag].append(k)
                        present.add(k)
                        added += 1
        members["d"], members["t"] = _topological(d, members["d"]), _topological(t, members["t"])
    return added


def _region(index: int, d: Side, t: Side, members: dict, outs: list) -> Region:
    """Both standalone modules of one region (same parameters: the union of both sides' inputs)."""
    context = _close_inputs(d, t, members, outs)
    inputs: dict = {}  # value hash -> (type, description)
    for side, tag in ((d, "d"), (t, "t")):
        mine = set(members[tag])
        other = t if side is d else d
        for k in members[tag]:
            for o in side.operands(k):
                if o in mine:
                    continue
                h = side.hashes[o]
                if h not in other.values:
                    raise CannotCut(f"region {index} reads {o[1]} ({o[0]}), a value only one module computes")
                inputs.setdefault(h, side.type_of(o))
        for _, kd, kt in outs:
            k = kd if tag == "d" else kt
            if k not in mine:
                h = side.hashes[k]
                if h not in other.values:
                    raise CannotCut(f"region {index} outputs {k[1]}, a value only one module computes")
                inputs.setdefault(h, side.type_of(k))
    params = sorted(inputs)
    sides = {"d": (d, members["d"], [kd for _, kd, _ in outs], "default"),
             "t": (t, members["t"], [kt for _, _, kt in outs], "tuned")}
    texts = {tag: _module_text([sides[tag]], params, inputs, f"region_{index}_{sides[tag][3]}") for tag in sides}
    # both sides in one module: one draw of the inputs, one compile, one run
    texts["both"] = _module_text([sides["d"], sides["t"]], params, inputs, f"region_{index}")
    protos = {}
    for tag, text in texts.items():
        try:
            protos[tag] = hlo.parse_text(text).as_serialized_hlo_module_proto()
        except Exception as exc:  # our own text not parsing is a limit of the cut, not a verdict
            raise CannotCut(f"region {index} does not parse as a module: {exc}") from None
    listing = []
    for side, tag, label in ((d, "d", "XLA's default"), (t, "t", "tuned")):
        keys = members[tag]
        listing.append(f"{label}: {len(keys)} instruction(s)" + (f" ({context} on both sides computed as context, "
                                                                   "so that its inputs are independent)" if context and tag == "d" else ""))
        listing += ["  " + matching.clean(side.table.entries[k].inst.to_string())[:200] for k in keys[:LIST_CAP]]
        if len(keys) > LIST_CAP:
            listing.append(f"  ... {len(keys) - LIST_CAP} more")
    comps = tuple(dict.fromkeys(k[0] for k in members["d"] + members["t"]))
    out_bytes = sum(shape_bytes(d.type_of(kd)) for _, kd, _ in outs)
    return Region(index, protos["d"], protos["t"], protos["both"], len(members["d"]), len(members["t"]), comps, len(params),
                  sum(shape_bytes(inputs[h]) for h in params), out_bytes, tuple(r for r, _, _ in outs),
                  "\n".join(listing), tuple(members["d"]), tuple(members["t"]))


def _side_body(side: Side, keys: list, params: list, types: dict, outputs: list, prefix: str):
    """One side's instructions as entry lines (named ``%{prefix}.N``, reading ``%input.I``), its
    outputs (references and types) and the computations they call (blocks, renamed with
    ``prefix`` so that both sides' computations can live in one module)."""
    names: dict = {h: f"%input.{i}" for i, h in enumerate(params)}
    body = []
    keyset = set(keys)
    callees: list = []

    def ref(k):
        return names[k] if k in keyset else names[side.hashes[k]]

    for n, k in enumerate(keys):
        line = side.lines[k]
        m = standins.INSTRUCTION.match(line)
        _, _, _, type_str, opcode, rest = m.groups()
        resolved = side.operands(k)
        names[k] = f"%{prefix}.{n}"
        callees.extend(side.table.entries[k].called)
        if not resolved:  # constant(...), iota(), parameter-free: the text stays as it is
            body.append(f"  %{prefix}.{n} = {type_str} {opcode}({rest}")
            continue
        operands, tail = standins.split_operands(rest)
        if len(operands) != len(resolved):
            raise CannotCut(f"cannot read the operands of {k[1]}")
        tail = hlo.strip_attr(tail, "control-predecessors")
        body.append(f"  %{prefix}.{n} = {type_str} {opcode}({', '.join(ref(o) for o in resolved)}){tail}")
    out_refs = [ref(k) for k in outputs]
    out_types = [side.type_of(k) if k in keyset else types[side.hashes[k]] for k in outputs]
    # the computations the region's instructions call, and theirs
    seen, order = set(), []
    while callees:
        c = callees.pop()
        if c in seen:
            continue
        seen.add(c)
        order.append(c)
        callees.extend(x for k in side.table.order if k[0] == c for x in side.table.entries[k].called)
    blocks = [side.blocks[c] for c in reversed(order)]
    if seen:
        pattern = re.compile(r"%(" + "|".join(re.escape(c) for c in sorted(seen, key=len, reverse=True))
                             + r")(?![\w.\-])")
        blocks = [pattern.sub(lambda m: f"%{prefix}.{m.group(1)}", b) for b in blocks]
        body = [pattern.sub(lambda m: f"%{prefix}.{m.group(1)}", ln) for ln in body]
    return body, out_refs, out_types, blocks


def _module_text(sides: list, params: list, types: dict, name: str) -> str:
    """A standalone module: parameters for ``params`` (value hashes), then each side's instructions
    (``sides``: ``(side, keys, outputs, prefix)``), returning all their outputs in order."""
    lines = [f"  %input.{i} = {types[h]} parameter({i})" for i, h in enumerate(params)]
    refs, out_types, blocks = [], [], []
    for side, keys, outputs, prefix in sides:
        body, r, t, b = _side_body(side, keys, params, types, outputs, prefix)
        lines += body
        refs += r
        out_types += t
        blocks += b
    lines.append(f"  ROOT %outputs = ({', '.join(out_types)}) tuple({', '.join(refs)})")
    sig = ", ".join(f"input.{i}: {types[h]}" for i, h in enumerate(params))
    entry = f"ENTRY %{name} ({sig}) -> ({', '.join(out_types)}) {{\n" + "\n".join(lines) + "\n}"
    return "\n\n".join([f"HloModule {name}", *blocks, entry]) + "\n"
