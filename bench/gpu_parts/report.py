"""The run's rank correlations and its results/gpu.{json,md}."""

from __future__ import annotations

import math
from pathlib import Path

from harness import Provenance, write as write_results
from gpu_parts.common import FIGURES


def spearman(xs: list[float], ys: list[float]) -> float | None:
    import numpy as np

    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:  # a constant side ranks nothing
        return None
    try:
        from scipy.stats import spearmanr

        rho = spearmanr(xs, ys).statistic
    except ImportError:
        def ranks(v):
            order = np.argsort(np.argsort(v, kind="stable"), kind="stable").astype(float)
            return order

        rho = float(np.corrcoef(ranks(np.asarray(xs)), ranks(np.asarray(ys)))[0, 1])
    return None if rho is None or math.isnan(rho) else float(rho)


def correlations(manifest: dict, rows: list[dict]) -> dict:
    """Spearman of each compile-only figure's ratio to the default against the measured time ratio."""
    figures_of = {(m["name"], v["label"]): v for m in manifest["modules"] for v in m["variants"]}
    pairs = []
    for row in rows:
        base = figures_of.get((row["name"], "default"), {})
        for v in row.get("variants", []):
            fig = figures_of.get((row["name"], v["label"]), {})
            if "ratio" in v and base and not v.get("same_as"):  # one pair per distinct module timed
                pairs.append((fig, base, v["ratio"]))
    out = {"pairs": len(pairs)}
    for name in FIGURES:
        xs, ys = [], []
        for fig, base, ratio in pairs:
            if fig.get(name) and base.get(name):
                xs.append(fig[name] / base[name])
                ys.append(ratio)
        out[name] = spearman(xs, ys)
    return out


#: Order and weight of a group in the run: the small modules first (most of the ranked pairs, seconds each),
#: the shared LLM steps last with three shares of the time each (30-78 GiB of inputs, slower compiles).
GROUP_ORDER = {"bundled": 0, "dlrm": 1, "llm-family": 2, "shared-llm": 3}
GROUP_WEIGHT = {"shared-llm": 3.0}


def write(data: dict, manifest: dict, out: Path) -> Path:
    data["correlation"] = correlations(manifest, data["rows"])
    stem = "gpu" if data["platform"] != "cpu" else "gpu-dryrun-cpu"
    prov = Provenance.now(target=f"{data['platform']} ({data['device']})")
    return write_results(out, stem, data, markdown(data, manifest), prov, indent=1)


def markdown(data: dict, manifest: dict) -> str:
    target = manifest.get("target", "?")
    dry = data["platform"] == "cpu"
    lines = [f"# {'Dry run on the host CPU' if dry else 'Timed on a GPU'}: XLA's default vs the answer tuned for "
             f"{target.split('-')[0]} vs the CPU's answer", "",
             f"Made by `{data['command']}` on **{data['device']}** with jax {data['jax']} ({data['date']}); "
             f"the orderings were tuned by `{data['bundle']}` (autotune, jax {manifest.get('jax')}, target "
             f"`{target}`: XLA's GPU pipeline compiled without a GPU).", ""]
    if dry:
        lines += ["**A dry run**: the same script on the CPU backend, to show it works end to end. These are not GPU "
                  "figures; the GPU figures are pending a machine with a GPU (`python bench/gpu.py` there).", ""]
    lines += ["Each cell: median time ratio variant / XLA's default over interleaved rounds, with its 95% bootstrap "
              "interval; below 1 is faster. `=out` the outputs equal the default's on the same seeded random inputs "
              "within autotune's validation tolerances (f32: rtol 1e-3, atol 1e-4; bf16: 5e-2, 1e-2; integers "
              "exact); `!out` they do not (bf16 arithmetic inside an f32 output is not given autotune's f32 second "
              "opinion here). Outputs over 16 MiB, e.g. a KV cache, are compared by sum, absolute sum and largest "
              "absolute value. `~out`: outside the tolerance, but no further from the default's outputs than twice "
              "the default's own run-to-run difference on the same inputs (column `run to run`, in units of the "
              "tolerance: a GPU reduction by atomics is not deterministic). `itself`: the default timed against "
              "itself, the noise floor of the ratios in that row; `recompiled` (with `--recompile`): against a "
              "second compile of itself (the GPU compile autotunes its GEMMs by timing them).", "",
              "| module | group | inputs | itself | recompiled | run to run | " + " | ".join(_labels(manifest)) + " |",
              "|---|---|---:|---|---|---:|" + "---|" * len(_labels(manifest))]
    for row in data["rows"]:
        floor = row.get("default_excess")
        cells = {v["label"]: _cell(v, floor) for v in row.get("variants", [])}
        why = row.get("skipped") or row.get("error")
        labels = _labels(manifest)
        values = [cells.get(lb, "") for lb in labels] if not why else [why] + [""] * (len(labels) - 1)
        noise = _cell(row["noise"]) if "noise" in row else ""
        again = _cell(row["recompiled"]) if "recompiled" in row else ""
        lines.append(f"| {row['name']} | {row['group']} | {row.get('input_gib', '')} GiB | {noise} | {again} | "
                     f"{'' if floor is None else format(floor, '.2f')} | " + " | ".join(values) + " |")
    opt_rows = [r for r in data["rows"] if r.get("options")]
    if opt_rows:
        flags = [o["label"] for o in opt_rows[0]["options"]]
        lines += ["", "Compiler options (`--compiler-options`): XLA's default ordering compiled with one flag set, "
                  "time ratio against the default compile:", "",
                  "| module | " + " | ".join(f"`{f}`" for f in flags) + " |", "|---|" + "---|" * len(flags)]
        for r in opt_rows:
            cells = {o["label"]: _cell(o, r.get("default_excess")) for o in r["options"]}
            lines.append(f"| {r['name']} | " + " | ".join(cells.get(f, "") for f in flags) + " |")
    c = data["correlation"]
    lines += ["", f"Rank correlation (Spearman) of each compile-only figure (its ratio to the default, from the "
                  f"target's deviceless pipeline) with the measured time ratio, over {c['pairs']} (module, ordering) "
                  "pairs:", "", "| figure | Spearman |", "|---|---:|"]
    lines += [f"| {name} | {'n/a' if c.get(name) is None else format(c[name], '.2f')} |" for name in FIGURES]
    return "\n".join(lines) + "\n"


def _labels(manifest: dict) -> list[str]:
    seen = []
    for m in manifest["modules"]:
        for v in m["variants"]:
            if v["label"] != "default" and v["label"] not in seen:
                seen.append(v["label"])
    return seen


def _cell(v: dict, floor: float | None = None) -> str:
    if "ratio" not in v:
        return v.get("error", v.get("skipped", ""))[:60]
    mark = {True: " =out", False: " !out"}.get(v.get("same_outputs"), "")
    if mark == " !out" and floor and v.get("excess", math.inf) <= 2 * floor:
        mark = " ~out"
    return f"{v['ratio']:.3f} [{v['low']:.3f}, {v['high']:.3f}]{mark}"
