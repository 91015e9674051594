"""The run store: every tuning run and every trial it made, in the cache's SQLite file.

Runs have one home. The tuner writes through ``RunStore`` (create, record a trial, finish), and
everything that reads runs (``autotune runs``, ``report``, ``export``/``check``, ``explain``,
``--resume``, the benchmarks) reads through it; no other module writes SQL for runs. Records
crossing the boundary are frozen (``RunInfo``, ``TrialRecord``), as optuna's storage hands out
frozen trials while its Study owns the loop.

Schema (created here, in the cache's database): ``runs`` (one row per run: its settings, status,
best sequence and cost, and the JSON summary of the finished result) and ``trials`` (``(run, n)`` ->
sequence, cost, status ok|failed|invalid|guarded, the state reached, whether the cache answered, the
compiler's or the validator's message, seconds since the run started). Trials are numbered from 0
without gaps; a gap means rows after it were never committed together, and replay stops there.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field

from autotune.errors import BadInput
from autotune.core.options import EMPTY, CompilerOptions
from autotune.core.results import FleetResult, TuneResult
from autotune.core.levels import Validation


@dataclass(frozen=True)
class TrialRecord:
    """One evaluation of one sequence within a run (budget unit: one per record)."""

    n: int
    sequence: tuple[str, ...]
    cost: float
    status: str  # ok | failed | invalid | guarded (``loop.GUARDED``)
    state: str | None
    cached: bool
    message: str | None = None
    #: The compiler options the trial was judged under (``core/options.py``; empty: the compiler's default).
    options: CompilerOptions = EMPTY


@dataclass(frozen=True)
class RunInfo:
    """A run's stored settings and outcome (``summary`` is the finished result's ``to_dict``)."""

    id: str
    created: float
    updated: float
    status: str  # running | finished | time-limit | interrupted | session
    module: str  # fingerprint of the normalised root
    module_name: str
    strategy: str
    objective: str
    budget: int
    seed: int
    max_length: int
    options: dict = field(default_factory=dict)
    validate: bool = True
    time_limit: float | None = None
    version: str = ""
    best_sequence: tuple[str, ...] = ()
    best_cost: float | None = None
    summary: dict | None = None
    evaluations: int = 0  # trials recorded

    @property
    def finished(self) -> bool:
        return self.summary is not None

    @property
    def result(self):
        """The finished run's typed result: ``FleetResult`` for a fleet, else ``TuneResult`` (None: unfinished)."""
        if self.summary is None:
            return None
        if self.summary.get("fleet"):
            return FleetResult.from_dict(self.summary)
        return TuneResult.from_dict(self.summary)

    @property
    def validation(self):
        """The finished run's ``Validation`` of its best (None: unfinished, or nothing validated).

        The one reader of the stored ``validity`` (single runs and fleets store the same shape)."""
        return Validation.from_dict((self.summary or {}).get("validity"))


_RUN_COLUMNS = {
    "id": str, "created": float, "updated": float, "status": str, "module": str, "module_name": str,
    "strategy": str, "objective": str, "budget": int, "seed": int, "max_length": int, "options": str,
    "validate": int, "time_limit": float, "version": str, "best_sequence": str, "best_cost": float, "summary": str,
}
_TRIAL_COLUMNS = {
    "run": str, "n": int, "sequence": str, "cost": float, "status": str, "cached": int, "state": str,
    "message": str, "seconds": float, "created": float, "compiler_options": str,
}


def create_run_tables(db) -> None:
    """The schema of this store; the cache calls it when it creates or opens a database. A database made
    before trials carried compiler options gets the column (empty: the compiler's default), nothing else
    changes: its runs read back as they were."""
    db["runs"].create(_RUN_COLUMNS, pk="id", if_not_exists=True)
    db["trials"].create(_TRIAL_COLUMNS, pk=("run", "n"), if_not_exists=True)
    if "compiler_options" not in db["trials"].columns_dict:
        db["trials"].add_column("compiler_options", str)


def new_run_id() -> str:
    """Start time first (``YYYYMMDD-HHMMSS-``), so ids sort by age and need no date column."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


class RunStore:
    """Runs and trials in one cache database (shares the cache's connection and write lock)."""

    def __init__(self, cache):
        self.cache = cache

    # ---- runs ------------------------------------------------------------------------------------
    def save(self, run_id: str, **fields) -> None:
        """Create the run or update the given fields (dicts/lists stored as JSON)."""
        unknown = set(fields) - set(_RUN_COLUMNS)
        if unknown:
            raise ValueError(f"unknown run fields: {', '.join(sorted(unknown))}")
        row = {}
        for key, value in fields.items():
            if isinstance(value, (dict, list)):
                value = json.dumps(value)
            elif isinstance(value, tuple):
                value = ",".join(value)
            elif isinstance(value, bool):
                value = int(value)
            row[key] = value
        with self.cache.write() as db:
            exists = db.execute("SELECT 1 FROM runs WHERE id=?", [run_id]).fetchone()
            if exists:
                sets = ", ".join(f"{k}=?" for k in row)
                db.execute(f"UPDATE runs SET {sets} WHERE id=?", [*row.values(), run_id])
            else:
                keys = ["id", *row]
                db.execute(f"INSERT INTO runs({', '.join(keys)}) VALUES ({', '.join('?' * len(keys))})",
                           [run_id, *row.values()])

    def get(self, run_id: str) -> RunInfo:
        rows = self._select("WHERE id = ?", [run_id])
        if not rows:
            raise BadInput(f"no run '{run_id}' in {self.cache.path}")
        return rows[0]

    def list(self, limit: int | None = None, module: str | None = None) -> list[RunInfo]:
        """Runs newest first; ``module`` matches a display name or a fingerprint."""
        where, args = ("WHERE module_name = ? OR module = ?", [module, module]) if module else ("", [])
        return self._select(where + " ORDER BY created DESC" + (f" LIMIT {int(limit)}" if limit else ""), args)

    def _select(self, tail: str, args: list) -> list[RunInfo]:
        cols = list(_RUN_COLUMNS)
        rows = self.cache.db.execute(
            f"SELECT {', '.join(cols)}, (SELECT COUNT(*) FROM trials t WHERE t.run = runs.id) FROM runs {tail}", args
        ).fetchall()
        out = []
        for row in rows:
            d = dict(zip(cols, row))
            out.append(RunInfo(
                id=d["id"], created=d["created"] or 0.0, updated=d["updated"] or 0.0, status=d["status"] or "",
                module=d["module"], module_name=d["module_name"], strategy=d["strategy"], objective=d["objective"],
                budget=int(d["budget"] or 0), seed=int(d["seed"] or 0), max_length=int(d["max_length"] or 0),
                options=json.loads(d["options"] or "{}"), validate=bool(d["validate"]),
                time_limit=d["time_limit"], version=d["version"] or "",
                best_sequence=tuple(s for s in (d["best_sequence"] or "").split(",") if s),
                best_cost=d["best_cost"], summary=json.loads(d["summary"]) if d["summary"] else None,
                evaluations=int(row[-1]),
            ))
        return out

    # ---- trials ----------------------------------------------------------------------------------
    def add_trial(self, run_id: str, rec: TrialRecord, seconds: float) -> None:
        with self.cache.write() as db:
            db.execute(
                "INSERT OR REPLACE INTO trials(run, n, sequence, cost, status, cached, state, message, seconds, created,"
                " compiler_options) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                [run_id, rec.n, ",".join(rec.sequence), rec.cost, rec.status, int(rec.cached), rec.state,
                 rec.message, seconds, time.time(), rec.options.key],
            )

    def trials(self, run_id: str) -> list[TrialRecord]:
        """The run's trials in order, up to the first gap."""
        rows = self.cache.db.execute(
            "SELECT n, sequence, cost, status, state, cached, message, compiler_options FROM trials WHERE run=? "
            "ORDER BY n", [run_id]
        ).fetchall()
        out = []
        for i, (n, seq, cost, status, state, cached, message, options) in enumerate(rows):
            if n != i:
                break
            out.append(TrialRecord(n, tuple(s for s in seq.split(",") if s), cost, status, state, bool(cached),
                                   message, CompilerOptions.from_key(options)))
        return out

    def trial_seconds(self, run_id: str) -> list[float]:
        """Seconds from the run's start to the end of each trial, in order, up to the first gap (what a
        report plots a search against wall time with)."""
        rows = self.cache.db.execute("SELECT n, seconds FROM trials WHERE run=? ORDER BY n", [run_id]).fetchall()
        out = []
        for i, (n, seconds) in enumerate(rows):
            if n != i:
                break
            out.append(float(seconds or 0.0))
        return out

    def truncate(self, run_id: str, n: int) -> None:
        """Forget trials ``n`` and later (a resumed strategy diverged from the recorded run)."""
        with self.cache.write() as db:
            db.execute("DELETE FROM trials WHERE run=? AND n>=?", [run_id, n])

    def mark_invalid(self, run_id: str, state: str, reason: str | None, options: CompilerOptions = EMPTY) -> None:
        """Trials that reached ``state`` under ``options`` failed the validity check: they are not results."""
        with self.cache.write() as db:
            db.execute("UPDATE trials SET status='invalid', message=? WHERE run=? AND state=? AND status='ok' "
                       "AND COALESCE(compiler_options, '')=?", [f"validation failed: {reason}", run_id, state,
                                                              options.key])
