"""Structural counts of an HLO module: the constructs that decide which pass pays first.

The opcode histogram says *what* a module contains, not *where* or *how it is wired*. The passes
that beat XLA's default on LLM steps act on wiring: ``cse`` merges instructions that compute the
same thing from the same operands (rotary tables and masks rebuilt in every layer of a ``scan``
body, duplicated ``iota``/``broadcast``/``constant``), ``algsimp`` folds chains of layout ops and
no-op converts, ``reshape-mover`` sinks reshapes and transposes below element-wise ops. This module
counts those patterns from the module's HLO text (``hlo.elided_text``: names, shapes, operands and
called computations, constants elided), one pass over the text, no XLA call:

* ``loop:<opcode>``: instructions per opcode inside ``while`` bodies and conditions (and the
  computations they call, transitively): what a layer under ``lax.scan`` is made of; the KV-cache
  ``dynamic-update-slice``/``scatter`` and the MoE ``gather``/``scatter`` show up here.
* ``while``: number of while loops; ``loop_instructions``: instructions inside them.
* ``cse_candidates``: instructions (not parameters) that repeat another of the same computation
  exactly (opcode, shape, operands and attributes): what ``cse`` would merge in one round;
  ``cse_candidates_in_loops`` the same inside loop bodies.
* ``layout_chains``: reshape/transpose/bitcast/copy whose operand is itself one of those (what
  ``algsimp`` folds); ``convert_chains``: convert of a convert; ``broadcast_chains``: broadcast or
  reshape of a broadcast.
* ``elementwise_of_layout``: element-wise instructions with at least one reshape/transpose operand
  and no other non-scalar operand kind (what ``reshape-mover`` can move across).
* ``constant_broadcasts``: broadcasts of a constant (foldable or mergeable).
* ``dead``: non-root instructions without users (what ``dce`` removes).
* ``computations``: number of computations.

What one device's program of a partitioned step adds (``PARTITION_COUNTS``; zero, and ``devices`` 1,
for a single-device module). The opcode histogram already counts each collective and ``loop:`` the
collectives inside loop bodies; these say how the program is wired around them:

* ``devices``: how many devices the step is partitioned over: the largest of the header's
  ``num_partitions`` x ``replica_count`` and the device ids the collectives name (``replica_groups``,
  ``source_target_pairs``), so it survives a module printed without the header's options.
* ``between_collectives``: instructions that use a collective's result and feed another collective
  (transitively, in one computation): the computation sandwiched between exchanges, where a pass that
  moves a reshape or merges a broadcast changes what is exchanged.
* ``collective_layout_operands``: collectives with a reshape/transpose/bitcast/copy/convert operand
  (what ``algsimp`` and ``reshape-mover`` can fold into or move across the exchange).
* ``device_index_arith``: integer or predicate instructions computed from ``partition-id`` or
  ``replica-id`` (transitively, through such instructions): the partitioner's per-device offset
  arithmetic (constant tables sliced by the device index), which ``algsimp`` and the simplifiers
  rewrite.

Every count is a plain integer, keyed by a stable name (``STRUCTURE_COUNTS`` plus the ``loop:``
opcode keys), and travels in ``Metrics.structure``.
"""

from __future__ import annotations

import collections
import re

from autotune.core.metrics import COLLECTIVE_OPCODES

#: The scalar (non-histogram) structural counts, in the order observations use them.
STRUCTURE_COUNTS = (
    "while", "loop_instructions", "cse_candidates", "cse_candidates_in_loops", "layout_chains",
    "convert_chains", "broadcast_chains", "elementwise_of_layout", "constant_broadcasts", "dead",
    "computations",
)
#: The counts of a partitioned program's wiring (the docstring's second list), observed by policies whose
#: layout has them (``autotune.rl.observation``: ``partition:*``).
PARTITION_COUNTS = ("devices", "between_collectives", "collective_layout_operands", "device_index_arith")
LOOP_PREFIX = "loop:"

_HEADER = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INST = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s([a-z][a-z0-9\-]*)\((.*)$")
_NAME = re.compile(r"%([\w.\-]+)")
_CALLS = re.compile(r"(body|condition|to_apply|calls|branch_computations|true_computation|false_computation)="
                    r"(\{[^}]*\}|%?[\w.\-]+)")
_LAYOUT = frozenset({"reshape", "transpose", "bitcast", "copy"})
_DEVICE_INDEX = frozenset({"partition-id", "replica-id"})
#: Index arithmetic is integer (or predicate) valued; the data a device offset slices is not counted.
_INTEGER = re.compile(r"\(?(s|u)(8|16|32|64)\[|\(?pred\[")
_HEADER_DEVICES = re.compile(r"\b(num_partitions|replica_count)=(\d+)")
_GROUPS = re.compile(r"(?:replica_groups|source_target_pairs)=(\{[\d,{}\s]*\}|\[[\d,]+\]<=\[[\d,]+\][^,\s]*)")
_ELEMENTWISE = frozenset({
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "remainder", "and", "or",
    "xor", "select", "clamp", "compare", "negate", "exponential", "log", "tanh", "logistic", "sqrt",
    "rsqrt", "abs", "sign", "convert", "sine", "cosine", "exponential-minus-one", "log-plus-one",
    "floor", "ceil", "not", "atan2", "erf", "cbrt", "round-nearest-even", "round-nearest-afz",
})


def _split_operands(rest: str) -> tuple[str, str]:
    """(operand list, attributes) of the text after ``opcode(``: the operand list ends at the matching ')'."""
    depth = 1
    for i, ch in enumerate(rest):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return rest[:i], rest[i + 1:]
    return rest, ""


def parse_computations(text: str) -> dict[str, list[tuple[str, str, str, tuple[str, ...], str, bool]]]:
    """Computations of the text: name -> [(name, shape, opcode, operand names, operand text + attributes, is_root)].

    Public: ``gpu_cost.py`` reads the GPU-compiled module with it too."""
    comps: dict[str, list] = {}
    current: list | None = None
    for line in text.splitlines():
        if current is None:
            if line.startswith("HloModule"):
                continue
            m = _HEADER.match(line)
            if m:
                current = comps.setdefault(m.group(1), [])
            continue
        if line.startswith("}"):
            current = None
            continue
        m = _INST.match(line)
        if not m:
            continue
        root, name, shape, opcode, rest = m.groups()
        operands, attrs = _split_operands(rest)
        current.append((name, shape.strip(), opcode, tuple(_NAME.findall(operands)), operands + ")" + attrs.strip(),
                        bool(root)))
    return comps


def called_computations(attrs: str) -> list[tuple[str, str]]:
    """(role, computation name) pairs an instruction's attributes call."""
    out = []
    for role, names in _CALLS.findall(attrs):
        out.extend((role, n) for n in (_NAME.findall(names) or [names.strip("{}% ")]) if n)
    return out


def _group_devices(attrs: str) -> int:
    """Devices the replica groups / source-target pairs of one instruction's attributes name (0: none)."""
    most = 0
    for group in _GROUPS.findall(attrs):
        if group.startswith("{"):
            ids = [int(x) for x in re.findall(r"\d+", group)]
            most = max(most, max(ids) + 1 if ids else 0)
        else:  # iota form [groups,size]<=[dims]...: the device count is the product of the reshaped dims
            n = 1
            for x in re.search(r"<=\[([\d,]+)\]", group).group(1).split(","):
                n *= int(x)
            most = max(most, n)
    return most


def _partition_counts(text: str, comps: dict) -> dict[str, int]:
    """``PARTITION_COUNTS`` of a module (see the module docstring)."""
    counts = dict.fromkeys(PARTITION_COUNTS, 0)
    first = text.partition("\n")[0]  # XLA prints the module's header line first
    header = first if first.startswith("HloModule") else ""
    declared = dict.fromkeys(("num_partitions", "replica_count"), 1)
    declared.update({k: int(v) for k, v in _HEADER_DEVICES.findall(header)})
    devices = declared["num_partitions"] * declared["replica_count"]
    for insts in comps.values():
        after_collective: set[str] = set()  # uses a collective's result (transitively)
        from_index: set[str] = set()  # computed from the device index (transitively)
        kind = {i[0]: i[2] for i in insts}
        for name, shape, opcode, operands, attrs, root in insts:
            if opcode in COLLECTIVE_OPCODES:
                devices = max(devices, _group_devices(attrs))
                if any(kind.get(o) in _LAYOUT or kind.get(o) == "convert" for o in operands):
                    counts["collective_layout_operands"] += 1
            if any(o in after_collective for o in operands) or opcode in COLLECTIVE_OPCODES:
                after_collective.add(name)
            if opcode in _DEVICE_INDEX or (_INTEGER.match(shape) and any(o in from_index for o in operands)):
                from_index.add(name)
                counts["device_index_arith"] += opcode not in _DEVICE_INDEX
        feeds_collective: set[str] = set()  # a collective uses it (transitively)
        for name, shape, opcode, operands, attrs, root in reversed(insts):
            if opcode in COLLECTIVE_OPCODES or name in feeds_collective:
                if name in feeds_collective and name in after_collective and opcode not in COLLECTIVE_OPCODES:
                    counts["between_collectives"] += 1
                feeds_collective.update(operands)
    counts["devices"] = devices
    return counts


def structure_counts(text: str) -> dict[str, int]:
    """The named structural counts of one module's HLO text (see the module docstring)."""
    comps = parse_computations(text)
    counts: collections.Counter[str] = collections.Counter({k: 0 for k in STRUCTURE_COUNTS})
    counts.update(_partition_counts(text, comps))
    counts["computations"] = len(comps)
    loop_roots: set[str] = set()
    calls: dict[str, set[str]] = {c: set() for c in comps}
    for cname, insts in comps.items():
        for name, shape, opcode, operands, attrs, root in insts:
            for role, callee in called_computations(attrs):
                calls[cname].add(callee)
                if opcode == "while" and role in ("body", "condition"):
                    loop_roots.add(callee)
            if opcode == "while":
                counts["while"] += 1
    in_loop: set[str] = set()
    stack = [c for c in loop_roots if c in comps]
    while stack:
        c = stack.pop()
        if c in in_loop:
            continue
        in_loop.add(c)
        stack.extend(x for x in calls.get(c, ()) if x in comps and x not in in_loop)
    for cname, insts in comps.items():
        loop = cname in in_loop
        by_name = {i[0]: i for i in insts}
        users: collections.Counter[str] = collections.Counter()
        seen: set[tuple] = set()
        for name, shape, opcode, operands, attrs, root in insts:
            users.update(operands)
            if loop:
                counts["loop_instructions"] += 1
                counts[LOOP_PREFIX + opcode] += 1
            if opcode != "parameter":
                key = (shape, opcode, attrs)  # attrs holds the operand text (constants' literals included)
                if key in seen:
                    counts["cse_candidates"] += 1
                    if loop:
                        counts["cse_candidates_in_loops"] += 1
                else:
                    seen.add(key)
            kinds = [by_name[o][2] for o in operands if o in by_name]
            if opcode in _LAYOUT and kinds and kinds[0] in _LAYOUT:
                counts["layout_chains"] += 1
            if opcode == "convert" and kinds and kinds[0] == "convert":
                counts["convert_chains"] += 1
            if opcode in ("broadcast", "reshape") and kinds and kinds[0] == "broadcast":
                counts["broadcast_chains"] += 1
            if opcode == "broadcast" and kinds and kinds[0] == "constant":
                counts["constant_broadcasts"] += 1
            if opcode in _ELEMENTWISE and kinds and any(k in ("reshape", "transpose") for k in kinds) and all(
                    k in ("reshape", "transpose", "constant", "broadcast") for k in kinds):
                counts["elementwise_of_layout"] += 1
        for name, shape, opcode, operands, attrs, root in insts:
            if not root and users[name] == 0 and opcode != "parameter":
                counts["dead"] += 1
    return dict(sorted(counts.items()))
