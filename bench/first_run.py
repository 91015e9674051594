#!/usr/bin/env python
"""A newcomer's first run on real modules: ``autotune run --budget 3`` (validation on) on every real
module at hand, each on a cold cache, with the time of each phase. Writes results/first_run.{md,json}.

Why: issue 53 found first runs on real modules twice as slow as a round earlier (validation and pruning
on large steps); this is the before/after figure for that work, with the jax that made it.

    python bench/first_run.py [--modules DIR_OR_FILES...] [--budget 3] [--validate-seconds 30]
                              [--before results/first_run_before.json] [--name first_run]
                              [--against DIR --against-label REV]

``--llm LAYERS,D_MODEL,EXPERTS`` adds a decode step of the zoo's llm family lowered here (bf16, layers
unrolled: ``scan=False``; 60 layers of 4 experts is ~17k instructions, the size of the issue's Gemma step),
and times one full XLA compile of it (``jax.jit(...).lower(...).compile()``, in this process before
the runs): the figure the validation phase is read against, twice the budget plus one full compile.

``--before`` puts an earlier run's figures (its JSON) beside these, module by module. ``--against``
runs an older ``autotune`` package (``DIR/autotune``, e.g. from ``git archive REV autotune | tar -x -C
DIR``; put first on ``PYTHONPATH``, the rest of this environment shared) on each module right before
this tree, so that both see the same load on a shared machine; its rows are the "before" then (also
written as ``NAME_against.json``). ``--name`` is the stem of what is written under ``--out``. The validation column is the phase's total, to be read
against ``--validate-seconds`` (since issue 53 a budget for the phase as a whole); the checks the
budget skipped are listed per module.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

from autotune.core.results import TuneResult

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIRS = (ROOT / "tests" / "data" / "real", ROOT / "tests" / "data" / "real-llm", ROOT.parent / "shared" / "real-hlo")
PHASES = ("load", "normalise", "default", "search", "prune", "validation")


def modules(given: list[str]) -> list[Path]:
    """The given files and folders' ``.hlo`` files, or the real modules at hand (one file per name)."""
    found: dict[str, Path] = {}
    for item in [Path(g) for g in given] or [d for d in DEFAULT_DIRS if d.is_dir()]:
        for path in sorted(item.glob("*.hlo")) if item.is_dir() else [item]:
            found.setdefault(path.name, path)
    if not found:
        raise SystemExit("first_run: no .hlo modules found")
    return list(found.values())


def lowered_llm(spec: str, out: Path) -> tuple[Path, str]:
    """The ``--llm LAYERS,D_MODEL,EXPERTS`` decode step written under ``out``, and what it is: its
    config, instructions and one full compile's seconds."""
    import jax

    from autotune.zoo import lower
    from autotune.zoo.common import count_instructions
    from autotune.zoo.llm import LLMConfig, program

    layers, d_model, experts = (int(x) for x in spec.split(","))
    cfg = LLMConfig(layers=layers, d_model=d_model, heads=8, kv_heads=4, ffn=4 * d_model, experts=experts, top_k=2,
                    vocab=32000, seq=64, batch=2, scan=False, dtype="bf16")
    text = lower("llm", "decode", cfg)
    path = out / f"llm_decode_{layers}l_{d_model}d_{experts}e.hlo"
    path.write_text(text)
    n = count_instructions(text)
    prog = program(cfg, "decode")
    t0 = time.perf_counter()
    jax.jit(prog.fn).lower(*prog.args).compile()
    took = time.perf_counter() - t0
    return path, (f"`{path.stem}`: `LLMConfig(layers={layers}, d_model={d_model}, heads=8, kv_heads=4, "
                  f"ffn={4 * d_model}, experts={experts}, top_k=2, vocab=32000, seq=64, batch=2, scan=False, "
                  f"dtype='bf16')`, decode, lowered here: {n} instructions; one full XLA CPU compile of it took "
                  f"{took:.1f} s (this process, before the runs)")


def run_one(path: Path, budget: int, validate_seconds: float, package: str | None = None) -> dict:
    """One cold-cache ``autotune run`` of ``path``: its wall time, phases and answer; ``package``: a
    directory whose ``autotune`` runs instead of this tree's (first on ``PYTHONPATH``)."""
    env = dict(os.environ)
    if package:
        env["PYTHONPATH"] = os.pathsep.join([package, *filter(None, [env.get("PYTHONPATH")])])
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-P", "-m", "autotune.cli", "run", "--strategy", "random", "--budget", str(budget),
               "--validate-seconds", str(validate_seconds), str(path), "--db", f"{tmp}/c.db", "--json"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env)
        wall = time.perf_counter() - t0
    row = {"module": path.stem, "wall": wall, "rc": proc.returncode}
    if proc.returncode == 0:
        data = json.loads(proc.stdout)
        validation = TuneResult.from_dict(data).validation  # read typed (an older package's JSON too)
        row.update(phases=data.get("phases") or {}, level=data.get("validation_level"),
                   default=data.get("default_cost"), best=(data.get("best") or {}).get("cost"),
                   reason=validation.reason if validation else None,
                   skipped=[f"{s.check}: {s.reason}" for s in validation.skipped] if validation else [])
    else:
        row["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1][:200]
    return row


def render(rows: list[dict], meta: dict, befores: list[dict] = ()) -> str:
    head = "| module | wall s | " + " | ".join(PHASES) + " | level reached | default -> best |"
    lines = ["# First run on real modules (`autotune run --strategy random --budget 3`, validation on)", "",
             f"Made by `{meta['command']}` at {meta['revision']} with jax {meta['jax']} on {meta['machine']}; "
             f"each module on a cold cache, `--validate-seconds {meta['validate_seconds']}`. Judged by XLA's "
             "CPU pipeline; wall time of the whole command (start-up included) on a shared machine"
             + (f" (load average {meta['load']} at the start)" if meta.get("load") else "") + ": other jobs "
             "ran beside it, and one module's time varies up to 2x between rounds. Compare within an A/B "
             "table (`--against`: each module's before run just before its after run), not across rounds.", "",
             *([meta["llm"], ""] if meta.get("llm") else []), head, "|" + "---|" * (len(PHASES) + 4)]
    for r in rows:
        ph = r.get("phases", {})
        cells = " | ".join(f"{ph[p]:.1f}" if isinstance(ph.get(p), (int, float)) else "-" for p in PHASES)
        answer = f"{r.get('default')} -> {r.get('best')}" if r["rc"] == 0 else r.get("error", "")
        lines.append(f"| `{r['module']}` | {r['wall']:.1f} | {cells} | {r.get('level') or '-'} | {answer} |")
    lines += ["", f"Total: {sum(r['wall'] for r in rows):.0f} s over {len(rows)} modules."]
    skipped = [(r["module"], s) for r in rows for s in r.get("skipped") or ()]
    if skipped:
        lines += ["", "Checks the validation phase's budget skipped before they started:", ""]
        lines += [f"- `{module}`: {s}" for module, s in skipped]
    for before in befores:
        lines += ["", *beside(rows, before)]
    return "\n".join(lines) + "\n"


def beside(rows: list[dict], before: dict) -> list[str]:
    """These rows' wall and validation seconds next to an earlier run's (``--before``), per module."""
    old = {r["module"]: r for r in before["rows"]}
    meta = before["meta"]
    lines = [f"## Before and after (before: `{meta['command'].strip()}` at {meta['revision']}, jax {meta['jax']}, "
             f"`--validate-seconds {meta['validate_seconds']}`)", "",
             "| module | wall s before | wall s after | validation s before | validation s after | level before | level after |",
             "|---|---|---|---|---|---|---|"]

    def val(r):
        v = (r or {}).get("phases", {}).get("validation")
        return f"{v:.1f}" if isinstance(v, (int, float)) else "-"

    for r in rows:
        b = old.get(r["module"])
        lines.append(f"| `{r['module']}` | {b['wall']:.1f} | {r['wall']:.1f} | {val(b)} | {val(r)} | "
                     f"{b.get('level') or '-'} | {r.get('level') or '-'} |" if b else
                     f"| `{r['module']}` | - | {r['wall']:.1f} | - | {val(r)} | - | {r.get('level') or '-'} |")
    common = [r for r in rows if r["module"] in old]
    lines += ["", f"Total over the {len(common)} modules in both: {sum(old[r['module']]['wall'] for r in common):.0f} s "
              f"before, {sum(r['wall'] for r in common):.0f} s after (validation {sum_phase(old[r['module']] for r in common):.0f} s "
              f"-> {sum_phase(common):.0f} s)."]
    return lines


def sum_phase(rows, phase: str = "validation") -> float:
    return sum(float((r.get("phases") or {}).get(phase) or 0.0) for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modules", nargs="*", default=[])
    ap.add_argument("--budget", type=int, default=3)
    ap.add_argument("--validate-seconds", type=float, default=30.0)
    ap.add_argument("--out", default=str(ROOT / "results"))
    ap.add_argument("--name", default="first_run", help="stem of the files written under --out")
    ap.add_argument("--before", default=None, help="an earlier run's JSON, shown beside this one")
    ap.add_argument("--against", default=None, help="a directory holding an older autotune package, run on "
                                                    "each module right before this tree (the before figure)")
    ap.add_argument("--against-label", default=None, help="what --against is (a revision)")
    ap.add_argument("--llm", default=None, help="LAYERS,D_MODEL,EXPERTS: also a bf16 llm decode step lowered here")
    args = ap.parse_args()
    if args.against and not (Path(args.against) / "autotune" / "__init__.py").is_file():
        raise SystemExit(f"first_run: --against {args.against}: no autotune package there")
    try:
        before = json.loads(Path(args.before).read_text()) if args.before else None
    except (OSError, ValueError) as exc:
        raise SystemExit(f"first_run: --before {args.before}: {exc}") from None
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    meta = {"command": "python bench/first_run.py " + " ".join(sys.argv[1:]), "revision": rev or "?",
            "jax": version("jaxlib"), "machine": f"{platform.machine()}, {platform.python_version()}",
            "validate_seconds": args.validate_seconds, "load": " ".join(f"{x:.1f}" for x in os.getloadavg())}
    rows, against, paths = [], [], modules(args.modules) if args.modules or not args.llm else []
    lowered = tempfile.TemporaryDirectory()
    if args.llm:
        path, meta["llm"] = lowered_llm(args.llm, Path(lowered.name))
        paths.append(path)
    for path in paths:
        if args.against:
            against.append(run_one(path, args.budget, args.validate_seconds, str(Path(args.against).resolve())))
            print(f"{path.stem} (against): {against[-1]['wall']:.1f}s "
                  f"{against[-1].get('phases', against[-1].get('error'))}", flush=True)
        rows.append(run_one(path, args.budget, args.validate_seconds))
        print(f"{path.stem}: {rows[-1]['wall']:.1f}s {rows[-1].get('phases', rows[-1].get('error'))}", flush=True)
    out = Path(args.out)
    if args.against:
        before_ab = {"meta": {**meta, "revision": args.against_label or args.against,
                              "command": meta["command"] + " (the --against package, each module run just before)"},
                     "rows": against}
        (out / f"{args.name}_against.json").write_text(json.dumps(before_ab, indent=2) + "\n")
    (out / f"{args.name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    befores = ([before_ab] if args.against else []) + ([before] if before is not None else [])
    (out / f"{args.name}.md").write_text(render(rows, meta, befores))
    print(f"wrote {out / (args.name + '.md')}")


if __name__ == "__main__":
    main()
