#!/usr/bin/env python
"""Decisions per site, measured: writes results/sites.md, .json and .png.

Does deciding *per instruction* which convolution, dot or reduce runs as a YNNPACK library fusion and which
as XLA's own code (``pipelines/xla/sites.py``) make a real step faster on this CPU, where no module-wide
flag does? Per module (the real modules of tests/data/real and the examples, those whose step runs in under
``--max-ms`` here):

1. **sites**: the module's sites (``autotune sites``), the ``--sites`` hottest by ``autotune profile`` taken
   (as ``autotune run`` takes them; the largest results where the profile names none).
2. **singles**: each site's other choice alone, timed against XLA's default (interleaved A/B rounds, raced:
   stopped once it provably cannot beat the default) and run on two draws of inputs against the default's
   outputs. Also every site flipped at once (what a module-wide flag would do).
3. **combined**: the singles that paid (median ratio below ``1 - min_effect``), together, confirmed with 30
   interleaved rounds and a bootstrap interval (``stats.time_ratio``), executed and compared. A win is an
   interval wholly below ``1 - min_effect`` with the same outputs.

One worker, a fresh cache database, one process at a time; the machine may be shared (load averages are
recorded): the ratios and verdicts are the result, absolute times this machine's.

    python bench/sites.py [--quick] [--sites 8] [--max-ms 400] [MODULE ...]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from harness import ROOT, RESULTS, Provenance, log, pyplot, rel, save_figure, write

from autotune.core.engine import open_engine
from autotune.core.module import load
from autotune.core import execution
from autotune.core import tuner
from autotune.core.stats import time_ratio
from autotune.errors import PassFailed

MODULES = sorted((ROOT / "tests/data/real").glob("*.hlo")) + [
    ROOT / "examples" / name for name in ("gpt2_train_step.hlo", "bert_encoder_step.hlo", "resnet_train_step.hlo",
                                          "llm_decode_step.hlo")]


def _same(pipeline, a, b) -> bool:
    """Outputs of ``b`` equal to ``a``'s on two draws of inputs, as the tool's validation judges them
    (``execution.validate``: its tolerance per dtype; NaN where the default has NaN is the same; a NaN that
    only a library fusion swallowed judged on inputs in the working range)."""
    return all(execution.validate(pipeline, a, b, seed=seed).ok for seed in (0, 1))


def _ratio(pipeline, a, b, rounds: int, stop_above: float | None = None) -> dict:
    out = pipeline.time_ab(a, b, rounds=rounds, min_seconds=0.02, stop_above=stop_above)
    r = time_ratio(out["a"], out["b"])
    return {"ratio": r.ratio, "low": r.low, "high": r.high, "rounds": out["rounds"], "stopped": out["stopped"],
            "default_ms": 1e3 * r.a.median}


def one_module(ev, path: Path, n_sites: int, rounds: int, min_effect: float, max_ms: float) -> dict:
    pipeline = ev.pipeline
    t0 = time.perf_counter()
    root = ev.prepare(load(path))
    probe = pipeline.time(root, repeats=3, warmup=1)
    ms = 1e3 * float(np.median(probe["seconds"]))
    row = {"module": path.stem, "default_ms": ms}
    if ms > max_ms:
        return {**row, "skipped": f"step {ms:.0f} ms > --max-ms {max_ms:.0f}"}
    found = sorted(pipeline.sites(root), key=lambda s: -s.elements)
    row["sites_total"] = len(found)
    row["by_default"] = {c: sum(s.default == c for s in found) for c in ("ynn", "xla")}
    # The sites a run searches: the profile's hottest (as `autotune run` orders them), else the largest.
    hot = tuner.hot_sites(pipeline, root)
    if hot:
        rank = {key: i for i, key in enumerate(hot)}
        chosen = sorted((s for s in found if s.name in rank), key=lambda s: rank[s.name])[:n_sites]
        row["chosen_by"] = "profile"
    if not hot or not chosen:
        chosen, row["chosen_by"] = found[:n_sites], "size"
    singles = []
    for s in chosen:
        other = next(c for c in s.choices if c != s.default)
        cand = root.with_options({s.option: other})
        entry = {"site": s.id, "from": s.default, "to": other}
        try:
            entry.update(_ratio(pipeline, root, cand, rounds, stop_above=1.0))
            entry["same"] = _same(pipeline, root, cand)
        except PassFailed as exc:
            entry["failed"] = str(exc)[:200]
        singles.append(entry)
        log(f"{path.stem}: {s.id} -> {other}: {entry.get('ratio', float('nan')):.3f} "
            f"{'' if entry.get('same', True) else 'WRONG'}{entry.get('failed', '')[:80]}")
    row["singles"] = singles
    if found:
        every = root.with_options({s.option: next(c for c in s.choices if c != s.default) for s in found})
        try:
            row["all_flipped"] = {**_ratio(pipeline, root, every, rounds), "same": _same(pipeline, root, every)}
        except PassFailed as exc:
            row["all_flipped"] = {"failed": str(exc)[:200]}
    paid = [e for e in singles if e.get("same") and e.get("ratio", 2.0) < 1.0 - min_effect]
    row["paid"] = [e["site"] for e in paid]
    decisions = {next(s.option for s in chosen if s.id == e["site"]): e["to"] for e in paid}
    allf = row.get("all_flipped", {})
    if allf.get("same") and allf.get("ratio", 2.0) < 1.0 - min_effect and (
            not paid or allf["ratio"] < min(e["ratio"] for e in paid)):
        # every site flipped beat the best single: confirm that instead (a module-wide choice made per site)
        decisions = {s.option: next(c for c in s.choices if c != s.default) for s in found}
        row["confirmed_what"] = "all sites flipped"
    elif paid:
        row["confirmed_what"] = f"{len(paid)} single(s) that paid"
    if decisions:
        cand = root.with_options(decisions)
        try:
            conf = _ratio(pipeline, root, cand, 30)
            conf["same"] = _same(pipeline, root, cand)
            conf["win"] = conf["same"] and conf["high"] < 1.0 - min_effect
            conf["decisions"] = decisions
            row["combined"] = conf
        except PassFailed as exc:
            row["combined"] = {"failed": str(exc)[:200], "win": False}
    row["seconds"] = time.perf_counter() - t0
    return row


def markdown(rows: list[dict], args) -> str:
    ran = [r for r in rows if "skipped" not in r]
    wins = [r for r in ran if r.get("combined", {}).get("win")]
    ratios = [r["combined"]["ratio"] if r.get("combined", {}).get("win") else 1.0 for r in ran]
    med = float(np.median(ratios)) if ratios else float("nan")
    lines = ["# Decisions per site, measured on this CPU", "",
             f"**{len(wins)} confirmed, executed wins on {len(ran)} runnable modules**; median time ratio over them "
             f"{med:.3f} (a module without a win counts 1.00). Per site: the {args.sites} hottest sites' other "
             f"choice alone, raced against XLA's default; the ones below {1 - args.min_effect:.2f} combined and "
             "confirmed with 30 interleaved rounds (95% bootstrap interval), outputs compared on two draws; when "
             "every site flipped at once beat the best single, that is what is confirmed.", "",
             "| module | default ms | sites (ynn/xla) | best single | all flipped | combined [95% CI] | same outputs | win |",
             "|---|---:|---|---|---|---|---|---|"]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['module']} | {r['default_ms']:.1f} | skipped: {r['skipped']} | | | | | |")
            continue
        singles = [e for e in r["singles"] if "ratio" in e]
        best = min(singles, key=lambda e: e["ratio"]) if singles else None
        best_s = f"{best['site'].split(':')[0]}->{best['to']} {best['ratio']:.3f}" if best else "-"
        allf = r.get("all_flipped", {})
        all_s = f"{allf['ratio']:.3f}" if "ratio" in allf else allf.get("failed", "-")[:40]
        c = r.get("combined")
        comb = (f"{c['ratio']:.3f} [{c['low']:.3f}, {c['high']:.3f}] ({r.get('confirmed_what', '')})"
                if c and "ratio" in c else "-")
        same = "-" if not c or "same" not in c else ("yes" if c["same"] else "**no**")
        wrong = sum(1 for e in r["singles"] if e.get("same") is False)
        lines.append(f"| {r['module']} | {r['default_ms']:.1f} | {r['sites_total']} ({r['by_default']['ynn']}/"
                     f"{r['by_default']['xla']}) | {best_s} | {all_s} | {comb} | {same}"
                     f"{f' ({wrong} single(s) wrong)' if wrong else ''} | {'**yes**' if c and c.get('win') else 'no'} |")
    lines += ["", "![per-site ratios](sites.png)", "",
              "A ratio below 1 is faster than XLA's default. 'all flipped' is every site's other choice at once, "
              "what one module-wide switch would do. Load averages during the run: "
              f"{os.getloadavg()[0]:.1f} (1 min) at the end."]
    return "\n".join(lines)


def plot(rows: list[dict]):
    def draw(path: Path) -> None:
        plt = pyplot()
        ran = [r for r in rows if "singles" in r and r["singles"]]
        fig, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * max(1, len(ran))))
        for i, r in enumerate(ran):
            xs = [e["ratio"] for e in r["singles"] if "ratio" in e]
            ax.scatter(xs, [i] * len(xs), s=14, color="tab:blue", alpha=0.6, label="one site" if i == 0 else None)
            if r.get("combined", {}).get("ratio"):
                c = r["combined"]
                ax.errorbar([c["ratio"]], [i], xerr=[[c["ratio"] - c["low"]], [c["high"] - c["ratio"]]], fmt="o",
                            color="tab:green", label="combined (95% CI)" if i == 0 else None)
        ax.axvline(1.0, color="grey", lw=1)
        ax.set_yticks(range(len(ran)), [r["module"] for r in ran])
        ax.set_xlabel("time ratio vs XLA's default (lower is faster)")
        ax.legend(loc="lower right", fontsize=8)
        save_figure(fig, path)
    return draw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modules", nargs="*", type=Path)
    ap.add_argument("--sites", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--min-effect", type=float, default=0.02)
    ap.add_argument("--max-ms", type=float, default=400.0)
    ap.add_argument("--quick", action="store_true", help="two modules, 3 sites, 6 rounds")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    paths = args.modules or MODULES
    if args.quick:
        paths, args.sites, args.rounds = paths[:2], 3, 6
    prov = Provenance.now()
    rows = []
    with tempfile.TemporaryDirectory(prefix="autotune-sites-") as tmp, open_engine(Path(tmp) / "c.db", workers=1) as ev:
        for path in paths:
            log(f"== {rel(path)}")
            try:
                rows.append(one_module(ev, path, args.sites, args.rounds, args.min_effect, args.max_ms))
            except PassFailed as exc:
                rows.append({"module": path.stem, "default_ms": float("nan"), "skipped": f"failed: {str(exc)[:120]}"})
            data = {"rows": rows, "sites": args.sites, "rounds": args.rounds, "min_effect": args.min_effect}
            out = write(args.out, "sites", data, markdown(rows, args), prov, plot=plot(rows))
    log(f"wrote {rel(out)}")


if __name__ == "__main__":
    main()
