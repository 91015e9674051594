"""A higher-precision reference run of a module: its bf16/f16 arithmetic widened to f32.

Why: XLA CPU computes narrow floats in f32 and rounds, and with ``xla_allow_excess_precision``
(on by default) algsimp may drop a rounding pair ``convert(convert(x, bf16), f32)`` when the two
converts are adjacent. Whether they are adjacent depends on the pass order (a reshape between a
bf16 dot and the ``astype(f32)`` that follows it keeps them apart), so a reordered pipeline can
legally round an intermediate value in one place and not in another. In a deep bf16 network
that one-ulp change grows past any fixed bf16 tolerance although both results are equally valid
roundings of the same math. Judging such a result needs the math itself: this module's run with
every bf16/f16 type replaced by f32, fed exactly the (bf16-rounded) inputs that ``runner.execute``
feeds the module. ``autotune.core.precision`` compares the errors of XLA's default and of the
tuned module against it.

The widening is textual (HLO printed without metadata, ``bf16[``/``f16[`` -> ``f32[``, parsed
back): a convert to bf16 becomes a convert f32 -> f32 (a no-op) and constants keep their printed
values (XLA prints a bf16 constant as its shortest round trip, e.g. 0.1001 for 0.10009765625: within
1e-4 relative, far below a bf16 ulp of 4e-3). A ``bitcast-convert`` from/to a narrow float
(the total-order comparator of a bf16 sort: MoE top-k) keeps reading the narrow bits: the widened
value is rounded back first. Other ops whose meaning depends on the bit width make the widened
module fail to parse or compile; then there is no reference (``PassFailed``) and the strict
comparison stands.

Runs inside a worker process (``worker.XlaWorker.execute_reference``), like everything that compiles.
"""

from __future__ import annotations

import re

import numpy as np

from autotune.errors import BadInput, PassFailed
from autotune.pipelines.xla import hlo, partitioned, runner

#: The narrow float types widened for the reference (what XLA CPU emulates through f32).
NARROW = ("bf16", "f16")
_NARROW_TYPE = re.compile(r"\b(?:bf16|f16)\[")


def has_narrow_floats(text: str) -> bool:
    """Does this HLO text use a bf16/f16 array anywhere (parameters, intermediates, outputs)?"""
    return _NARROW_TYPE.search(text) is not None


_DEFINES = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+) = (\w+)\[")
_BITCAST = re.compile(r"^(\s*(?:ROOT\s+)?)%?([\w.\-]+) = (\w+)(\[[^\]]*\](?:\{[^}]*\})?) "
                      r"bitcast-convert\(%?([\w.\-]+)\)(.*)$")
_KEEP = "__narrow_kept__"  # a narrow type the widening must leave alone (restored after it)


def _bitcast_fix(line: str, types: dict) -> str:
    """A ``bitcast-convert`` between a narrow float and a 16-bit integer reads the float's bits,
    which widening would change (and the widened line does not parse): round the widened value back
    to the narrow type first (float -> int), or convert the narrow result to f32 (int -> float). Sort
    comparators of bf16 keys (MoE top-k routing) are made of these."""
    m = _BITCAST.match(line)
    if not m:
        return line
    lead, name, res_t, shape, operand, rest = m.groups()
    op_t = types.get(operand)
    if op_t in NARROW and res_t not in NARROW:
        return (f"{lead.replace('ROOT', '    ')}%{name}.narrow = {_KEEP}{op_t}{shape} convert(%{operand})\n"
                f"{lead}%{name} = {res_t}{shape} bitcast-convert(%{name}.narrow){rest}")
    if res_t in NARROW and op_t not in NARROW:
        return (f"{lead.replace('ROOT', '    ')}%{name}.raw = {_KEEP}{res_t}{shape} bitcast-convert(%{operand})\n"
                f"{lead}%{name} = f32{shape} convert(%{name}.raw){rest}")
    return line


def widened_text(text: str) -> str:
    """HLO text with every bf16/f16 array type made f32 (the same program in higher precision);
    bit casts of narrow floats keep reading narrow bits (``_bitcast_fix``)."""
    lines = text.splitlines()
    types = {m.group(1): m.group(2) for m in map(_DEFINES.match, lines) if m}
    fixed = "\n".join(_bitcast_fix(ln, types) if "bitcast-convert(" in ln else ln for ln in lines)
    return _NARROW_TYPE.sub("f32[", fixed).replace(_KEEP, "")


def widened_proto(proto: bytes) -> bytes | None:
    """The module with bf16/f16 widened to f32 (serialized), or None when it has no narrow floats.

    Raises ``PassFailed`` when the widened text is not a valid module (width-dependent ops).
    """
    text = hlo.to_text(hlo.parse_proto(proto))  # every constant printed, no metadata
    if not has_narrow_floats(text):
        return None
    try:
        return hlo.parse_text(widened_text(text)).as_serialized_hlo_module_proto()
    except BadInput as exc:
        raise PassFailed(f"no f32 reference: the widened module does not parse: {exc}", "error") from None


def _widen_input(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32) if np.dtype(x.dtype).name in ("bfloat16", "float16") else x


def execute_reference(worker, proto: bytes, seed: int = 0, floats: str = "normal",
                      int_high: int = runner.INT_HIGH) -> list[np.ndarray] | None:
    """Outputs of the widened module on the inputs ``runner.execute(worker, proto, ...)`` uses.

    None when the module has no bf16/f16 (no reference needed: its own run is the reference).
    Inputs are drawn for the ORIGINAL signature (bf16-rounded values) and cast to f32 exactly.
    """
    wide = widened_proto(proto)
    if wide is None:
        return None
    n = partitioned.partitions(hlo.parse_proto(proto))
    if n > 1:  # every device's inputs, as runner.execute draws them
        per_device = runner.device_inputs(proto, seed, floats, int_high, n)
        return runner.execute_on_devices(worker, wide, [[_widen_input(x) for x in xs] for xs in per_device])
    inputs = [_widen_input(x) for x in runner.random_inputs(proto, seed, floats, int_high)]
    return runner.execute_on(worker, wide, inputs)
