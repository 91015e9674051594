"""A surrogate of a module with weights baked in: its large constants lifted to entry parameters.

Why: every compile enters through XLA's StableHLO importer, which is ~15x slower on a module whose
weights are constants than on the same program with the weights as parameters (results/realscale.md),
and a search pays that import at every step. The surrogate is the same program with each large
entry-computation constant replaced by a parameter of the same shape: the search runs on it at the
price of parameters, and the tuner then re-establishes the best candidates on the real module
(``autotune.core.tuner``), because a pass may treat the two differently (``constant_folding`` and
``algsimp`` can fold arithmetic on a constant, never on a parameter).

How: the module is printed as HLO text (every constant in full, once per run), each entry
constant line whose data is at least ``min_bytes`` becomes ``parameter(N)`` (numbered after the
existing parameters), the entry computation layout is dropped from the header (it lists the old
parameters only; XLA then uses default layouts) and the text is parsed back. Constants inside
nested computations (loop bodies, reducers) stay: only entry parameters can replace them.
"""

from __future__ import annotations

import math
import re

from autotune.pipelines.xla import hlo

#: Lift constants of at least this many bytes (smaller ones are cheap to import and may matter to folding).
LIFT_MIN_BYTES = 64 << 10

_ENTRY = re.compile(r"^ENTRY\b")
_PARAM = re.compile(r"\bparameter\((\d+)\)")
_CONSTANT = re.compile(r"^(\s*)(%?[\w.\-]+) = ((\w+)\[([\d,]*)\](?:\{[^}]*\})?) constant\(")
_LAYOUT = re.compile(r",\s*entry_computation_layout=\{.*?\}(?=,\s*\w+=|\s*$)")


def _nbytes(dtype: str, dims: str) -> int:
    size = hlo.DTYPE_BYTES.get(dtype, 1)
    return size * math.prod(int(d) for d in dims.split(",") if d)


def lift_constants(proto: bytes, min_bytes: int = LIFT_MIN_BYTES) -> tuple[bytes, int, int] | None:
    """``(surrogate proto, constants lifted, their bytes)``, or None when no entry constant is that large."""
    if next(hlo.constant_literals(proto, min_bytes), None) is None:  # a scan of the bytes: no printing
        return None
    lines = hlo.to_text(hlo.parse_proto(proto)).split("\n")
    in_entry, params, lifted = False, -1, []
    for i, line in enumerate(lines):
        if _ENTRY.match(line):
            in_entry = True
            continue
        if not in_entry:
            continue
        if line.startswith("}"):
            break
        c = _CONSTANT.match(line)
        if c:  # a constant line may hold megabytes of data: never scan it further
            if _nbytes(c.group(4), c.group(5)) >= min_bytes:
                lifted.append((i, c))
            continue
        m = _PARAM.search(line) if " parameter(" in line else None
        if m:
            params = max(params, int(m.group(1)))
    if not lifted:
        return None
    total = 0
    for k, (i, c) in enumerate(lifted):
        indent, name, shape = c.group(1), c.group(2), c.group(3)
        lines[i] = f"{indent}{name} = {shape} parameter({params + 1 + k})"
        total += _nbytes(c.group(4), c.group(5))
    lines[0] = _LAYOUT.sub("", lines[0])
    surrogate = hlo.parse_text("\n".join(lines))
    return surrogate.as_serialized_hlo_module_proto(), len(lifted), total
