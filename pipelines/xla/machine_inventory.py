"""The discovered pass inventory remembered per installed compiler, across cache databases.

Why: discovering XLA's pass inventory compiles a probe with a per-pass dump in a fresh worker process
(its start, jax's import and the compile: about 1.7 s of a 2-core machine's CPU). The answer depends
only on the installed compiler, the target and the engine, yet it was kept only in the cache database,
so every new database paid it again: a user's first run in each project, and each of the suite's
temporary databases (some 200 a run). The database still records the inventory it was keyed by (its
digest is part of every cache key); this file only saves the probe.

Where: ``$AUTOTUNE_MACHINE_CACHE`` (``off`` disables it), else ``$XDG_CACHE_HOME/autotune`` or
``~/.cache/autotune``. The file name hashes the database's inventory key together with the installed
jaxlib's identity (the path, size and modification time of each of its compiled libraries, the same
for a GPU plugin) and ``XLA_FLAGS``: a reinstalled or rebuilt compiler of the same version number is
another file, never a stale answer. Nothing here can fail a run: an unreadable or unwritable cache
directory is the same as none, and a file that does not parse as an inventory is ignored.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import tempfile
from pathlib import Path

from autotune.pipelines.xla.inventory import PassInventory

ENV = "AUTOTUNE_MACHINE_CACHE"


def directory() -> Path | None:
    """Where inventories are kept on this machine, or None when switched off."""
    chosen = os.environ.get(ENV, "").strip()
    if chosen.lower() in ("off", "0", "none"):
        return None
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "autotune"


def _libraries(package_dir: Path) -> list[tuple[str, int, int]]:
    try:
        return sorted((p.name, st.st_size, st.st_mtime_ns) for p in package_dir.iterdir()
                      if p.suffix == ".so" and (st := p.stat()))
    except OSError:
        return []


def compiler_identity(plugins: tuple[str, ...] = ()) -> str:
    """A digest of the installed jaxlib (and of the named plugin modules where installed): which build
    of the compiler this is, beyond its version number."""
    import jaxlib

    parts: list[object] = [jaxlib.__version__, os.environ.get("XLA_FLAGS", "")]
    for pkg in [Path(jaxlib.__file__).resolve().parent] + [_origin(name) for name in plugins]:
        if pkg is not None:
            parts += [str(pkg), _libraries(pkg)]
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:24]


def _origin(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).resolve().parent


def _path(key: str, identity: str) -> Path | None:
    where = directory()
    if where is None:
        return None
    digest = hashlib.sha256(f"{key}|{identity}".encode()).hexdigest()[:32]
    return where / "inventory" / f"{digest}.json"


def _is_inventory(text: str) -> bool:
    return bool(PassInventory.from_json(text).invocations)


def get(key: str, identity: str, valid=_is_inventory) -> str | None:
    """The inventory JSON remembered for ``key`` on this compiler build, or None (also for a file that
    does not read back as an inventory: parsed here once, so that no record can fail the run that reads it).
    ``valid``: how a record of another kind kept here is read back (the accepted compiler options,
    ``options.py``); a record it rejects or that makes it raise is the same as none."""
    path = _path(key, identity)
    try:
        text = path.read_text() if path is not None else None
        if text is None or not valid(text):
            return None
        return text
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None


def put(key: str, identity: str, text: str) -> None:
    """Remember ``text`` (written whole, then renamed: a concurrent reader sees all of it or nothing)."""
    path = _path(key, identity)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".inventory-")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError:
        return
