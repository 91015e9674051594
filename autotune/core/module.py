"""The Module: a compiler's program as bytes plus a name-independent fingerprint, and its loader.

The core never reads a module's bytes: what they hold (XLA: a serialized ``HloModuleProto``; the
toy backend: program text) and how they are parsed, printed and fingerprinted is the backend's
business (``Backend.parse``/``to_text``). What is common to every backend lives here: the frozen
value passed between layers, and ``load``, which refuses unusable files (missing, empty, too
large, unreadable) in one line before handing the bytes to the backend's parser. Loading only
parses; ``Backend.normalize`` then applies the compiler's own import round trip.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path

from autotune.errors import BadInput
from autotune.core import backend as backends
from autotune.core.options import EMPTY, CompilerOptions

#: Inputs larger than this are refused before parsing (a model graph is far smaller).
MAX_INPUT_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class Module:
    """A program: the backend's serialized bytes (``proto``), a display name and its fingerprint.

    ``proto`` is opaque to the core (the name is historical: for XLA it is an ``HloModuleProto``);
    ``fingerprint`` is the backend's hash of the program with names and metadata removed, the key
    of every cache entry. ``options``: the compiler options a full compile of it uses (``execute``,
    ``time``, ``compiles``); they are not part of the program, so not of its fingerprint, and the
    passes' steps ignore them. Empty: the compiler's default, what every module starts with.
    """

    name: str
    proto: bytes
    fingerprint: str
    options: CompilerOptions = EMPTY

    def renamed(self, name: str) -> "Module":
        return replace(self, name=name)

    def with_options(self, options) -> "Module":
        """The same program, compiled with ``options`` (a ``CompilerOptions``, mapping or None)."""
        return replace(self, options=CompilerOptions.of(options))

    def __repr__(self) -> str:
        extra = f", options {self.options.key}" if self.options else ""
        return f"Module({self.name!r}, fingerprint={self.fingerprint[:12]}, {len(self.proto)} bytes{extra})"


def _parser(backend):
    """A backend object as given, else a fresh (unstarted) instance of the one named (default: ``$AUTOTUNE_BACKEND``)."""
    if backend is not None and not isinstance(backend, str):
        return backend
    return backends.get(backend)


def load(source, name: str | None = None, backend=None) -> Module:
    """Load a module from a path, program text, serialized bytes, or an object with ``as_text()``
    (a lowered program, e.g. ``jax.jit(f).lower(...)``).

    ``backend``: a ``Backend`` or its name (default: ``$AUTOTUNE_BACKEND`` or xla); its ``parse``
    reads the bytes. Raises ``BadInput`` with a one-line reason for anything that is not a usable
    module.
    """
    parser = _parser(backend)
    if hasattr(source, "as_text") and not isinstance(source, (str, bytes, bytearray, os.PathLike)):
        return parser.parse(source.as_text().encode(), "", name)
    if isinstance(source, (bytes, bytearray)):
        return parser.parse(bytes(source), "", name or "module")
    if isinstance(source, str) and ("\n" in source or not _looks_like_path(source, parser.suffixes)):
        return parser.parse(source.encode(), "", name or "module")
    if isinstance(source, (str, os.PathLike)):
        return load_path(Path(source), name, parser)
    raise BadInput(f"cannot load a module from {type(source).__name__}")


def _looks_like_path(text: str, suffixes: tuple[str, ...]) -> bool:
    """A one-line string is a path when such a file exists or it is spelled like one (a directory
    part or one of the backend's extensions), so a missing file still reads "no such file"."""
    return os.path.exists(text) or os.sep in text or Path(text.strip()).suffix.lower() in suffixes


def load_path(path: Path, name: str | None = None, backend=None) -> Module:
    """Load a module file; every refusal is one line naming the file."""
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
        return _parser(backend).parse(data, path.suffix.lower(), name or path.stem)
    except BadInput as exc:
        raise BadInput(f"{path}: {exc}") from None
