"""autotune as a user installs it: the release's sdist and wheel (``python -m build``), checked as the
package index would (``twine check``), holding what a user needs (the LICENSE, the README as the long
description, the shipped policies with their torch-free ``.npz`` weights, the GPU target specs); the
wheel installed by its distribution name, ``xla-autotune``, into a fresh venv, whose ``autotune`` runs
the quick start from a directory outside the repository and from the repository's root, importing
itself, never the checkout; and a worker that cannot start says so instead of blaming the input.

Why: ``python -m`` children put the working directory first on their import path; from a clone's
root they imported the source folder ``autotune/`` (no ``autotune.pipelines`` inside) and died, and
the parser's death was reported as "XLA's parser crashed on this input" (issue 52, item 0). The
package had never been built as a release, and ``pip install autotune`` installs another project
(issue 61). ``make release-check`` runs this file after the name check.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

from conftest import EXAMPLES, ROOT, SMALL

pytestmark = pytest.mark.slow

NAME = "xla-autotune"
#: What the repository ships inside the package, which the wheel must hold, each file of it.
SHIPPED = [("autotune/policies", ("*.zip", "*.zip.json", "*.zip.npz", "*/*.zip", "*/*.zip.json", "*/*.zip.npz")),
           ("pipelines/xla/gpu_specs", ("*.txtpb",))]
#: Where those land in the wheel (pipelines/ is installed as autotune.pipelines).
IN_WHEEL = {"autotune/policies": "autotune/policies", "pipelines/xla/gpu_specs": "autotune/pipelines/xla/gpu_specs"}


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """The release's sdist and wheel, built as ``python -m build`` builds them (the wheel from the sdist),
    without isolation: this environment's setuptools, no network."""
    out = tmp_path_factory.mktemp("dist")
    build = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
                           capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, (build.stdout + build.stderr)[-3000:]
    assert len(list(out.glob("xla_autotune-*.tar.gz"))) == 1 and len(list(out.glob("xla_autotune-*.whl"))) == 1
    return out


def test_twine_check_passes_on_the_sdist_and_the_wheel(dist):
    proc = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, sorted(dist.iterdir()))],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("PASSED") == 2, proc.stdout


def _shipped() -> set[str]:
    files = set()
    for folder, patterns in SHIPPED:
        for pattern in patterns:
            files |= {f"{IN_WHEEL[folder]}/{p.relative_to(ROOT / folder).as_posix()}"
                      for p in (ROOT / folder).glob(pattern)}
    return files


def test_the_wheel_holds_the_license_the_readme_the_policies_and_the_gpu_specs(dist):
    wheel = zipfile.ZipFile(next(dist.glob("*.whl")))
    names = set(wheel.namelist())
    shipped = _shipped()
    assert any(n.endswith(".zip.npz") for n in shipped) and any(n.count("/") == 3 for n in shipped)  # committees
    assert shipped <= names, sorted(shipped - names)
    assert {"autotune/pipelines/xla/gpu_specs/h100.txtpb", "autotune/policies/llm.zip.npz"} <= names
    info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    assert wheel.read(f"{info}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
    assert b"Apache License" in wheel.read(f"{info}/licenses/LICENSE")
    meta = wheel.read(f"{info}/METADATA").decode()
    assert f"Name: {NAME}\n" in meta and "License-Expression: Apache-2.0" in meta
    assert "Description-Content-Type: text/markdown" in meta and "# autotune\n" in meta  # the README
    for minor in (11, 12, 13):
        assert f"Classifier: Programming Language :: Python :: 3.{minor}" in meta
    assert "autotune = autotune.cli:main" in wheel.read(f"{info}/entry_points.txt").decode()
    sdist = tarfile.open(next(dist.glob("*.tar.gz")))
    top = sdist.getnames()[0].split("/")[0]
    members = set(sdist.getnames())
    for path in ("LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml", "autotune/policies/llm.zip.npz"):
        assert f"{top}/{path}" in members, path


def _dependencies_of_this_environment(work: Path) -> Path:
    """This environment's installed packages less autotune itself, as links in one folder: a fresh venv
    reads them through a path entry (installing jax again would download a gigabyte), so that pip there
    finds every dependency of the wheel installed and installs only the wheel, by its name."""
    deps = work / "deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.lower().startswith(("autotune", "xla_autotune", "__editable__", "_xla_autotune")):
            (deps / entry.name).symlink_to(entry)
    return deps


@pytest.fixture(scope="module")
def installed(dist, tmp_path_factory) -> Path:
    """A fresh venv where ``pip install xla-autotune`` found the built wheel (``--no-index --find-links``)
    and its dependencies already installed."""
    work = tmp_path_factory.mktemp("wheel")
    env_dir = work / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "deps.pth").write_text(str(_dependencies_of_this_environment(work)) + "\n")
    inst = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index",
                           "--find-links", str(dist), NAME], capture_output=True, text=True, timeout=600)
    assert inst.returncode == 0, (inst.stdout + inst.stderr)[-3000:]
    assert f"Successfully installed {NAME}-" in inst.stdout, inst.stdout
    return env_dir


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AUTOTUNE_DB")}
    env["JAX_PLATFORMS"] = "cpu"
    return env


def test_installed_wheel_imports_itself_not_the_checkout(installed):
    out = subprocess.run([installed / "bin" / "python", "-P", "-c", "import autotune; print(autotune.__file__)"],
                         capture_output=True, text=True, cwd=ROOT, env=_env(), check=True).stdout
    assert str(installed) in out, out


def test_quick_start_from_outside_the_repository(installed, tmp_path):
    """What a user does after ``pip install xla-autotune``, in a folder of their own: which version and
    compiler, XLA's default on a module, the shipped policy's zero-shot answer (its ``.npz`` weights from
    the wheel), and the CI gate on a committed record."""
    exe, work = installed / "bin" / "autotune", tmp_path / "project"
    work.mkdir()
    for path in (EXAMPLES / "llm_decode_step.hlo", EXAMPLES / "xla_dlrm_train_step.tuned.json",
                 ROOT / "tests/data/real/xla_dlrm_train_step.hlo"):
        shutil.copy(path, work)

    def autotune(*args):
        proc = subprocess.run([exe, *args], capture_output=True, text=True, cwd=work, env=_env(), timeout=900)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        return proc.stdout

    assert autotune("--version").startswith(f"{NAME} ")
    assert "default" in autotune("baseline", "llm_decode_step.hlo").lower()
    ppo = autotune("run", "--strategy", "ppo", "--budget", "4", "llm_decode_step.hlo", "--no-validate")
    assert "ppo" in ppo and "Traceback" not in ppo
    assert "OK: the record holds" in autotune("check", "xla_dlrm_train_step.hlo", "--record",
                                              "xla_dlrm_train_step.tuned.json", "--no-validate")


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
