#!/usr/bin/env python
"""The screen on ResNet-50: is its one-flag win found at budget 30 by every strategy? results/screen.md.

Issue 64 asks that ResNet-50's one-flag win (YNNPACK reduce fusions, 0.82-0.94 alone) be found at
budget <= 30 by random, nevergrad, optuna and greedy in at least 19 of 20 seeds each, with
``--space both``. Before the screen, nevergrad at budget 20 found a win in 3 of 6 runs.

For each seed, each strategy runs ``autotune run MODEL --objective runtime --space both --budget 30
--seed S --strategy X --json`` (a subprocess, as a user would). A win is **found** when the run
offers a confirmed, executed and replicated runtime win (``claim.win``); its ratio and interval are
the confirmation's. Reported per seed and strategy, and in counts per strategy.

Cache. All runs share one cache. Every runtime measurement is keyed by the run's seed (the inputs
timed and the cache key), so each seed's screen is timed afresh, on its own inputs; the strategies
of one seed share that seed's screen (it asks the same candidates of every strategy: its first
evaluations are cache hits for the second strategy on), and each run's confirmation is timed anew.
Compiles, normalisation and validation verdicts (facts about the modules) are shared across seeds.
This is what makes a seed affordable on a loaded 2-core machine (one ResNet-50 candidate takes tens
of seconds here); the counts are of seeds whose screen was timed independently.

``--stop-at HH:MM`` (UTC) starts no run after that time; the report says how many seeds ran.
``--resume`` keeps the runs already in the output's screen.json (a session's time on this machine
holds about six seeds) and runs only the (seed, strategy) pairs it lacks; the report names the
earlier session's revision and date beside this one's. A resumed seed's screen is timed afresh on
its seed's inputs like any other, so seeds from different sessions are as independent as within one.

    python bench/screen.py [--seeds 20] [--budget 30] [--stop-at 22:40] [--resume]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from harness import RESULTS, ROOT, Provenance, write

MODEL = ROOT / "tests/data/real/xla_resnet50_keras_jax.hlo"
STRATEGIES = ("random", "nevergrad", "optuna", "greedy")
WIN = ("xla_cpu_experimental_ynn_fusion_type", "LIBRARY_FUSION_TYPE_REDUCE")


def one_run(seed: int, strategy: str, budget: int, db: Path, extra: list[str]) -> dict:
    """One ``autotune run`` as a user would type it; the facts the report needs from its JSON."""
    cmd = [sys.executable, "-m", "autotune.cli", "run", str(MODEL), "--objective", "runtime", "--space", "both",
           "--budget", str(budget), "--seed", str(seed), "--strategy", strategy, "--json", "--db", str(db), *extra]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=dict(os.environ))
    seconds = time.perf_counter() - t0
    row = {"seed": seed, "strategy": strategy, "seconds": seconds, "rc": done.returncode}
    try:
        data = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {**row, "error": (done.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    claim = data.get("claim") or {}
    best = data.get("best") or {}
    notes = (data.get("search_notes") or {}).get("screen") or {}
    found = best.get("found_compiler_options") or best.get("compiler_options") or {}
    screened = {tuple(next(iter(p["options"].items()))): p for p in notes.get("probes", []) if not p["combined"]}
    probe = screened.get(WIN)
    return {**row, "win": bool(claim.get("win")), "ratio": claim.get("ratio"), "low": claim.get("low"),
            "high": claim.get("high"), "options": best.get("compiler_options") or {}, "found_options": found,
            "sequence": best.get("sequence") or [], "evaluations": data.get("evaluations"),
            "message": claim.get("message"), "screen": {k: notes.get(k) for k in (
                "screened", "singles", "left_out", "combined", "evaluations", "extended", "extra_rounds", "paid",
                "best")} if notes else None,
            "reduce_in_screen": probe is not None,
            "reduce_screened": None if probe is None else probe.get("evidence"),
            "phases": data.get("phases")}


def _load_note(rows: list[dict]) -> str:
    """The machine's 1-minute load average when the runs started (timings on a shared machine depend on it)."""
    loads = [r["load"] for r in rows if r.get("load") is not None]
    return f", load average at the runs' starts {min(loads):.1f}-{max(loads):.1f}" if loads else ""


def _earlier(out: Path) -> tuple[list[dict], list[dict]]:
    """The runs (errors left out: they run again) and provenances of an earlier screen.json under ``out``."""
    path = out / "screen.json"
    if not path.exists():
        return [], []
    data = json.loads(path.read_text())
    provs = list(data.get("earlier_provenance") or [])
    if data.get("provenance"):
        provs.append(data["provenance"])
    return [r for r in data.get("rows", []) if "error" not in r], provs


def markdown(rows: list[dict], seeds: list[int], budget: int, planned: int, prov_note: str) -> str:
    ran = sorted({r["seed"] for r in rows})
    complete = [s for s in ran if all(any(r["seed"] == s and r["strategy"] == st for r in rows) for st in STRATEGIES)]
    lines = ["# The screen on ResNet-50: the one-flag win at budget 30", "",
             f"`autotune run {MODEL.relative_to(ROOT)} --objective runtime --space both --budget {budget} --seed S "
             f"--strategy X`, one subprocess per (seed, strategy). **{len(complete)} of {planned} seeds run** with all "
             f"four strategies ({len(rows)} runs in all"
             + ("" if len(complete) >= planned else "; the rest did not fit before the deadline")
             + f" on this {os.cpu_count()}-CPU machine{_load_note(rows)}). A win is *found* when the run offers a confirmed win (interleaved A/B, 30 rounds, "
             "replicated on other inputs, executed and compared on two draws of inputs).", "",
             prov_note, "", "## Wins found, per strategy", "",
             "| strategy | runs | wins found | with YNNPACK reduce | ratio of the wins (median) |", "|---|---|---|---|---|"]
    for st in STRATEGIES:
        mine = [r for r in rows if r["strategy"] == st]
        wins = [r for r in mine if r.get("win")]
        reduce = [r for r in wins if r.get("options", {}).get(WIN[0]) == WIN[1]]
        ratios = sorted(r["ratio"] for r in wins if r.get("ratio") is not None)
        med = f"{ratios[len(ratios) // 2]:.3f}" if ratios else "-"
        lines.append(f"| {st} | {len(mine)} | {len(wins)} of {len(mine)} | {len(reduce)} | {med} |")
    lines += ["", "## Every run", "",
              "| seed | strategy | found | ratio [95% CI] | answer's options | screen: paid | REDUCE screened | s |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['seed']} | {r['strategy']} | error | {r['error']} | | | | {r['seconds']:.0f} |")
            continue
        ci = (f"{r['ratio']:.3f} [{r['low']:.3f}, {r['high']:.3f}]" if r.get("low") is not None
              else (f"{r['ratio']:.3f}" if r.get("ratio") is not None else "-"))
        opts = ", ".join(f"{k.replace('xla_cpu_experimental_', '')}={v.replace('LIBRARY_FUSION_TYPE_', '')}"
                         for k, v in (r.get("options") or {}).items()) or "(default)"
        paid = "; ".join(p.replace("xla_cpu_experimental_", "").replace("LIBRARY_FUSION_TYPE_", "")
                         for p in ((r.get("screen") or {}).get("paid") or [])) or "none"
        ev = r.get("reduce_screened")
        red = "not screened" if ev is None else (
            f"{ev['ratio']:.3f}" + (f" [{ev['low']:.3f}, {ev['high']:.3f}]" if ev.get("low") is not None else "")
            + f" ({ev['rounds']} rounds)")
        lines.append(f"| {r['seed']} | {r['strategy']} | {'yes' if r.get('win') else 'no'} | {ci} | {opts} | {paid} | "
                     f"{red} | {r['seconds']:.0f} |")
    misses = [r for r in rows if "error" not in r and not r.get("win")]
    if misses:
        lines += ["", "## The runs that found no win, in their own words", ""]
        for r in misses:
            found = ", ".join(f"{k}={v}" for k, v in (r.get("found_options") or {}).items()) or "(default)"
            load = f", load {r['load']:.1f} at its start" if r.get("load") is not None else ""
            lines.append(f"- seed {r['seed']}, {r['strategy']}{load}: its answer's candidate {found}; "
                         f"\"{r.get('message')}\"")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--budget", type=int, default=30)
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--stop-at", default=None, help="HH:MM UTC: start no run after this")
    parser.add_argument("--db", default=None, help="the shared cache (default: a fresh one under results/.cache)")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--resume", action="store_true",
                        help="keep the runs already in OUT/screen.json and run only the missing (seed, strategy) pairs")
    args = parser.parse_args()
    strategies = [s for s in args.strategies.split(",") if s]
    db = Path(args.db) if args.db else RESULTS / ".cache" / f"screen-{int(time.time())}.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    prov = Provenance.now(script="bench/screen.py")
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    rows, earlier = _earlier(Path(args.out)) if args.resume else ([], [])
    done = {(r["seed"], r["strategy"]) for r in rows}
    note = (f"Cache: one for all runs ({db.name}); every runtime measurement is keyed by its seed, so each seed's "
            "screen was timed afresh and shared by that seed's four strategies; confirmations are timed in every run.")
    if earlier:
        note += (" Resumed: " + str(len(rows)) + " runs kept from earlier sessions ("
                 + "; ".join(f"{p['revision']}, {p['when']}" for p in earlier)
                 + "); this session ran the rest.")
    for seed in seeds:
        for st in strategies:
            if (seed, st) in done:
                continue
            if args.stop_at and time.strftime("%H:%M", time.gmtime()) >= args.stop_at:
                break
            load = os.getloadavg()[0]
            row = {**one_run(seed, st, args.budget, db, []), "load": load}
            rows.append(row)
            rows.sort(key=lambda r: (r["seed"], strategies.index(r["strategy"]) if r["strategy"] in strategies else 9))
            print(json.dumps({k: row.get(k) for k in ("seed", "strategy", "win", "ratio", "options", "seconds",
                                                         "error")}), flush=True)
            write(Path(args.out), "screen", {"rows": rows, "budget": args.budget, "planned_seeds": len(seeds),
                                             "strategies": strategies, "model": str(MODEL.relative_to(ROOT)),
                                             "earlier_provenance": earlier},
                  markdown(rows, seeds, args.budget, len(seeds), note), prov)
        else:
            continue
        break


if __name__ == "__main__":
    main()
