#!/usr/bin/env python
"""Headroom of the LLM family: on how many of its modules does a search beat XLA's default?

Why: a policy can only learn to order passes where orderings matter. Before anything is trained on
the ``llm`` family of the suite, this measures, on a stratified sample of it (every kind x scan /
unrolled x dense / MoE stratum, both sides of the split), whether random search at a fixed budget
finds a validated sequence whose final-ops (the sequence followed by XLA's default pipeline) are
below the default's, by how much, and which first passes and sequences do it. The most frequent
winning sequences are then applied as fixed sequences to every sampled module (the "one sequence
for all" baseline a policy must beat).

    python bench/llm_headroom.py [--quick] [--per-stratum N] [--budget B] [--suite DIR] [--db FILE]

``--target h100`` judges with XLA's GPU pipeline for that GPU, compiled without one
(``results/llm_headroom_h100.md``): is there headroom for the GPU target too?

``--family llm_spmd``: the partitioned steps (``autotune.zoo.llm_spmd``), stratified by kind x
parallel style (18 strata), into ``results/llm_headroom_spmd.md``.

``--family t5`` / ``vit`` / ``diffusion``: the encoder-decoder, vision-transformer and diffusion
families (``autotune.zoo.t5`` / ``vit`` / ``diffusion``), stratified by kind x the structural knobs
of :data:`STRATA`, into ``results/headroom_<family>.md``.

``--quick``: 2 modules per stratum (24), budget 40. Default: 4 per stratum (48), budget 40. The
suite is generated into ``--suite`` when it has no manifest yet. One shared cache database serves
every module; per-module rows are also kept next to it, so an interrupted run resumes where it
stopped (the row, with its original time and compile count, is reused). Writes
``results/llm_headroom.md`` and ``results/llm_headroom.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from harness import RESULTS, ROOT, Provenance, ensure_suite, write  # first: the repository on the path

from autotune.api import Session
from autotune.zoo import suite

STRATEGY = "random"


#: Config fields the sample of each non-LLM family is stratified by (with the kind): its structural axes.
STRATA = {"t5": ("scan", "ffn_kind"), "vit": ("patch_embed", "pool", "scan"),
          "diffusion": ("arch", "guidance", "dtype")}


def stratum(entry: suite.ManifestEntry) -> str:
    cfg = entry.config
    if entry.family in STRATA:
        def word(field: str) -> str:
            value = cfg[field]
            return (field if value else f"no{field}") if isinstance(value, bool) else str(value)

        fields = [f for f in STRATA[entry.family] if not (entry.kind == "train" and f == "guidance")]
        return "/".join([entry.kind, *map(word, fields)])
    if "parallel" in cfg:
        return f"{entry.kind}/{cfg['parallel']}"
    return f"{entry.kind}/{'scan' if cfg['scan'] else 'unrolled'}/{'moe' if cfg['experts'] else 'dense'}"


def sample(manifest: suite.Manifest, per_stratum: int) -> list[suite.ManifestEntry]:
    """``per_stratum`` modules of every stratum, in a fixed hash order, alternating the split's sides."""
    strata: dict[str, list[suite.ManifestEntry]] = {}
    for e in manifest.entries:
        strata.setdefault(stratum(e), []).append(e)
    out: list[suite.ManifestEntry] = []
    for key in sorted(strata):
        ranked = sorted(strata[key], key=lambda e: hashlib.sha256(e.name.encode()).hexdigest())
        sides = {s: [e for e in ranked if e.split == s] for s in ("test", "train")}
        picked: list[suite.ManifestEntry] = []
        while len(picked) < per_stratum and any(sides.values()):
            for side in ("test", "train"):
                if sides[side] and len(picked) < per_stratum:
                    picked.append(sides[side].pop(0))
        out.extend(picked)
    return out


def tune_row(session: Session, path: Path, entry: suite.ManifestEntry, budget: int, seed: int) -> dict:
    t0 = time.perf_counter()
    r = session.tune(path, strategy=STRATEGY, budget=budget, seed=seed)
    seconds = time.perf_counter() - t0
    best = r.best.cost if r.best else r.default_cost
    return {
        "module": entry.name, "kind": entry.kind, "stratum": stratum(entry), "split": entry.split,
        "sha256": entry.sha256, "input_ops": r.input.instructions, "default_final_ops": int(r.default_cost),
        "best_final_ops": int(best), "beats_default": r.beats_default,
        "gain_pct": round(100.0 * (r.default_cost - best) / r.default_cost, 3),
        "sequence": list(r.best_sequence) if r.beats_default else [],
        "level": r.validation_level, "evaluations": r.evaluations, "steps_compiled": r.steps_compiled,
        "seconds": round(seconds, 1), "run_id": r.run_id,
    }


def fixed_sequences(session: Session, rows: list[dict], paths: dict[str, Path], top: int) -> list[dict]:
    """The ``top`` most frequent winning sequences, each applied to every sampled module: final-ops
    against the default (not validated; the per-module search results above are)."""
    common = [list(s) for s, _ in Counter(tuple(r["sequence"]) for r in rows if r["sequence"]).most_common(top)]
    out = []
    for seq in common:
        wins = losses = 0
        gains = []
        for r in rows:
            ev = session.evaluator
            root = session.normalize(paths[r["module"]])
            res = ev.evaluate(root, seq)
            final = ev.final(res.state).metrics.instructions if res.ok else None
            if final is None:
                gains.append(None)
                continue
            gain = 100.0 * (r["default_final_ops"] - final) / r["default_final_ops"]
            gains.append(round(gain, 3))
            wins += final < r["default_final_ops"]
            losses += final > r["default_final_ops"]
        ok = [g for g in gains if g is not None]
        out.append({"sequence": seq, "wins": wins, "losses": losses, "failed": len(gains) - len(ok),
                    "mean_gain_pct": round(statistics.mean(ok), 3) if ok else None})
    return out


def real_llm_rows() -> tuple[str | None, list[dict]]:
    """The command and the shared real LLM steps' rows of results/real_models.json (a cross-reference,
    not re-measured here)."""
    path = RESULTS / "real_models.json"
    if not path.exists():
        return None, []
    data = json.loads(path.read_text())
    keep = ("module", "default_final_ops", "best_final_ops", "sequence")
    llm = ("llama", "gpt_oss", "deepseek")
    rows = [r for r in data.get("rows", []) if r.get("exit") == 0 and any(m in r["module"] for m in llm)]
    return data.get("command"), [{k: r.get(k) for k in keep} for r in rows]


def summary(rows: list[dict]) -> dict:
    gains = [r["gain_pct"] for r in rows]
    wins = [r for r in rows if r["beats_default"]]
    win_gains = sorted(r["gain_pct"] for r in wins)

    def q(xs: list[float], p: float) -> float:
        return round(xs[min(len(xs) - 1, int(p * len(xs)))], 2) if xs else 0.0

    return {
        "modules": len(rows), "with_headroom": len(wins),
        "fraction_with_headroom": round(len(wins) / len(rows), 3) if rows else 0.0,
        "mean_gain_pct": round(statistics.mean(gains), 3) if gains else 0.0,
        "median_gain_pct_of_wins": round(statistics.median(win_gains), 3) if win_gains else 0.0,
        "gain_pct_of_wins": {"min": q(win_gains, 0.0), "p25": q(win_gains, 0.25), "p50": q(win_gains, 0.5),
                             "p75": q(win_gains, 0.75), "max": q(win_gains, 1.0)},
        "ops_saved_mean": round(statistics.mean(r["default_final_ops"] - r["best_final_ops"] for r in rows), 2)
        if rows else 0.0,
    }


def markdown(data: dict) -> str:
    rows, s = data["rows"], data["summary"]
    g = s["gain_pct_of_wins"]
    target = data.get("target", "cpu")
    family = data.get("family", "llm")
    strata = {"llm": "kind x scan/unrolled x dense/MoE", "llm_spmd": "kind x parallel style"}.get(
        family, " x ".join(("kind", *STRATA.get(family, ()))))
    title = {"llm": "LLM family", "llm_spmd": "partitioned LLM family"}.get(family, f"`{family}` family")
    lines = [
        f"# Headroom of the {title}"
        + (f" for {target.split('-')[0]}" if target != "cpu" else ""),
        "",
        f"Judged by {data.get('judged_by', 'XLA' + chr(39) + 's CPU pipeline')} (target `{target}`); nothing was "
        "timed: final-ops are instruction counts.",
        "",
        f"Made by `{data['command']}` ({data['cpus']} CPUs, shared machine: times are indicative). "
        f"Sample: {s['modules']} of the family's {data['family_size']} modules, {data['per_stratum']} per stratum "
        f"({strata}), "
        "both sides of the split. Each module: `autotune run --strategy "
        f"{STRATEGY} --budget {data['budget']}` through the Python API (`Session.tune`, one shared cache). "
        "final-ops = instructions after the sequence followed by XLA's default pipeline; a module has headroom "
        "when the validated best sequence ends below the default's final-ops.",
        "",
        f"**{s['with_headroom']} of {s['modules']} modules ({100 * s['fraction_with_headroom']:.0f}%) have headroom.** "
        f"Gain of those: min {g['min']}%, p25 {g['p25']}%, median {g['p50']}%, p75 {g['p75']}%, max {g['max']}%; "
        f"mean over all sampled modules {s['mean_gain_pct']}% ({s['ops_saved_mean']} final-ops).",
        "",
        "| stratum | modules | with headroom | mean gain % | median gain % of wins |",
        "|---|---:|---:|---:|---:|",
    ]
    for key, sub in data["by_stratum"].items():
        lines.append(f"| {key} | {sub['modules']} | {sub['with_headroom']} | {sub['mean_gain_pct']} | "
                     f"{sub['median_gain_pct_of_wins']} |")
    for key, sub in data["by_split"].items():
        lines.append(f"| split: {key} | {sub['modules']} | {sub['with_headroom']} | {sub['mean_gain_pct']} | "
                     f"{sub['median_gain_pct_of_wins']} |")
    lines += ["", "First pass of the winning sequences (pruned):", "",
              "| first pass | wins |", "|---|---:|"]
    lines += [f"| `{p}` | {n} |" for p, n in data["first_passes"]]
    lines += ["", "Winning sequences (pruned), most frequent first:", "", "| sequence | wins |", "|---|---:|"]
    lines += [f"| `{', '.join(seq)}` | {n} |" for seq, n in data["sequences"][:12]]
    if data["fixed"]:
        lines += ["", "The most frequent winning sequences applied as ONE fixed sequence to every sampled module "
                      "(final-ops vs the default; not validated):", "",
                  "| fixed sequence | beats default | worse | failed | mean gain % |", "|---|---:|---:|---:|---:|"]
        lines += [f"| `{', '.join(f['sequence'])}` | {f['wins']} | {f['losses']} | {f['failed']} | "
                  f"{f['mean_gain_pct']} |" for f in data["fixed"]]
    if data["real_llm"]:
        lines += ["", "For comparison, the held-out real LLM steps of `tests/data/real-llm` (never used here; rows "
                      f"of results/real_models.md, made by `{data['real_llm_command']}`):", "",
                  "| module | default final-ops | best final-ops | sequence |", "|---|---:|---:|---|"]
        lines += [f"| {r['module']} | {r['default_final_ops']} | {r['best_final_ops']} | "
                  f"`{', '.join(r['sequence']) or '(= default)'}` |" for r in data["real_llm"]]
    lines += ["", "Per module:", "",
              "| module | split | input ops | default final-ops | best final-ops | gain % | sequence | level | "
              "steps | time |", "|---|---|---:|---:|---:|---:|---|---|---:|---:|"]
    for r in rows:
        seq = ", ".join(r["sequence"]) if r["sequence"] else "(= default)"
        lines.append(f"| {r['module']} | {r['split']} | {r['input_ops']} | {r['default_final_ops']} | "
                     f"{r['best_final_ops']} | {r['gain_pct']} | `{seq}` | {r['level'] or '- (the default)'} | "
                     f"{r['steps_compiled']} | "
                     f"{r['seconds']}s |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 modules per stratum (24), budget 40")
    p.add_argument("--per-stratum", type=int, default=None, help="modules per stratum (default 4; 2 with --quick)")
    p.add_argument("--budget", type=int, default=40, help="random-search evaluations per module (default 40)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fixed", type=int, default=3, help="most frequent winning sequences to apply to all (default 3)")
    p.add_argument("--family", default="llm", choices=("llm", "llm_spmd", *STRATA),
                   help="llm (single device, default), llm_spmd (partitioned over 2-8 devices), or the "
                        "encoder-decoder / vision / diffusion families t5, vit, diffusion")
    p.add_argument("--suite", type=Path, default=None,
                   help="generated family (default .autotune/<family>-suite; generated there when missing)")
    p.add_argument("--db", type=Path, default=None, help="shared cache database (default .autotune/llm_headroom.db)")
    p.add_argument("--workers", type=int, default=None, help="compiler worker processes")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--target", default=None, help="judge for this target (default cpu; e.g. h100)")
    args = p.parse_args(argv)
    target_tag = "" if args.target in (None, "cpu") else f"_{args.target}"
    spmd = {"llm": "", "llm_spmd": "_spmd"}.get(args.family, f"_{args.family}")
    stem = "llm_headroom" if args.family in ("llm", "llm_spmd") else "headroom"
    args.suite = args.suite or ROOT / ".autotune" / f"{args.family.replace('_', '-')}-suite"
    args.db = args.db or ROOT / ".autotune" / f"{stem}{spmd}.db"
    if target_tag:
        args.db = args.db.with_name(args.db.stem + target_tag + args.db.suffix)
    tag = spmd + target_tag
    per = args.per_stratum or (2 if args.quick else 4)
    if per < 1 or args.budget < 1:
        print("error: --per-stratum and --budget must be >= 1", file=sys.stderr)
        return 2
    manifest = ensure_suite(args.suite, args.family)
    chosen = sample(manifest, per)
    paths = {e.name: args.suite / e.file for e in chosen}
    args.db.parent.mkdir(parents=True, exist_ok=True)
    done_file = args.db.with_suffix(".rows.jsonl")
    done: dict[tuple, dict] = {}
    if done_file.exists():
        for line in done_file.read_text().splitlines():
            row = json.loads(line)
            done[(row["sha256"], row["budget"], row["seed"], row.get("engine"))] = row
    rows: list[dict] = []
    with Session(cache=args.db, workers=args.workers, target=args.target) as session:
        target, judged_by = session.target.key, session.target.judged_by()
        engine = session.evaluator.pipeline.version  # XLA, target, inventory and engine versions
        for i, e in enumerate(chosen, 1):
            # the db (and so this file) is per target; a row counts only for the engine that judged it
            key = (e.sha256, args.budget, args.seed, engine)
            if key in done:
                row = done[key]
            else:
                row = tune_row(session, paths[e.name], e, args.budget, args.seed) | {"budget": args.budget,
                                                                                    "seed": args.seed,
                                                                                    "engine": engine}
                with done_file.open("a") as f:
                    f.write(json.dumps(row) + "\n")
            rows.append(row)
            print(f"[{i}/{len(chosen)}] {row['module']}: {row['default_final_ops']} -> {row['best_final_ops']} "
                  f"({row['gain_pct']}%) {row['sequence']} {row['seconds']}s", file=sys.stderr, flush=True)
        fixed = fixed_sequences(session, rows, paths, args.fixed) if args.fixed else []
    command = "python bench/llm_headroom.py" + (f" --family {args.family}" if spmd else "") \
        + (" --quick" if args.quick else "") \
        + (f" --per-stratum {args.per_stratum}" if args.per_stratum else "") \
        + (f" --budget {args.budget}" if args.budget != 40 else "") + (f" --seed {args.seed}" if args.seed else "") \
        + (f" --target {args.target}" if args.target not in (None, "cpu") else "")
    by_stratum = {k: summary([r for r in rows if r["stratum"] == k]) for k in sorted({r["stratum"] for r in rows})}
    by_split = {k: summary([r for r in rows if r["split"] == k]) for k in ("train", "test")}
    wins = [r for r in rows if r["sequence"]]
    data = {
        "command": command, "target": target, "judged_by": judged_by, "cpus": os.cpu_count(), "strategy": STRATEGY, "budget": args.budget, "seed": args.seed,
        "family": args.family, "per_stratum": per,
        "family_size": sum(e.family == args.family for e in manifest.entries),
        "summary": summary(rows), "by_stratum": by_stratum, "by_split": by_split,
        "first_passes": Counter(r["sequence"][0] for r in wins).most_common(),
        "sequences": [[list(s), n] for s, n in Counter(tuple(r["sequence"]) for r in wins).most_common()],
        "fixed": fixed, "rows": [{k: v for k, v in r.items() if k != "run_id"} for r in rows],
    }
    data["real_llm_command"], data["real_llm"] = real_llm_rows() if not tag else (None, [])
    write(args.out, f"{stem}{tag}", data, markdown(data), Provenance.now(target=target), indent=1)
    s = data["summary"]
    print(f"{s['with_headroom']}/{s['modules']} modules with headroom; wrote {args.out / f'{stem}{tag}.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
