#!/usr/bin/env python
"""Every real module autotune did not generate, tuned the way a new user would, with its validation level.

For each module: ``autotune run --strategy S --budget B MODULE --json`` in a subprocess (the real
CLI, one shared cache), recording the exit code, wall time, input / XLA default / best final-ops,
the best sequence and the validation level with its reason. Nothing is refused for size or for
accelerator custom calls: a module that cannot be executed here gets a lower level (``compiled``).

    python bench/real_models.py [--strategy random] [--budget 20] [--seed 0] [MODULE ...]

Default modules: the eight in ``../shared/real-hlo`` (three LLM steps too large to execute here) and
the generated real-model classes in ``tests/data/gen`` (an LLM-shaped train step from abstract
shapes, GPU custom calls from cross-platform lowering, baked-in weights). Writes
``results/real_models.md`` and ``results/real_models.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "real-hlo"


def default_modules() -> list[Path]:
    return sorted(SHARED.glob("*.hlo")) + sorted((ROOT / "tests" / "data" / "gen").glob("*.hlo"))


def run_one(path: Path, args, db: Path) -> dict:
    cmd = [sys.executable, "-m", "autotune.cli", "run", "--strategy", args.strategy, "--budget", str(args.budget),
           "--seed", str(args.seed), str(path), "--json", "--db", str(db)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - t0
    row = {"module": path.stem, "path": str(path), "exit": proc.returncode, "seconds": round(seconds, 1)}
    if proc.returncode != 0:
        row["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return row
    data = json.loads(proc.stdout)
    best = data.get("best") or {}
    validation = data.get("validity") or {}
    row.update(
        input_ops=data["input"]["instructions"], default_final_ops=data["default"]["instructions"],
        best_final_ops=(best.get("final") or {}).get("instructions"), beats_default=data["beats_default"],
        sequence=best.get("sequence") if data["beats_default"] else [],
        level=data.get("validation_level"), level_reason=validation.get("reason"),
        steps_compiled=data["steps_compiled"], evaluations=data["evaluations"],
    )
    return row


def markdown(rows: list[dict], command: str) -> str:
    lines = [
        "# Real modules, tuned as a new user would",
        "",
        f"Made by `{command}` on {os.cpu_count()} CPUs (shared machine; wall times are indicative). Each row is "
        "one `autotune run ... --json` in a subprocess on one shared, initially empty cache. final-ops = "
        "instructions after the sequence followed by XLA's default pipeline. The level is the evidence for the "
        "reported best (README: Validation levels): `identical` = the same final module as XLA's default, "
        "`executed` = same outputs on seeded random inputs, `compiled` = full compile only (the reason says why).",
        "",
        "| module | exit | input ops | XLA default final-ops | best final-ops | best sequence | level | why | time |",
        "|---|---:|---:|---:|---:|---|---|---|---:|",
    ]
    for r in rows:
        if r["exit"] != 0:
            lines.append(f"| {r['module']} | {r['exit']} | | | | | | {r.get('error', '')} | {r['seconds']}s |")
            continue
        seq = ", ".join(f"`{p}`" for p in r["sequence"]) if r["beats_default"] else "(= XLA default)"
        why = (r.get("level_reason") or "").replace("|", "/")
        lines.append(f"| {r['module']} | 0 | {r['input_ops']} | {r['default_final_ops']} | {r['best_final_ops']} | "
                     f"{seq} | {r['level']} | {why} | {r['seconds']}s |")
    wins = [r for r in rows if r.get("beats_default")]
    lines += ["", f"{sum(r['exit'] == 0 for r in rows)} of {len(rows)} modules tuned (exit 0); "
                  f"{len(wins)} beat XLA's default on final-ops."]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("modules", nargs="*", type=Path)
    p.add_argument("--strategy", default="random")
    p.add_argument("--budget", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--db", type=Path, default=None, help="cache database (default: a fresh temporary one)")
    p.add_argument("--out", type=Path, default=ROOT / "results")
    args = p.parse_args()
    modules = args.modules or default_modules()
    with tempfile.TemporaryDirectory(prefix="autotune-real-") as tmp:
        db = args.db or Path(tmp) / "cache.db"
        rows = []
        for path in modules:
            rows.append(run_one(path, args, db))
            r = rows[-1]
            print(f"{r['module']}: exit {r['exit']}, {r.get('default_final_ops')} -> {r.get('best_final_ops')}, "
                  f"{r.get('level')}, {r['seconds']}s", flush=True)
    command = "python bench/real_models.py" + ("" if args.strategy == "random" else f" --strategy {args.strategy}") \
        + ("" if args.budget == 20 else f" --budget {args.budget}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "real_models.json").write_text(json.dumps({"command": command, "rows": rows}, indent=2))
    (args.out / "real_models.md").write_text(markdown(rows, command))


if __name__ == "__main__":
    main()
