"""The discovered pass inventory remembered per installed compiler, across cache databases.

Why: discovering XLA's pass inventory compiles a probe with a per-pass dump in a fresh worker process
(its start, jax's import and the compile: about 1.7 s of a 2-core machine's CPU). The answer depends
only on the installed compiler, the target and the engine, yet it was kept only in the cache database,
so every new database paid it again: a user's first run in each project, and each of the suite's
temporary databases (some 200 a run). The database still records the inventory it was keyed by (its
digest is part of every cache key); this file only saves the probe.

Where: ``$AUTOTUNE_MACHINE_CACHE`` (``off`` disables it), else ``$XDG_CACHE_HOME/autotune`` or
``~/.cache/autotune``, under ``inventory/IDENTITY/``: one folder per compiler build, whose identity
hashes the installed jaxlib (the path, size and modification time of each of its compiled libraries,
the same for a GPU plugin) and ``XLA_FLAGS``, so a reinstalled or rebuilt compiler of the same version
number is another folder, never a stale answer. Its ``compiler.json`` names those libraries; each
record's file name hashes the database's inventory key. Nothing here can fail a run: an unreadable or
unwritable cache directory is the same as none, and a file that does not parse as an inventory is ignored.

Every jaxlib install adds a folder; ``prune`` (``autotune cache prune``) removes those whose libraries
are no longer installed as they were, and the flat ``inventory/*.json`` files of the first layout, whose
compiler cannot be told (each costs one probe if it is needed again).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from autotune.pipelines.xla.inventory import PassInventory

ENV = "AUTOTUNE_MACHINE_CACHE"
#: In each compiler's folder: what it was written for (jaxlib's version, its libraries as they were).
ABOUT = "compiler.json"


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


@dataclass(frozen=True)
class Compiler:
    """One installed build of the compiler: its ``identity`` (a digest, the folder's name) and what it is
    (``about``: jaxlib's version, ``XLA_FLAGS``, each compiled library as [path, size, mtime_ns])."""

    identity: str
    about: dict


def installed_compiler(plugins: tuple[str, ...] = ()) -> Compiler:
    """The installed jaxlib (and the named plugin modules where installed): which build of the compiler
    this is, beyond its version number."""
    import jaxlib

    flags = os.environ.get("XLA_FLAGS", "")
    parts: list[object] = [jaxlib.__version__, flags]
    libraries: list[list] = []
    for pkg in [Path(jaxlib.__file__).resolve().parent] + [_origin(name) for name in plugins]:
        if pkg is not None:
            found = _libraries(pkg)
            parts += [str(pkg), found]
            libraries += [[str(pkg / name), size, mtime] for name, size, mtime in found]
    identity = hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:24]
    return Compiler(identity, {"jaxlib": jaxlib.__version__, "xla_flags": flags, "libraries": libraries})


def _origin(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).resolve().parent


def _path(key: str, compiler: Compiler) -> Path | None:
    where = directory()
    if where is None:
        return None
    digest = hashlib.sha256(f"{key}|{compiler.identity}".encode()).hexdigest()[:32]
    return where / "inventory" / compiler.identity / f"{digest}.json"


def _is_inventory(text: str) -> bool:
    return bool(PassInventory.from_json(text).invocations)


def get(key: str, compiler: Compiler, valid=_is_inventory) -> str | None:
    """The inventory JSON remembered for ``key`` on this compiler build, or None (also for a file that
    does not read back as an inventory: parsed here once, so that no record can fail the run that reads it).
    ``valid``: how a record of another kind kept here is read back (the accepted compiler options,
    ``options.py``); a record it rejects or that makes it raise is the same as none."""
    path = _path(key, compiler)
    try:
        text = path.read_text() if path is not None else None
        if text is None or not valid(text):
            return None
        return text
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None


def put(key: str, compiler: Compiler, text: str) -> None:
    """Remember ``text``, and once per folder what compiler it is for (each written whole, then renamed:
    a concurrent reader sees all of it or nothing)."""
    path = _path(key, compiler)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not (path.parent / ABOUT).exists():
            _write(path.parent / ABOUT, json.dumps(compiler.about))
        _write(path, text)
    except OSError:
        return


def _write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".inventory-")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


# ---- pruning -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pruned:
    """What ``prune`` removed (or, dry, would remove): the files, their bytes, and per folder which
    compiler they were for, in words."""

    files: tuple[Path, ...] = ()
    bytes: int = 0
    compilers: tuple[str, ...] = ()


def still_installed(about: dict) -> bool:
    """Whether every library a folder was written for is still on disk as it was (same size and time)."""
    libraries = about.get("libraries")
    if not isinstance(libraries, list) or not libraries:
        return False
    try:
        for path, size, mtime in libraries:
            st = os.stat(path)
            if (st.st_size, st.st_mtime_ns) != (size, mtime):
                return False
    except (OSError, TypeError, ValueError):
        return False
    return True


def _stale(folder: Path) -> str | None:
    """Why ``folder``'s records are of a compiler no longer installed, in words; None while it is."""
    try:
        about = json.loads((folder / ABOUT).read_text())
        libraries = about["libraries"]
        where = Path(libraries[0][0]).parent if libraries else "?"
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return f"an unknown compiler ({folder.name}: no readable {ABOUT})"
    return None if still_installed(about) else f"jaxlib {about.get('jaxlib', '?')} at {where}"


def prune(dry_run: bool = False) -> Pruned:
    """Remove the records of compilers no longer installed (and the first layout's flat files); with
    ``dry_run`` only say what would go. Never fails: what cannot be read or removed stays."""
    root = directory()
    if root is None or not (root / "inventory").is_dir():
        return Pruned()
    targets: list[Path] = []  # a stale compiler's folder, or a flat file of the first layout
    files: list[Path] = []
    compilers: list[str] = []
    for entry in sorted((root / "inventory").iterdir()):
        if entry.is_dir():
            why, gone = _stale(entry), [p for p in entry.rglob("*") if p.is_file()]
        elif entry.is_file() and entry.suffix == ".json":
            why, gone = "the first layout's records (their compiler cannot be told)", [entry]
        else:
            continue
        if why is None:
            continue
        targets.append(entry)
        files += gone
        if why not in compilers:
            compilers.append(why)
    size = sum(p.stat().st_size for p in files if p.exists())
    if not dry_run:
        for entry in targets:
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
    return Pruned(tuple(files), size, tuple(compilers))
