"""How much a plain ``pip install xla-autotune`` (no extras) puts on disk, per supported Python.

A JAX project adds autotune to its own environment; what it pays is the core install: jax, jaxlib and
the pure-Python search libraries, no torch (``xla-autotune[train]``) and no ray (``xla-autotune[ray]``). This
script makes one fresh venv per Python it finds (3.11, 3.12, 3.13: pyenv or ``pythonX.Y`` on the
path), installs the repository into it without extras under the constraints file CI uses for that
Python (3.11: jax 0.10.2; 3.12 and 3.13: the newest jax CI has tested), checks that ``autotune`` starts
and that no torch came in, and reports the venv's size::

    python bench/install_size.py [--pythons 3.11,3.12,3.13] [--out results]

Writes ``results/install-size.{json,md}``. A Python that is not on this machine is listed as such.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import RESULTS, ROOT, Provenance, fail, log, write

#: The constraints file each Python installs with (the Makefile's: CI's environments).
CONSTRAINTS = {"3.11": "constraints/py3.11.txt", "3.12": "constraints/py3.12-newest.txt",
               "3.13": "constraints/py3.12-newest.txt"}


def find_python(version: str) -> str | None:
    """An interpreter of ``version`` (``3.12``): pyenv's first, then ``python3.12`` on the path."""
    candidates = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}*/bin/python")))
    candidates.append(shutil.which(f"python{version}") or "")
    for path in filter(None, candidates):
        got = subprocess.run([path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True)
        if got.returncode == 0 and got.stdout.strip() == version:
            return path
    return None


def tree_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path`` (links not followed, hard links counted once)."""
    seen, total = set(), 0
    for folder, _, files in os.walk(path):
        for name in files:
            st = os.lstat(os.path.join(folder, name))
            if (st.st_dev, st.st_ino) not in seen and not os.path.islink(os.path.join(folder, name)):
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def measure(version: str, python: str, work: Path) -> dict:
    """Install the core into a fresh venv of ``python``; its size, jax and whether torch came in."""
    venv = work / f"venv-{version}"
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    log(f"Python {version}: pip install -c {CONSTRAINTS[version]} .")
    subprocess.run([*pip, "-c", str(ROOT / CONSTRAINTS[version]), str(ROOT)], check=True, cwd=work)
    probe = ("import importlib.util as u, importlib.metadata as m; "
             "print(m.version('jax'), m.version('jaxlib'), u.find_spec('torch') is not None, u.find_spec('ray') is not None)")
    jax, jaxlib, torch, ray = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True,
                                             text=True, check=True).stdout.split()
    starts = subprocess.run([str(venv / "bin" / "autotune"), "--version"], capture_output=True, text=True, cwd=work)
    size = tree_bytes(venv)
    return {"python": version, "interpreter": python, "constraints": CONSTRAINTS[version], "jax": jax,
            "jaxlib": jaxlib, "torch": torch == "True", "ray": ray == "True", "starts": starts.returncode == 0,
            "bytes": size, "gb": round(size / 1e9, 2)}


def markdown(rows: list[dict], missing: list[str]) -> str:
    lines = ["# Core install size (`pip install xla-autotune`, no extras)", "",
             "A fresh venv per Python, installed from this repository under CI's constraints file; the size "
             "is the venv's files (pip and the interpreter's own included).", "",
             "| Python | jax / jaxlib | constraints | venv size | torch | ray | `autotune --version` |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['python']} | {r['jax']} / {r['jaxlib']} | `{r['constraints']}` | {r['gb']:.2f} GB | "
                     f"{'yes' if r['torch'] else 'no'} | {'yes' if r['ray'] else 'no'} | "
                     f"{'starts' if r['starts'] else 'FAILS'} |")
    for version in missing:
        lines.append(f"| {version} | not on this machine | | | | | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pythons", default="3.11,3.12,3.13", help="comma-separated X.Y versions")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    versions = [v.strip() for v in args.pythons.split(",") if v.strip()]
    unknown = [v for v in versions if v not in CONSTRAINTS]
    if unknown:
        fail(f"--pythons: no constraints file for Python {', '.join(unknown)} (supported: {', '.join(CONSTRAINTS)})")
    prov = Provenance.now(target="none (install only)")
    rows, missing = [], []
    with tempfile.TemporaryDirectory(prefix="autotune-install-") as tmp:
        for version in versions:
            python = find_python(version)
            if python is None:
                log(f"Python {version}: not found here")
                missing.append(version)
                continue
            rows.append(measure(version, python, Path(tmp)))
            log(f"Python {version}: {rows[-1]['gb']:.2f} GB, jax {rows[-1]['jax']}, torch {rows[-1]['torch']}")
    path = write(Path(args.out), "install-size", {"rows": rows, "missing": missing}, markdown(rows, missing), prov)
    log(f"wrote {path}")
    return 0 if rows and all(r["starts"] and not r["torch"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
