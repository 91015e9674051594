"""Where the real third-party modules the benchmarks use live in this repository, and one check.

``tests/data/real`` holds five small ones (executable here), ``tests/data/real-llm`` the three LLM
steps dumped from GPU runs (too large to execute here); each folder's SOURCES.md names the source
repository, path, commit and licence. A benchmark checks its inputs before it starts
(``require``): a missing file is one line and exit 2, not a traceback after an hour of work.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "tests" / "data" / "real"
REAL_LLM = ROOT / "tests" / "data" / "real-llm"
#: The three LLM steps, in the order the reports list them.
LLM_STEPS = ("rocm_llama3_8b_generate.hlo", "rocm_gpt_oss_20b_prefill.hlo", "rocm_deepseek2_16b_generate.hlo")


def llm_steps() -> list[Path]:
    return [REAL_LLM / name for name in LLM_STEPS]


def all_real() -> list[Path]:
    """The eight real modules: the five small ones, then the three LLM steps."""
    return sorted(REAL.glob("*.hlo")) + llm_steps()


def require(paths, what: str = "input") -> None:
    """Exit 2 with one line naming the first missing file (before any work is done)."""
    for path in paths:
        if not Path(path).is_file():
            print(f"{Path(sys.argv[0]).name}: error: {what} {path} is missing (a clone of the repository has it; "
                  f"see {Path(path).parent}/SOURCES.md)", file=sys.stderr)
            sys.exit(2)
