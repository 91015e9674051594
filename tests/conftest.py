"""Shared fixtures: one cache database and one worker pool per test session (real XLA, no mocks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
EXAMPLES = ROOT / "examples"
GPT2 = EXAMPLES / "gpt2_train_step.hlo"
SMALL = DATA / "small_redundant.hlo"
REAL = sorted((DATA / "real").glob("*.hlo"))


def pytest_collection_modifyitems(config, items):
    """The files that hold a test marked ``slow`` run first, each file's tests in their own order (its
    module-scoped fixtures are built once a worker): xdist hands the collection out front to back, so a
    long test no longer starts last and keeps one worker busy while the other has finished."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: the order within each group is kept


def _gpu_plugin_available() -> bool:
    from autotune.pipelines.xla.targets import plugin_available

    return plugin_available()


#: GPU-target tests need jax's CUDA plugin (the ``gpu`` extra, which ``make test`` installs); skipped
#: without it, except where ``AUTOTUNE_REQUIRE_GPU_TESTS`` is set (``.ci/run`` sets it: CI must run them).
needs_plugin = pytest.mark.skipif(
    not _gpu_plugin_available() and not os.environ.get("AUTOTUNE_REQUIRE_GPU_TESTS"),
    reason="jax's CUDA plugin is not installed (pip install 'xla-autotune[gpu]')")


@pytest.fixture(scope="session")
def db_path(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache") / "cache.db"


@pytest.fixture(scope="session")
def engine(db_path):
    """An Evaluator over a session-wide cache and two warm workers."""
    from autotune.core.engine import open_engine

    with open_engine(db_path, workers=2) as ev:
        yield ev


@pytest.fixture(scope="session")
def pipeline(engine):
    return engine.pipeline


@pytest.fixture(scope="session")
def gpt2_root(engine):
    from autotune.core.module import load

    return engine.prepare(load(GPT2))


@pytest.fixture(scope="session")
def small_root(engine):
    from autotune.core.module import load

    return engine.prepare(load(SMALL))


def one_worker_under_xdist(env: dict) -> dict:
    """``env`` with ``AUTOTUNE_WORKERS=1`` (unless it names a count) when the suite runs under xdist: two
    pytest processes fill the two cores already, so a CLI run's second compiler worker only costs a jax
    import. Every CLI process a test starts takes its environment from here."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        env.setdefault("AUTOTUNE_WORKERS", "1")
    return env


def run_cli(*args: str, db: Path | None = None, timeout: float = 600, env: dict | None = None, cwd: Path | None = None):
    """Run the real ``autotune`` CLI in a subprocess; returns CompletedProcess (text)."""
    full_env = one_worker_under_xdist(dict(os.environ))
    if db is not None:
        full_env["AUTOTUNE_DB"] = str(db)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "autotune.cli", *args],
        capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd or ROOT,
    )


def assert_one_line_error(proc, code: int = 2, prefix: str = "autotune: error: ") -> str:
    """``proc`` failed the project's way for bad input: exit ``code``, one non-blank line on stderr that
    starts with ``prefix`` (the CLI's, or a benchmark script's own name), no traceback anywhere."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(prefix), lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    return lines[0]


def value_and_reduce_hlo(y: str) -> str:
    """A module with 16 MiB of inputs (``w``, reduced) and an 8-element value ``y`` that variants compute
    differently (``multiply(%x, %b)``, ``add(%x, %x)``...): the region and validation-budget tests' subject."""
    return f"""HloModule m
%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

ENTRY %main (w: f32[2048,2048], x: f32[8]) -> (f32[8], f32[2048]) {{
  %w = f32[2048,2048] parameter(0)
  %x = f32[8] parameter(1)
  %c2 = f32[] constant(2)
  %b = f32[8] broadcast(%c2), dimensions={{}}
  %y = f32[8] {y}
  %e = f32[8] exponential(%y)
  %z = f32[] constant(0)
  %r = f32[2048] reduce(%w, %z), dimensions={{0}}, to_apply=%add
  ROOT %t = (f32[8], f32[2048]) tuple(%e, %r)
}}
"""
