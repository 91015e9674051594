"""The Module: an HLO program as bytes plus a name-independent fingerprint, and its loaders.

A module is kept as a serialized ``HloModuleProto`` (compact, exact, and what XLA hands back). Its
``fingerprint`` hashes XLA's canonical printout with metadata, names and ids replaced, so the same
program always has the same cache key whatever it was called or however it was loaded.

Loaders accept HLO text (``.hlo``/``.txt``), serialized HloModuleProto (``.pb``), StableHLO or MHLO
MLIR (``.mlir``, text or bytecode) and a lowered JAX function (``jax.jit(f).lower(...)``). Loading
only parses; ``Pipeline.normalize`` then applies the one conversion round trip that every compile
applies anyway (the first round trip canonicalises, later ones are stable).
"""

from __future__ import annotations

import os
import pickle
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from autotune.errors import BadInput
from autotune.core import hlo

#: Inputs larger than this are refused before parsing (a model graph is far smaller).
MAX_INPUT_BYTES = 512 * 1024 * 1024
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


@dataclass(frozen=True)
class Module:
    """An HLO module: serialized ``HloModuleProto`` bytes, a display name and its fingerprint."""

    name: str
    proto: bytes
    fingerprint: str

    @classmethod
    def from_proto(cls, proto: bytes, name: str | None = None) -> "Module":
        parsed = hlo.parse_proto(proto)
        return cls(name or parsed.name, proto, hlo.fingerprint(parsed, proto))

    def hlo_module(self):
        """The jaxlib ``HloModule`` object (parsed on demand, never stored: it is not picklable)."""
        return hlo.parse_proto(self.proto)

    def text(self) -> str:
        """Parseable HLO text with all constants printed."""
        return hlo.to_text(self.hlo_module())

    def renamed(self, name: str) -> "Module":
        return Module(name, self.proto, self.fingerprint)

    def __repr__(self) -> str:
        return f"Module({self.name!r}, fingerprint={self.fingerprint[:12]}, {len(self.proto)} bytes)"


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
    return Module(name, proto, hlo.fingerprint(module, proto))


def _human_bytes(n: int) -> str:
    for unit, shift in (("EiB", 60), ("PiB", 50), ("TiB", 40), ("GiB", 30), ("MiB", 20)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} bytes"


def load(source, name: str | None = None) -> Module:
    """Load a module from a path, HLO/MLIR text, proto bytes, or a lowered JAX function.

    Raises ``BadInput`` with a one-line reason for anything that is not a usable module. Parsing
    runs in a separate process: XLA's parser CHECK-fails (aborting the process) on some malformed
    inputs, and a bad file must cost an error message, never the caller's process.
    """
    if hasattr(source, "as_text") and hasattr(source, "compiler_ir"):  # jax.stages.Lowered
        return _from_lowered(source, name)
    if isinstance(source, (bytes, bytearray)):
        return parse_isolated(bytes(source), "", name or "module")
    if isinstance(source, str) and ("\n" in source or source.lstrip().startswith(("HloModule", "module"))):
        return parse_isolated(source.encode(), ".hlo" if source.lstrip().startswith("HloModule") else "", name or "module")
    if isinstance(source, (str, os.PathLike)):
        return load_path(Path(source), name)
    raise BadInput(f"cannot load a module from {type(source).__name__}")


def load_path(path: Path, name: str | None = None) -> Module:
    path = Path(path)
    if not path.exists():
        raise BadInput(f"{path}: no such file")
    if path.is_dir():
        raise BadInput(f"{path}: is a directory, expected a module file")
    if not stat.S_ISREG(path.stat().st_mode):
        raise BadInput(f"{path}: not a regular file")
    size = path.stat().st_size
    if size == 0:
        raise BadInput(f"{path}: empty file")
    if size > MAX_INPUT_BYTES:
        raise BadInput(f"{path}: {size} bytes is larger than the {MAX_INPUT_BYTES >> 20} MiB input limit")
    try:
        data = path.read_bytes()
    except PermissionError:
        raise BadInput(f"{path}: permission denied") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        return parse_isolated(data, path.suffix.lower(), name or path.stem)
    except BadInput as exc:
        raise BadInput(f"{path}: {exc}") from None


def parse_isolated(data: bytes, suffix: str, name: str) -> Module:
    """Run ``_parse`` in a child process (``python -m autotune.core.module``) and return its Module."""
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("JAX_PLATFORMS", "cpu")
    proc = subprocess.run(
        [sys.executable, "-m", "autotune.core.module"], input=pickle.dumps((data, suffix, name)),
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
    fatal = [ln.strip() for ln in proc.stderr.decode("utf-8", "replace").splitlines()
             if ln.startswith(("F", "E")) and ("Check failed" in ln or "] " in ln)]
    detail = fatal[0].split("] ", 1)[-1] if fatal else f"exit status {proc.returncode}"
    raise BadInput(f"XLA's parser crashed on this input: {detail[:300]}")


def _parse(data: bytes, suffix: str, name: str) -> Module:
    """In the child process: pick the format by extension, else by content."""
    if suffix in PROTO_SUFFIXES:
        return _from_proto(data, name)
    if suffix in MLIR_SUFFIXES:
        return _from_mlir(data, name)
    if suffix in TEXT_SUFFIXES:
        return _from_text(_decode(data), name, hint="")
    hint = f" (unrecognised extension '{suffix}'; expected .hlo, .txt, .pb or .mlir)" if suffix else ""
    return _from_bytes(data, name, hint=hint)


def _decode(data: bytes, path: Path | None = None) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"not UTF-8 text (invalid byte at offset {exc.start})") from None


def _from_bytes(data: bytes, name: str, hint: str) -> Module:
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


def _from_text(text: str, name: str, hint: str) -> Module:
    stripped = text.lstrip()
    if stripped.startswith(("module", "func.func", "#loc")) or "stablehlo." in stripped[:4096]:
        return _from_mlir(text.encode(), name)
    if not stripped.startswith("HloModule"):
        raise BadInput(f"not HLO text: expected it to start with 'HloModule'{hint}")
    return _checked(hlo.parse_text(text), name)


def _from_proto(data: bytes, name: str) -> Module:
    module = hlo.parse_proto(data)
    if not module.computations():
        raise BadInput("serialized HloModuleProto has no computations")
    return _checked(module, name)


def _from_mlir(data: bytes, name: str) -> Module:
    text: str | bytes = data
    if not data.startswith(b"ML\xefR"):  # MLIR bytecode magic; anything else must be text
        text = _decode(data)
        if "stablehlo." not in text and "mhlo." not in text and "func.func" not in text:
            raise BadInput("MLIR without StableHLO/MHLO operations (unsupported dialect)")
    proto = hlo.from_mlir(text)
    return _from_proto(proto, name)


def _from_lowered(lowered, name: str | None) -> Module:
    """A ``jax.jit(f).lower(...)`` result: its StableHLO goes through XLA's importer, like a compile."""
    module = parse_isolated(lowered.as_text().encode(), ".mlir", name or "jax_module")
    if name is None:
        module = module.renamed(hlo.parse_proto(module.proto).name)
    return module


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
