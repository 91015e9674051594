"""``bench/options.py --stage effect``: what each search's answer is worth, measured apart from the search.

Why. A runtime search ranks about a hundred candidates on short raced measurements and keeps the best:
its ratio is the luckiest of many (the winner's curse). The claim's confirmation then decides one thing,
whether the answer clears the 2% bar; an answer that does not is dropped, and neither figure says how
large its effect is. On the small zoo steps the search read 0.91-0.93 and the confirmation straddled 0.98:
is there a 7% effect the claim is too weak to confirm, or a 2% one the search overrated? That decides
whether more rounds (or a better statistic) can reach issue 64's median goal, or only a new lever can.

How. Each answer (the one offered where the search won; the search's best where it did not) is timed
against XLA's default in ``INSTANCES`` independent A/B measurements: each is its own ``time_ab`` (both
taken from the worker's executable cache, inputs drawn with seed k and placed in fresh buffers), ``ROUNDS`` interleaved rounds at the claim's
sample length. Beside each, an A/A: XLA's default against itself, measured the same way. Per instance the
median per-round ratio; the estimate is their geometric mean with a t interval over instances
(``scipy.stats.ttest_1samp``): instances are independent, rounds within one are not (one executable, one
set of buffers), so the interval counts the unit that varies. The A/A says where the same method lands
when nothing changed. Nothing here is a claim or decides anything the tool offers: the answers were
executed and compared in the search that found them (a win's validation is in its row).
"""

from __future__ import annotations

import math
import statistics

from autotune.core import stats

#: Independent A/B measurements per answer (and as many A/A): a t interval on 9 degrees of freedom.
INSTANCES = 10
#: Interleaved rounds per measurement: one instance's median of 10 per-round ratios.
ROUNDS = 10


def estimate(log_ratios, confidence: float = 0.95) -> dict:
    """Geometric mean ratio of per-instance log ratios, its t interval and the spread between instances (the
    claim's own statistic, ``stats.instance_interval``), with each instance's ratio."""
    est = stats.instance_interval(log_ratios, confidence)
    return {**est, "per_instance": [round(math.exp(float(x)), 4) for x in log_ratios]}


def log_ratio(timing: dict) -> float:
    """One measurement's figure: the log of the median per-round ratio B/A of a ``time_ab`` result."""
    return stats.log_ratio(timing["a"], timing["b"])


def answer_of(row: dict) -> tuple[dict, list]:
    """The options and sequence a search row stands for: what it offered if it won, else its best found."""
    if row.get("win"):
        return dict(row.get("options") or {}), list(row.get("sequence") or [])
    return dict(row.get("found_options") or {}), list(row.get("found_sequence") or [])


def search_best(row: dict) -> float | None:
    """The smallest ratio the search timed in full (not stopped by racing): the winner's search-time figure."""
    full = [t["ratio"] for t in row.get("timed") or [] if t.get("ratio") and not t.get("stopped")]
    return min(full) if full else None


def effect_stage(ev, rows: list[dict], module_file, tmp, min_seconds: float, log, instances: int = INSTANCES,
                 rounds: int = ROUNDS) -> list[dict]:
    """Per search row with an answer other than XLA's default: the effect and the A/A beside it."""
    from autotune.core.module import load

    out = []
    for row in rows:
        options, sequence = answer_of(row)
        if row.get("skipped") or not (options or sequence):
            continue
        root = ev.prepare(load(module_file(row["path"], tmp)))
        module = ev.answer(root, sequence, options)
        logs: dict[str, list[float]] = {"ab": [], "aa": []}
        for k in range(instances):
            for arm, b in (("ab", module), ("aa", root)):
                t = ev.pipeline.time_ab(root, b, seed=k, rounds=rounds, min_seconds=min_seconds)
                logs[arm].append(log_ratio(t))
        effect, aa = estimate(logs["ab"]), estimate(logs["aa"])
        log(f"effect {row['module']}: {effect['ratio']:.3f} [{effect['low']:.3f}, {effect['high']:.3f}] "
            f"(search {row.get('ratio') or 0:.3f}, A/A {aa['ratio']:.3f} [{aa['low']:.3f}, {aa['high']:.3f}])")
        out.append({"module": row["module"], "path": row["path"], "win": bool(row.get("win")), "options": options,
                    "sequence": sequence, "claim": [row.get("ratio"), row.get("low"), row.get("high")],
                    "search_best": search_best(row), "rounds": rounds, "effect": effect, "aa": aa})
    return out


def merged_rows(sources: list[dict]) -> list[dict]:
    """Search rows of several runs of the bench, by module; a later run's row replaces an earlier one's."""
    rows: dict[str, dict] = {}
    for data in sources:
        for row in data.get("search") or []:
            rows[row["module"]] = row
    return list(rows.values())


def effect_summary(rows: list[dict], modules: int) -> dict:
    """Over ``modules`` modules (one without an answer counts 1.0): the median estimated ratio, how many
    answers are shown at least 2% and 5% faster by the instances' interval, and how many A/A intervals
    exclude 1.00."""
    ratios = [r["effect"]["ratio"] for r in rows] + [1.0] * (modules - len(rows))
    return {"modules": modules, "median": statistics.median(ratios) if ratios else None,
            "below_098": sum(r["effect"]["high"] < 0.98 for r in rows),
            "below_095": sum(r["effect"]["high"] < 0.95 for r in rows),
            "estimate_095": sum(r["effect"]["ratio"] <= 0.95 for r in rows),
            "aa_excluding_1": sum(not r["aa"]["low"] <= 1.0 <= r["aa"]["high"] for r in rows)}


def _fmt(e: dict) -> str:
    return f"{e['ratio']:.3f} [{e['low']:.3f}, {e['high']:.3f}]"


def effect_lines(data: dict) -> list[str]:
    rows = data.get("effect") or []
    if not rows:
        return []
    s = data["effect_summary"]
    lines = ["## What each answer is worth, measured apart from the search (`--stage effect`)", "",
             f"Answers of {', '.join(data.get('effect_from') or [])}; each timed against XLA's default in "
             f"{rows[0]['effect']['instances']} independent A/B measurements of {rows[0]['rounds']} interleaved rounds "
             f"(each its own inputs and buffers), the ratio the geometric mean of their medians with a 95% t interval "
             f"over measurements; an A/A (XLA's default against itself) beside each. Not a claim: see "
             f"`bench/options_parts/effect.py`.", "",
             f"**Median estimated ratio over the {s['modules']} modules: {s['median']:.3f}** (a module without an "
             f"answer counts 1.0); estimate <= 0.95 on {s['estimate_095']}; interval wholly below 0.98 on "
             f"{s['below_098']}, below 0.95 on {s['below_095']}. A/A intervals that exclude 1.00: "
             f"{s['aa_excluding_1']} of {len(rows)} (95% each: about {0.05 * len(rows):.1f} expected).", "",
             "| module | claimed (search's confirmation) | search's best sample | effect (instances) | A/A (instances) | answer |",
             "|---|---|---:|---|---|---|"]
    for r in rows:
        low, high = r["claim"][1], r["claim"][2]
        claim = (f"{'win ' if r['win'] else 'no win '}{r['claim'][0]:.3f} [{low:.3f}, {high:.3f}]"
                 if r["claim"][0] is not None else "-")
        best = f"{r['search_best']:.3f}" if r.get("search_best") else "-"
        answer = ", ".join(f"{k}={v or '(empty)'}" for k, v in sorted(r["options"].items()))
        if r["sequence"]:
            answer = f"{answer}; {len(r['sequence'])} passes" if answer else f"{len(r['sequence'])} passes"
        lines.append(f"| `{r['module']}` | {claim} | {best} | {_fmt(r['effect'])} | {_fmt(r['aa'])} | {answer} |")
    # the figure is the effect's where the run has no search of its own (options.py's plot)
    return lines + ([""] if data.get("search") else ["", "![effect per module](options.png)", ""])


def effect_plot(data: dict, plt):
    """Per module: the claim's interval, the search's best sample and the instances' estimate, A/A beside."""
    rows = data.get("effect") or []
    fig, ax = plt.subplots(figsize=(8.5, 0.55 * len(rows) + 1.6))
    for i, r in enumerate(rows):
        e, aa = r["effect"], r["aa"]
        ax.errorbar(e["ratio"], i + 0.15, xerr=[[e["ratio"] - e["low"]], [e["high"] - e["ratio"]]], fmt="o",
                    color="tab:green" if e["high"] < 0.98 else "tab:blue", label="effect (instances)" if i == 0 else None)
        ax.errorbar(aa["ratio"], i - 0.15, xerr=[[aa["ratio"] - aa["low"]], [aa["high"] - aa["ratio"]]], fmt="s",
                    color="tab:gray", ms=4, label="A/A (instances)" if i == 0 else None)
        if r["claim"][0] is not None:
            ax.plot(r["claim"][0], i + 0.15, "|", color="black", ms=12, label="claim's ratio" if i == 0 else None)
        if r.get("search_best"):
            ax.plot(r["search_best"], i + 0.15, "x", color="tab:red", label="search's best sample" if i == 0 else None)
    ax.axvline(1.0, color="black", lw=0.8)
    for bar in (0.98, 0.95):
        ax.axvline(bar, color="tab:green", lw=0.8, ls="--")
    ax.set_yticks(range(len(rows)), [r["module"] for r in rows])
    ax.set_xlabel("time / XLA's default (95% t interval over independent measurements)")
    ax.set_title(f"What the answers are worth, measured apart from the search (jax {data.get('jax', '?')})")
    ax.legend(loc="lower right", fontsize=8)
    return fig
