"""One final module's values, as ``region.py`` matches them: every instruction hashed by what it
computes, looking through while-loop state (an element the body passes through unchanged is the value
that entered the loop; a loop-carried one gets a label). ``Side`` holds one module's table of them.

Parses and prints only (``jaxlib._hlo``); runs in the driver, like ``explain``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from autotune.core.graph import bottom_up, digest
from autotune.pipelines.xla import hlo, matching, standins

_INDEX = re.compile(r"\bindex=(\d+)")
_COND = re.compile(r"\bcondition=%([\w.\-]+)")
_BODY = re.compile(r"\bbody=%([\w.\-]+)")
_COMMENT = re.compile(r"/\*.*?\*/")
_ELEMENT_BYTES = {"pred": 1, "s2": 1, "u2": 1, "s4": 1, "u4": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "s32": 4,
                  "u32": 4, "s64": 8, "u64": 8, "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16}


# ---- one module's values ---------------------------------------------------------------------------------
def shape_bytes(type_str: str) -> int:
    """Bytes of an HLO type (a tuple: the sum of its leaves)."""
    def walk(shape) -> int:
        if isinstance(shape, list):
            return sum(walk(s) for s in shape)
        dtype, dims = shape
        return math.prod(dims) * _ELEMENT_BYTES.get(dtype, 4) if dtype != "token" else 0
    try:
        return walk(standins.parse_type(type_str))
    except (standins.Unsupported, IndexError):
        return 0


def blocks(text: str) -> tuple[dict, dict, str]:
    """HLO text -> ({computation: block text}, {(computation, instruction): line}, entry name)."""
    blocks, lines, entry = {}, {}, ""
    current, buf = None, []
    for line in text.splitlines():
        if current is None:
            if line and not line.startswith(" ") and line.rstrip().endswith("{"):
                header = line[6:] if line.startswith("ENTRY ") else line
                current = header.split(" ", 1)[0].lstrip("%")
                if line.startswith("ENTRY "):
                    entry = current
                buf = [line]
            continue
        buf.append(line)
        if line.strip() == "}":
            blocks[current] = "\n".join(buf)
            current = None
            continue
        m = standins.INSTRUCTION.match(line)
        if m:
            lines[(current, m.group(3).lstrip("%"))] = line
    return blocks, lines, entry


@dataclass
class Loop:
    key: tuple  # the while instruction
    init: tuple  # its operand (a tuple instruction)
    body: str
    cond: str
    invariant: frozenset  # element indices the body passes through unchanged
    labels: dict  # element index -> label (variant elements)


class Side:
    """One final module as values: hashes, aliases, plumbing, sinks."""

    def __init__(self, module):
        #: (loop number, element) -> label forced by the pairing with the other module (``cut``)
        self.overrides: dict = {}
        self.table = matching.instruction_table(module)
        text = hlo.to_text(module)
        self.blocks, self.lines, self.entry = blocks(text)
        e = self.table.entries
        self.users: dict = {}
        for key in self.table.order:
            for o in e[key].operands:
                self.users.setdefault(o, []).append(key)
        calls: dict = {}
        for key in self.table.order:
            for c in e[key].called:
                calls[c] = calls.get(c, 0) + 1
        # value-space computations: the entry, and the body/condition of loops we can look through
        self.loops: dict = {}  # while key -> Loop
        self.loop_of_comp: dict = {}  # body/cond name -> while key
        todo = [self.entry]
        self.value_comps = set()
        while todo:
            comp = todo.pop()
            self.value_comps.add(comp)
            for key in self.table.order:
                if key[0] != comp or e[key].opcode != "while":
                    continue
                loop = self._loop(key, calls)
                if loop is not None:
                    self.loops[key] = loop
                    self.loop_of_comp[loop.body] = self.loop_of_comp[loop.cond] = key
                    todo += [loop.body, loop.cond]
        self.alias: dict = {}  # gte key -> the key whose value it is
        self.label_of: dict = {}  # gte(param) key -> (loop key, element)
        self.plumbing: set = set()
        for wkey, loop in self.loops.items():
            self.plumbing.update({wkey, loop.init, self.table.roots[loop.body]})
            for comp in (loop.body, loop.cond):
                for key in self.table.order:
                    if key[0] == comp and e[key].opcode == "parameter":
                        self.plumbing.add(key)
                        for u in self.users.get(key, ()):
                            self._element(u, wkey, loop)
            for u in self.users.get(wkey, ()):
                if e[u].opcode == "get-tuple-element":
                    self._element(u, wkey, loop)
        root = self.table.roots[self.entry]
        if e[root].opcode == "tuple":
            self.plumbing.add(root)
        self.loop_keys = [k for k in self.table.order if k in self.loops]  # loop number -> while key
        self.splits: dict = {}
        self.relabel({})

    def relabel(self, overrides: dict) -> None:
        """Hash again with some loop-carried elements' labels forced to the other module's.

        Elements with the same type and initial value share a label unless their next values
        differ (partition refinement, as in DFA minimisation): two state elements that always hold
        the same value are one value, so a module that carries it twice and one that carries it
        once (``cse`` merged them) agree."""
        self.overrides = dict(overrides)
        self.splits: dict = {}
        for _ in range(16):
            self.hashes = self._hash()
            refined = False
            for number, wkey in enumerate(self.loop_keys):
                loop = self.loops[wkey]
                root = self.table.entries[self.table.roots[loop.body]]
                groups: dict = {}
                for i in sorted(loop.labels):
                    groups.setdefault(loop.labels[i], []).append(i)
                for members in groups.values():
                    nexts = [self.hashes.get(self.resolve(root.operands[i]), "?") for i in members]
                    if len(set(nexts)) > 1:
                        order = list(dict.fromkeys(nexts))
                        for i, h in zip(members, nexts):
                            self.splits[(number, i)] = self.splits.get((number, i), "") + f"/{order.index(h)}"
                        refined = True
            if not refined:
                break
        self.values = {self.hashes[k] for k in self.table.order if k[0] in self.value_comps}

    def _element(self, u, wkey, loop) -> None:
        """``u`` reads element i of loop ``wkey``'s state (inside its body/cond or after it): plumbing,
        and either the loop-invariant value that enters the loop or the loop's labelled element i."""
        e = self.table.entries
        i = int(_INDEX.search(e[u].sig).group(1))
        self.plumbing.add(u)
        if i in loop.invariant:
            self.alias[u] = e[loop.init].operands[i]
        else:
            self.label_of[u] = (wkey, i)

    def _loop(self, key, calls) -> Loop | None:
        """The loop at ``key`` if it can be looked through: its own body and condition, a tuple as its
        initial value and as the body's root, and a state read only through get-tuple-element."""
        e = self.table.entries
        ent = e[key]
        raw = matching.clean(ent.inst.to_string())
        cm, bm = _COND.search(raw), _BODY.search(raw)
        if not cm or not bm:
            return None
        cond, body = cm.group(1), bm.group(1)
        init = ent.operands[0] if len(ent.operands) == 1 else None
        if init is None or e.get(init) is None or e[init].opcode != "tuple" or calls.get(body) != 1 or calls.get(cond) != 1:
            return None
        if len(self.users.get(init, ())) != 1:
            return None
        root = self.table.roots.get(body)
        if root is None or e[root].opcode != "tuple":
            return None
        for comp in (body, cond):
            for k in self.table.order:
                if k[0] == comp and e[k].opcode == "parameter":
                    if any(e[u].opcode != "get-tuple-element" for u in self.users.get(k, ())):
                        return None
        invariant = set()
        for i, o in enumerate(e[root].operands):
            oe = e[o]
            if (oe.opcode == "get-tuple-element" and e[oe.operands[0]].opcode == "parameter"
                    and int(_INDEX.search(oe.sig).group(1)) == i):
                invariant.add(i)
        return Loop(key, init, body, cond, frozenset(invariant), {})

    def resolve(self, key):
        seen = 0
        while key in self.alias and seen < 1000:
            key, seen = self.alias[key], seen + 1
        return key

    def _hash(self) -> dict:
        e, roots = self.table.entries, self.table.roots

        def deps(key):
            if key in self.alias:
                return [self.alias[key]]
            if key in self.label_of:
                wkey, _ = self.label_of[key]
                return [wkey]
            if key in self.loops:
                loop = self.loops[key]
                return list(e[loop.init].operands)
            ent = e[key]
            return [o for o in ent.operands if o in e] + [roots[c] for c in ent.called if c in roots]

        def combine(key, hashes):
            if key in self.alias:
                return hashes.get(self.alias[key], "?")
            if key in self.label_of:
                wkey, i = self.label_of[key]
                loop = self.loops[wkey]
                label = loop.labels.get(i, "?")
                # inside the loop: the element's current value; after it: its final value
                return label if key[0] in (loop.body, loop.cond) else digest(["after-loop", label])
            if key in self.loops:
                loop = self.loops[key]
                init_ops = e[loop.init].operands
                number = self.loop_keys.index(key) if key in self.loop_keys else -1
                for i, o in enumerate(init_ops):
                    if i not in loop.invariant:
                        loop.labels[i] = digest(["loop-carried", element_type(e[key].sig, i), hashes.get(o, "?"),
                                                          self.splits.get((number, i), "")])
                for i in loop.labels:
                    loop.labels[i] = self.overrides.get((number, i), loop.labels[i])
                return digest(["loop"] + sorted(loop.labels.values()))
            ent = e[key]
            return digest([ent.sig] + [hashes.get(o, "?") for o in ent.operands]
                                   + ["C" + hashes.get(roots.get(c), "?") for c in ent.called])

        return bottom_up(self.table.order, deps, combine)

    # -- what a region is made of --
    def changed(self, other_values) -> set:
        """Keys of value-space compute instructions whose value the other module does not compute."""
        return {k for k in self.table.order if k[0] in self.value_comps and k not in self.plumbing
                and self.hashes[k] not in other_values}

    def sinks(self) -> dict:
        """Where both modules consume values in the same role: role -> value key (aliases resolved)."""
        e = self.table.entries
        out = {}
        root = self.table.roots[self.entry]
        if e[root].opcode == "tuple":
            for i, o in enumerate(e[root].operands):
                out[f"entry output {i}"] = self.resolve(o)
        else:
            out["entry output"] = root
        for wkey, loop in self.loops.items():
            body_root = self.table.roots[loop.body]
            for i, label in loop.labels.items():
                out[f"loop-carried {label[:8]} (next)"] = self.resolve(e[body_root].operands[i])
                out[f"loop-carried {label[:8]} (initial)"] = self.resolve(e[loop.init].operands[i])
            out["loop condition " + digest(sorted(loop.labels.values()))[:8]] = self.table.roots[loop.cond]
        return out

    def operands(self, key) -> list:
        return [self.resolve(o) for o in self.table.entries[key].operands]

    def type_of(self, key) -> str:
        m = standins.INSTRUCTION.match(self.lines[key])
        return m.group(4)


def element_type(while_sig: str, i: int) -> str:
    """The type of element ``i`` of a while's tuple type, from its signature text."""
    type_str = _COMMENT.sub("", while_sig.split(" while(", 1)[0])
    try:
        shape = standins.parse_type(type_str)
        return standins.type_text(shape[i]) if isinstance(shape, list) and i < len(shape) else type_str
    except (standins.Unsupported, IndexError):
        return type_str
