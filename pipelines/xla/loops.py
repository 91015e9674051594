"""Decisions per loop: unroll a counted while loop of the input module, by a factor or fully.

Why. Layers written as ``lax.scan`` (how LLM stacks keep their compiles short) reach XLA as one while loop
over stacked weights, and XLA's CPU pipeline has no while-loop unroller (``autotune passes`` lists none; the
GPU pipeline has one). Unrolled, each layer's dynamic slices of the stacked weights become static and the
loop's per-trip bookkeeping goes; whether that pays differs by loop (``python bench/levers.py``: training
steps gain, decode steps can lose), so it is a decision per loop, made by measuring, like the library
choice of ``sites.py``.

How. Unlike the library choice, unrolling has to happen *before* XLA's pipeline: the specialisation it buys
is XLA's own simplification of the unrolled body. So the decision rewrites the input module (text in, text
out): the loop's body becomes a new computation that calls the old body ``k`` times, and the loop runs a
``k``-th of its trips. ``full`` is ``k`` = the trip count: a loop of one trip, which XLA's while-loop
simplifier removes and its call inliner flattens. A loop is a site only when its trip count is read off
the module exactly (the counter starts at a constant, steps by one, and the condition compares it with a
constant), and a factor is offered only when it divides that count: the rewrite never changes what the
module computes (and every answer is executed and compared anyway).

Decisions travel as ``site:unroll:<while instruction>`` options with the value ``full`` or a factor;
``runner.compile_full`` and the JAX hook apply them to the module before it is compiled.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from autotune.pipelines.xla import hlo

#: The kind of decision, as in ``site:unroll:<instruction>``.
UNROLL = "unroll"
#: XLA's own choice: the loop as written.
AS_WRITTEN = "1"
FULL = "full"
#: The partial factors offered, where they divide the trip count (and are smaller than it).
FACTORS = (2, 4)
#: No factor is offered that would copy the body's instructions more than this many in all: an unrolled
#: generation loop of hundreds of trips would cost more compile time than any run could win back.
MAX_UNROLLED_INSTRUCTIONS = 50_000

_WHILE = re.compile(r"^(?P<lead>\s*(?:ROOT )?)%(?P<name>[\w.\-]+) = (?P<shape>\(.*\)) while\(%(?P<init>[\w.\-]+)\), "
                    r"condition=%(?P<cond>[\w.\-]+), body=%(?P<body>[\w.\-]+)(?P<rest>.*)$")
_LINE = re.compile(r"^\s*(?P<root>ROOT )?%(?P<name>[\w.\-]+) = (?P<shape>.+?) (?P<op>[a-z][a-z\-]*)\((?P<operands>.*?)\)"
                   r"(?P<rest>(?:, [a-z_]+=.*)?)$")
_COMP = re.compile(r"^(?P<entry>ENTRY )?%(?P<name>[\w.\-]+) \((?P<params>.*)\) -> (?P<result>.*) \{$")
_COMMENT = re.compile(r"/\*.*?\*/")


@dataclass(frozen=True)
class Loop:
    """A counted while loop: its instruction, trip count and computations."""

    name: str
    trips: int
    body: str
    condition: str
    body_size: int = 0  # the body computation's instructions

    def _affordable(self, k: int) -> bool:
        return k * self.body_size <= MAX_UNROLLED_INSTRUCTIONS

    @property
    def choices(self) -> tuple[str, ...]:
        partial = tuple(str(k) for k in FACTORS if self.trips % k == 0 and k < self.trips and self._affordable(k))
        return partial + ((FULL,) if self._affordable(self.trips) else ())

    def factor(self, choice: str) -> int | None:
        """The unroll factor of ``choice`` for this loop, None when it does not divide the trips."""
        k = self.trips if choice == FULL else int(choice) if str(choice).isdigit() else 0
        return k if k > 1 and self.trips % k == 0 and self._affordable(k) else None


@dataclass
class _Comp:
    name: str
    header: int
    end: int
    insts: dict  # name -> match


def _computations(lines: list[str]) -> dict[str, _Comp]:
    comps, current = {}, None
    for i, line in enumerate(lines):
        m = _COMP.match(line)
        if m:
            current = comps[m.group("name")] = _Comp(m.group("name"), i, i, {})
        elif line.startswith("}") and current is not None:
            current.end, current = i, None
        elif current is not None and (inst := _LINE.match(line)):
            current.insts[inst.group("name")] = inst
    return comps


def _operands(m) -> list[str]:
    return [o.strip().lstrip("%") for o in _COMMENT.sub("", m.group("operands")).split(",") if o.strip()]


def _constant(comp: _Comp, name: str) -> int | None:
    m = comp.insts.get(name)
    if m is None or m.group("op") != "constant" or not re.fullmatch(r"[su](8|16|32|64)\[\]", m.group("shape")):
        return None
    value = m.group("operands").strip()
    return int(value) if re.fullmatch(r"-?\d+", value) else None


def _gte_index(comp: _Comp, name: str) -> int | None:
    """``index`` of a get-tuple-element of the computation's parameter, else None."""
    m = comp.insts.get(name)
    if m is None or m.group("op") != "get-tuple-element":
        return None
    src = comp.insts.get(_operands(m)[0])
    idx = re.search(r"index=(\d+)", m.group("rest"))
    return int(idx.group(1)) if idx and src is not None and src.group("op") == "parameter" else None


def _root(comp: _Comp):
    return next((m for m in comp.insts.values() if m.group("root")), None)


def _trip_count(comps: dict[str, _Comp], caller: _Comp, w) -> int | None:
    """Trips of while ``w`` when its counter is plain: ``i < N`` in the condition, ``i + 1`` in the body,
    a constant start; else None."""
    cond, body = comps.get(w.group("cond")), comps.get(w.group("body"))
    if cond is None or body is None:
        return None
    root = _root(cond)
    if root is None or root.group("op") != "compare":
        return None
    direction = re.search(r"direction=(\w+)", root.group("rest"))
    a, b = _operands(root)
    if direction and direction.group(1) == "GT":
        a, b = b, a
    elif not direction or direction.group(1) != "LT":
        return None
    index, limit = _gte_index(cond, a), _constant(cond, b)
    if index is None or limit is None:
        return None
    body_root = _root(body)
    if body_root is None or body_root.group("op") != "tuple":
        return None
    outs = _operands(body_root)
    step = body.insts.get(outs[index]) if index < len(outs) else None
    if step is None or step.group("op") != "add":
        return None
    x, y = _operands(step)
    if not ((_gte_index(body, x) == index and _constant(body, y) == 1) or
            (_gte_index(body, y) == index and _constant(body, x) == 1)):
        return None
    init = caller.insts.get(w.group("init"))
    if init is None or init.group("op") != "tuple":
        return None
    starts = _operands(init)
    start = _constant(caller, starts[index]) if index < len(starts) else None
    if start is None or limit - start < 2:
        return None
    return limit - start


def _while_loops(lines: list[str], comps: dict[str, _Comp]):
    """``(line index, while match, Loop)`` per counted while loop."""
    for comp in comps.values():
        for i in range(comp.header + 1, comp.end):
            w = _WHILE.match(lines[i])
            if w is None:
                continue
            trips = _trip_count(comps, comp, w)
            if trips is not None:
                body = comps[w.group("body")]
                loop = Loop(w.group("name"), trips, w.group("body"), w.group("cond"), body.end - body.header - 1)
                if loop.choices:
                    yield i, w, loop


def find_loops(text: str) -> list[Loop]:
    """The counted while loops of an input module (unoptimised HLO text)."""
    lines = text.splitlines()
    return [loop for _, _, loop in _while_loops(lines, _computations(lines))]


@dataclass(frozen=True)
class UnrollResult:
    text: str
    applied: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()


def _unrolled_body(lines: list[str], body: _Comp, k: int, name: str) -> list[str]:
    """A computation calling ``body`` ``k`` times in a row, on the same loop state."""
    param = next(m for m in body.insts.values() if m.group("op") == "parameter")
    shape = param.group("shape")
    header = _COMP.match(lines[body.header])
    out = [f"%{name} ({header.group('params')}) -> {header.group('result')} {{",
           f"  %{name}.state = {shape} parameter(0)"]
    prev = f"{name}.state"
    for j in range(k):
        lead = "ROOT " if j == k - 1 else ""
        out.append(f"  {lead}%{name}.trip{j} = {shape} call(%{prev}), to_apply=%{body.name}")
        prev = f"{name}.trip{j}"
    return out + ["}", ""]


def unroll(text: str, decisions: Mapping[str, str]) -> UnrollResult:
    """``text`` with each ``{while instruction: factor or "full"}`` applied where the module holds that
    counted loop and the factor divides its trips (a decision of ``"1"`` leaves the loop as written)."""
    lines = text.splitlines()
    comps = _computations(lines)
    applied, unchanged, inserts = [], [], []
    taken = set(comps)  # computation names, the new bodies' included
    for idx, w, loop in list(_while_loops(lines, comps)):
        choice = decisions.get(loop.name)
        if choice is None:
            continue
        if str(choice) == AS_WRITTEN:
            unchanged.append(loop.name)
            continue
        k = loop.factor(str(choice))
        if k is None:
            continue
        new = f"{loop.body}.autotune_unroll{k}"
        n = 0
        while new in taken:
            n += 1
            new = f"{loop.body}.autotune_unroll{k}_{n}"
        body = comps[loop.body]
        inserts.append((body.end + 1, _unrolled_body(lines, body, k, new)))
        lines[idx] = lines[idx].replace(f"body=%{loop.body}", f"body=%{new}", 1)
        taken.add(new)
        applied.append(loop.name)
    for at, block in sorted(inserts, key=lambda x: -x[0]):
        lines[at:at] = block
    missing = tuple(sorted(set(decisions) - set(applied) - set(unchanged)))
    return UnrollResult("\n".join(lines) + "\n", tuple(applied), missing, tuple(unchanged))


def apply(proto: bytes, decisions: Mapping[str, str]) -> tuple[bytes, UnrollResult]:
    """The serialized input module with the loop decisions applied (unchanged bytes when none applied)."""
    result = unroll(hlo.to_text(hlo.parse_proto(proto)), decisions)
    if not result.applied:
        return proto, result
    return hlo.parse_text(result.text).as_serialized_hlo_module_proto(), result
