#!/usr/bin/env python
"""What the timed GPU runs of ``bench/gpu.py`` say together: which answers were slower or faster, whether
the measured differences repeat from run to run, and whether any compile-only figure ranks them.

A single run's table (results/gpu.md) cannot tell a real 2% from noise: every cell is one interval from
one run on one machine. This reads every run's JSON (``--runs``, each written by ``python bench/gpu.py``
on a GPU) with the bundle's manifest (the compile-only figures each ordering got when it was tuned) and
writes ``results/gpu-summary.md`` and ``results/gpu-summary.png``:

* per module and answer (tuned for the target, the CPU's answer, the shipped policy's zero-shot answer):
  the ratio in each run and in how many runs its 95% interval lies above 1 (slower) or below (faster);
* the noise floors: the default timed against itself and against a second compile of itself;
* how well the measured ratios of one run rank those of another (the ceiling of any objective's
  agreement with time on these modules), and each compile-only figure's Spearman against the ratio
  averaged over the runs;
* across modules, the roofline estimate of the default's compiled module against its measured time.

* with ``--compiler-options`` runs, each GPU flag's ratio on each module in each run.

    python bench/gpu_summary.py [--runs results/gpu.json ...] [--bundle DIR_OR_MANIFEST ...] [--out DIR]

The defaults are the three runs of 2026-11-26, read against the bundle they timed (GPU engine 1, kept as
results/gpu_bundle_engine1_manifest.json); the runs of 2026-11-28 (engine 2, with the GPU guard) are
summarized by ``--runs results/gpu-engine2/*.json --bundle bench/gpu_bundle bench/gpu_bundle_spread
--out results/gpu-engine2``. Several bundles are read as one: a spread bundle times other orderings of
the same modules.

Nothing here needs a GPU or autotune: it reads JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from gpu_parts.report import spearman as rho  # the run's own Spearman: scipy's, None on a constant side
from harness import RESULTS, ROOT, Provenance, fail, pyplot, save_figure, write_markdown
RUNS = ("results/gpu-run1.json", "results/gpu.json", "results/gpu-run3.json")
BUNDLES = ("results/gpu_bundle_engine1_manifest.json",)
ANSWERS = ("h100", "cpu", "policy")
FIGURES = ("final_ops", "kernels", "estimate_us")


def measured(run: dict) -> dict[tuple[str, str], dict]:
    """(module, label) -> the timed result, one per distinct module timed (``same_as`` rows dropped)."""
    return {(r["name"], v["label"]): v for r in run["rows"] for v in r.get("variants", [])
            if "ratio" in v and not v.get("same_as")}


def verdict(v: dict) -> int:
    """+1 slower (interval above 1), -1 faster (below), 0 within noise."""
    return 1 if v["low"] > 1 else -1 if v["high"] < 1 else 0


def fmt(x: float | None, spec: str = ".2f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def summarize(runs: list[dict], names: list[str], manifest: dict) -> dict:
    timed = [measured(r) for r in runs]
    fig = {(m["name"], v["label"]): v for m in manifest["modules"] for v in m["variants"]}
    answers = {}
    for (module, label) in sorted({k for t in timed for k in t}):
        if label not in ANSWERS:
            continue
        cells = [t.get((module, label)) for t in timed]
        answers[(module, label)] = cells
    # run-to-run agreement of the measured ratios, every pair of runs over the pairs both timed
    repeat = []
    for i in range(len(timed)):
        for j in range(i + 1, len(timed)):
            common = sorted(set(timed[i]) & set(timed[j]))
            repeat.append((names[i], names[j], len(common),
                           rho([timed[i][k]["ratio"] for k in common], [timed[j][k]["ratio"] for k in common])))
    # each figure against the geometric mean of the measured ratio over the runs that timed the pair
    keys = sorted({k for t in timed for k in t})
    mean = {k: math.exp(sum(math.log(t[k]["ratio"]) for t in timed if k in t) / sum(k in t for t in timed))
            for k in keys}
    figures = {}
    for name in FIGURES:
        xs, ys, moved = [], [], 0
        for k in keys:
            f, base = fig.get(k, {}).get(name), fig.get((k[0], "default"), {}).get(name)
            if f and base:
                xs.append(f / base)
                ys.append(mean[k])
                moved += abs(f / base - 1) > 1e-9
        figures[name] = {"pairs": len(xs), "moved": moved, "spearman": rho(xs, ys)}
    # across modules: the default's roofline estimate and kernels against its measured time
    base_us = {}
    for t, r in ((t, r) for t, run in zip(timed, runs) for r in run["rows"]):
        if "noise" in r:
            base_us.setdefault(r["name"], r["noise"]["base_us"])
    absolute = {}
    for name in ("estimate_us", "kernels", "final_ops"):
        pts = [(fig[(m, "default")][name], us) for m, us in base_us.items() if fig.get((m, "default"), {}).get(name)]
        absolute[name] = {"modules": len(pts), "spearman": rho([p[0] for p in pts], [p[1] for p in pts])}
    floors = {}
    for name, run in zip(names, runs):
        for r in run["rows"]:
            for what in ("noise", "recompiled"):
                if what in r:
                    floors.setdefault(r["name"], {})[f"{what} ({name})"] = r[what]
    options: dict[str, dict[str, list]] = {}  # module -> flag label -> one cell per run
    for i, run in enumerate(runs):
        for r in run["rows"]:
            for o in r.get("options", []):
                options.setdefault(r["name"], {}).setdefault(o["label"], [None] * len(runs))[i] = o
    return {"answers": answers, "repeat": repeat, "figures": figures, "absolute": absolute, "floors": floors,
            "base_us": base_us, "pairs": len(keys), "options": options}


def load_manifest(paths: list[Path]) -> dict:
    """One manifest from several bundles (a directory holding manifest.json, or the file itself): the first's
    header, every bundle's modules (a module in two bundles appears twice; its figures are keyed by label)."""
    loaded = [json.loads((p / "manifest.json" if p.is_dir() else p).read_text()) for p in paths]
    return {**loaded[0], "modules": [m for man in loaded for m in man["modules"]]}


def cell(c: dict | None) -> str:
    if not c:
        return ""
    if "ratio" not in c:
        return c.get("error", c.get("skipped", ""))[:60]
    same = {True: " =out", False: " !out"}.get(c.get("same_outputs"), "")
    return f"{c['ratio']:.3f} [{c['low']:.3f}, {c['high']:.3f}]{same}"


def markdown(s: dict, runs: list[dict], names: list[str], paths: list[str], manifest: dict, command: str) -> str:
    devices = sorted({f"{r['device']} (jax {r['jax']}, {r['date']})" for r in runs})
    lines = ["# The GPU runs together: was any answer slower, and does any compile-only figure rank GPU time?", "",
             f"Made by `{command}` from {len(runs)} runs of `python bench/gpu.py` on "
             f"{', '.join(devices)}: " + "; ".join(f"{n}: `{r['command']}` ({p})" for n, r, p in zip(names, runs, paths))
             + ". "
             f"The orderings were tuned without a GPU for target `{manifest.get('target')}` (autotune, jax "
             f"{manifest.get('jax')}); each was compiled there by that jax's default GPU pipeline and timed "
             "interleaved against XLA's default (median ratio of the rounds, 95% bootstrap interval).", "",
             "## Was an answer slower?", "",
             "Each cell: the ratio answer / default in each run (blank: not timed in that run), then how many "
             "runs' intervals lie wholly above 1 (`slower`) or below (`faster`). At 95%, about one interval "
             "per answer kind at 95%, one or two land outside 1 by chance.", "",
             "| module | answer | " + " | ".join(names) + " | slower | faster |",
             "|---|---|" + "---|" * len(names) + "---:|---:|"]
    for (module, label), cells in s["answers"].items():
        vals = [f"{c['ratio']:.3f} [{c['low']:.3f}, {c['high']:.3f}]" if c else "" for c in cells]
        v = [verdict(c) for c in cells if c]
        lines.append(f"| {module} | {label} | " + " | ".join(vals) + f" | {v.count(1)} | {v.count(-1)} |")
    totals = {}
    for (module, label), cells in s["answers"].items():
        t = totals.setdefault(label, [0, 0, 0])
        for c in cells:
            if c:
                t[0] += 1
                t[1] += verdict(c) == 1
                t[2] += verdict(c) == -1
    lines += ["", "| answer | intervals | slower | faster |", "|---|---:|---:|---:|"]
    lines += [f"| {lb} | {t[0]} | {t[1]} | {t[2]} |" for lb, t in totals.items()]
    lines += ["", "## Do the measured differences repeat?", "",
              "Spearman between two runs' ratios over the (module, ordering) pairs both timed: the most any "
              "compile-only objective could agree with one run's time on these modules.", "",
              "| runs | pairs | Spearman |", "|---|---:|---:|"]
    lines += [f"| {a} vs {b} | {n} | {fmt(r)} |" for a, b, n, r in s["repeat"]]
    kinds = sorted({what for fl in s["floors"].values() for what in fl}, key=lambda w: (w.split(" (")[1], w))
    lines += ["", "Noise floors per module: `noise` the default against itself (the same executable), `recompiled` "
              "against a second compile of itself (GPU compiles autotune their GEMMs by timing them).", "",
              "| module | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
    for module, fl in s["floors"].items():
        lines.append(f"| {module} | " + " | ".join(
            f"{fl[k]['ratio']:.3f} [{fl[k]['low']:.3f}, {fl[k]['high']:.3f}]" if k in fl else "" for k in kinds) + " |")
    lines += ["", "## Does a compile-only figure rank GPU time?", "",
              f"Each figure's ratio to the default (from the bundle's deviceless compile) against the measured "
              f"ratio (geometric mean over the runs), over {s['pairs']} pairs; `moved`: pairs where the figure "
              "differs from the default's at all.", "", "| figure | pairs | moved | Spearman |", "|---|---:|---:|---:|"]
    lines += [f"| {n} | {f['pairs']} | {f['moved']} | {fmt(f['spearman'])} |" for n, f in s["figures"].items()]
    lines += ["", "Across modules (the default of each, not the orderings): the figure against the measured "
              "time of a step.", "", "| figure | modules | Spearman |", "|---|---:|---:|"]
    lines += [f"| {n} | {a['modules']} | {fmt(a['spearman'])} |" for n, a in s["absolute"].items()]
    if s["options"]:
        lines += ["", "## Do compiler options move GPU time?", "",
                  "XLA's default ordering compiled with one GPU flag set (`python bench/gpu.py --compiler-options`), "
                  "its time against the default compile's, in each run that timed it; `=out` / `!out` whether "
                  "the outputs matched the default's within autotune's tolerances.", "",
                  "| module | flag | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
        unreached = 0
        for module, flags in s["options"].items():
            for flag, cells in flags.items():
                if not any(c and "ratio" in c for c in cells):
                    unreached += 1  # every run ran out of the module's time share before this flag
                    continue
                lines.append(f"| {module} | `{flag}` | " + " | ".join(cell(c) for c in cells) + " |")
        if unreached:
            lines += ["", f"{unreached} (module, flag) pairs were reached by no run (each module's share of the "
                      "deadline went to its orderings first)."]
    lines += ["", "![answers per module](gpu-summary.png)", ""]
    return "\n".join(lines)


def plot(s: dict, names: list[str], path: Path) -> None:
    plt = pyplot()
    rows = [(m, lb, cells) for (m, lb), cells in s["answers"].items()]
    fig, ax = plt.subplots(figsize=(8, 0.28 * len(rows) + 1.5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    labelled = set()
    for y, (module, label, cells) in enumerate(rows):
        for i, c in enumerate(cells):
            if c:
                off = (i - (len(cells) - 1) / 2) * 0.22
                ax.errorbar(c["ratio"], y + off, xerr=[[c["ratio"] - c["low"]], [c["high"] - c["ratio"]]],
                            fmt="o", ms=3, color=colours[i % len(colours)],
                            label=None if i in labelled else names[i])
                labelled.add(i)
    ax.axvline(1.0, color="grey", lw=0.8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{m[:38]} · {lb}" for m, lb, _ in rows], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("GPU time, answer / XLA's default (95% interval); < 1 is faster")
    ax.legend(fontsize=7, loc="lower right")
    save_figure(fig, path, dpi=120)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="+", default=list(RUNS))
    ap.add_argument("--bundle", nargs="+", default=list(BUNDLES),
                    help="the bundles the runs timed (directories or manifest files): their compile-only figures")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    paths = [Path(p) if Path(p).is_absolute() else ROOT / p for p in args.runs]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        fail(f"no such run: {', '.join(missing)}")
    runs = [json.loads(p.read_text()) for p in paths]
    names = [f"run {i + 1}" for i in range(len(paths))]
    bundles = [Path(b) if Path(b).is_absolute() else ROOT / b for b in args.bundle]
    absent = [str(b) for b in bundles if not (b / "manifest.json" if b.is_dir() else b).is_file()]
    if absent:
        fail(f"no bundle manifest at {', '.join(absent)}")
    manifest = load_manifest(bundles)
    s = summarize(runs, names, manifest)
    out = Path(args.out)
    command = "python bench/gpu_summary.py" + "".join(f" {a}" for a in (sys.argv[1:] if argv is None else argv))
    rel = [str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p) for p in paths]
    write_markdown(out / "gpu-summary.md", markdown(s, runs, names, rel, manifest, command), Provenance.now())
    plot(s, names, out / "gpu-summary.png")
    print(f"wrote {out / 'gpu-summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
