"""What every benchmark under bench/ shares: its inputs, its provenance and how it writes results/.

A benchmark is a small file on top of this module::

    from harness import ROOT, Provenance, require, write

    require(paths)                       # before any work: a missing input is one line and exit 2
    prov = Provenance.now(target="cpu")  # the command as run, git revision, jax/jaxlib, target, machine
    ...
    write(out, "name", data, markdown, prov, plot=draw)   # name.json + name.md (+ name.png)

**Inputs.** ``tests/data/real`` holds five small real modules (executable here), ``tests/data/real-llm``
the three LLM steps dumped from GPU runs (too large to execute here); each folder's SOURCES.md names
the source repository, path, commit and licence. ``all_real``/``llm_steps`` name them, ``hlo_files``
reads a folder or a list of files, ``ensure_suite`` generates a zoo family once into a folder.

**Provenance.** Every results file says which command, revision and jax made it: the JSON gains a
``provenance`` object, the Markdown a "Made by ..." line under its title (``stamp``).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
REAL = ROOT / "tests" / "data" / "real"
REAL_LLM = ROOT / "tests" / "data" / "real-llm"
#: The three LLM steps, in the order the reports list them.
LLM_STEPS = ("rocm_llama3_8b_generate.hlo", "rocm_gpt_oss_20b_prefill.hlo", "rocm_deepseek2_16b_generate.hlo")

for _path in (str(ROOT), str(ROOT / "bench")):  # the package and the benchmarks' own modules
    if _path not in sys.path:
        sys.path.insert(0, _path)


# ---- logging and paths ----------------------------------------------------------------------------
def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def rel(path: Path) -> str:
    """A path as results/ may show it: relative to the repository (a path outside it is shown whole)."""
    path = Path(path).resolve()
    for base, prefix in ((ROOT, ""), (ROOT.parent, "../")):
        try:
            return prefix + str(path.relative_to(base))
        except ValueError:
            continue
    return str(path)  # outside the repository: the whole path, which says where it is


# ---- inputs ---------------------------------------------------------------------------------------------
def llm_steps() -> list[Path]:
    return [REAL_LLM / name for name in LLM_STEPS]


def all_real() -> list[Path]:
    """The eight real modules: the five small ones, then the three LLM steps."""
    return sorted(REAL.glob("*.hlo")) + llm_steps()


def fail(message: str) -> None:
    """One line on stderr, named after the script, and exit 2 (a usage error: nothing was done)."""
    print(f"{Path(sys.argv[0]).name}: error: {message}", file=sys.stderr)
    sys.exit(2)


def require(paths, what: str = "input") -> None:
    """Exit 2 with one line naming the first missing file (before any work is done)."""
    for path in map(Path, paths):
        if not path.is_file():
            inside = path.resolve().is_relative_to(ROOT)  # the repository's own inputs say where they come from
            fail(f"{what} {path} is missing" + (f" (a clone of the repository has it; see {path.parent}/SOURCES.md)"
                                                 if inside else ""))


def max_rel_diff(a, b) -> float:
    """The largest difference between two pytrees of arrays (two programs' outputs), relative to each
    leaf's largest magnitude: what a bench reports beside a timing to say both computed the same."""
    import jax
    import numpy as np

    worst = 0.0
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if x.size:
            worst = max(worst, float(np.max(np.abs(x - y)) / (np.max(np.abs(x)) + 1e-30)))
    return worst


def hlo_files(given, pattern: str = "*.hlo") -> list[Path]:
    """The files named and every ``pattern`` file of the folders named, checked before any work:
    a missing file or folder, or a folder without modules, is one line and exit 2."""
    found: list[Path] = []
    for item in map(Path, given):
        if item.is_dir():
            files = sorted(item.glob(pattern))
            if not files:
                fail(f"folder {item} holds no {pattern} modules")
            found += files
        elif item.is_file():
            found.append(item)
        else:
            fail(f"input {item} is missing (no such file or folder)")
    return found


def ensure_suite(directory: Path, family: str = "llm"):
    """The zoo family in ``directory``, generated when missing or generated from another grid."""
    from autotune.zoo import suite

    manifest = suite.load_manifest(directory) if (directory / "manifest.json").exists() else None
    if manifest is None or not suite.is_current(manifest, [family]):
        print(f"generating the {family} family into {directory} ...", file=sys.stderr, flush=True)
        suite.generate(directory, families=[family])
        manifest = suite.load_manifest(directory)
    if not any(e.family == family for e in manifest.entries):
        raise SystemExit(f"error: {directory} holds no {family} modules")
    return manifest


# ---- provenance -----------------------------------------------------------------------------------------
def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "?"


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def command_line(argv: list[str] | None = None, script: str | None = None) -> str:
    """The command as run, from the repository root: ``python bench/x.py --flag ...``."""
    path = Path(script or sys.argv[0]).resolve()
    try:
        shown = str(path.relative_to(ROOT))
    except ValueError:
        shown = path.name
    return shlex.join(["python", shown, *(sys.argv[1:] if argv is None else argv)])


@dataclass(frozen=True)
class Provenance:
    """Who made a results file: the command, the revision (``+dirty`` with uncommitted changes), the
    jax/jaxlib (XLA ships inside jaxlib) that compiled, the target judged for and the machine."""

    command: str
    revision: str
    jax: str
    jaxlib: str
    target: str
    machine: str
    when: str

    @classmethod
    def now(cls, argv: list[str] | None = None, target: str = "cpu", script: str | None = None) -> Provenance:
        rev = _git("rev-parse", "--short", "HEAD") or "?"
        if rev != "?" and _git("status", "--porcelain", "--untracked-files=no"):
            rev += "+dirty"
        machine = (f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
                   f"Python {platform.python_version()}")
        return cls(command_line(argv, script), rev, _version("jax"), _version("jaxlib"), str(target), machine,
                   time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))

    @classmethod
    def of(cls, data: dict) -> Provenance | None:
        """The provenance a results JSON carries, if any (for re-rendering its Markdown)."""
        p = data.get("provenance")
        return cls(**p) if isinstance(p, dict) else None

    def as_dict(self) -> dict:
        return asdict(self)

    def sentence(self) -> str:
        return (f"Made by `{self.command}` at {self.revision} with jax {self.jax} (jaxlib {self.jaxlib}) for "
                f"target {self.target} on {self.machine}, {self.when}.")


# ---- results --------------------------------------------------------------------------------------------
def stamp(markdown: str, prov: Provenance | None) -> str:
    """``markdown`` with the provenance line after its title (at the top without one)."""
    if prov is None:
        return markdown
    lines = markdown.split("\n")
    at = next((i + 1 for i, line in enumerate(lines[:3]) if line.startswith("# ")), 0)
    return "\n".join(lines[:at] + (["", prov.sentence()] if at else [prov.sentence(), ""]) + lines[at:])


def write_json(path: Path, data: dict, prov: Provenance | None, indent: int = 2) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {**data, "provenance": prov.as_dict()} if prov is not None else data
    path.write_text(json.dumps(body, indent=indent, default=str) + "\n")
    return path


def write_markdown(path: Path, markdown: str, prov: Provenance | None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = stamp(markdown, prov)
    path.write_text(text if text.endswith("\n") else text + "\n")
    return path


def write(out: Path, stem: str, data: dict, markdown: str | None, prov: Provenance, *, indent: int = 2,
          plot: Callable[[Path], None] | None = None) -> Path:
    """``out/stem.json`` (``data`` plus its provenance), ``out/stem.md`` (the provenance line under the
    title) and, given ``plot``, ``out/stem.png`` drawn by it; returns the Markdown's path (the JSON's
    without Markdown)."""
    out = Path(out)
    path = write_json(out / f"{stem}.json", data, prov, indent)
    if markdown is not None:
        path = write_markdown(out / f"{stem}.md", markdown, prov)
    if plot is not None:
        plot(out / f"{stem}.png")
    return path


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (no display on a benchmark machine)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, dpi: int = 120) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
