"""How much memory each compiler worker may use: the limit that makes a runaway allocation cost one
worker, never the machine (``core/workers.py`` applies it to every worker process it starts).
"""

from __future__ import annotations

import os

from autotune.core import limits
from autotune.errors import BadInput

#: Overrides the per-worker memory limit: bytes or a size such as ``6G``, ``512M``, ``2.5GiB``;
#: ``0``, ``none`` or ``off`` removes the limit.
MEMORY_ENV = "AUTOTUNE_WORKER_MEMORY"
#: Never less than this per worker: a worker holding a warm XLA client and compiling a 10k-instruction
#: module peaks at several hundred MiB (bench/perf.py measures ~185 MiB on the GPT-2 example).
MIN_WORKER_MEMORY = 1 << 30
#: What the limit leaves to everything else on the machine (the evaluator, other programs).
HEADROOM_FRACTION = 0.10
MIN_HEADROOM = 1 << 30


def parse_size(text: str) -> int:
    """``"6G"``, ``"512M"``, ``"2.5GiB"``, ``"1073741824"`` -> bytes (``0`` for none/off)."""
    if text.strip().lower() in ("", "0", "none", "off", "unlimited"):
        return 0
    try:
        return limits.parse_bytes(text)
    except BadInput:
        raise BadInput(f"{MEMORY_ENV}={text!r} is not a size (expected e.g. 6G, 512M or a number of bytes)") from None


def available_memory() -> int:
    """Bytes this process could still get: ``MemAvailable``, lowered by a cgroup (v2/v1) limit if any."""
    avail = limits.available_memory()
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            avail = 8 << 30
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            limit = open(limit_file).read().strip()
            usage = int(open(usage_file).read().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < (1 << 60):
            avail = min(avail, max(0, int(limit) - usage))
    return avail


def worker_memory_limit(workers: int) -> int:
    """Bytes each of ``workers`` processes may use (0: no limit).

    ``$AUTOTUNE_WORKER_MEMORY`` if set; else the memory available now, less a headroom (10% of it,
    at least 1 GiB) for the evaluator and the rest of the machine, shared evenly: all workers at
    their limits at once still fit, so no combination of runaway jobs can exhaust the machine.
    Never below ``MIN_WORKER_MEMORY`` (a worker could not even compile below that).
    """
    override = os.environ.get(MEMORY_ENV)
    if override is not None:
        return parse_size(override)
    avail = available_memory()
    usable = avail - max(MIN_HEADROOM, int(HEADROOM_FRACTION * avail))
    return max(MIN_WORKER_MEMORY, usable // max(1, int(workers)))


def describe_bytes(n: int) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 1 << 30 else f"{n / 2**20:.0f} MiB"


def memory_message(limit: int, detail: str) -> str:
    """The one line a user sees when a worker ran out of its memory."""
    return (f"worker exceeded its memory limit of {describe_bytes(limit)} and was replaced"
            f" (raise it with {MEMORY_ENV}, e.g. {MEMORY_ENV}=16G){': ' + detail if detail else ''}")
