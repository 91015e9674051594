"""Stage ``report``: the summary over every stage, its plot, and results/learning.{json,md,png}."""

from __future__ import annotations

import statistics
from pathlib import Path

from harness import Provenance, pyplot, save_figure, write
from learn import common as C
from learn.common import BRANCHES, BRANCH_BUDGET, EARLIER_TEST_MODULES, METHODS, POLICY, Work, log, rel
from learn.markdown import markdown, verdict
from learn.seeds import ensemble_spread, seed_spread
from learn.train import fractions


# ---- report --------------------------------------------------------------------------------------------
def summarise(work: Work) -> dict:
    evals = {m: work.load(f"eval-{m}") or {} for m in METHODS}
    names = [n for n in evals["search"] if all(n in evals[m] for m in METHODS)]
    per_module = []
    for n in names:
        d = evals["search"][n]["default"]
        ceiling = d - evals["search"][n]["cost"]
        entry = {"module": n, "split": evals["search"][n]["split"], "default": d, "ceiling_gain": ceiling}
        for m in METHODS:
            r = evals[m][n]
            gain = d - r["cost"]
            entry[m] = {"cost": r["cost"], "gain": gain, "fraction": gain / ceiling if ceiling > 0 else None,
                        "steps": r["steps"], "seconds": r["seconds"], "evaluations": r["evaluations"],
                        "sequence": r["sequence"]}
        per_module.append(entry)
    groups = {}
    for label, keep in (("test", lambda e: e["split"] == "test"), ("shared", lambda e: e["split"] == "shared"),
                        ("all", lambda e: True)):
        rows = [e for e in per_module if keep(e)]
        with_headroom = [e for e in rows if e["ceiling_gain"] > 0]
        g = {"modules": len(rows), "with_headroom": len(with_headroom)}
        for m in METHODS:
            mean, pooled = fractions((e[m]["gain"], e["ceiling_gain"]) for e in rows)
            g[m] = {"mean_fraction": mean, "pooled_fraction": pooled,
                    "mean_gain": statistics.mean(e[m]["gain"] for e in rows) if rows else None,
                    "mean_relative_gain": statistics.mean(e[m]["gain"] / e["default"] for e in rows) if rows else None,
                    "beats_default": sum(e[m]["gain"] > 0 for e in rows),
                    "worse_than_default": sum(e[m]["gain"] < 0 for e in rows),
                    "mean_steps": statistics.mean(e[m]["steps"] for e in rows) if rows else None,
                    "mean_seconds": statistics.mean(e[m]["seconds"] for e in rows) if rows else None}
        g["policy_vs_fixed"] = {"better": sum(e["policy"]["gain"] > e["fixed"]["gain"] for e in rows),
                                "same": sum(e["policy"]["gain"] == e["fixed"]["gain"] for e in rows),
                                "worse": sum(e["policy"]["gain"] < e["fixed"]["gain"] for e in rows)}
        groups[label] = g
    return {"per_module": per_module, "groups": groups}


def plot(data: dict, path: Path) -> None:
    plt = pyplot()
    g = data["summary"]["groups"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.38
    for k, label in enumerate(("test", "shared")):
        vals = [g[label][m]["mean_fraction"] or 0 for m in METHODS]
        a.bar([i + (k - 0.5) * width for i in range(len(METHODS))], vals, width, label=label)
    a.set_xticks(range(len(METHODS)), METHODS, rotation=35, ha="right")
    a.axhline(1.0, color="grey", lw=0.8)
    a.set_ylabel("fraction of the ceiling's gain (mean)")
    a.legend()
    steps = [g["all"][m]["mean_steps"] or 0 for m in METHODS]
    b.bar(range(len(METHODS)), steps, color="tab:gray")
    b.set_xticks(range(len(METHODS)), METHODS, rotation=35, ha="right")
    b.set_yscale("log")
    b.set_ylabel("compiled steps per module (mean, log)")
    fig.suptitle("Zero-shot policy vs baselines on LLM steps (bench/learning.py)")
    save_figure(fig, path, dpi=110)


def report(work: Work, out: Path, command: str, quick: bool, policy: Path = POLICY) -> dict:
    from autotune.core.engine import open_engine as _open

    with _open(work.db("policy"), workers=1, target=C.TARGET) as ev:
        version = ev.version
    s = summarise(work)
    data = {"command": command, "quick": quick, "version": version, "params": work.params, "policy": rel(policy),
            "work": rel(work.root),
            "shipped": Path(policy).resolve().parent == POLICY.resolve().parent,  # found by name: shipped
            "train": work.load("train"), "fleet": work.load("fleet"), "summary": s,
            "select": {k: v for k, v in (work.load("select") or {}).items() if k != "rows"}}
    data["seeds"] = seed_spread(work, s)
    data["ensembles"] = ensemble_spread(work, s)
    data["branch_params"] = [work.params.get("branches", BRANCHES), work.params.get("branch_budget", BRANCH_BUDGET)]
    data["seed_validation"] = work.load("ensemble-validation") or {}
    data["verdict"] = verdict({**s, "train": data["train"], "select": data["select"], "seeds": data["seeds"]})
    if quick:
        first = {x.stem for x in work.test_set()[:EARLIER_TEST_MODULES]}
        entries = [e for e in s["per_module"] if e["module"] in first and e["ceiling_gain"] > 0]
        if entries and len(work.test_set()) > EARLIER_TEST_MODULES:
            mean, pooled = fractions((e["policy"]["gain"], e["ceiling_gain"]) for e in entries)
            data["earlier_test"] = {"modules": EARLIER_TEST_MODULES, "mean_fraction": mean, "pooled_fraction": pooled}
    write(out, "learning", data, markdown(data), Provenance.now(target=C.TARGET or "cpu"),
          plot=lambda path: plot(data, path))
    log(f"wrote {rel(out / 'learning.md')}: {data['verdict']}")
    return data
