"""Write a ``Comparison`` as a report: Markdown, self-contained HTML, JSON and PNG plots.

``write_report(comparison, out_dir)`` writes into ``out_dir``:

* ``report.md``: for the repository (images linked relatively, so it renders on GitHub);
* ``report.html``: self-contained (the PNGs embedded as base64 data URIs, a little CSS);
* ``comparison.json``: ``Comparison.to_dict()`` (reload with ``Comparison.from_dict``);
* ``convergence.png``: best-so-far objective / XLA default's objective vs evaluations, per strategy
  (mean over modules x seeds, interquartile band);
* ``per_module.png``: final-ops improvement per module, bars grouped by strategy;
* ``families.png``: final-ops improvement per model family, one box per strategy.

A comparison on a measured objective (``runtime``) leads with what was measured instead
(``reporting/timing.py``): the time table, the runs' confirmations, and as plots the best-so-far time
ratio vs evaluations (``convergence.png``) and vs wall time (``convergence_wall.png``) and the
confirmed time per module (``per_module.png``); its op counts follow under their own heading.

Both documents are built from one list of blocks (``Heading``, ``Para``, ``Table``, ``Image``,
``Code``, ``Bullets``), so they always say the same thing. Inline text may use ``code`` and
**bold**; callers (``bench/paper.py``) can add their own blocks before and after the standard ones.
"""

from __future__ import annotations

import base64
import html
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from autotune.reporting.comparison import Comparison, StrategySummary
from autotune.reporting.metric import PAPER
from autotune.reporting.timing import measured, ratio_cell, run_ratio, seconds_cell, time_summaries
from autotune.core.validation import rank
from autotune.core import objectives

FAMILY_ORDER = ("gpt2", "bert", "resnet", "llm", "other")
FAMILY_LABEL = {"gpt2": "GPT-2", "bert": "BERT", "resnet": "ResNet", "llm": "LLM", "other": "other"}


# ---- blocks -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Code:
    text: str
    lang: str = ""


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    align: str = ""  # one of l/r per column; default: first left, rest right
    caption: str = ""


@dataclass(frozen=True)
class Image:
    file: str  # a file name inside the output directory
    alt: str


Block = Heading | Para | Bullets | Code | Table | Image


def to_markdown(blocks: Sequence[Block]) -> str:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append("#" * b.level + " " + b.text)
        elif isinstance(b, Para):
            out.append(b.text)
        elif isinstance(b, Bullets):
            out.append("\n".join(f"* {item}" for item in b.items))
        elif isinstance(b, Code):
            out.append(f"```{b.lang}\n{b.text.rstrip()}\n```")
        elif isinstance(b, Table):
            align = _align(b)
            lines = []
            if b.caption:
                lines.append(b.caption + "\n")
            lines.append("| " + " | ".join(_md_cell(h) for h in b.header) + " |")
            lines.append("|" + "|".join("---:" if a == "r" else "---" for a in align) + "|")
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
            out.append("\n".join(lines))
        elif isinstance(b, Image):
            out.append(f"![{b.alt}]({b.file})")
    return "\n\n".join(out) + "\n"


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _align(t: Table) -> str:
    return t.align or ("l" + "r" * (len(t.header) - 1))


_INLINE = re.compile(r"`([^`]+)`|\*\*([^*]+)\*\*|\[([^\]]+)\]\(([^)\s]+)\)")


def _inline_html(text: str) -> str:
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[pos:m.start()]))
        if m.group(1) is not None:
            out.append(f"<code>{html.escape(m.group(1))}</code>")
        elif m.group(2) is not None:
            out.append(f"<strong>{html.escape(m.group(2))}</strong>")
        else:
            out.append(f'<a href="{html.escape(m.group(4))}">{html.escape(m.group(3))}</a>')
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "".join(out)


CSS = """
body{font-family:-apple-system,BlinkMacSystemFont,"Segoe UI",Helvetica,Arial,sans-serif;max-width:1100px;
margin:2em auto;padding:0 1em;color:#1f2328;line-height:1.45}
h1,h2,h3{border-bottom:1px solid #d0d7de;padding-bottom:.2em}
table{border-collapse:collapse;margin:1em 0;font-size:.9em}
th,td{border:1px solid #d0d7de;padding:.3em .6em}th{background:#f6f8fa}
td.r,th.r{text-align:right}tr:nth-child(even) td{background:#fbfcfd}
code{background:#f6f8fa;padding:.1em .3em;border-radius:4px;font-size:.9em}
pre{background:#f6f8fa;padding:.8em;overflow:auto;border-radius:6px}pre code{background:none;padding:0}
img{max-width:100%;height:auto;border:1px solid #eee;margin:.5em 0}caption{text-align:left;padding:.3em 0}
""".strip()


def to_html(blocks: Sequence[Block], title: str, images: dict[str, bytes]) -> str:
    """Self-contained HTML; ``images`` maps an ``Image.file`` to its PNG bytes (embedded)."""
    body: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            body.append(f"<h{b.level}>{_inline_html(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            body.append(f"<p>{_inline_html(b.text)}</p>")
        elif isinstance(b, Bullets):
            body.append("<ul>" + "".join(f"<li>{_inline_html(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Code):
            body.append(f"<pre><code>{html.escape(b.text.rstrip())}</code></pre>")
        elif isinstance(b, Table):
            align = _align(b)
            cap = f"<caption>{_inline_html(b.caption)}</caption>" if b.caption else ""
            head = "".join(f'<th class="{a}">{_inline_html(h)}</th>' for h, a in zip(b.header, align))
            rows = "".join(
                "<tr>" + "".join(f'<td class="{a}">{_inline_html(str(c))}</td>' for c, a in zip(row, align)) + "</tr>"
                for row in b.rows
            )
            body.append(f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif isinstance(b, Image):
            data = images.get(b.file)
            if data is None:
                body.append(f"<p><em>(missing image {html.escape(b.file)})</em></p>")
            else:
                uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
                body.append(f'<figure><img src="{uri}" alt="{html.escape(b.alt)}"></figure>')
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{CSS}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n")


# ---- numbers -------------------------------------------------------------------------------------------
def pct(x: float | None, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x * 100:+.{digits}f}%"


def metric_cell(m) -> str:
    """``+3.2%`` with the geometric mean's caveats (floored runs, excluded modules) in brackets."""
    if m is None:
        return "-"
    notes = []
    if m.floored_runs:
        notes.append(f"{m.floored_runs} floored")
    if m.excluded_modules:
        notes.append(f"{m.excluded_modules} excl.")
    return pct(m.improvement) + (f" ({', '.join(notes)})" if notes else "")


def _family_metric(s: StrategySummary, family: str, kind: str):
    d = s.by_family.get(family)
    return d.get(kind) if d else None


def paper_table(comp: Comparison) -> Table:
    """The paper's numbers next to ours (GPT-2 modules and all modules, raw and final-ops)."""
    rows = [("paper (2023): PPO + reward shaping", pct(PAPER["gpt2"]), pct(PAPER["mixed"]), "not reported",
             "not reported")]
    for s in comp.summaries:
        rows.append((f"ours: {s.strategy}", metric_cell(_family_metric(s, "gpt2", "raw")), metric_cell(s.raw),
                     metric_cell(_family_metric(s, "gpt2", "final")), metric_cell(s.final)))
    return Table(("", "GPT-2, raw ops", "mixed, raw ops", "GPT-2, final-ops", "mixed, final-ops"), tuple(rows),
                 caption=f"Geometric mean over modules of (tuned reduction / the reduction of {comp.baseline}), minus 1. "
                         "'mixed' = every module compared (the paper: GPT-2, BERT and ResNet graphs).")


def overview_table(comp: Comparison) -> Table:
    rows = []
    for s in comp.summaries:
        rows.append((
            s.strategy, str(s.budget), metric_cell(s.raw), metric_cell(s.final),
            f"{s.wins}/{s.ties}/{s.losses}", str(s.validity_failures),
            f"{s.evaluations} ({s.mean_evaluations:.1f}/run)", f"{s.seconds:.0f}s", f"{s.cache_hit_rate:.0%}",
        ))
    return Table(("strategy", "budget", "paper metric, raw ops", "paper metric, final-ops",
                  f"win/tie/loss vs {comp.baseline} ({comp.objective})", "validity failures", "evaluations", "wall time",
                  "cache hits"), tuple(rows))


def strategy_table(comp: Comparison, s: StrategySummary) -> Table:
    rows: list[tuple[str, str]] = [
        ("strategy plugin" + (" and options" if s.options else ""),
         f"`{s.base_strategy}`" + (" " + ", ".join(f"`{k}={v}`" for k, v in s.options.items()) if s.options else "")),
        ("runs (modules x seeds)", f"{s.runs} ({s.modules} x {len(comp.seeds)})" + (f", {s.errors} errored" if s.errors else "")),
        ("budget per run / evaluations spent", f"{s.budget} / {s.evaluations} ({s.mean_evaluations:.1f} per run)"),
        ("paper metric, raw ops (geomean ratio - 1)",
         f"{pct(s.raw.improvement)} (ratio {_num(s.raw.geomean_ratio)}; {s.raw.modules} modules, "
         f"{s.raw.floored_runs} runs floored, {s.raw.excluded_modules} modules excluded)"),
        ("paper metric, final-ops (geomean ratio - 1)",
         f"{pct(s.final.improvement)} (ratio {_num(s.final.geomean_ratio)}; {s.final.modules} modules, "
         f"{s.final.floored_runs} runs floored, {s.final.excluded_modules} modules excluded)"),
    ]
    for fam in FAMILY_ORDER:
        if fam in s.by_family:
            rows.append((f"{FAMILY_LABEL[fam]}: raw ops / final-ops",
                         f"{metric_cell(s.by_family[fam]['raw'])} / {metric_cell(s.by_family[fam]['final'])}"))
    rows += [
        (f"best {comp.objective} / that of {comp.baseline} (geomean over runs)", _num(s.objective_geomean)),
        (f"wins / ties / losses vs {comp.baseline} ({comp.objective})", f"{s.wins} / {s.ties} / {s.losses}"),
        ("validity failures (runs whose best was rejected)", str(s.validity_failures)),
        ("runs left with no sequence (none evaluated ok, or none valid)", str(s.no_valid_best)),
        ("wall time (sum over runs, validation included)", f"{s.seconds:.1f}s"),
        ("steps compiled / from cache (hit rate)", f"{s.steps_compiled} / {s.steps_cached} ({s.cache_hit_rate:.0%})"),
    ]
    return Table(("", s.strategy), tuple(rows), align="ll")


def module_table(comp: Comparison) -> Table:
    """Per module: sizes and each strategy's final-ops (raw ops) improvement, seeds averaged."""
    header = ["module", "input", comp.baseline, *[f"{s.strategy}" for s in comp.summaries], "validation"]
    rows = []
    for m in comp.modules:
        cells = [f"`{m.name}`", _int(m.input_ops), _int(m.default_ops)]
        for s in comp.summaries:
            f = s.final.per_module.get(m.name)
            r = s.raw.per_module.get(m.name)
            cells.append("-" if f is None else f"{pct(f - 1)} ({pct(r - 1) if r is not None else 'n/a'})")
        levels = [r.validation for r in comp.rows() if r.module == m.name and r.validation]
        cells.append(min(levels, key=rank) if levels else "-")
        rows.append(tuple(cells))
    return Table(tuple(header), tuple(rows),
                 caption=f"Improvement over the reduction of {comp.baseline} per module: final-ops (raw ops in brackets), "
                         "seed-averaged ratio minus 1, floored as described above. Validation: the weakest level "
                         "any run's best reached on that module (identical > executed > executed-with-stand-ins > executed-region > "
                         "compiled > unverified).")


def claims_table(comp: Comparison) -> Table | None:
    """Per run of a measured objective: the confirmed ratio tuned/default with its interval (None if none)."""
    rows = []
    for r in comp.runs:
        c = r.claim or {}
        if not c.get("measured"):
            continue
        options = ", ".join(f"{k}={v}" for k, v in sorted(r.best_options.items())) or "-"
        rows.append((f"`{r.module}`", r.strategy, str(r.seed), f"{c['ratio']:.3f}",
                     f"[{c['low']:.3f}, {c['high']:.3f}]", f"{c['confidence']:.0%}", str(c["rounds"]),
                     "win" if c.get("win") else ("loss" if r.outcome == "loss" else "no significant difference"),
                     options))
    if not rows:
        return None
    return Table(("module", "strategy", "seed", "tuned/default", "interval", "confidence", "rounds", "verdict",
                  "compiler options"),
                 tuple(rows), caption=f"Runtime claims: the best candidate and {comp.baseline} re-measured interleaved; "
                 "a win only when the whole interval lies below 1 - minimum effect (see docs/runtime.md). Runs "
                 f"without a row had nothing to confirm (their best was the executable of {comp.baseline} or not faster in "
                 "the search).")


def time_table(comp: Comparison) -> Table:
    """The headline of a measured comparison: per strategy the geometric-mean time ratio with its
    interval, wins/ties/losses and the seconds to the first confirmed win (``reporting/timing.py``)."""
    by_label = {s.strategy: s for s in comp.summaries}
    rows = []
    for t in time_summaries(comp):
        s = by_label[t.strategy]
        rows.append((t.strategy, str(s.budget), ratio_cell(t), f"{t.runs} ({t.confirmed} confirmed)",
                     f"{t.wins}/{t.ties}/{t.losses}", seconds_cell(t), str(s.evaluations), f"{s.seconds:.0f}s"))
    confidence = next((t.confidence for t in time_summaries(comp)), 0.95)
    return Table(("strategy", "budget", f"tuned/default time, geomean [{confidence:.0%} CI]", "runs",
                  f"win/tie/loss vs {comp.baseline}", "s to first confirmed win", "evaluations", "wall time"),
                 tuple(rows),
                 caption=f"Measured time against {comp.baseline} (below 1 is faster), geometric mean over modules x "
                         "seeds of each run's confirmed tuned/default ratio (a run with nothing to confirm ships "
                         f"{comp.baseline}: 1.0); the interval spans the runs' spread and each confirmation's own. "
                         "A win: the whole confirmation interval below 1 - minimum effect. Seconds: into the run, "
                         "when its search first evaluated the answer then confirmed (fewest over winning runs).")


def module_time_table(comp: Comparison) -> Table:
    """Per module: each strategy's confirmed tuned/default time (geometric mean over seeds)."""
    rows = []
    for m in comp.modules:
        cells = [f"`{m.name}`"]
        for s in comp.summaries:
            vals = [x for x in (run_ratio(r) for r in comp.rows(s.strategy) if r.module == m.name) if x is not None]
            cells.append("-" if not vals else f"{math.exp(sum(math.log(v) for v, _ in vals) / len(vals)):.3f}")
        rows.append(tuple(cells))
    return Table(("module", *[s.strategy for s in comp.summaries]), tuple(rows),
                 caption=f"Tuned/default time per module (geometric mean over seeds; 1.0 = {comp.baseline}).")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _num(x) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def _int(x) -> str:
    return "-" if x is None else str(x)


def _minimises_raw_ops(objective: str) -> bool:
    """Whether the objective is read right after the sequence (the paper's raw count)."""
    try:
        return getattr(objectives.get(objective), "after_default", True) is False
    except Exception:  # an objective no longer installed: say the conservative thing
        return False


def method_bullets(comp: Comparison) -> tuple[str, ...]:
    b = comp.baseline
    return (
        f"**Metric** (the 2023 paper's): per module, ratio = (input - tuned) / (input - {b}) instructions; "
        "a strategy's score is the geometric mean of the ratio over modules, minus 1 (so +10% means 10% more "
        f"instructions removed than {b} ordering removes). Reported on **raw ops** (right after the "
        f"sequence; the paper's) and on **final-ops** (after the sequence followed by {b} pipeline: what "
        "the backend sees; the honest number).",
        *((f"**Raw ops under `{comp.objective}`**: the search minimised `{comp.objective}`, so the raw-ops figures "
           "are those of the sequences chosen for it (ties on the objective are broken by evaluation order, not by raw "
           "ops); they are not the paper's protocol, which minimises raw ops (`--objective ops`).",)
          if not _minimises_raw_ops(comp.objective) else ()),
        *((f"**Judged by** {comp.judged_by} (pipeline `{comp.pipeline_version}`); nothing here was timed on a GPU.",)
          if comp.judged_by else ()),
        "**Seeds**: each module's ratios are averaged over seeds first.",
        f"**Ratios <= 0** (nothing removed, or more instructions than the input): floored at {comp.ratio_floor:g} "
        f"before averaging, counted as `floored` (a heavy penalty on purpose). **Modules where {b} removes "
        "nothing** have no ratio: left out and counted as `excl.`. A run with no valid sequence counts as the "
        "untuned module: raw ratio 0 (floored), final-ops ratio 1.",
        f"**Win / tie / loss**: the run's best `{comp.objective}` against {b} ordering's on the same module.",
        "**Validity failures**: runs whose best candidate failed the validity check (full compile + same outputs on "
        "random inputs) and was replaced by the next best." + ("" if comp.validate else " (Validation was OFF.)"),
        "**Budget**: sequence evaluations per run, cache hits included; all runs share one cache, so a step "
        "compiled once is never compiled again (the strategy order is rotated per module so no strategy always "
        "meets the cold cache). Wall time therefore depends on order; evaluations and results do not.",
        f"**Convergence plot**: best-so-far objective divided by that of {b} on the same module "
        f"(1.0 = {b}, lower is better), mean over modules x seeds (the median is 1.0 wherever most modules "
        "have no gain, which hides the differences) with the interquartile band; a run that "
        "stopped before its budget keeps its last value, and before its first successful evaluation a run reads 1.0 "
        f"({b} is what would be shipped).",
        *(f"**Note**: {n}" for n in comp.notes),
        *_explain_bullets(comp),
    )


def _explain_bullets(comp: Comparison) -> tuple[str, ...]:
    """Where a run beat the default: the command that explains the win (autotune.reporting.explain)."""
    wins = [r for r in comp.runs if r.ok and r.run_id and r.best_cost is not None and r.default_cost is not None
            and r.best_cost < r.default_cost]
    if not wins:
        return ()
    best = {}
    for r in sorted(wins, key=lambda r: r.best_cost / r.default_cost if r.default_cost else 1.0):
        best.setdefault(r.module, r)
    cmds = "; ".join(f"{m}: `autotune explain {r.run_id}`" for m, r in best.items())
    return (f"**Why a win** (which instructions vanish, which pass did it, a minimal sequence and the commands "
            f"that reproduce it): {cmds}.",)


def standard_blocks(comp: Comparison, images: Sequence[str] | None = None, heading_level: int = 2) -> list[Block]:
    """The report's blocks. A measured comparison (``runtime``) leads with what was measured (the time
    table, the runs' confirmations, time plots); its op counts follow under their own heading."""
    h = heading_level
    timed = measured(comp)
    images = tuple(plots_for(comp)) if images is None else tuple(images)
    families = sorted({m.family for m in comp.modules}, key=lambda f: FAMILY_ORDER.index(f) if f in FAMILY_ORDER else 9)
    blocks: list[Block] = [
        Para(f"{len(comp.modules)} modules ({', '.join(f'{sum(m.family == f for m in comp.modules)} {FAMILY_LABEL.get(f, f)}' for f in families)}), "
             f"strategies {', '.join(f'`{s}`' for s in comp.strategies)}, budget {comp.budget} evaluations per run, "
             f"seeds {', '.join(map(str, comp.seeds))}, objective `{comp.objective}`, max sequence length "
             f"{comp.max_length}" + (f", time limit {comp.time_limit:g}s per run" if comp.time_limit else "")
             + f"; {len(comp.runs)} runs in {_duration(comp.seconds)}"
             + (f" with {comp.pipeline_version}" if comp.pipeline_version else "") + "."
             + (" **The comparison was interrupted; the numbers cover the runs that finished.**"
                if comp.status == "interrupted" else "")),
    ]
    alts = {**ALTS, "per_module.png": "confirmed time per module"} if timed else ALTS
    pictures = [Image(name, alts.get(name.rsplit("/", 1)[-1], name)) for name in images]
    if timed:
        claims = claims_table(comp)
        blocks += [Heading("Measured time", h), time_table(comp)]
        if claims is not None:
            blocks += [Heading("Runtime claims (confirmed by interleaved A/B)", h), claims]
        blocks += [*pictures, Heading("Per module (time)", h), module_time_table(comp),
                   Heading("Op counts (the paper's metric; not what this comparison measured)", h),
                   Para("The search minimised measured time: the instruction counts below are those of its answers "
                        "(an answer of compiler options alone keeps the pass order, and its raw-ops figure reads "
                        "as a loss), shown for completeness."),
                   paper_table(comp), overview_table(comp)]
    else:
        blocks += [Heading("Against the paper", h), paper_table(comp), Heading("Summary", h), overview_table(comp),
                   *pictures]
    blocks.append(Heading("Per strategy", h))
    for s in comp.summaries:
        blocks += [Heading(s.strategy, h + 1), strategy_table(comp, s)]
    blocks += [Heading("Per module" + (" (op counts)" if timed else ""), h), module_table(comp)]
    if not timed:
        claims = claims_table(comp)
        if claims is not None:
            blocks += [Heading("Runtime claims (confirmed by interleaved A/B)", h), claims]
    blocks += [Heading("Method", h), Bullets(method_bullets(comp))]
    return blocks


# ---- plots ------------------------------------------------------------------------------------------------
def _colors(labels: Sequence[str]) -> dict[str, tuple]:
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    return {label: cmap(i % 10) for i, label in enumerate(labels)}


def plot_convergence(comp: Comparison, path: Path) -> None:
    import matplotlib.pyplot as plt
    import numpy as np

    colors = _colors(comp.strategies)
    fig, ax = plt.subplots(figsize=(9, 5.2))
    for k, s in enumerate(comp.summaries):
        rows = [r for r in comp.rows(s.strategy) if r.ok and r.default_cost]
        if not rows:
            continue
        n = max(s.budget, max(len(r.history) for r in rows), 1)
        mat = np.full((len(rows), n), np.nan)
        for i, r in enumerate(rows):
            # Before the first successful evaluation (or with none at all) the fallback is XLA's default: 1.0.
            vals = [1.0 if h is None else h / r.default_cost for h in r.history] or [1.0]
            vals = vals + [vals[-1]] * (n - len(vals))
            mat[i, :] = vals[:n]
        x = np.arange(1, n + 1)
        valid_cols = ~np.all(np.isnan(mat), axis=0)
        if not valid_cols.any():
            continue
        with np.errstate(all="ignore"):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                med = np.nanmean(mat, axis=0)
                q1 = np.nanpercentile(mat, 25, axis=0)
                q3 = np.nanpercentile(mat, 75, axis=0)
        c = colors[s.strategy]
        ax.plot(x[valid_cols], med[valid_cols], color=c, lw=2, ls=("-", "--", "-.", ":")[k % 4],
                label=f"{s.strategy} (n={len(rows)})")
        ax.fill_between(x[valid_cols], q1[valid_cols], q3[valid_cols], color=c, alpha=0.07, lw=0)
    ax.axhline(1.0, color="black", ls="--", lw=1, label=comp.baseline)
    ax.set_xlabel("evaluations (sequences scored, cache hits included)")
    if measured(comp):
        ax.set_ylabel(f"best-so-far time ratio (tuned / {comp.baseline}, search samples)")
        ax.set_title("Best-so-far time ratio vs evaluations\n(mean over modules x seeds, band: interquartile range; "
                     "lower is faster; confirmed ratios are in the tables)")
    else:
        ax.set_ylabel(f"best-so-far {comp.objective} / that of {comp.baseline}")
        ax.set_title(f"Best-so-far {comp.objective} vs evaluations\n(mean over modules x seeds, band: interquartile range; lower is better)")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_per_module(comp: Comparison, path: Path) -> None:
    import matplotlib.pyplot as plt
    import numpy as np

    colors = _colors(comp.strategies)
    modules = [m.name for m in comp.modules]
    k = len(comp.summaries)
    bars = max(1, len(modules) * max(1, k))
    fig, ax = plt.subplots(figsize=(10, min(60.0, max(4.0, 0.08 * bars + 0.25 * len(modules) + 2.0))))
    y = np.arange(len(modules))
    bar = 0.8 / max(1, k)
    every = []
    for j, s in enumerate(comp.summaries):
        vals = [100 * (s.final.per_module[m] - 1) if m in s.final.per_module else np.nan for m in modules]
        every += [v for v in vals if not np.isnan(v)]
        pos = y - 0.4 + bar * (j + 0.5)
        ax.barh(pos, vals, height=bar, color=colors[s.strategy], label=s.strategy)
        # a tick at each bar's end, so a 0% bar (as good as XLA) is still visible
        ax.scatter(vals, pos, marker="|", s=max(20, 300 * bar), color=colors[s.strategy], zorder=3)
    lo, hi = min(every + [0.0]), max(every + [0.0])
    pad = 0.08 * ((hi - lo) or 1.0)
    ax.set_xlim(lo - pad, hi + pad)
    ax.axvline(0, color="black", lw=1)
    ax.set_yticks(y)
    ax.set_yticklabels(modules, fontsize=7 if len(modules) > 15 else 8)
    ax.invert_yaxis()
    ax.set_xlabel(f"final-ops improvement over the reduction of {comp.baseline} (%)  [ratio - 1]")
    ax.set_ylabel("module")
    ax.set_title(f"Final-ops improvement per module\n(seed-averaged; 0% = as good as {comp.baseline} ordering; right is better)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="strategy")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def plot_families(comp: Comparison, path: Path) -> None:
    import matplotlib.pyplot as plt
    import numpy as np

    colors = _colors(comp.strategies)
    fams = [f for f in FAMILY_ORDER if any(m.family == f for m in comp.modules)] or ["other"]
    fig, axes = plt.subplots(1, len(fams), figsize=(max(7.0, 4.2 * len(fams)), 5.0), squeeze=False, sharey=True)
    rng = np.random.default_rng(0)
    for ax, fam in zip(axes[0], fams):
        names = [m.name for m in comp.modules if m.family == fam]
        data, labels = [], []
        for s in comp.summaries:
            data.append([100 * (s.final.per_module[n] - 1) for n in names if n in s.final.per_module])
            labels.append(s.strategy)
        positions = np.arange(1, len(data) + 1)
        nonempty = [(p, d, label) for p, d, label in zip(positions, data, labels) if d]
        if nonempty:
            bp = ax.boxplot([d for _, d, _ in nonempty], positions=[p for p, _, _ in nonempty], widths=0.6,
                            patch_artist=True, showfliers=False)
            for patch, (_, _, label) in zip(bp["boxes"], nonempty):
                patch.set_facecolor(colors[label])
                patch.set_alpha(0.45)
            for p, d, label in nonempty:
                ax.scatter(p + rng.uniform(-0.15, 0.15, len(d)), d, s=12, color=colors[label], zorder=3)
        ax.axhline(0, color="black", lw=1, ls="--")
        ax.set_xticks(positions)
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{FAMILY_LABEL.get(fam, fam)} ({len(names)} modules)")
        ax.set_xlabel("strategy")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel(f"final-ops improvement over {comp.baseline} (%)")
    fig.suptitle("Final-ops improvement per model family\n(box per strategy; one point per module, seed-averaged)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_convergence_wall(comp: Comparison, path: Path) -> None:
    """Best-so-far time ratio (search samples) against seconds into each run, mean over runs."""
    import matplotlib.pyplot as plt
    import numpy as np

    colors = _colors(comp.strategies)
    fig, ax = plt.subplots(figsize=(9, 5.2))
    runs = [r for r in comp.runs if r.ok and r.default_cost and r.history_seconds]
    end = max([r.history_seconds[-1] for r in runs] + [1e-3])
    grid = np.linspace(0.0, end, 200)
    for k, s in enumerate(comp.summaries):
        rows = [r for r in runs if r.strategy == s.strategy]
        if not rows:
            continue
        mat = np.ones((len(rows), len(grid)))
        for i, r in enumerate(rows):
            vals = [1.0 if h is None else h / r.default_cost for h in r.history][:len(r.history_seconds)]
            at = np.searchsorted(np.asarray(r.history_seconds[:len(vals)]), grid, side="right") - 1
            mat[i] = np.where(at >= 0, np.asarray(vals)[np.clip(at, 0, None)], 1.0)
        ax.step(grid, mat.mean(axis=0), where="post", color=colors[s.strategy], lw=2,
                ls=("-", "--", "-.", ":")[k % 4], label=f"{s.strategy} (n={len(rows)})")
    ax.axhline(1.0, color="black", ls="--", lw=1, label=comp.baseline)
    ax.set_xlabel("seconds into the run (search; the confirmation follows it)")
    ax.set_ylabel(f"best-so-far time ratio (tuned / {comp.baseline}, search samples)")
    ax.set_title("Best-so-far time ratio vs wall time\n(mean over modules x seeds; lower is faster)")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_per_module_time(comp: Comparison, path: Path) -> None:
    """Each strategy's confirmed tuned/default time per module (geometric mean over seeds)."""
    import matplotlib.pyplot as plt
    import numpy as np

    colors = _colors(comp.strategies)
    modules = [m.name for m in comp.modules]
    k = max(1, len(comp.summaries))
    fig, ax = plt.subplots(figsize=(10, min(60.0, max(4.0, 0.08 * len(modules) * k + 0.25 * len(modules) + 2.0))))
    y = np.arange(len(modules))
    bar = 0.8 / k
    for j, s in enumerate(comp.summaries):
        vals = []
        for m in modules:
            got = [x for x in (run_ratio(r) for r in comp.rows(s.strategy) if r.module == m) if x is not None]
            vals.append(math.exp(sum(math.log(v) for v, _ in got) / len(got)) if got else np.nan)
        ax.barh(y - 0.4 + bar * (j + 0.5), [v - 1.0 for v in vals], left=1.0, height=bar, color=colors[s.strategy],
                label=s.strategy)
    ax.axvline(1.0, color="black", lw=1)
    ax.set_yticks(y)
    ax.set_yticklabels(modules, fontsize=7 if len(modules) > 15 else 8)
    ax.invert_yaxis()
    ax.set_xlabel(f"confirmed tuned/default time (1.0 = {comp.baseline}; left is faster)")
    ax.set_title("Measured time per module\n(seed geometric mean of each run's confirmation)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="strategy")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


#: The plots of a comparison on a deterministic objective (op counts), and of a measured one (time).
PLOTS = {"convergence.png": plot_convergence, "per_module.png": plot_per_module, "families.png": plot_families}
TIME_PLOTS = {"convergence.png": plot_convergence, "convergence_wall.png": plot_convergence_wall,
              "per_module.png": plot_per_module_time}
ALTS = {"convergence.png": "best-so-far vs evaluations", "convergence_wall.png": "best-so-far time ratio vs wall time",
        "per_module.png": "improvement per module", "families.png": "improvement per family"}


def plots_for(comp: Comparison) -> dict:
    """The plots ``comp``'s report draws: time for a measured objective, op counts otherwise."""
    return TIME_PLOTS if measured(comp) else PLOTS


def write_plots(comp: Comparison, out_dir: Path) -> dict[str, Path]:
    import matplotlib

    matplotlib.use("Agg", force=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, fn in plots_for(comp).items():
        fn(comp, out_dir / name)
        paths[name] = out_dir / name
    return paths


# ---- the entry point -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReportFiles:
    markdown: Path
    html: Path
    json: Path
    images: dict[str, Path] = field(default_factory=dict)


def write_report(comp: Comparison, out_dir, title: str = "Strategy comparison", before: Sequence[Block] = (),
                 after: Sequence[Block] = (), markdown_name: str = "report.md", image_prefix: str = "") -> ReportFiles:
    """Write report.md, report.html, comparison.json and the PNGs into ``out_dir``.

    ``before``/``after`` are extra blocks around the standard ones. ``markdown_name`` may point
    elsewhere (e.g. ``../README.md``); ``image_prefix`` is then the images' path relative to it.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    images = write_plots(comp, out)
    (out / "comparison.json").write_text(json.dumps(comp.to_dict(), indent=1, default=str) + "\n")
    blocks = [Heading(title, 1), *before, *standard_blocks(comp, tuple(image_prefix + n for n in plots_for(comp))),
              *after]
    md_path = (out / markdown_name).resolve()
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(to_markdown(blocks))
    data = {image_prefix + n: p.read_bytes() for n, p in images.items()}
    html_path = out / "report.html"
    html_path.write_text(to_html(blocks, title, data))
    return ReportFiles(md_path, html_path, out / "comparison.json", images)
