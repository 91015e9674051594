"""Bad input gets one line, exit code 2, no traceback, and leaves the cache database intact."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, ROOT, SMALL, assert_one_line_error, run_cli

BAD = sorted(p for p in (DATA / "bad").iterdir() if p.is_file())
TABLES = ("blobs", "states", "transitions", "runs", "trials", "roots")


@pytest.fixture(scope="module")
def seeded_db(tmp_path_factory) -> Path:
    """A cache that already holds work: bad input must not lose any of it."""
    db = tmp_path_factory.mktemp("bad") / "cache.db"
    proc = run_cli("apply", "--passes", "cse,dce", str(SMALL), db=db)
    assert proc.returncode == 0, proc.stderr
    return db


def snapshot(db: Path) -> dict:
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES}
    finally:
        conn.close()


def test_corpus_is_large_enough():
    assert len(BAD) >= 25


@pytest.mark.parametrize("path", BAD, ids=[p.name for p in BAD])
def test_bad_module_file(path, seeded_db):
    before = snapshot(seeded_db)
    line = assert_one_line_error(run_cli("baseline", str(path), db=seeded_db))
    assert len(line) < 600
    assert snapshot(seeded_db) == before


def _dynamic_cases(tmp: Path) -> dict[str, list[str]]:
    (tmp / "adir").mkdir(exist_ok=True)
    broken = tmp / "broken_link.hlo"
    if not broken.is_symlink():
        broken.symlink_to(tmp / "does_not_exist.hlo")
    fifo = tmp / "pipe.hlo"
    if not fifo.exists():
        os.mkfifo(fifo)
    return {
        "directory": ["baseline", str(tmp / "adir")],
        "missing file": ["baseline", str(tmp / "nope.hlo")],
        "broken symlink": ["baseline", str(broken)],
        "fifo": ["baseline", str(fifo)],
        "device": ["baseline", "/dev/null"],
        "unknown pass": ["apply", "--passes", "cse,algsimpp", str(SMALL)],
        "empty pass list": ["apply", "--passes", " , ", str(SMALL)],
        "unknown strategy": ["run", "--strategy", "simulated-annealing", str(SMALL)],
        "unknown objective": ["run", "--objective", "speed", str(SMALL)],
        "negative budget": ["run", "--budget", "-5", str(SMALL)],
        "zero budget": ["run", "--budget", "0", str(SMALL)],
        "non-numeric budget": ["run", "--budget", "many", str(SMALL)],
        "zero max length": ["run", "--max-length", "0", str(SMALL)],
        "negative time limit": ["run", "--time-limit", "-1", "--budget", "2", str(SMALL)],
        "malformed option": ["run", "--option", "patience", str(SMALL)],
        "unknown resume id": ["run", "--resume", "no-such-run"],
        "no model": ["run"],
        "zero workers": ["apply", "--workers", "0", "--passes", "cse", str(SMALL)],
        "unknown command": ["frobnicate"],
        "unknown option": ["baseline", "--frobnicate", str(SMALL)],
        "unwritable output": ["apply", "--passes", "cse", str(SMALL), "-o", "/proc/autotune/out.hlo"],
        "output is a directory": ["apply", "--passes", "cse", str(SMALL), "-o", str(tmp / "adir")],
    }




@pytest.mark.parametrize("case", [
    "directory", "missing file", "broken symlink", "fifo", "device", "unknown pass", "empty pass list",
    "unknown strategy", "unknown objective", "negative budget", "zero budget", "non-numeric budget",
    "zero max length", "negative time limit", "malformed option", "unknown resume id", "no model",
    "zero workers", "unknown command", "unknown option", "unwritable output", "output is a directory",
])
def test_bad_usage(case, seeded_db, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dyn")
    args = _dynamic_cases(tmp)[case]
    before = snapshot(seeded_db)
    assert_one_line_error(run_cli(*args, db=seeded_db))
    assert snapshot(seeded_db) == before


def test_corrupted_cache_database_is_refused_and_left_alone(tmp_path):
    db = tmp_path / "cache.db"
    garbage = os.urandom(8192)
    db.write_bytes(garbage)
    line = assert_one_line_error(run_cli("apply", "--passes", "cse", str(SMALL), db=db))
    assert "not an SQLite database" in line
    assert db.read_bytes() == garbage


def test_cache_path_is_a_directory(tmp_path):
    assert_one_line_error(run_cli("cache", "stats", db=tmp_path))


def test_unreadable_file(tmp_path):
    """Permission denied. Root reads anything, so as root the child runs without CAP_DAC_*."""
    target = tmp_path / "secret.hlo"
    target.write_text(SMALL.read_text())
    target.chmod(0)
    db = tmp_path / "c.db"
    args = [sys.executable, "-m", "autotune.cli", "baseline", str(target), "--db", str(db)]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv, "util-linux setpriv is needed to test permissions as root"
        args = [setpriv, "--bounding-set=-dac_override,-dac_read_search", *args]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=300)
    line = assert_one_line_error(proc)
    assert "permission denied" in line or "not readable" in line


def test_jax_outside_the_supported_range_is_one_line_at_start_up(tmp_path):
    """An installed jaxlib outside the supported range: one line naming the range, exit 2, before any
    compile (here the installed version is read as 0.9.0 by the real start-up path)."""
    import subprocess
    import sys

    code = ("import importlib.metadata as m; real = m.version; "
            "m.version = lambda n: '0.9.0' if n == 'jaxlib' else real(n); "
            "from autotune.cli import main; main(['baseline', sys.argv[1], '--db', sys.argv[2]])")
    db = tmp_path / "c.db"
    proc = subprocess.run([sys.executable, "-P", "-c", "import sys; " + code, str(SMALL), str(db)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "jaxlib 0.9.0 is not supported" in lines[0] and "0.10.2 to" in lines[0], lines
    assert not db.exists()  # refused before anything was opened or stored
