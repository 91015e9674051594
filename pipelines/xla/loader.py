"""Reading XLA modules: HLO text, serialized ``HloModuleProto`` and StableHLO/MHLO MLIR.

``XlaPipeline.parse`` (the Backend contract's ``parse``) lands here. A module's bytes are a
serialized ``HloModuleProto`` (compact, exact, and what XLA hands back); its fingerprint hashes
XLA's canonical printout with metadata, names and ids replaced (``hlo.fingerprint``), so the same
program always has the same cache key whatever it was called or however it was loaded.

Parsing runs in a separate process (``python -m autotune.pipelines.xla.loader``): XLA's parser
CHECK-fails (aborting the process) on some malformed inputs, and a bad file must cost an error
message, never the caller's process.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

from autotune.core.module import Module
from autotune.core.child import python_module_command, startup_failure
from autotune.errors import BadInput, WorkerStartFailed
from autotune.pipelines.xla import hlo, replica_groups

#: An array shape larger than this (2**57 bytes = 128 PiB) is a malformed or hostile input, not a model.
#: Tuning never allocates a module's arrays (applying passes works on shapes), so a shape too large
#: for this machine is fine: an LLM training step's attention scores f32[1024,32,4096,4096] need
#: 2 TiB, a pre-partitioning (global-shape) module more. The bound is what no machine can address:
#: 57 bits is the widest virtual address space of any 64-bit CPU (x86-64 with 5-level paging; ARM64
#: stops at 52), and it keeps byte counts far from int64 overflow inside XLA (2**63).
#: f32[1e9,1e9] (3.5 EiB, tests/data/bad/huge_shape.hlo) is refused.
MAX_ARRAY_BYTES = 1 << 57

TEXT_SUFFIXES = (".hlo", ".txt")
PROTO_SUFFIXES = (".pb", ".hlopb", ".proto")
MLIR_SUFFIXES = (".mlir", ".mlirbc", ".stablehlo")


def module_from_proto(proto: bytes, name: str | None = None) -> Module:
    """A ``Module`` from serialized ``HloModuleProto`` bytes, parsed in this process (trusted bytes)."""
    parsed = hlo.parse_proto(proto)
    return Module(name or parsed.name, proto, hlo.fingerprint(parsed, proto))


def hlo_module(module: Module):
    """The jaxlib ``HloModule`` of a Module (parsed on demand, never stored: it is not picklable)."""
    return hlo.parse_proto(module.proto)


def module_text(module: Module) -> str:
    """Parseable HLO text with all constants printed."""
    return hlo.to_text(hlo_module(module))


def _checked(module, name: str) -> Module:
    """Module from a parsed HloModule, refusing shapes no machine could address.

    Shapes are read from the text with large constants elided: printing constant data costs
    seconds on a module with weights baked in and says nothing about shapes.
    """
    largest = hlo.largest_array_bytes(hlo.elided_text(module))
    if largest > MAX_ARRAY_BYTES:
        raise BadInput(f"an array shape needs {_human_bytes(largest)}, more than any machine can address "
                       f"(limit {_human_bytes(MAX_ARRAY_BYTES)}); refusing")
    proto = module.as_serialized_hlo_module_proto()
    return Module(name or module.name, proto, hlo.fingerprint(module, proto))


def _human_bytes(n: int) -> str:
    for unit, shift in (("EiB", 60), ("PiB", 50), ("TiB", 40), ("GiB", 30), ("MiB", 20)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} bytes"


def parse_isolated(data: bytes, suffix: str, name: str | None) -> Module:
    """Parse in a child process (``python -m autotune.pipelines.xla.loader``) and return its Module.

    ``name`` None: the module's own name (what ``HloModule NAME`` or the MLIR module says).
    """
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("JAX_PLATFORMS", "cpu")
    proc = subprocess.run(
        python_module_command("autotune.pipelines.xla.loader"), input=pickle.dumps((data, suffix, name)),
        capture_output=True, env=env, timeout=600,
    )
    if proc.returncode == 0:
        try:
            kind, payload = pickle.loads(proc.stdout)
        except Exception:
            kind, payload = "error", "the parser process returned no result"
        if kind == "ok":
            return Module(*payload)
        raise BadInput(payload)
    stderr = proc.stderr.decode("utf-8", "replace")
    failed = startup_failure(stderr)
    if failed is not None and not proc.stdout:
        raise WorkerStartFailed(f"the parser process could not start (autotune's environment, not your input): {failed}")
    fatal = [ln.strip() for ln in stderr.splitlines()
             if ln.startswith(("F", "E")) and ("Check failed" in ln or "] " in ln)]
    detail = fatal[0].split("] ", 1)[-1] if fatal else f"exit status {proc.returncode}"
    raise BadInput(f"XLA's parser crashed on this input: {detail[:300]}")


def _parse(data: bytes, suffix: str, name: str | None) -> Module:
    """In the child process: pick the format by extension, else by content."""
    if suffix in PROTO_SUFFIXES:
        return _from_proto(data, name)
    if suffix in MLIR_SUFFIXES:
        return _from_mlir(data, name)
    if suffix in TEXT_SUFFIXES:
        return _from_text(_decode(data), name, hint="")
    hint = f" (unrecognised extension '{suffix}'; expected .hlo, .txt, .pb or .mlir)" if suffix else ""
    return _from_bytes(data, name, hint=hint)


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"not UTF-8 text (invalid byte at offset {exc.start})") from None


def _from_bytes(data: bytes, name: str | None, hint: str) -> Module:
    """Content sniffing for inputs whose kind is not given by an extension."""
    head = data[:4096].lstrip()
    if head.startswith(b"HloModule"):
        return _from_text(_decode(data), name, hint)
    if head.startswith((b"module", b"func.func", b"#loc", b"MLIR", b"ML\xefR")) or b"stablehlo." in head or b"mhlo." in head:
        return _from_mlir(data, name)
    try:
        return _from_proto(data, name)
    except BadInput:
        raise BadInput(f"not HLO text, MLIR or a serialized HloModuleProto{hint}") from None


def _from_text(text: str, name: str | None, hint: str) -> Module:
    stripped = text.lstrip()
    if stripped.startswith(("module", "func.func", "#loc")) or "stablehlo." in stripped[:4096]:
        return _from_mlir(text.encode(), name)
    if not stripped.startswith("HloModule"):
        raise BadInput(f"not HLO text: expected it to start with 'HloModule'{hint}")
    # A partitioned module from jax's Shardy writes collectives' groups over its mesh; every compile
    # path here needs them as lists (see replica_groups).
    return _checked(hlo.parse_text(replica_groups.expand(text)), name)


def _from_proto(data: bytes, name: str | None) -> Module:
    module = hlo.parse_proto(data)
    if not module.computations():
        raise BadInput("serialized HloModuleProto has no computations")
    return _checked(module, name)


def _from_mlir(data: bytes, name: str | None) -> Module:
    text: str | bytes = data
    if not data.startswith(b"ML\xefR"):  # MLIR bytecode magic; anything else must be text
        text = _decode(data)
        if "stablehlo." not in text and "mhlo." not in text and "func.func" not in text:
            raise BadInput("MLIR without StableHLO/MHLO operations (unsupported dialect)")
    proto = hlo.from_mlir(text)
    return _from_proto(proto, name)


def _child_main() -> None:
    data, suffix, name = pickle.loads(sys.stdin.buffer.read())
    try:
        m = _parse(data, suffix, name)
        result = ("ok", (m.name, m.proto, m.fingerprint))
    except BadInput as exc:
        result = ("error", str(exc))
    except Exception as exc:  # anything else XLA raises is still a statement about the input
        result = ("error", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    sys.stdout.buffer.write(pickle.dumps(result))


if __name__ == "__main__":
    _child_main()
