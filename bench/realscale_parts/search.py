"""bench/realscale.py's ``--search-pair`` and ``--before-after`` runs: searches on the constants/parameters pair, and one old tree against this one."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import LLM_STEPS as LLM_MODULES, REAL_LLM, ROOT, Provenance, all_real, write


def cli_checks(tmp: Path) -> list[dict]:
    """``baseline`` and ``run --no-validate --budget 20 --strategy random`` on every real and generated module."""
    from realscale_models import llama_train_step

    llm = tmp / "llama_train_2l_abstract.hlo"
    llm.write_text(llama_train_step(2))
    big = tmp / "llama_train_1l_scores_2tib.hlo"
    big.write_text(llama_train_step(1, batch=1024))  # attention scores f32[1024,32,4096,4096]
    rows = []
    env = dict(os.environ, AUTOTUNE_DB=str(tmp / "cli.db"))
    for path in [*sorted(all_real(), key=lambda p: p.name), llm, big]:
        row = {"module": path.name}
        for label, args in (("baseline", ["baseline", "--json", str(path)]),
                            ("run", ["run", "--strategy", "random", "--budget", "20", "--no-validate", "--json",
                                     str(path)])):
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "autotune.cli", *args], capture_output=True, text=True,
                                  env=env, timeout=900)
            row[f"{label}_rc"] = proc.returncode
            row[f"{label}_s"] = round(time.perf_counter() - t0, 1)
            if proc.returncode:
                row[f"{label}_error"] = (proc.stderr.strip().splitlines() or [""])[-1][:200]
            elif label == "run":
                row.update(_run_summary(proc.stdout))
        print(f"[cli] {row}", file=sys.stderr)
        rows.append(row)
    return rows


def _run_summary(stdout: str) -> dict:
    """Input / default / best instruction counts and the validation level from ``run --json``."""
    try:
        data = json.loads(stdout)
    except ValueError:
        return {}
    best = data.get("best") or {}
    return {"input_instructions": (data.get("input") or {}).get("instructions"),
            "default_cost": data.get("default_cost"), "best_cost": best.get("cost", (data.get("claim") or {}).get("cost")),
            "best_sequence": best.get("sequence"), "validation_level": data.get("validation_level"),
            "run_seconds": data.get("seconds"), "steps_compiled": data.get("steps_compiled")}


#: The end-to-end pair: (label, module, extra CLI arguments).
SEARCH_PAIR = (("parameters", "parameters", []), ("constants", "constants", []),
               ("constants, --no-surrogate", "constants", ["--no-surrogate"]))


def search_pair(rounds: int, budget: int, out: Path) -> None:
    """The same search end to end on the weights-as-constants module and on the weights-as-parameters
    one: ``autotune run --strategy nevergrad --budget B --json`` in a subprocess, each on a fresh cache
    (cold: every step compiled), the three settings alternating for ``rounds`` rounds; median wall
    time, phases, best sequence and level. Writes results/realscale-search.{md,json}."""
    from realscale_models import embedded_weights

    with tempfile.TemporaryDirectory(prefix="autotune-search-pair-") as tmpdir:
        tmp = Path(tmpdir)
        paths = {"constants": tmp / "embedded_constants.hlo", "parameters": tmp / "embedded_parameters.hlo"}
        paths["constants"].write_text(embedded_weights(True))
        paths["parameters"].write_text(embedded_weights(False))
        runs: dict[str, list[dict]] = {label: [] for label, _, _ in SEARCH_PAIR}
        for r in range(rounds):
            for label, module, extra in SEARCH_PAIR:
                db = tmp / f"{label}-{r}.db"
                cmd = [sys.executable, "-m", "autotune.cli", "run", "--strategy", "nevergrad", "--budget", str(budget),
                       "--seed", "0", str(paths[module]), "--json", "--db", str(db), *extra]
                t0 = time.perf_counter()
                proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
                wall = time.perf_counter() - t0
                if proc.returncode:
                    raise SystemExit(f"{label}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
                data = json.loads(proc.stdout)
                best = data.get("best") or {}
                runs[label].append({"wall_s": round(wall, 2), "phases": data.get("phases"),
                                    "best_sequence": best.get("sequence") if data.get("beats_default") else [],
                                    "found_sequence": best.get("found_sequence"), "best_cost": best.get("cost"),
                                    "default_cost": data.get("default_cost"), "level": data.get("validation_level"),
                                    "surrogate": (data.get("surrogate") or {}).get("message")})
                print(f"[search-pair] round {r + 1}/{rounds} {label}: {wall:.1f}s", file=sys.stderr)
    med = {label: statistics.median(x["wall_s"] for x in rows) for label, rows in runs.items()}
    same = all(x["found_sequence"] == runs["parameters"][0]["found_sequence"]
               and x["best_sequence"] == runs["parameters"][0]["best_sequence"] for rows in runs.values() for x in rows)
    command = f"python bench/realscale.py --search-pair --rounds {rounds}" + ("" if budget == 40 else f" --budget {budget}")
    paired = [round(c["wall_s"] / p["wall_s"], 2) for c, p in zip(runs["constants"], runs["parameters"])]
    paired_plain = [round(c["wall_s"] / p["wall_s"], 2)
                    for c, p in zip(runs["constants, --no-surrogate"], runs["parameters"])]
    report = {"command": command, "rounds": rounds, "budget": budget, "median_wall_s": med,
              "round_ratios": paired, "round_ratios_without_surrogate": paired_plain,
              "ratio": round(med["constants"] / med["parameters"], 2),
              "ratio_without_surrogate": round(med["constants, --no-surrogate"] / med["parameters"], 2),
              "same_sequences": same, "runs": runs}
    phase_names = ("load", "normalise", "default", "search", "recheck", "prune", "validation")
    lines = ["# Weights at the price of parameters: the same search end to end", "",
             f"Made by `{command}` on {os.cpu_count()} CPUs (a shared machine: figures are the median of {rounds} "
             "alternating rounds). Each run is `autotune run --strategy nevergrad --budget "
             f"{budget} --seed 0 MODULE --json` in a subprocess on a fresh cache (every step compiled). "
             "`constants` is `bench/realscale_models.py: embedded_weights(True)` (bf16[56945,50] + bf16[50,128] "
             "baked in, 22 MiB of HLO text), `parameters` the same function with the weights as parameters. "
             "By default the constants module is searched on a surrogate with its large constants lifted to "
             "parameters and the best candidates are re-checked on the real module; `--no-surrogate` searches "
             "the real module at every step.", "",
             "| setting | wall (s, median) | vs parameters | " + " | ".join(phase_names) + " | best sequence | level |",
             "|---|---:|---:|" + "---:|" * len(phase_names) + "---|---|"]
    for label, rows in runs.items():
        first = rows[0]
        phases = first["phases"] or {}
        cells = " | ".join(f"{statistics.median((x['phases'] or {}).get(k, 0.0) for x in rows):.1f}"
                           if k in phases else "" for k in phase_names)
        seq = ",".join(first["found_sequence"] or []) or "-"
        lines.append(f"| {label} | {med[label]:.1f} | {med[label] / med['parameters']:.2f}x | {cells} | "
                     f"`{seq[:80]}{'...' if len(seq) > 80 else ''}` | {first['level']} |")
    lines += ["", f"Constants / parameters, end to end: **{report['ratio']:.2f}x** with the surrogate (goal 1.5x), "
                  f"{report['ratio_without_surrogate']:.2f}x without it (round by round: "
                  f"{', '.join(f'{x:.2f}' for x in paired)} with, {', '.join(f'{x:.2f}' for x in paired_plain)} "
                  "without). Same sequence found in every run: "
                  f"{'yes' if same else 'no'}. The surrogate's verdict: {runs['constants'][0]['surrogate']}."]
    write(out, "realscale-search", report, "\n".join(lines), Provenance.now())
    print("\n".join(lines))


def before_after(old_tree: Path, rounds: int, out: Path) -> None:
    from realscale_models import embedded_weights

    with tempfile.TemporaryDirectory(prefix="autotune-before-after-") as tmpdir:
        tmp = Path(tmpdir)
        consts = tmp / "embedded_constants.hlo"
        consts.write_text(embedded_weights(True))
        params = tmp / "embedded_parameters.hlo"
        params.write_text(embedded_weights(False))
        modules = [str(consts), str(params), *(str(REAL_LLM / n) for n in LLM_MODULES)]
        runs: dict[str, list[dict]] = {"before": [], "after": []}
        for r in range(rounds):
            for label, tree in (("before", old_tree), ("after", ROOT)):
                print(f"[before-after] round {r + 1}/{rounds}: {label}", file=sys.stderr)
                env = dict(os.environ, PYTHONPATH=str(tree))
                proc = subprocess.run([sys.executable, str(tree / "bench" / "realscale.py"), "--quick", "--timings", *modules],
                                      cwd=tree, env=env, capture_output=True, text=True, check=True)
                runs[label].append(json.loads(proc.stdout))
    table = {}
    for name in runs["after"][0]:
        row = {}
        for label in ("before", "after"):
            for key in ("load_ms", "normalise_ms"):
                row[f"{key}_{label}"] = statistics.median(x[name][key] for x in runs[label])
            row[f"step_ms_{label}"] = statistics.median(x[name]["uncached_ms"]["median"] for x in runs[label])
        row["instructions"] = runs["after"][0][name]["instructions"]
        table[name] = row
    command = f"python bench/realscale.py --before-after {old_tree} --rounds {rounds}"
    report = {"command": command, "old_tree": str(old_tree), "rounds": rounds, "table": table, "runs": runs}
    lines = ["# Real-scale tuning cost: before and after", "",
             f"Made by `{command}` (the old tree runs its own copy of this script, `OLD_TREE/bench/realscale.py`, copied there with `realscale_models.py`) on {os.cpu_count()} CPUs: the old and "
             f"the new engine alternate for {rounds} rounds on the same modules and each figure is the median of "
             "the rounds (this machine is shared; single runs vary by 2x). Step: median uncached step over 4 "
             "actions through the Evaluator (`bench/perf.py: step_latency`). `embedded_constants` is the "
             "bf16[56945,50] + bf16[50,128] weights module, `embedded_parameters` the same function with the "
             "weights as parameters.", "",
             "| module | instructions | load (ms) before -> after | normalise (ms) before -> after | step (ms) before -> after |",
             "|---|---:|---:|---:|---:|"]
    for name, row in table.items():
        lines.append(f"| {name} | {row['instructions']} | {row['load_ms_before']:.0f} -> {row['load_ms_after']:.0f} "
                     f"| {row['normalise_ms_before']:.0f} -> {row['normalise_ms_after']:.0f} "
                     f"| {row['step_ms_before']:.1f} -> {row['step_ms_after']:.1f} |")
    write(out, "realscale-before-after", report, "\n".join(lines), Provenance.now())
    print("\n".join(lines))
