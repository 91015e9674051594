"""Host stand-ins for accelerator custom calls, so that a GPU-dumped module can still be executed.

Most HLO that people have comes from GPU/TPU runs, and it calls kernels the CPU backend does not
have (``cusolver_getrf_ffi``, ``cu_lu_pivots_to_permutation``, ``cusolver_syevd_ffi``, vendor
collectives): XLA refuses to compile it here ("No registered implementation for ... custom call").
Tuning does not need to run the module, but validation does. ``rewrite`` replaces every such
custom call by a ``call`` of a small generated computation (the stand-in) with the same result
shape, applied identically to the original and to the tuned module; both then run on the host and
everything *around* the custom calls is checked by execution.

What a stand-in computes (a pure function of its operands, so a pass that moved or duplicated the
custom call does not matter):

* every numeric operand contributes ``mean(x * w)`` with position weights ``w = 1 + i/n`` over its
  flattened elements (a weighted mean, so a permutation, a changed element or a changed scale of an
  operand changes the stand-in's value); the contributions are summed with weights 1, 1/2, 1/3...;
* a float (or complex) result leaf is that sum ``s`` plus a fixed pattern ``0.5 * sin(0.7 * i)``
  over its flattened positions, converted to the leaf's type: bounded, varied, and linear in ``s``
  so rounding differences of the operands stay rounding differences;
* an integer result leaf is ``iota`` along its last dimension (0 for a scalar): integer results of
  such kernels are pivots, permutations and status codes, which the surrounding code uses as
  indices or compares with 0; an iota is always a valid index (and a valid permutation) and 0 is
  "success". They do not depend on the operands: a float rounding difference must not flip an
  integer, which would report a false mismatch;
* a pred leaf is false, a token leaf ``after-all()``; tuples are rebuilt leaf by leaf.

The rewrite works on HLO text (printed by XLA with every constant, reparsed by XLA): a custom-call
instruction is one line, and the generated computations are plain HLO that any XLA version parses.
It runs in a worker process (``XlaWorker.stand_ins``), like every other use of XLA's parser.
"""

from __future__ import annotations

import math
import re

#: Partitioning and placement markers: XLA's own passes remove them on every platform before
#: codegen (the LLM steps dumped from GPU runs carry dozens of ``Sharding`` calls).
PARTITIONING_MARKERS = frozenset({
    "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "MoveToHost", "MoveToDevice",
    "annotate_device_placement", "LayoutConstraint", "InspectSharding", "local_sharding",
    "xla.sdy.GlobalToLocalShape", "xla.sdy.LocalToGlobalShape", "xla.sdy.FuncResultSharding",
})
#: Custom-call targets that XLA's compiler itself lowers or removes (the markers above, dynamic-shape
#: helpers, the host's callbacks): the host compiles them, so they keep their place.
COMPILER_HANDLED = PARTITIONING_MARKERS | frozenset({
    "PadToStatic", "SliceToDynamic", "SetBound", "TopK", "AllocateBuffer", "X64Combine", "X64SplitLow",
    "X64SplitHigh", "xla_python_cpu_callback", "xla_ffi_python_cpu_callback", "xla_buffer_python_cpu_callback",
})

_FLOATS = ("f16", "bf16", "f32", "f64")
INSTRUCTION = re.compile(r"^(\s*)(ROOT\s+)?(%?[^\s=]+) = (.+?) ([a-z][a-z0-9\-]*)\((.*)$")
_TARGET = re.compile(r'custom_call_target="([^"]*)"')
_LAYOUT = re.compile(r"\{[^{}]*\}")
_COMMENT = re.compile(r"/\*.*?\*/")  # XLA's ``/*index=5*/`` markers in long operand lists and tuple types


class Unsupported(ValueError):
    """A custom call whose shapes a stand-in cannot be built for (e.g. dynamic dimensions)."""


# ---- shapes ----------------------------------------------------------------------------------------------
def strip_layouts(type_str: str) -> str:
    return _LAYOUT.sub("", type_str).strip()


def parse_type(type_str: str):
    """``"(f32[8,8]{0,1}, s32[])"`` -> ``[("f32", (8, 8)), ("s32", ())]``; an array -> ``(dtype, dims)``."""
    text = strip_layouts(_COMMENT.sub("", type_str))
    pos = 0

    def parse():
        nonlocal pos
        while text[pos] == " ":
            pos += 1
        if text[pos] == "(":
            pos += 1
            items = []
            while True:
                while text[pos] == " ":
                    pos += 1
                if text[pos] == ")":
                    pos += 1
                    return items
                items.append(parse())
                while text[pos] == " ":
                    pos += 1
                if text[pos] == ",":
                    pos += 1
        m = re.compile(r"([a-z0-9]+)\[([^\]]*)\]").match(text, pos)
        if not m:
            raise Unsupported(f"cannot read the shape '{type_str}'")
        pos = m.end()
        dims = m.group(2).strip()
        if "<" in dims or "?" in dims:
            raise Unsupported(f"dynamic shape '{type_str}'")
        return m.group(1), tuple(int(d) for d in dims.split(",") if d.strip())

    out = parse()
    return out


def type_text(shape) -> str:
    if isinstance(shape, list):
        return "(" + ", ".join(type_text(s) for s in shape) + ")"
    dtype, dims = shape
    return f"{dtype}[{','.join(map(str, dims))}]"


def _kind(dtype: str) -> str:
    if dtype == "pred":
        return "pred"
    if dtype == "token":
        return "token"
    if dtype in ("c64", "c128"):
        return "complex"
    if dtype in _FLOATS or dtype.startswith("f8") or dtype.startswith("f4") or dtype.startswith("f6"):
        return "float"
    if dtype[0] in "su" and dtype[1:].isdigit():
        return "int"
    return "other"


# ---- one stand-in computation ----------------------------------------------------------------------------
class _Builder:
    def __init__(self, prefix: str):
        self.prefix = prefix
        self.lines: list[str] = []
        self.n = 0

    def emit(self, type_str: str, expr: str) -> str:
        name = f"%{self.prefix}.{self.n}"
        self.n += 1
        self.lines.append(f"  {name} = {type_str} {expr}")
        return name

    def const(self, value: float, dtype: str = "f32") -> str:
        return self.emit(f"{dtype}[]", f"constant({value!r})")

    def bcast(self, scalar: str, dtype: str, dims) -> str:
        return self.emit(f"{dtype}[{','.join(map(str, dims))}]", f"broadcast({scalar}), dimensions={{}}")


def _operand_sum(b: _Builder, params: list[tuple[str, object]], add: str) -> str:
    """f32 scalar: sum over array operands of weighted means (see the module docstring)."""
    total = b.const(0.0)
    zero = b.const(0.0)
    for k, (name, shape) in enumerate(params):
        if isinstance(shape, list):
            continue
        dtype, dims = shape
        kind = _kind(dtype)
        n = math.prod(dims)
        if kind in ("token", "other") or n == 0:
            continue
        dims_s = ",".join(map(str, dims))
        x = name
        if kind == "complex":
            x = b.emit(f"{'f64' if dtype == 'c128' else 'f32'}[{dims_s}]", f"real({x})")
        x = b.emit(f"f32[{dims_s}]", f"convert({x})")
        flat = b.emit(f"f32[{n}]", f"reshape({x})")
        iota = b.emit(f"f32[{n}]", "iota(), iota_dimension=0")
        inv_n = b.const(1.0 / n)
        w = b.emit(f"f32[{n}]", f"multiply({iota}, {b.bcast(inv_n, 'f32', (n,))})")
        w = b.emit(f"f32[{n}]", f"add({w}, {b.bcast(b.const(1.0), 'f32', (n,))})")
        xw = b.emit(f"f32[{n}]", f"multiply({flat}, {w})")
        r = b.emit("f32[]", f"reduce({xw}, {zero}), dimensions={{0}}, to_apply={add}")
        mean = b.emit("f32[]", f"multiply({r}, {b.const(1.0 / (n * (k + 1)))})")
        total = b.emit("f32[]", f"add({total}, {mean})")
    return total


def _leaf(b: _Builder, shape, s: str) -> str:
    if isinstance(shape, list):
        parts = [_leaf(b, sub, s) for sub in shape]
        return b.emit(type_text(shape), f"tuple({', '.join(parts)})")
    dtype, dims = shape
    kind = _kind(dtype)
    t = type_text(shape)
    n = math.prod(dims)
    if kind == "token":
        return b.emit("token[]", "after-all()")
    if kind == "pred":
        return b.bcast(b.emit("pred[]", "constant(false)"), "pred", dims)
    if kind == "int":
        if not dims:
            return b.emit(t, "constant(0)")
        return b.emit(t, f"iota(), iota_dimension={len(dims) - 1}")
    if kind not in ("float", "complex"):
        raise Unsupported(f"no stand-in for a result of type {t}")
    if n == 0:
        return b.bcast(b.emit(f"{dtype}[]", f"convert({s})"), dtype, dims)
    iota = b.emit(f"f32[{n}]", "iota(), iota_dimension=0")
    phase = b.emit(f"f32[{n}]", f"multiply({iota}, {b.bcast(b.const(0.7), 'f32', (n,))})")
    wave = b.emit(f"f32[{n}]", f"sine({phase})")
    wave = b.emit(f"f32[{n}]", f"multiply({wave}, {b.bcast(b.const(0.5), 'f32', (n,))})")
    value = b.emit(f"f32[{n}]", f"add({wave}, {b.bcast(s, 'f32', (n,))})")
    value = b.emit(f"f32[{','.join(map(str, dims))}]", f"reshape({value})")
    return b.emit(t, f"convert({value})")


def stand_in_computation(name: str, operand_types: list[str], result_type: str, add: str) -> str:
    """HLO text of a computation ``name(operands) -> result`` computing the stand-in."""
    params = [parse_type(t) for t in operand_types]
    result = parse_type(result_type)
    b = _Builder(name.lstrip("%") + ".i")
    names = [b.emit(type_text(p), f"parameter({i})") for i, p in enumerate(params)]
    s = _operand_sum(b, list(zip(names, params)), add)
    root = _leaf(b, result, s)
    body = [ln.replace(f"  {root} =", f"  ROOT {root} =") if ln.startswith(f"  {root} =") else ln for ln in b.lines]
    sig = ", ".join(f"{n.lstrip('%')}: {type_text(p)}" for n, p in zip(names, params))
    return f"{name} ({sig}) -> {type_text(result)} {{\n" + "\n".join(body) + "\n}\n"


_ADD = "%autotune_standin_add"
_ADD_TEXT = f"{_ADD} (a: f32[], b: f32[]) -> f32[] {{\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n  ROOT %s = f32[] add(%a, %b)\n}}\n"


def split_operands(rest: str) -> tuple[list[str], str]:
    """``"%a, %b), attrs"`` -> (["%a", "%b"], ", attrs").

    XLA prints an index comment before every fifth operand (``/*index=5*/%x``); it is not part of
    the name and is dropped (a fused-attention custom call has a dozen operands)."""
    depth = 0
    for i, ch in enumerate(rest):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                inner = _COMMENT.sub("", rest[:i]).strip()
                return ([o.strip() for o in inner.split(",")] if inner else []), rest[i + 1:]
            depth -= 1
    raise Unsupported("unbalanced operand list")


def custom_call_targets(text: str) -> list[str]:
    """Every custom-call target in the module's text, in order of appearance (with repeats)."""
    return [m.group(1) for line in text.splitlines() if " custom-call(" in line for m in [_TARGET.search(line)] if m]


def rewrite(text: str, needs_stand_in) -> tuple[str, int, tuple[str, ...]]:
    """Replace each custom call whose target ``needs_stand_in(target)`` by a call of its stand-in.

    Returns ``(new text, how many custom calls were replaced, their distinct targets)``; the text is
    returned unchanged when nothing needs a stand-in. Raises ``Unsupported`` for a custom call no
    stand-in can be built for (dynamic shapes, operands that are not named instructions).
    """
    lines = text.splitlines()
    # Every instruction's type, per computation, before rewriting: an operand's type is known
    # wherever the operand is printed, before or after the custom call that reads it.
    types_in: list[dict[str, str]] = []
    for line in lines:
        if line and not line.startswith(" ") and line.rstrip().endswith("{"):
            types_in.append({})  # a new computation: names are local to it
        m = INSTRUCTION.match(line)
        if m and types_in:
            types_in[-1][m.group(3)] = m.group(4)
    out: list[str] = []
    comps: list[str] = []
    targets: list[str] = []
    types: dict[str, str] = {}
    block = -1
    for line in lines:
        if line and not line.startswith(" ") and line.rstrip().endswith("{"):
            block += 1
            types = types_in[block]
        m = INSTRUCTION.match(line)
        if not m:
            out.append(line)
            continue
        indent, root, name, type_str, opcode, rest = m.groups()
        target = _TARGET.search(rest) if opcode == "custom-call" else None
        if target is None or not needs_stand_in(target.group(1)):
            out.append(line)
            continue
        operands, _ = split_operands(rest)
        missing = [o for o in operands if o not in types]
        if missing:
            raise Unsupported(f"custom call {name}: operand {missing[0]} is not an instruction of its computation")
        comp = f"%autotune_standin.{len(comps)}"
        comps.append(stand_in_computation(comp, [types[o] for o in operands], type_str, _ADD))
        targets.append(target.group(1))
        out.append(f"{indent}{root or ''}{name} = {strip_layouts(type_str)} call({', '.join(operands)}), to_apply={comp}")
    if not comps:
        return text, 0, ()
    header, body = out[0], out[1:]
    new = "\n".join([header, "", _ADD_TEXT, *comps, *body]) + "\n"
    return new, len(comps), tuple(dict.fromkeys(targets))
