"""The two tools a session lent a GPU machine uses (bench/gpu_wheelhouse.py here, bench/gpu_check.sh
there) refuse what they cannot do in one line and exit 2 before anything is fetched, installed or run:
a lent machine's minutes must not go to a traceback. Nothing here needs a GPU or the network."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import assert_one_line_error

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"


def test_the_wheelhouse_with_a_wheel_pip_cannot_find_is_one_line_and_exit_2(tmp_path):
    """pip pointed at an empty folder (no index): the first wheel it looks for is missing."""
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(empty), "PIP_CONFIG_FILE": os.devnull}
    out = tmp_path / "house"
    done = subprocess.run([sys.executable, str(BENCH / "gpu_wheelhouse.py"), "--out", str(out)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    err = assert_one_line_error(done, prefix="gpu_wheelhouse: error: a wheel for Python 3.12 could not be fetched")
    assert "could not find a version" in err.lower(), err  # pip's own reason, with the wheel it missed
    assert not list(out.glob("*.whl"))


def test_the_wheelhouse_refuses_a_python_it_cannot_read(tmp_path):
    done = subprocess.run([sys.executable, str(BENCH / "gpu_wheelhouse.py"), "--python", "twelve", "--list"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert_one_line_error(done, prefix="gpu_wheelhouse: error: --python twelve")


def test_the_gpu_check_refuses_an_unknown_check_before_anything_runs(tmp_path):
    env = {**os.environ, "CHECKS": "runtime-llama bogus", "OUT": str(tmp_path / "out")}
    done = subprocess.run(["bash", str(BENCH / "gpu_check.sh"), "--cpu"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert_one_line_error(done, prefix="gpu_check: error: unknown check 'bogus'")
    assert not (tmp_path / "out").exists()


def test_the_gpu_check_without_its_wheelhouse_is_one_line_and_exit_2(tmp_path):
    empty = tmp_path / "house"
    empty.mkdir()
    env = {**os.environ, "WHEELHOUSE": str(empty), "OUT": str(tmp_path / "out"), "SITE": str(tmp_path / "site")}
    done = subprocess.run(["bash", str(BENCH / "gpu_check.sh")], capture_output=True, text=True, env=env, timeout=60)
    assert_one_line_error(done, prefix=f"gpu_check: error: no wheels in {empty}")
    assert not (tmp_path / "site").exists()
