"""The tuning store: one per-user folder of tuning records, looked up by the module a program compiles.

Why a folder of JSON files and not a database: each entry IS a tuning record as ``autotune export``
writes it (plus a ``store`` block naming the host and XLA that made it), so ``autotune check MODEL
--record ENTRY`` reads an entry as it is, a team can point ``AUTOTUNE_STORE`` at a shared folder, and
concurrent writers need no lock: every entry is written to a temporary file and renamed into place
(atomic on one file system; the last writer of the same key wins with a whole record).

An entry's key is what must hold for its answer to be trusted here: the module's normalised
fingerprint, the target it was judged for, this host's CPU (model and ISA flags) and the XLA that
made it. A matching module whose entry was made on another host or by another XLA is NOT applied:
the lookup says so, and ``autotune check`` (its cross-version judge) decides whether it still holds;
``autotune store import --here`` adopts a record once that check passed.

An entry whose record has neither passes nor compiler options says "keep XLA's default": the module
was tuned and nothing confirmed won, so the next run compiles it untouched and does not tune again.

Where: ``store=`` / ``--store``, else ``$AUTOTUNE_STORE``, else ``$XDG_CACHE_HOME/autotune/store``
(``~/.cache/autotune/store``).
"""

from __future__ import annotations

from importlib import metadata

import hashlib
import json
import os
import platform
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from autotune.core.record import TuningRecord
from autotune.errors import BadInput

#: Moves the store (a folder; a shared one for a team).
STORE_ENV = "AUTOTUNE_STORE"
#: The entries' suffix; any other file in the folder is ignored.
SUFFIX = ".json"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def default_root() -> Path:
    """``$AUTOTUNE_STORE``, else the user's cache directory's ``autotune/store``."""
    env = os.environ.get(STORE_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "autotune" / "store"


@dataclass(frozen=True)
class Host:
    """The machine an answer was measured on: the CPU's model and its ISA flags (a hash of them: an
    answer tuned where AVX-512 exists is not blindly applied where it does not)."""

    cpu: str
    isa: str
    machine: str

    @property
    def key(self) -> str:
        return hashlib.sha256(f"{self.cpu}|{self.isa}|{self.machine}".encode()).hexdigest()[:12]

    def to_dict(self) -> dict:
        return {"cpu": self.cpu, "isa": self.isa, "machine": self.machine, "key": self.key}

    @classmethod
    def from_dict(cls, data) -> "Host | None":
        if not isinstance(data, dict) or not {"cpu", "isa", "machine"} <= set(data):
            return None
        return cls(str(data["cpu"]), str(data["isa"]), str(data["machine"]))

    @classmethod
    def here(cls) -> "Host":
        model, flags = "", ""
        try:
            with open("/proc/cpuinfo") as fh:
                for line in fh:
                    name, _, value = line.partition(":")
                    name = name.strip()
                    if name == "model name" and not model:
                        model = value.strip()
                    elif name in ("flags", "Features") and not flags:
                        flags = " ".join(sorted(value.split()))
        except OSError:
            pass
        model = model or platform.processor()
        isa = hashlib.sha256(flags.encode()).hexdigest()[:12] if flags else "unknown"
        return cls(model or "unknown", isa, platform.machine())


@dataclass(frozen=True)
class Entry:
    """One stored record and where and by what it was made."""

    path: Path
    record: TuningRecord
    host: Host | None  # None: imported without a host (never applied without ``import --here``)
    jaxlib: str
    source: str  # how it came in: "tune", "import", ...

    @property
    def id(self) -> str:
        return self.path.stem

    @property
    def keeps_default(self) -> bool:
        """Tuned, and nothing confirmed beat XLA's default: compile the module untouched."""
        return not self.record.sequence and not self.record.compiler_options

    def foreign_because(self, host: Host, xla: str) -> str | None:
        """Why this entry may not be applied on ``host`` with ``xla`` (None: it may)."""
        if self.host is None:
            return "made on an unknown host (imported without one)"
        if self.host.key != host.key:
            return f"made on another host ({self.host.cpu}, ISA {self.host.isa})"
        if self.record.xla_version and self.record.xla_version != xla:
            return f"made by another XLA ({self.record.xla_version})"
        return None

    def describe(self) -> str:
        r = self.record
        if self.keeps_default:
            what = "keep XLA's default"
        else:
            parts = []
            if r.sequence:
                parts.append(f"{len(r.sequence)} pass(es)")
            if r.compiler_options:
                parts.append(", ".join(f"{k}={v}" for k, v in sorted(r.compiler_options.items())))
            what = "; ".join(parts)
        ratio = r.metrics.get("ratio")
        claim = (f", ratio {ratio:.3f} [{r.metrics.get('ratio_low', float('nan')):.3f}, "
                 f"{r.metrics.get('ratio_high', float('nan')):.3f}]") if isinstance(ratio, (int, float)) else ""
        return f"{r.module} ({r.fingerprint[:12]}, {r.target}): {what}{claim}, validation {r.validation or 'none'}"


@dataclass(frozen=True)
class Lookup:
    """What the store holds for one module on one target, here: the entry to apply (None: nothing
    applies) and the matching entries set aside because another host or XLA made them, with why."""

    entry: Entry | None
    foreign: tuple[tuple[Entry, str], ...] = ()


class Store:
    """A folder of tuning records (see the module doc)."""

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root).expanduser() if root else default_root()
        if self.root.exists() and not self.root.is_dir():
            raise BadInput(f"{self.root}: the tuning store must be a folder, not a file "
                           f"(set {STORE_ENV} or --store to a folder)")

    # ---- writing --------------------------------------------------------------------------------------
    def put(self, record: TuningRecord, host: Host | None = None, jaxlib: str | None = None,
            source: str = "tune") -> Entry:
        """Store ``record`` as made on ``host`` (default this one) and return its entry; an entry of the
        same key is replaced (atomically)."""
        host = Host.here() if host is None and source != "import" else host
        jaxlib = _installed_jaxlib() if jaxlib is None else jaxlib
        data = record.to_dict()
        data["store"] = {"host": host.to_dict() if host else None, "jaxlib": jaxlib, "source": source}
        name = self._name(record, host)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=self.root)
            with os.fdopen(fd, "w") as fh:
                json.dump(data, fh, indent=2)
                fh.write("\n")
            os.replace(tmp, self.root / name)
        except OSError as exc:
            raise BadInput(f"{self.root}: cannot write to the tuning store ({exc.strerror or exc})") from None
        return Entry(self.root / name, record, host, jaxlib, source)

    @staticmethod
    def _name(record: TuningRecord, host: Host | None) -> str:
        xla = hashlib.sha256(record.xla_version.encode()).hexdigest()[:8]
        hostkey = host.key if host else "nohost"
        return _SAFE.sub("_", f"{record.fingerprint[:24]}-{record.target}-{hostkey}-{xla}") + SUFFIX

    def remove(self, entry: Entry) -> None:
        try:
            entry.path.unlink()
        except FileNotFoundError:
            pass

    # ---- reading --------------------------------------------------------------------------------------
    def read(self, path: Path) -> Entry:
        """One entry file; ``BadInput`` naming the file when it is not a stored record."""
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise BadInput(f"{path}: no such store entry") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadInput(f"{path}: not a stored tuning record ({str(exc).splitlines()[0]})") from None
        record = TuningRecord.from_dict(data, str(path))
        meta = data.get("store") if isinstance(data.get("store"), dict) else {}
        return Entry(Path(path), record, Host.from_dict(meta.get("host")), str(meta.get("jaxlib", "")),
                     str(meta.get("source", "import")))

    def scan(self) -> tuple[list[Entry], list[tuple[Path, str]]]:
        """Every entry, and every file that could not be read as one (with why), newest first."""
        if not self.root.is_dir():
            return [], []
        good, bad = [], []
        for path in sorted(self.root.glob(f"*{SUFFIX}")):
            if path.name.startswith(".tmp-"):
                continue
            try:
                good.append(self.read(path))
            except BadInput as exc:
                bad.append((path, str(exc)))
        good.sort(key=lambda e: e.record.created, reverse=True)
        return good, bad

    def entries(self) -> list[Entry]:
        return self.scan()[0]

    def find(self, ident: str) -> Entry:
        """The entry whose id (file stem) starts with ``ident``; ``BadInput`` when none or several do."""
        matches = [e for e in self.entries() if e.id.startswith(ident)]
        if not matches:
            raise BadInput(f"no store entry '{ident}' in {self.root} (see `autotune store list`)")
        if len(matches) > 1:
            raise BadInput(f"'{ident}' names {len(matches)} store entries; give more of the id")
        return matches[0]

    def lookup(self, fingerprint: str, target: str, xla: str, host: Host | None = None,
               entries: list[Entry] | None = None) -> Lookup:
        """The entry to apply to the module ``fingerprint`` compiled for ``target`` by ``xla`` on ``host``."""
        host = host or Host.here()
        found, foreign = None, []
        for entry in self.entries() if entries is None else entries:
            if fingerprint not in entry.record.applies_to or entry.record.target != target:
                continue
            why = entry.foreign_because(host, xla)
            if why:
                foreign.append((entry, why))
            elif found is None:  # newest first
                found = entry
        return Lookup(found, tuple(foreign))


def _installed_jaxlib() -> str:
    """The installed jaxlib's version (the XLA that made an entry), read from the package metadata: core
    never imports the compiler's backend."""
    try:
        return metadata.version("jaxlib")
    except metadata.PackageNotFoundError:
        return "none"
