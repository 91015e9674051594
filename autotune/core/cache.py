"""The SQLite cache: nothing is compiled twice.

Layout (one file, WAL mode, safe for several processes at once):

* ``blobs``       content-addressed module bytes (zlib), stored once, keyed by SHA-256 of the bytes;
* ``states``      (pipeline version, module fingerprint) -> metrics and the blob holding it;
* ``transitions`` (pipeline version, state fingerprint, action) -> next state fingerprint, or a
                  failure (status + compiler message). Two prefixes that reach the same module share
                  everything after it, because the walk continues from the state, not the prefix;
* ``roots``       raw input fingerprint -> normalised fingerprint (the load round trip);
* ``inventory``   the discovered pass inventory per XLA version;
* ``reports``     other measurements keyed by what they depend on (validity checks, runtimes);
* ``runs``/``trials`` tuning runs and every trial they made (owned by ``autotune.core.runs``).

Integrity: every ``states`` and ``transitions`` row carries a checksum of its own fields and every
blob is checked against its hash when read. A row that fails its check is deleted and reported as a
miss, so the caller recomputes it; keys always include the pipeline version (XLA version and pass
inventory), so a result never leaks to a different compiler.

Writes use ``BEGIN IMMEDIATE`` (take the write lock up front, waiting up to ``busy_timeout``),
which is what avoids SQLite's "database is locked" upgrade deadlock between concurrent writers.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import sqlite3
import threading
import time
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from autotune.errors import BadInput, CacheError
from autotune.core.metrics import Metrics
from autotune.core.runs import create_run_tables



def _import_sqlite_utils():
    """sqlite-utils imports pandas when it is installed, for one column type (``pd.Timestamp``) this cache
    never writes: a quarter of a second of every CLI and worker process's start (nevergrad brings pandas
    in). Imported with pandas hidden unless something already imported it, as on an installation without
    pandas (the GPU wheelhouse's, ``bench/gpu_wheelhouse.py``); pandas stays importable afterwards."""
    import sys

    hide = "pandas" not in sys.modules
    if hide:
        sys.modules["pandas"] = None  # an import of it raises ImportError, which sqlite-utils expects
    try:
        import sqlite_utils
    finally:
        if hide and sys.modules.get("pandas", 0) is None:
            del sys.modules["pandas"]
    return sqlite_utils


sqlite_utils = _import_sqlite_utils()

SCHEMA_VERSION = 3
DEFAULT_DB = ".autotune/cache.db"


def default_path() -> Path:
    return Path(os.environ.get("AUTOTUNE_DB", DEFAULT_DB))


@dataclass(frozen=True)
class Transition:
    """One cached step: ``src --action--> dst`` or a failure of that step."""

    src: str
    action: str
    dst: str | None
    status: str  # ok | error | crash | timeout
    message: str | None
    seconds: float


def _check(*fields) -> str:
    return hashlib.sha1("\x1f".join("" if f is None else str(f) for f in fields).encode()).hexdigest()[:16]


class Cache:
    """Handle on one cache database file (or ``:memory:``)."""

    def __init__(self, path: str | os.PathLike | None = None, busy_timeout: float = 60.0):
        self.path = str(path if path is not None else default_path())
        self._lock = threading.RLock()
        if self.path != ":memory:":
            p = Path(self.path)
            if p.exists() and p.is_dir():
                raise BadInput(f"{p}: cache path is a directory")
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise BadInput(f"{p}: cannot create cache directory ({exc.strerror})") from None
            # No plain open()/read() of the file here: closing any descriptor of a file drops every
            # POSIX lock this process holds on it, including the locks of SQLite connections already
            # open on it; another process could then delete their WAL (seen: "database disk image is
            # malformed"). SQLite itself recognises a foreign file without writing to it.
        # Switching a new file to WAL needs an exclusive lock, and SQLite answers "database is locked"
        # at once (no busy handler) when several processes open a fresh cache together: retry the
        # opening for as long as the busy timeout, like any other wait for the lock.
        deadline = time.monotonic() + busy_timeout
        for attempt in itertools.count():
            conn = None
            try:
                conn = sqlite3.connect(self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
                conn.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
                self.db = sqlite_utils.Database(conn)
                if self.path != ":memory:":
                    self.db.enable_wal()
                conn.execute("PRAGMA synchronous=NORMAL")
                self._ensure_schema()
                break
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) and time.monotonic() < deadline:
                    if conn is not None:
                        conn.close()
                    time.sleep(min(1.0, 0.02 * 2 ** attempt))
                    continue
                raise CacheError(f"{self.path}: cannot use cache database ({exc}); left untouched") from None
            except sqlite3.DatabaseError as exc:
                if "not a database" in str(exc):
                    raise CacheError(f"{self.path}: not an SQLite database (corrupted or foreign file); left untouched") from None
                raise CacheError(f"{self.path}: cannot use cache database ({exc}); left untouched") from None
        self._transitions: dict[tuple[str, str, str], Transition] = {}
        self._states: dict[tuple[str, str], Metrics] = {}
        self.hits = 0
        self.misses = 0
        self.corrupt_rows = 0

    # ---- schema ---------------------------------------------------------------------------------
    def _ensure_schema(self) -> None:
        db = self.db
        with self.write():
            db["meta"].create({"key": str, "value": str}, pk="key", if_not_exists=True)
            row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if row is None:
                db.execute("INSERT INTO meta(key, value) VALUES ('schema', ?)", [str(SCHEMA_VERSION)])
            elif int(row[0]) != SCHEMA_VERSION:
                raise CacheError(f"{self.path}: cache schema {row[0]} is not {SCHEMA_VERSION}; use another --db")
            db["blobs"].create({"hash": str, "data": bytes, "size": int}, pk="hash", if_not_exists=True)
            db["states"].create(
                {
                    "version": str, "fp": str, "blob": str, "instructions": int, "flops": float,
                    "transcendentals": float, "bytes_accessed": float, "opcodes": str, "check": str,
                },
                pk=("version", "fp"), if_not_exists=True,
            )
            if "structure" not in db["states"].columns_dict:  # added later: NULL (not measured) in older rows
                db.execute("ALTER TABLE states ADD COLUMN structure TEXT")
            if "compiled" not in db["states"].columns_dict:  # the target pipeline's figures (GPU targets)
                db.execute("ALTER TABLE states ADD COLUMN compiled TEXT")
            db["transitions"].create(
                {
                    "version": str, "src": str, "action": str, "dst": str, "status": str,
                    "message": str, "seconds": float, "created": float, "check": str,
                },
                pk=("version", "src", "action"), if_not_exists=True,
            )
            db["roots"].create({"version": str, "raw": str, "fp": str, "name": str}, pk=("version", "raw"), if_not_exists=True)
            db["inventory"].create({"key": str, "json": str, "created": float}, pk="key", if_not_exists=True)
            db["reports"].create({"kind": str, "key": str, "report": str, "created": float}, pk=("kind", "key"),
                                 if_not_exists=True)
            create_run_tables(db)  # runs and trials belong to the run store (autotune.core.runs)

    @contextmanager
    def write(self):
        """An IMMEDIATE transaction, retried if another process holds the lock past the timeout."""
        with self._lock:
            for attempt in range(20):
                try:
                    self.db.execute("BEGIN IMMEDIATE")
                    break
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) and "busy" not in str(exc):
                        raise
                    time.sleep(0.05 * (attempt + 1))
            else:
                raise CacheError(f"{self.path}: database stayed locked by another process")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            else:
                self.db.execute("COMMIT")

    # ---- blobs -------------------------------------------------------------------------------------
    @staticmethod
    def blob_hash(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    def put_blob(self, data: bytes) -> str:
        key = self.blob_hash(data)
        self.db.execute(
            "INSERT OR IGNORE INTO blobs(hash, data, size) VALUES (?, ?, ?)", [key, zlib.compress(data, 1), len(data)]
        )
        return key

    def get_blob(self, key: str) -> bytes | None:
        row = self.db.execute("SELECT data FROM blobs WHERE hash=?", [key]).fetchone()
        if row is None:
            return None
        try:
            data = zlib.decompress(row[0])
        except zlib.error:
            data = b""
        if self.blob_hash(data) != key:
            self._drop("blobs", "hash=?", [key])
            return None
        return data

    # ---- states -----------------------------------------------------------------------------------
    def put_state(self, version: str, fp: str, proto: bytes, metrics: Metrics) -> None:
        opcodes = json.dumps(dict(metrics.opcodes), sort_keys=True)
        structure = None if metrics.structure is None else json.dumps(dict(metrics.structure), sort_keys=True)
        compiled = None if metrics.compiled is None else json.dumps(dict(metrics.compiled), sort_keys=True)
        with self.write():
            blob = self.put_blob(proto)
            self.db.execute(
                "INSERT OR REPLACE INTO states(version, fp, blob, instructions, flops, transcendentals, bytes_accessed, opcodes, \"check\", structure, compiled)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                [version, fp, blob, metrics.instructions, metrics.flops, metrics.transcendentals, metrics.bytes_accessed,
                 opcodes, _check(version, fp, blob, metrics.instructions, opcodes), structure, compiled],
            )
        self._states[(version, fp)] = metrics

    def state_metrics(self, version: str, fp: str) -> Metrics | None:
        key = (version, fp)
        if key in self._states:
            return self._states[key]
        row = self.db.execute(
            'SELECT blob, instructions, flops, transcendentals, bytes_accessed, opcodes, "check", structure, compiled'
            ' FROM states WHERE version=? AND fp=?',
            [version, fp],
        ).fetchone()
        if row is None:
            return None
        blob, n, flops, trans, nbytes, opcodes, check, structure, compiled = row
        if check != _check(version, fp, blob, n, opcodes):
            self._drop("states", "version=? AND fp=?", [version, fp])
            return None
        metrics = Metrics.from_dict(
            {"instructions": n, "flops": flops, "transcendentals": trans, "bytes_accessed": nbytes, "opcodes": opcodes,
             "structure": structure, "compiled": compiled}
        )
        self._states[key] = metrics
        return metrics

    def state_proto(self, version: str, fp: str) -> bytes | None:
        row = self.db.execute("SELECT blob FROM states WHERE version=? AND fp=?", [version, fp]).fetchone()
        if row is None:
            return None
        data = self.get_blob(row[0])
        if data is None:  # the blob was corrupt or missing: the state must be recomputed
            self._drop("states", "version=? AND fp=?", [version, fp])
            self._states.pop((version, fp), None)
        return data

    # ---- transitions ------------------------------------------------------------------------------
    def put_transition(self, version: str, t: Transition) -> None:
        with self.write():
            self.db.execute(
                'INSERT OR REPLACE INTO transitions(version, src, action, dst, status, message, seconds, created, "check")'
                " VALUES (?,?,?,?,?,?,?,?,?)",
                [version, t.src, t.action, t.dst, t.status, t.message, t.seconds, time.time(),
                 _check(version, t.src, t.action, t.dst, t.status)],
            )
        self._transitions[(version, t.src, t.action)] = t

    def transition(self, version: str, src: str, action: str) -> Transition | None:
        key = (version, src, action)
        t = self._transitions.get(key)
        if t is not None:
            return t
        row = self.db.execute(
            'SELECT dst, status, message, seconds, "check" FROM transitions WHERE version=? AND src=? AND action=?',
            [version, src, action],
        ).fetchone()
        if row is None:
            return None
        dst, status, message, seconds, check = row
        if check != _check(version, src, action, dst, status):
            self._drop("transitions", "version=? AND src=? AND action=?", [version, src, action])
            return None
        t = Transition(src, action, dst, status, message, seconds or 0.0)
        self._transitions[key] = t
        return t

    def forget_state(self, version: str, fp: str) -> None:
        """Drop a state and every transition into it (its bytes were lost): it will be recomputed."""
        with self.write():
            self.db.execute("DELETE FROM transitions WHERE version=? AND dst=?", [version, fp])
            self.db.execute("DELETE FROM states WHERE version=? AND fp=?", [version, fp])
        self._states.pop((version, fp), None)
        self._transitions = {k: t for k, t in self._transitions.items() if not (k[0] == version and t.dst == fp)}

    def _drop(self, table: str, where: str, params: list) -> None:
        self.corrupt_rows += 1
        with self.write():
            self.db.execute(f"DELETE FROM {table} WHERE {where}", params)

    # ---- roots / inventory -------------------------------------------------------------
    def put_root(self, version: str, raw: str, fp: str, name: str) -> None:
        with self.write():
            self.db.execute("INSERT OR REPLACE INTO roots(version, raw, fp, name) VALUES (?,?,?,?)", [version, raw, fp, name])

    def root(self, version: str, raw: str) -> str | None:
        row = self.db.execute("SELECT fp FROM roots WHERE version=? AND raw=?", [version, raw]).fetchone()
        return row[0] if row else None

    def get_inventory(self, key: str) -> str | None:
        row = self.db.execute("SELECT json FROM inventory WHERE key=?", [key]).fetchone()
        return row[0] if row else None

    def put_inventory(self, key: str, text: str) -> None:
        with self.write():
            self.db.execute("INSERT OR REPLACE INTO inventory(key, json, created) VALUES (?,?,?)", [key, text, time.time()])

    def get_report(self, kind: str, key: str) -> dict | None:
        """A cached measurement (validation report, runtime, ...) keyed by its inputs."""
        row = self.db.execute("SELECT report FROM reports WHERE kind=? AND key=?", [kind, key]).fetchone()
        return json.loads(row[0]) if row else None

    def put_report(self, kind: str, key: str, report: dict) -> None:
        with self.write():
            self.db.execute("INSERT OR REPLACE INTO reports(kind, key, report, created) VALUES (?,?,?,?)",
                            [kind, key, json.dumps(report), time.time()])

    def prune(self, failures: bool = False, other_versions_than: str | None = None,
              dry_run: bool = False) -> dict[str, int]:
        """Delete failed steps (so they are retried) and/or everything of other pipeline versions,
        then blobs no state refers to any more. Returns the number of rows deleted per table; with
        ``dry_run`` the rows that would be (the same deletes, rolled back to a savepoint)."""
        deleted: dict[str, int] = {}
        with self.write():
            self.db.execute("SAVEPOINT prune")
            if failures:
                deleted["failed transitions"] = self.db.execute(
                    "DELETE FROM transitions WHERE status != 'ok'").rowcount
            if other_versions_than is not None:
                for table in ("transitions", "states", "roots"):
                    deleted[table] = deleted.get(table, 0) + self.db.execute(
                        f"DELETE FROM {table} WHERE version != ?", [other_versions_than]).rowcount
            deleted["blobs"] = self.db.execute(
                "DELETE FROM blobs WHERE hash NOT IN (SELECT blob FROM states)").rowcount
            if dry_run:
                self.db.execute("ROLLBACK TO prune")
            self.db.execute("RELEASE prune")
        if dry_run:
            return deleted
        self._transitions.clear()
        self._states.clear()
        self.db.execute("VACUUM")
        return deleted

    # ---- stats -----------------------------------------------------------------------------------
    def step_seconds(self, version: str | None = None) -> list[float]:
        """Worker seconds of every compiled step that succeeded (benchmarks read step costs here)."""
        where, args = ("AND version = ?", [version]) if version else ("", [])
        rows = self.db.execute(f"SELECT seconds FROM transitions WHERE status='ok' {where}", args).fetchall()
        return [s for (s,) in rows if s]

    def stats(self) -> dict:
        def count(table: str) -> int:
            return self.db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]

        size = os.path.getsize(self.path) if self.path != ":memory:" and os.path.exists(self.path) else 0
        failures = self.db.execute("SELECT status, COUNT(*) FROM transitions WHERE status != 'ok' GROUP BY status").fetchall()
        return {
            "path": self.path,
            "file_bytes": size,
            "blob_bytes": self.db.execute("SELECT COALESCE(SUM(size), 0) FROM blobs").fetchone()[0],
            "blobs": count("blobs"),
            "states": count("states"),
            "transitions": count("transitions"),
            "failed_transitions": dict(failures),
            "runs": count("runs"),
            "trials": count("trials"),
            "compiled_steps": count("transitions"),
            "versions": [r[0] for r in self.db.execute("SELECT DISTINCT version FROM transitions").fetchall()],
            "session": {"hits": self.hits, "misses": self.misses, "corrupt_rows_recomputed": self.corrupt_rows},
        }

    def close(self) -> None:
        try:
            self.db.conn.close()
        except sqlite3.Error:
            pass
