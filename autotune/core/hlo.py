"""HLO module helpers that need only ``jaxlib._hlo`` (parsing, printing, fingerprints, counts).

These run in the main process as well as in workers: importing ``jaxlib._hlo`` is cheap (~0.1 s)
and does not start an XLA client. Anything that compiles lives in ``compiler.py`` and runs only in
worker processes, where an XLA fatal error costs one process.
"""

from __future__ import annotations

import collections
import hashlib
import re

from autotune.errors import BadInput


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
_BYTES = {"pred": 1, "s4": 1, "s8": 1, "s16": 2, "s32": 4, "s64": 8, "u4": 1, "u8": 1, "u16": 2, "u32": 4, "u64": 8,
          "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16}


def largest_array_bytes(text: str) -> int:
    """Bytes of the largest array shape written in HLO text (used to refuse absurd inputs early)."""
    largest = 0
    for dtype, dims in _ARRAY_SHAPE.findall(text):
        size = _BYTES.get(dtype, 1)
        for d in dims.split(","):
            if d:
                size *= int(d)
        largest = max(largest, size)
    return largest


def _print_options(canonical: bool):
    opts = _hlo().HloPrintOptions.canonical() if canonical else _hlo().HloPrintOptions()
    opts.print_large_constants = True
    opts.print_metadata = False
    return opts


def to_text(module) -> str:
    """Parseable HLO text with every constant printed (the default elides large ones as {...})."""
    return module.to_string(_print_options(canonical=False))


def canonical_text(module) -> str:
    """Module text with metadata, instruction names, ids and computation names removed.

    XLA's canonical printer renames instructions (tmp_N) and prints every called computation's
    body inline at its call site (``to_apply=`` followed by the body), so references carry no
    names. What remains name-dependent is each computation's header line and the order of the
    computation blocks; here headers lose their names and the non-entry blocks are sorted by
    content. Constants are printed in full: programs that differ only in a constant's value are
    different programs. Dead computations are kept: they count as instructions.
    """
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


def fingerprint(module) -> str:
    """SHA-256 (hex, 32 chars) of ``canonical_text``: equal programs get equal keys."""
    return hashlib.sha256(canonical_text(module).encode()).hexdigest()[:32]


def opcode_histogram(module) -> dict[str, int]:
    """Instructions per opcode over all computations (entry, nested, fused), HLO text spelling."""
    counts: collections.Counter[str] = collections.Counter()
    for comp in module.computations():
        for inst in comp.instructions():
            op = inst.opcode
            name = _OPCODE_NAMES.get(op)
            if name is None:
                name = _OPCODE_NAMES[op] = _opcode_name(inst)
            counts[name] += 1
    return dict(sorted(counts.items()))


_OPCODE_NAMES: dict = {}
_OPCODE_IN_TEXT = re.compile(r"=\s.*?\s([a-z][a-z0-9\-]*)\(")


def _opcode_name(inst) -> str:
    """The opcode as HLO text spells it (kExp -> exponential), read once per opcode from XLA."""
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
