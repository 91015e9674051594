"""HLO module helpers that need only ``jaxlib._hlo`` (parsing, printing, fingerprints, counts).

XLA's own format, so it lives with the XLA backend: the core treats a module's bytes as opaque and
asks the backend to parse, print and fingerprint them (``autotune.core.backend.Backend.parse``).
These run in the main process as well as in workers: importing ``jaxlib._hlo`` is cheap (~0.1 s)
and does not start an XLA client. Anything that compiles runs only in worker processes
(``worker.py``), where an XLA fatal error costs one process.
"""

from __future__ import annotations

import collections
import hashlib
import re

from autotune.errors import BadInput
from autotune.core.backend import Instruction


def _hlo():
    from jaxlib import _hlo

    return _hlo


def parse_text(text: str):
    """HLO text -> HloModule; a parse error becomes ``BadInput`` with XLA's first line."""
    try:
        return _hlo().hlo_module_from_text(text)
    except Exception as exc:  # jaxlib raises XlaRuntimeError / ValueError variants
        raise BadInput(f"not valid HLO text: {_first_line(exc)}") from None


def parse_proto(data: bytes):
    """Serialized HloModuleProto -> HloModule."""
    try:
        return _hlo().HloModule.from_serialized_hlo_module_proto(data)
    except Exception as exc:
        raise BadInput(f"not a valid serialized HloModuleProto: {_first_line(exc)}") from None


def from_mlir(text: str | bytes) -> bytes:
    """StableHLO/MHLO MLIR (text or bytecode) -> serialized HloModuleProto, via XLA's own importer."""
    from jax._src.lib import _jax

    try:
        comp = _jax.mlir.mlir_module_to_xla_computation(text, use_tuple_args=False, return_tuple=False)
    except Exception as exc:
        raise BadInput(f"not a StableHLO/MHLO module XLA can import: {_first_line(exc)}") from None
    return comp.as_serialized_hlo_module_proto()


def _first_line(exc: BaseException) -> str:
    """XLA's status line plus, for parse errors, the first concrete ``error:`` lines (where/what)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    msg = lines[0]
    details = []
    for ln in lines[1:]:
        if "error:" in ln:
            detail = ln.removeprefix("was parsing ").strip()
            if detail not in details:
                details.append(detail)
        if len(details) == 2:
            break
    if msg.endswith(":"):
        msg = f"{msg} {'; '.join(details)}" if details else f"{msg[:-1]} (XLA gave no detail)"
    return msg[:400]


_ARRAY_SHAPE = re.compile(r"\b(pred|s4|s8|s16|s32|s64|u4|u8|u16|u32|u64|f16|bf16|f32|f64|c64|c128|f8\w*)\[([\d,]*)\]")
#: Bytes per element of each HLO primitive type.
DTYPE_BYTES = {"pred": 1, "s4": 1, "s8": 1, "s16": 2, "s32": 4, "s64": 8, "u4": 1, "u8": 1, "u16": 2, "u32": 4, "u64": 8,
          "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16}


def largest_array_bytes(text: str) -> int:
    """Bytes of the largest array shape written in HLO text (used to refuse absurd inputs early)."""
    largest = 0
    for dtype, dims in _ARRAY_SHAPE.findall(text):
        size = DTYPE_BYTES.get(dtype, 1)
        for d in dims.split(","):
            if d:
                size *= int(d)
        largest = max(largest, size)
    return largest


def _print_options(canonical: bool, large_constants: bool = True, metadata: bool = False):
    opts = _hlo().HloPrintOptions.canonical() if canonical else _hlo().HloPrintOptions()
    opts.print_large_constants = large_constants
    opts.print_metadata = metadata
    return opts


def to_text(module, metadata: bool = False) -> str:
    """Parseable HLO text with every constant printed (the default elides large ones as {...});
    ``metadata``: with each instruction's ``op_name`` and source (a rewrite that hands the module back
    to XLA keeps them for profiles).

    Printing constant data is slow (~1 s for 3M bf16 elements): use it only to write a module out,
    never on a hot path (fingerprints and shape checks use ``elided_text``).
    """
    return module.to_string(_print_options(canonical=False, metadata=metadata))


_HEADER = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) ")
_ROOT = re.compile(r"^\s+ROOT %?([^\s=]+) = ")


def computation_roots(text: str) -> dict[str, str]:
    """``{computation: its root instruction's name}`` from a module's text: an instruction's own
    printout (``to_string``) never says whether it is its computation's root."""
    roots, comp = {}, None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.rstrip().endswith("{"):
            m = _HEADER.match(line)
            comp = m.group(1) if m else None
            continue
        m = _ROOT.match(line)
        if m and comp is not None:
            roots[comp] = m.group(1)
    return roots


def elided_text(module) -> str:
    """HLO text with constants of more than 10 elements printed as ``{...}`` (shapes, names, structure)."""
    return module.to_string(_print_options(canonical=False, large_constants=False))


def canonical_text(module, proto: bytes | None = None) -> str:
    """Module text with metadata, instruction names, ids and computation names removed.

    XLA's canonical printer renames instructions (tmp_N) and prints every called computation's
    body inline at its call site (``to_apply=`` followed by the body), so references carry no
    names. What remains name-dependent is each computation's header line and the order of the
    computation blocks; here headers lose their names and the non-entry blocks are sorted by
    content. Dead computations are kept: they count as instructions.

    Constants: programs that differ only in a constant's value are different programs, but
    printing constant data as text costs seconds on a module with weights baked in. So the text is
    printed with large constants elided (XLA prints ``{...}`` for more than 10 elements); when
    those hold more than ``PRINT_CONSTANT_ELEMENTS`` elements, each constant with a large literal
    is replaced, in a copy of the serialized proto, by a data-free stand-in instruction whose text
    carries a hash of the literal's bytes (``constant_stand_ins``), and that copy is printed
    instead (fewer elements are printed as they are: that is cheaper). The stand-in keeps the constant's
    place and shape, so the text still says which constant sits where; only the data is hashed
    as bytes rather than printed. ``proto`` (the module's serialized bytes) saves one serialisation.
    """
    text = module.to_string(_print_options(canonical=True, large_constants=False))
    if "{...}" in text and elided_elements(text) <= PRINT_CONSTANT_ELEMENTS:
        text = module.to_string(_print_options(canonical=True))  # little data: printing it is cheapest
    elif "{...}" in text:
        if proto is None:
            proto = module.as_serialized_hlo_module_proto()
        for min_bytes in (LARGE_LITERAL_BYTES, 0):
            stand_in = parse_proto(constant_stand_ins(proto, min_bytes))
            text = stand_in.to_string(_print_options(canonical=True, large_constants=False))
            if "{...}" not in text:
                break
        else:  # pragma: no cover - a constant kind the stand-ins do not cover: print it in full
            text = module.to_string(_print_options(canonical=True))
    header, _, body = text.partition("\n")
    header = re.sub(r"^HloModule \S+?(,|$)", r"HloModule m\1", header)
    entry: list[str] = []
    others: list[str] = []
    for block in body.strip().split("\n\n"):
        first, _, rest = block.partition("\n")
        if first.startswith("ENTRY "):
            entry.append("ENTRY {\n" + rest)
        else:
            others.append("{\n" + rest)
    return "\n\n".join([header, *entry, *sorted(others)])


#: Up to this many elided constant elements the data is printed (about 0.3 us an element, so
#: under ~20 ms); beyond, constants are hashed as bytes. Decided from the program's own text, so
#: equal programs always take the same path.
PRINT_CONSTANT_ELEMENTS = 1 << 16

_ELIDED_CONSTANT = re.compile(r"= [a-z0-9]+\[([\d,]*)\]\S* constant\(\{\.\.\.\}\)")


def elided_elements(text: str) -> int:
    """Elements of all constants printed as ``{...}`` in ``text``."""
    total = 0
    for dims in _ELIDED_CONSTANT.findall(text):
        n = 1
        for d in dims.split(","):
            if d:
                n *= int(d)
        total += n
    return total


def fingerprint(module, proto: bytes | None = None) -> str:
    """SHA-256 (hex, 32 chars) of ``canonical_text``: equal programs get equal keys."""
    return hashlib.sha256(canonical_text(module, proto).encode()).hexdigest()[:32]


# ---- constants as bytes, read from the serialized HloModuleProto ---------------------------------------
# Field numbers of xla/service/hlo.proto (stable across XLA versions: protobuf fields are never renumbered;
# checked against jaxlib 0.10.2's own serialisation in tests/test_real_engine.py).
_MODULE_COMPUTATIONS = 3
_COMPUTATION_INSTRUCTIONS = 2
_INSTRUCTION_OPCODE = 2
_INSTRUCTION_LITERAL = 8
_INSTRUCTION_CUSTOM_CALL_TARGET = 28
_OPCODE_CONSTANT = b"\x12\x08constant"  # field 2, length 8, "constant"

#: Constants whose LiteralProto is larger than this get a stand-in. XLA elides constants of more
#: than 10 elements, and the smallest such literal (pred[11], s8[11]) serializes to 31 bytes (shape
#: included), while scalars take 15-28: so one pass covers every elided constant and leaves most
#: scalars printed as they are. Should a smaller elided literal exist, ``canonical_text`` sees a
#: ``{...}`` left and replaces every constant instead.
LARGE_LITERAL_BYTES = 30

#: Prefix of the custom-call target that stands for a constant in fingerprint text.
STAND_IN_TARGET = b"autotune.constant."


def _varint(buf, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, i
        shift += 7


def _put_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _fields(buf, start: int = 0, end: int | None = None):
    """Yield ``(field, wire_type, value_start, value_end, field_start)`` of one protobuf message.

    Values are not copied: a length-delimited value is ``buf[value_start:value_end]``.
    """
    i = start
    end = len(buf) if end is None else end
    while i < end:
        field_start = i
        tag, i = _varint(buf, i)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            _, j = _varint(buf, i)
            yield field, wire, i, j, field_start
            i = j
        elif wire == 2:
            n, i = _varint(buf, i)
            yield field, wire, i, i + n, field_start
            i += n
        elif wire == 5:
            yield field, wire, i, i + 4, field_start
            i += 4
        elif wire == 1:
            yield field, wire, i, i + 8, field_start
            i += 8
        else:
            raise BadInput(f"not a valid serialized HloModuleProto: unsupported wire type {wire}")


def unwrap_hlo_proto(data: bytes) -> bytes:
    """The ``HloModuleProto`` inside an ``HloProto`` (what XLA's ``xla_dump_hlo_as_proto`` writes:
    field 1 the module, field 3 a buffer assignment); a bare ``HloModuleProto`` comes back as it is.
    An ``HloModuleProto`` always has more fields than 1 and 3 (its entry computation's name is 2)."""
    buf = memoryview(data)
    module = None
    for f, wire, s, e, _ in _fields(buf):
        if f not in (1, 3) or wire != 2:
            return data
        if f == 1:
            module = (s, e)
    return bytes(buf[module[0]:module[1]]) if module is not None else data


def _field(number: int, payload: bytes) -> bytes:
    return _put_varint((number << 3) | 2) + _put_varint(len(payload)) + payload


def constant_literals(proto: bytes, min_bytes: int = 0):
    """Yield ``(computation index, instruction index, literal bytes)`` for constants in the proto.

    ``literal bytes`` is a zero-copy view of the serialized LiteralProto (shape and data): the
    cheap way to reach a module's weights, which jaxlib's Python API does not expose otherwise.
    """
    buf = memoryview(proto)
    for ci, (f, w, cs, ce, _) in enumerate(x for x in _fields(buf) if x[0] == _MODULE_COMPUTATIONS):
        ii = -1
        for f2, w2, s2, e2, _ in _fields(buf, cs, ce):
            if f2 != _COMPUTATION_INSTRUCTIONS:
                continue
            ii += 1
            if e2 - s2 <= min_bytes or bytes(buf[s2:min(e2, s2 + 512)]).find(_OPCODE_CONSTANT) < 0:
                continue
            for f3, w3, s3, e3, _ in _fields(buf, s2, e2):
                if f3 == _INSTRUCTION_LITERAL and e3 - s3 > min_bytes:
                    yield ci, ii, buf[s3:e3]
                    break


def constant_stand_ins(proto: bytes, min_bytes: int = LARGE_LITERAL_BYTES) -> bytes:
    """A copy of ``proto`` where every constant with a literal over ``min_bytes`` is a stand-in.

    The stand-in is a custom-call with no operands, the constant's shape, and the target
    ``autotune.constant.<sha256 of the literal bytes>``: printing it costs nothing whatever the
    data size, and two constants print alike exactly when their shapes and data are equal. The copy
    is only ever printed for a fingerprint, never compiled.
    """
    buf = memoryview(proto)
    out = bytearray()
    for f, w, cs, ce, fs in _fields(buf):
        if f != _MODULE_COMPUTATIONS:
            out += buf[fs:ce]
            continue
        comp = bytearray()
        changed = False
        for f2, w2, s2, e2, fs2 in _fields(buf, cs, ce):
            inst = buf[fs2:e2]
            if (f2 == _COMPUTATION_INSTRUCTIONS and e2 - s2 > min_bytes
                    and bytes(buf[s2:min(e2, s2 + 512)]).find(_OPCODE_CONSTANT) >= 0):
                replaced = _stand_in(buf, s2, e2, min_bytes)
                if replaced is not None:
                    inst = _field(_COMPUTATION_INSTRUCTIONS, replaced)
                    changed = True
            comp += inst
        out += _field(_MODULE_COMPUTATIONS, bytes(comp)) if changed else buf[fs:ce]
    return bytes(out)


def _stand_in(buf, start: int, end: int, min_bytes: int) -> bytes | None:
    parts = []
    literal = None
    for f, w, s, e, fs in _fields(buf, start, end):
        if f == _INSTRUCTION_LITERAL:
            literal = buf[s:e]
        elif f == _INSTRUCTION_OPCODE:
            parts.append(_field(_INSTRUCTION_OPCODE, b"custom-call"))
        else:
            parts.append(bytes(buf[fs:e]))
    if literal is None or len(literal) <= min_bytes:
        return None
    digest = hashlib.sha256(literal).hexdigest()[:32].encode()
    parts.append(_field(_INSTRUCTION_CUSTOM_CALL_TARGET, STAND_IN_TARGET + digest))
    return b"".join(parts)


def opcode_histogram(module) -> dict[str, int]:
    """Instructions per opcode over all computations (entry, nested, fused), HLO text spelling."""
    counts: collections.Counter[str] = collections.Counter()
    for comp in module.computations():
        for inst in comp.instructions():
            op = inst.opcode
            name = _OPCODE_NAMES.get(op)
            if name is None:
                name = _OPCODE_NAMES[op] = opcode_name(inst)
            counts[name] += 1
    return dict(sorted(counts.items()))


_OPCODE_NAMES: dict = {}
_OPCODE_IN_TEXT = re.compile(r"=\s.*?\s([a-z][a-z0-9\-]*)\(")


def opcode_name(inst) -> str:
    """The opcode of a jaxlib ``HloInstruction`` as HLO text spells it (kExp -> exponential).

    Public because reports list instructions by opcode as a compiler engineer reads them in a dump.
    """
    m = _OPCODE_IN_TEXT.search(inst.to_string())
    if m:
        return m.group(1)
    raw = inst.opcode.name[1:] if inst.opcode.name.startswith("k") else inst.opcode.name
    return re.sub(r"(?<!^)(?=[A-Z])", "-", raw).lower()


def instruction_count(module) -> int:
    """Number of HLO instructions in all computations of the module."""
    return sum(len(comp.instructions()) for comp in module.computations())


# HLO text spellings that the CamelCase -> kebab-case rule does not produce.
_SPELLING = {
    "kExp": "exponential", "kExpm1": "exponential-minus-one", "kLog1p": "log-plus-one", "kAtan2": "atan2",
    "kFft": "fft", "kRoundNearestAfz": "round-nearest-afz", "kRoundNearestEven": "round-nearest-even",
    "kIsFinite": "is-finite", "kClz": "count-leading-zeros", "kMulhi": "mulhi", "kCbrt": "cbrt",
    "kTopK": "topk", "kRsqrt": "rsqrt",
}


def opcode_vocabulary() -> tuple[str, ...]:
    """Every HLO opcode this jaxlib knows, in HLO text spelling, in a stable (sorted) order.

    Learning strategies turn a module's opcode histogram into a fixed-length feature vector over
    this vocabulary; it comes from jaxlib's own opcode enum, so it moves with the XLA version.
    """
    names = []
    for member in dir(_hlo().HloOpcode):
        if not member.startswith("k") or not member[1:2].isupper():
            continue
        names.append(_SPELLING.get(member) or re.sub(r"(?<!^)(?=[A-Z])", "-", member[1:]).lower())
    return tuple(sorted(set(names)))


# ---- instructions for a structural diff (``Backend.instructions``, ``autotune explain``) -----------------
NAME_PATTERN = re.compile(r"%([\w.\-]+)")  # an instruction or computation name
#: A shape's layout (``f32[4,8]{1,0}``): ignored when pairing "the same instruction, other inputs".
LAYOUT_PATTERN = re.compile(r"\]\{[^{}]*\}")


def strip_attr(text: str, attr: str) -> str:
    """``text`` without ``, attr={...}`` (brace- and quote-aware: metadata holds arbitrary strings)."""
    key = f", {attr}="
    while True:
        i = text.find(key)
        if i < 0:
            return text
        j = i + len(key)
        if j < len(text) and text[j] == "{":
            depth, quoted, k = 0, False, j
            while k < len(text):
                ch = text[k]
                if quoted:
                    if ch == "\\":
                        k += 1
                    elif ch == '"':
                        quoted = False
                elif ch == '"':
                    quoted = True
                elif ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                    if depth == 0:
                        break
                k += 1
            text = text[:i] + text[k + 1:]
        else:  # attr=value without braces: up to the next ", "
            k = text.find(", ", j)
            text = text[:i] + ("" if k < 0 else text[k:])


def _clean(text: str) -> str:
    """An instruction's text without its metadata (source locations differ between equal programs)."""
    text = strip_attr(text, "metadata")
    return text.strip()



def instructions(module) -> list:
    """Every instruction of a jaxlib ``HloModule`` as ``core.backend.Instruction``, in module order.

    The signature is the instruction's text after ``=`` (opcode, shape, attributes, operands
    spelled as placeholders), metadata removed and every name replaced: ``%C`` for a called
    computation, ``%?`` for anything else; the loose signature drops layouts too.
    """
    comps = list(module.computations())
    comp_names = {c.name for c in comps}
    roots = computation_roots(elided_text(module))
    out = []
    for comp in comps:
        insts = comp.instructions()
        names = {i.name for i in insts}
        for inst in insts:
            raw = inst.to_string()
            line = _clean(raw)
            body = line.split(" = ", 1)[1] if " = " in line else line
            called = tuple(n for n in NAME_PATTERN.findall(body) if n in comp_names and n not in names)
            # Literals (parameter(3), constant values, dimensions) stay; names become placeholders.
            sig = NAME_PATTERN.sub(lambda m: "%" + ("C" if m.group(1) in comp_names and m.group(1) not in names else "?"), body)
            out.append(Instruction(comp.name, inst.name, opcode_name(inst), line, sig, LAYOUT_PATTERN.sub("]", sig),
                                   tuple(o.name for o in inst.operands()), called,
                                   roots.get(comp.name) == inst.name))
    return out


_TAG_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_TAG_LINE = re.compile(r"^(\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*)(.*)$")


def tagged_text(text: str) -> tuple[str, dict[str, str]]:
    """``text`` with every instruction's metadata replaced by ``op_name="<its name>"``, and the
    ``{name: original op_name}`` of the instructions that had one (what a user's framework called them).

    The link from XLA's optimised module back to the input: XLA copies an instruction's metadata onto what
    it becomes (a fused clone, a library fusion), while it renumbers names (``profiling.py``, ``sites.py``)."""
    out, source = [], {}
    in_comp = False
    for line in text.splitlines():
        if not in_comp:
            in_comp = line.rstrip().endswith("{") and not line.startswith("HloModule")
            out.append(line)
            continue
        if line.startswith("}"):
            in_comp = False
            out.append(line)
            continue
        m = _TAG_LINE.match(line)
        if not m or "(" not in m.group(3):
            out.append(line)
            continue
        name = m.group(2)
        meta = _TAG_OP_NAME.search(line[line.find(", metadata={"):]) if ", metadata={" in line else None
        if meta:
            source[name] = meta.group(1)
        line = strip_attr(line.rstrip(), "metadata")
        out.append(f'{line}, metadata={{op_name="{name}"}}')
    return "\n".join(out) + "\n", source
