"""autotune installed as a library (a built wheel, not the editable checkout) works from any directory,
the repository's root included, and a worker that cannot start says so instead of blaming the input.

Why: ``python -m`` children put the working directory first on their import path; from a clone's
root they imported the source folder ``autotune/`` (no ``autotune.pipelines`` inside) and died, and
the parser's death was reported as "XLA's parser crashed on this input" (issue 52, item 0).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from conftest import EXAMPLES, ROOT, SMALL

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv holding autotune's built wheel; its other dependencies come from this test's own
    environment through a path entry (installing jax again would download a gigabyte), which is not
    a site directory, so the checkout's editable install there is never activated."""
    work = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(work / "dist"), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next((work / "dist").glob("autotune-*.whl"))
    env_dir = work / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    inst = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
                          capture_output=True, text=True, timeout=600)
    assert inst.returncode == 0, inst.stderr[-2000:]
    return env_dir


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AUTOTUNE_DB")}
    env["JAX_PLATFORMS"] = "cpu"
    return env


def test_installed_wheel_imports_itself_not_the_checkout(installed):
    out = subprocess.run([installed / "bin" / "python", "-P", "-c", "import autotune; print(autotune.__file__)"],
                         capture_output=True, text=True, cwd=ROOT, env=_env(), check=True).stdout
    assert str(installed) in out, out


def test_quick_start_from_the_repository_root(installed, tmp_path):
    """The README's first commands from the clone's root, with the installed (non-editable) package."""
    exe = installed / "bin" / "autotune"
    db = tmp_path / "c.db"
    base = subprocess.run([exe, "baseline", str(EXAMPLES / "llm_decode_step.hlo"), "--db", str(db)],
                          capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=900)
    assert base.returncode == 0, base.stderr
    assert "default" in base.stdout.lower()
    run = subprocess.run([exe, "run", "--strategy", "random", "--budget", "3", str(SMALL), "--db", str(db),
                          "--no-validate"], capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=900)
    assert run.returncode == 0, run.stderr


def test_a_worker_that_cannot_start_is_said_as_such(installed, tmp_path):
    """A broken environment (here: autotune.pipelines made unimportable in the children) is reported
    as a worker that could not start, with its own error, never as a crash on the user's input."""
    shadow = tmp_path / "shadow"
    (shadow / "autotune").mkdir(parents=True)
    (shadow / "autotune" / "__init__.py").write_text("")
    env = _env()
    env["PYTHONPATH"] = str(shadow)  # children (and the parent) import this empty package first
    proc = subprocess.run([installed / "bin" / "python", "-c",
                           "import sys; sys.path.remove(sys.argv[1]); "
                           "from autotune.cli import main; sys.argv=['autotune','baseline',sys.argv[2]]; main()",
                           str(shadow), str(SMALL)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "could not start" in lines[0] and "No module named" in lines[0], lines[0]
    assert "crashed on this input" not in lines[0]
