"""One device's program of a partitioned step, run on as many CPU devices as its collectives name.

Why: a per-device program of a multi-device step (``llm_spmd``, a dump of a multi-GPU job) has
collectives whose groups name the other devices; run alone it stops at the first one ("replica_id <
replica_count"). Validation must still run the original and the tuned program on the same inputs,
collectives included, or the tuned answer is only ``compiled``.

How: XLA compiles N partitions only through its SPMD partitioner, which would partition the
already partitioned program again. Marked *manual* on every entry parameter and on the result
(``sharding={manual}``, what a ``shard_map`` body is), the partitioner leaves the program as it is
and the compile runs it as N partitions with real collectives and ``partition-id``s, on N CPU
devices of the worker (``DEVICES``). Each device gets its own seeded inputs (device 0 exactly the
inputs a single-device run gets); outputs come back for every device.

The device count is what the collectives name (:func:`devices_spanned`): a program whose
collectives name only device 0, or that has none, runs on one device as before.
"""

from __future__ import annotations

import re

from autotune.core.metrics import COLLECTIVE_OPCODES
from autotune.errors import BadInput
from autotune.pipelines.xla import hlo, replica_groups

#: CPU devices every XLA worker starts with (``--xla_force_host_platform_device_count``): the largest
#: partitioned step whose per-device program is executed here.
DEVICES = 8

_LIST_GROUPS = re.compile(r"(?:replica_groups|source_target_pairs)=\{((?:\{[\d,]*\},?)*)\}")
_IOTA_GROUPS = re.compile(r"replica_groups=\[(\d+),(\d+)\]<=")
_LEAF = re.compile(r"\b(?:pred|token|[a-z]+\d+(?:e\d+m\d+\w*)?)\[")


def devices_spanned(text: str) -> int:
    """How many devices the collectives of a module's text name (1 when they name none or only device 0).

    Groups left empty (``replica_groups={}``: every device there is) count as one.
    """
    most = 0
    for m in _LIST_GROUPS.finditer(replica_groups.expand(text)):
        ids = [int(x) for x in re.findall(r"\d+", m[1])]
        most = max(most, max(ids, default=0))
    for m in _IOTA_GROUPS.finditer(text):
        most = max(most, int(m[1]) * int(m[2]) - 1)
    return most + 1


def check_devices(n: int, available: int = DEVICES) -> None:
    """``BadInput`` when a program whose collectives name ``n`` devices cannot run on ``available``."""
    if n > available:
        raise BadInput(f"it is one device's program of a step partitioned over {n} devices; this host runs "
                       f"partitioned programs on at most {available}")


def partitions(module) -> int:
    """:func:`devices_spanned` of a parsed module (1 without collectives, read without printing)."""
    if not COLLECTIVE_OPCODES & set(hlo.opcode_histogram(module)):
        return 1
    return devices_spanned(hlo.elided_text(module))


def manual_text(text: str) -> str:
    """``text`` with every sharding dropped and the entry's parameters and result marked manual."""
    text = hlo.strip_attr(replica_groups.expand(text), "sharding")
    out, in_entry = [], False
    for line in text.split("\n"):
        if line.startswith("ENTRY"):
            in_entry = True
        elif in_entry and line.startswith("}"):
            in_entry = False
        elif in_entry and (" parameter(" in line or line.lstrip().startswith("ROOT ")):
            line += f", sharding={_manual(_result_shape(line))}"
        out.append(line)
    return "\n".join(out)


def _result_shape(line: str) -> str:
    """The result shape of an instruction line (``%x = (f32[2]{0}, s32[]) tuple(...)`` -> the tuple)."""
    rest = line.split(" = ", 1)[1].lstrip()
    if not rest.startswith("("):
        return rest.split(" ", 1)[0]
    depth = 0
    for i, ch in enumerate(rest):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            return rest[: i + 1]
    return rest


def _manual(shape: str) -> str:
    """A manual sharding for ``shape``: one ``{manual}`` per leaf of a tuple (flattened), else one."""
    if not shape.startswith("("):
        return "{manual}"
    leaves = len(_LEAF.findall(shape))
    return "{" + ", ".join(["{manual}"] * leaves) + "}"
