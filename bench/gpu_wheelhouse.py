#!/usr/bin/env python
"""The wheels a GPU machine needs to run autotune itself, and nothing it already has.

The machines the project is measured on (H200: Python 3.12.3, jax 0.11.2 with the CUDA 13 plugin, torch
2.11, numpy, scipy, matplotlib) have no network and take at most 64 MiB of files, so the tool's own
run there (``bench/gpu_check.sh``: ``--objective runtime`` and validation on the device) needs a
wheelhouse made here. This script makes it:

* the distributions autotune's core needs: ``[project].dependencies`` of ``pyproject.toml`` and their
  requirements, walked through this environment's installed metadata (markers evaluated for the
  target Python on Linux), less what the GPU machine has (``PRESENT`` and everything they require);
* less ``LEFT_OUT``: nevergrad imports pandas and scikit-learn (25 MiB of wheels, over the budget);
  only ``--strategy nevergrad`` needs them, the default ``random`` and the others do not;
* each at the version the constraints file pins for that Python (``constraints/py3.12-newest.txt``),
  fetched with ``pip download --no-deps --only-binary=:all:`` for manylinux x86_64 and that CPython;
* plus autotune's own wheel, built from this working tree (tracked and new files, copied elsewhere
  first so the build leaves nothing in the checkout).

It checks the total against ``--max-mib`` (16) and prints the one install line. A wheel pip cannot
find, or a total over the budget: one line on stderr, exit 2. The folder (``.whl/``) is git-ignored.
``--list`` prints the distributions and stops (no network).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from harness import ROOT
#: What a jax + torch GPU machine has (and everything these require, found by the same walk).
PRESENT = ("numpy", "scipy", "matplotlib", "jax", "jaxlib", "ml-dtypes", "opt-einsum", "torch", "pip",
           "setuptools", "packaging", "typing-extensions", "python-dateutil", "six", "filelock", "jinja2",
           "markupsafe", "fsspec", "sympy", "networkx", "pillow")
#: Requirements not carried, with why (their own requirements are not walked either).
LEFT_OUT = {"pandas": "nevergrad's; only --strategy nevergrad imports it (12 MiB)",
            "scikit-learn": "bayesian-optimization's (nevergrad's); only --strategy nevergrad imports it (13 MiB)"}
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def core_requirements() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]


def _requires(name: str, python: str) -> list[str]:
    """``name``'s unconditional requirements on Linux with CPython ``python`` (installed metadata)."""
    from packaging.requirements import Requirement

    try:
        reqs = distribution(name).requires or []
    except PackageNotFoundError:
        raise SystemExit(f"gpu_wheelhouse: error: {name} is not installed here, so its requirements are unknown "
                         f"(run with the project's environment)") from None
    env = {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
           "os_name": "posix", "extra": ""}
    out = []
    for text in reqs:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate(env):
            out.append(canonical(req.name))
    return out


def closure(roots, python: str, stop=frozenset()) -> set[str]:
    seen: set[str] = set()
    todo = [canonical(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen or name in stop:
            continue
        seen.add(name)
        try:
            todo += _requires(name, python)
        except SystemExit:
            if name not in {canonical(p) for p in PRESENT}:
                raise
    return seen


def needed(python: str) -> list[str]:
    """The distributions to carry (canonical names, sorted)."""
    from packaging.requirements import Requirement

    core = [canonical(Requirement(r).name) for r in core_requirements()]
    present = closure(PRESENT, python, stop=frozenset(canonical(n) for n in LEFT_OUT))
    skip = present | {canonical(n) for n in LEFT_OUT}
    return sorted(closure(core, python, stop=frozenset(skip)) - skip)


def pins(python: str) -> dict[str, str]:
    """``canonical name -> version`` from the constraints file for ``python`` (empty when none)."""
    major_minor = python.replace(".", "")
    files = sorted((ROOT / "constraints").glob(f"py{python}*.txt")) or sorted((ROOT / "constraints").glob(
        f"py{major_minor}*.txt"))
    out = {}
    for f in files[:1]:
        for line in f.read_text().splitlines():
            m = re.match(r"^([A-Za-z0-9_.-]+)==([^\s;#]+)", line.strip())
            if m:
                out[canonical(m.group(1))] = m.group(2)
    return out


def fail(message: str) -> int:
    print(f"gpu_wheelhouse: error: {message}", file=sys.stderr)
    return 2


def download(names: list[str], versions: dict[str, str], python: str, out: Path) -> str | None:
    """``pip download`` every name at its pinned version; None, or the first line of pip's error."""
    abi = "cp" + python.replace(".", "")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", python,
           "--implementation", "cp", "--abi", abi, "--abi", "abi3", "--abi", "none", "-d", str(out), "--quiet"]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    cmd += [f"{n}=={versions[n]}" if n in versions else n for n in names]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if "ERROR" in ln] or done.stderr.strip().splitlines() or ["?"]
        return lines[0].strip()
    return None


def build_own_wheel(out: Path) -> str | None:
    """autotune's wheel from this working tree (tracked and untracked, not ignored), built in a copy."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    with tempfile.TemporaryDirectory(prefix="autotune-wheel-") as tmp:
        for rel in files:
            src = ROOT / rel
            if src.is_file() and not rel.startswith((".whl/", "results/", "bench/", "tests/")):
                dst = Path(tmp) / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                               "-w", str(out), tmp], capture_output=True, text=True)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["?"])[-1]
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default="3.12", help="the GPU machine's Python (major.minor; default 3.12)")
    ap.add_argument("--out", default=None, help="the wheelhouse folder (default .whl/pyXY, git-ignored)")
    ap.add_argument("--max-mib", type=float, default=16.0, help="largest total allowed (MiB; default 16)")
    ap.add_argument("--list", action="store_true", help="print the distributions to carry and stop")
    args = ap.parse_args(argv)
    if not re.fullmatch(r"3\.\d+", args.python):
        return fail(f"--python {args.python}: expected major.minor, e.g. 3.12")
    names, versions = needed(args.python), pins(args.python)
    if args.list:
        for n in names:
            print(f"{n}=={versions[n]}" if n in versions else n)
        return 0
    out = Path(args.out or ROOT / ".whl" / f"py{args.python.replace('.', '')}")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    error = download(names, versions, args.python, out)
    if error:
        return fail(f"a wheel for Python {args.python} could not be fetched: {error}")
    error = build_own_wheel(out)
    if error:
        return fail(f"autotune's own wheel did not build: {error}")
    wheels = sorted(out.glob("*.whl"))
    got = {canonical(w.name.split("-")[0]) for w in wheels}
    lacking = [n for n in names + ["autotune"] if n not in got]
    if lacking:
        return fail(f"no wheel for {', '.join(lacking)} in {out}")
    total = sum(w.stat().st_size for w in wheels)
    if total > args.max_mib * 2**20:
        return fail(f"the wheelhouse is {total / 2**20:.1f} MiB, over the {args.max_mib:g} MiB allowed "
                    f"({len(wheels)} wheels in {out})")
    for w in wheels:
        print(f"{w.stat().st_size / 2**20:7.2f} MiB  {w.name}")
    rel = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    print(f"{len(wheels)} wheels, {total / 2**20:.1f} MiB (left out: "
          + "; ".join(f"{k}, {v}" for k, v in LEFT_OUT.items()) + ")")
    print(f'python3 -m pip install --no-index --no-deps --target "$SITE" {rel}/*.whl && '
          f'export PYTHONPATH="$SITE${{PYTHONPATH:+:$PYTHONPATH}}"')
    return 0


if __name__ == "__main__":
    sys.exit(main())
