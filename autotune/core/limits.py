"""How much memory one execution may use on this machine (validation, runtime measurement).

Tuning never executes a module; validation and the ``runtime`` objective do. Whether a module can
be executed here is a fact about this machine, not about the module: the limit is a share of the
memory available now (``MemAvailable`` in /proc/meminfo), overridable with
``AUTOTUNE_MAX_EXEC_BYTES`` (bytes, or with a K/M/G/T suffix: ``512M``, ``8G``). A module over the
limit is not refused: it is compiled instead of executed (validation level ``compiled``).
Read at every call, in the driver and in the workers alike: free memory changes while a run goes on.
"""

from __future__ import annotations

import os
import re

from autotune.errors import BadInput

#: Environment variable overriding the execution memory limit.
EXEC_LIMIT_ENV = "AUTOTUNE_MAX_EXEC_BYTES"
#: Share of the available memory one execution may use: the driver, the other workers and the
#: original's outputs (kept for the comparison while the tuned module runs) need the rest.
EXEC_MEMORY_SHARE = 0.5
#: Used when the available memory cannot be read (no /proc/meminfo).
FALLBACK_EXEC_BYTES = 2 << 30


def parse_bytes(text: str) -> int:
    """``"2147483648"``, ``"512M"``, ``"2G"``, ``"1.5GiB"`` -> bytes (``BadInput`` for anything else)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([kmgt]?)(?:i?b)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise BadInput(f"{EXEC_LIMIT_ENV}={text!r} is not a size (e.g. 2147483648, 512M, 8G)")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def available_memory() -> int | None:
    """``MemAvailable`` from /proc/meminfo in bytes (None where it cannot be read)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def execution_limit() -> tuple[int, str]:
    """``(bytes, how it was set)``: the most memory one execution (inputs, outputs, temporaries) may use."""
    override = os.environ.get(EXEC_LIMIT_ENV)
    if override:
        return parse_bytes(override), EXEC_LIMIT_ENV
    avail = available_memory()
    if avail is None:
        limit, how = FALLBACK_EXEC_BYTES, "fallback (no /proc/meminfo)"
    else:
        limit, how = int(avail * EXEC_MEMORY_SHARE), f"{EXEC_MEMORY_SHARE:.0%} of MemAvailable"
    left = worker_memory_left()
    if left is not None and left < limit:
        return left, "what this worker's memory limit leaves (AUTOTUNE_WORKER_MEMORY)"
    return limit, how


def worker_memory_left() -> int | None:
    """Inside a worker under a memory limit (``RLIMIT_DATA``, core/workers.py): what it still leaves.

    An execution over it would only fail that worker, so it counts as "cannot be executed here".
    None where no limit is set (the driver, or ``AUTOTUNE_WORKER_MEMORY=none``).
    """
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
        if soft == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/status") as fh:
            used = next(int(ln.split()[1]) * 1024 for ln in fh if ln.startswith("VmData:"))
        return max(0, soft - used)
    except (ImportError, OSError, ValueError, StopIteration):
        return None


def gib(n: float) -> str:
    """Bytes for a person: ``30.1 GiB`` (or MiB/KiB/bytes below a tenth of the next unit)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale / 10:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} bytes"


# ---- time: how long one execution may take (validation) ------------------------------------------------
#: Environment variable overriding the per-execution time bound of validation (seconds).
VALIDATE_SECONDS_ENV = "AUTOTUNE_VALIDATE_SECONDS"
#: Default bound on one execution of one module during validation. Validation runs the original once
#: (a few times while its outputs are not finite) and each candidate once, so a run's validation
#: stays within minutes; a module estimated to take longer is compiled instead of executed
#: (level ``compiled``, with the estimate), and an execution that overruns is stopped at the bound.
DEFAULT_VALIDATE_SECONDS = 30.0


def validate_seconds(value: float | None = None) -> float:
    """The execution bound in seconds: ``value`` when given, else ``AUTOTUNE_VALIDATE_SECONDS``, else
    ``DEFAULT_VALIDATE_SECONDS``. ``BadInput`` for a value that is not a positive number."""
    source = "--validate-seconds"
    if value is None:
        text = os.environ.get(VALIDATE_SECONDS_ENV)
        if not text:
            return DEFAULT_VALIDATE_SECONDS
        source = VALIDATE_SECONDS_ENV
        try:
            value = float(text)
        except ValueError:
            raise BadInput(f"{VALIDATE_SECONDS_ENV}={text!r} is not a number of seconds") from None
    value = float(value)
    if not value > 0 or value != value:
        raise BadInput(f"{source} must be a positive number of seconds (got {value:g})")
    return value


def duration(seconds: float) -> str:
    """Seconds for a person: ``0.2 s``, ``45 s``, ``14 min``, ``3.2 h``."""
    if seconds < 10:
        return f"{seconds:.1f} s" if seconds >= 0.1 else f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
