"""Does a refactoring change what autotune does? The same three runs before and after, compared.

    python bench/same_behaviour.py --before 093ef5a        # writes results/same_behaviour.md

Runs, for the checkout at ``--before`` and for this working tree, each on a fresh cache and with
no validation (what is compared is the search, not the host's executions): the GPT-2 example tuned
by greedy at budget 30, a fleet of three modules (BERT, ResNet, the MLP test module) by random
search at budget 12, and ``explore --depth 1`` on the tiny GPT-2 test module. Equal means equal
sequences, evaluations, steps compiled and cached, costs and best-so-far histories.

Why a script and not a test: it needs two versions of the package side by side. The earlier one is
a ``git worktree`` laid out as an installed package (``pipelines/`` and ``strategies/`` moved under
``autotune/``, as pyproject's package-dir maps them) and put first on ``PYTHONPATH``; both run with
this checkout's environment, so a change in jax or the pins is not what is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
FLEET = ("examples/bert_encoder_step.hlo", "examples/resnet_train_step.hlo", "tests/data/mlp_train_step.hlo")
#: What must match, per command's JSON.
KEYS = ("evaluations", "steps_compiled", "steps_cached", "history", "best_cost", "default_cost", "status",
        "sequences_covered", "distinct_states", "best_sequence", "best_final_ops", "default_final_ops")


def installed_layout(rev: str, into: Path) -> Path:
    """``rev`` checked out and laid out as pyproject installs it; returns the folder for PYTHONPATH."""
    tree = into / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(tree), rev], check=True,
                   capture_output=True)
    site = into / "site"
    shutil.copytree(tree / "autotune", site / "autotune")
    shutil.copytree(tree / "pipelines", site / "autotune" / "pipelines")
    shutil.copytree(tree / "strategies", site / "autotune" / "strategies")
    return site


def runs(out: Path, pythonpath: str | None) -> dict[str, dict]:
    """The three commands' JSON, run from ``out`` (never from a folder holding an ``autotune`` package)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    fleet = out / "fleet"
    fleet.mkdir(parents=True)
    for f in FLEET:
        shutil.copy(ROOT / f, fleet)
    commands = {
        "gpt2 greedy 30": ["run", "--strategy", "greedy", "--budget", "30", str(ROOT / "examples/gpt2_train_step.hlo"),
                           "--db", str(out / "a.db")],
        "fleet of three": ["run", "--strategy", "random", "--budget", "12", "--seed", "1", "--modules", str(fleet),
                           "--db", str(out / "b.db")],
        "explore depth 1": ["explore", "--depth", "1", str(ROOT / "tests/data/tiny_gpt2_train_step.hlo"),
                            "--db", str(out / "c.db")],
    }
    found = {}
    for name, args in commands.items():
        proc = subprocess.run([sys.executable, "-m", "autotune.cli", *args, "--json", "--no-validate"], cwd=out,
                              env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"same_behaviour.py: {name} failed: {proc.stderr.strip().splitlines()[-1:]}")
        data = json.loads(proc.stdout)
        found[name] = {k: data[k] for k in KEYS if k in data} | {"sequence": (data.get("best") or {}).get("sequence")}
    return found


def jax_version() -> str:
    """The jaxlib both sides ran with (this checkout's environment)."""
    from importlib.metadata import version

    return version("jaxlib")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the git revision to compare this working tree with")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        try:
            site = installed_layout(args.before, tmp / "before")
            before = runs(tmp / "before" / "runs", str(site))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tmp / "before" / "tree")],
                           capture_output=True)
        after = runs(tmp / "after", None)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    lines = [f"# Same behaviour: {args.before} against the working tree at {head}", "",
             "Made by `python bench/same_behaviour.py --before " + args.before + f"` with jax {jax_version()} "
             "(XLA's CPU pipeline, no validation; nothing timed).", "", "| run | evaluations | steps compiled / cached | best | same |", "|---|---:|---:|---|---|"]
    same_all = True
    for name in before:
        a, b = before[name], after[name]
        same = a == b
        same_all &= same
        best = ",".join(a.get("sequence") or a.get("best_sequence") or []) or "(the default)"
        lines.append(f"| {name} | {a.get('evaluations', a.get('sequences_covered'))} | "
                     f"{a.get('steps_compiled')} / {a.get('steps_cached', '-')} | {best} | "
                     f"{'yes' if same else 'NO: ' + ', '.join(k for k in a if a[k] != b.get(k))} |")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "same_behaviour.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    sys.exit(0 if same_all else 1)


if __name__ == "__main__":
    main()
