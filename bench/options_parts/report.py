"""results/options.md from ``bench/options.py``'s figures (``markdown``): one table per stage, every figure
with the command that regenerates it."""

from __future__ import annotations

import statistics

from autotune.core.options import CompilerOptions
from options_parts.claims import claim_lines
from options_parts.effect import effect_lines


def _opts(options: dict) -> str:
    return CompilerOptions.of(options).describe(empty="XLA's default options")


def _interval(r: dict) -> str:
    return "-" if r.get("ratio") is None else f"{r['ratio']:.3f} [{r['low']:.3f}, {r['high']:.3f}]"


def speedups(rows: list[dict]) -> str:
    """The median time ratio over the searched modules, a module without a confirmed win counted as 1.0 (it keeps
    XLA's default), over all of them and over the real ones and the zoo's apart."""
    searched = [r for r in rows if "skipped" not in r]
    groups = {"all": searched, "real (third-party) modules": [r for r in searched if r["path"].startswith("tests/")],
              "zoo modules": [r for r in searched if not r["path"].startswith("tests/")]}
    parts = []
    for name, group in groups.items():
        if group:
            ratios = [r["ratio"] if r.get("win") else 1.0 for r in group]
            parts.append(f"{name}: {sum(1 for r in group if r.get('win'))} of {len(group)} with a win, "
                         f"median {statistics.median(ratios):.3f}")
    return "; ".join(parts)


def search_lines(data: dict) -> list[str]:
    rows = data.get("search") or []
    if not rows:
        return []
    wins = [r for r in rows if r.get("win")]
    lines = ["## Search: options and pass order, judged by measured time", "",
             f"`autotune run --objective runtime --space both --strategy {data['strategy']} --budget {data['budget']} "
             f"--seed {data['seed']} MODULE` on each module, a fresh cache each (`{data['command']} --stage search`). "
             + ("A win is a claim over 4-12 independent measurements against XLA's default (each its own inputs "
                "and buffers, 10 interleaved rounds; the geometric mean of their ratios with a 95% t interval) whose "
                "whole interval lies below 0.98"
                if any(r.get("instances") for r in rows) else
                "A win is a confirmation (30 interleaved rounds against XLA's default, ratio of medians with its 95% "
                "bootstrap interval) whose whole interval lies below 0.98, replicated by a second confirmation on "
                "other inputs (the figure: both pooled, 60 rounds)")
             + ", with outputs compared to the default's on two draws of inputs. A search's answer is its luckiest "
             "candidate confirmed or not: a small real win (0.95-0.97) is found in one run and missed in the next, "
             "so read the table as what one run of the command gives.", "",
             f"**Confirmed, executed speed-ups: {len(wins)} of {sum(1 for r in rows if 'skipped' not in r)} modules.** "
             f"Time / default, a module without a win counted as 1.0: {speedups(rows)}.", "",
             "| module | default | answer (options; passes) | time / default [95% CI] | validation | faster but wrong "
             "| compile s (default) | search s | racing saved |", "|---|---:|---|---|---|---|---:|---:|---:|"]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| `{r['module']}` | {r['skipped']} | left out (over the time limit) | | | | | | |")
            continue
        answer = (_opts(r["options"]) + (f"; `{','.join(r['sequence'])}`" if r["sequence"] else "")) if r["win"] \
            else f"keep XLA's default (best found: {_opts(r['found_options'])})"
        wrong = _wrong(r["faster_but_wrong"])
        notes = r.get("search_notes") or {}
        compile_s = "-" if r.get("compile_s") is None else f"{r['compile_s']:.1f} ({r['default_compile_s']:.1f})"
        lines.append(f"| `{r['module']}` | {r['default_us'] / 1e3:.2f} ms | {answer} | {_interval(r)} | "
                     f"{r['validation'] or '-'} | {wrong} | {compile_s} | {r['seconds']:.0f} | "
                     f"{notes.get('saved_fraction', 0):.0%} |")
    return lines + [""]


def _wrong(found: list[dict], shown: int = 2) -> str:
    """The faster-but-wrong option sets of a module, fastest first: the first few, then how many more."""
    found = sorted(found, key=lambda w: w.get("ratio") or 1.0)
    items = [f"{_opts(w['compiler_options'])} ({w['ratio']:.2f}x)" if w.get("ratio") else _opts(w["compiler_options"])
             for w in found[:shown]]
    more = f"; and {len(found) - shown} more" if len(found) > shown else ""
    return "; ".join(items) + more if items else "-"


def aa_lines(data: dict) -> list[str]:
    aa = data.get("aa") or []
    if not aa:
        return []
    n, wins = len(aa), data["aa_false_wins"]
    per = {}
    for r in aa:
        per.setdefault(r["module"], []).append(r)
    first = sum(bool(r.get("first_win")) for r in aa)
    extended = sum(bool(r.get("extended")) for r in aa)
    return ["## A/A: no option changed", "",
            f"XLA's default against itself, {n} confirmations at the runtime objective's defaults "
            f"(`{data['command']} --stage aa`): **{wins} false wins** (exact 95% upper bound {data['aa_upper']:.1%}). "
            f"Each claim is over independent measurements (each its own inputs and buffers): the first four said "
            f"\"faster\" {first} times; {extended} straddled 0.98 and were measured further (at most 12 in all), "
            f"after which {sum(bool(r.get('extended_win')) for r in aa)} said \"faster\".", "",
            "| module | trials | ratio range | first four said faster | measured further | then said faster | false wins |",
            "|---|---:|---|---:|---:|---:|---:|"] + [
        f"| `{m}` | {len(rs)} | {min(r['ratio'] for r in rs):.3f} - {max(r['ratio'] for r in rs):.3f} | "
        f"{sum(bool(r.get('first_win')) for r in rs)} | {sum(bool(r.get('extended')) for r in rs)} | "
        f"{sum(bool(r.get('extended_win')) for r in rs)} | {sum(r['win'] for r in rs)} |" for m, rs in per.items()] + [""]


def race_lines(data: dict) -> list[str]:
    race = data.get("race")
    if not race:
        return []
    lines = ["## Racing: the same search, raced and timed in full", "",
             f"`{race['raced']['path']}`, {race['raced']['strategy']} at budget {race['raced']['budget']}, seed "
             f"{race['raced']['seed']}, once raced (a candidate stops being timed once a sign-test bound says its ratio "
             f"to XLA's default lies above the best so far) and once with `--no-race` (`{data['command']} --stage race`).",
             "", "| | timing (s) | rounds timed of planned | candidates stopped early | search wall (s) | whole run (s) "
             "| answer | claim |", "|---|---:|---:|---:|---:|---:|---|---|"]
    for name in ("raced", "full"):
        r = race[name]
        n = r.get("search_notes") or {}
        lines.append(f"| {name} | {n.get('seconds', 0):.1f} | {n.get('rounds', 0)} of {n.get('planned', 0)} | "
                     f"{n.get('stopped', 0)} of {n.get('timed', 0)} | {r['phases'].get('search', 0):.0f} | {r['seconds']:.0f} "
                     f"| {_opts(r['options']) if r['win'] else 'XLA default'} | {_interval(r)} |")
    cut = race.get("timing_cut")
    said = f"Racing cut the timing by {cut:.0%}" if cut is not None else "No timing to compare"
    lines += ["", f"**{said}; the same answer: {'yes' if race['same_answer'] else 'no'}.**", ""]
    return lines


def hook_lines(data: dict) -> list[str]:
    hook = data.get("hook")
    if not hook:
        return []
    lines = ["## The JAX hook applies a record's options", "", hook.get("what", ""), ""]
    if hook.get("record"):
        rec, jx = hook["record"], hook.get("jax") or {}
        seq = rec.get("sequence") or []
        what = (_opts(rec["options"]) if rec["options"] else "no compiler options") + (
            f"; passes `{','.join(seq)}`" if seq else "")
        ctl = hook.get("jax_control") or {}
        applied = "compiler options" if hook.get("applied") else ""
        applied += (" and " if applied else "") + "a sequence" if hook.get("applied_sequences") else ""
        lines += [f"Record: {what}; ratio {rec['ratio']:.3f} [{rec['low']:.3f}, {rec['high']:.3f}]. The hook applied "
                  f"{applied or 'nothing'} to jax's compile.",
                  f"jax's own timing, hooked against plain jit ({jx.get('rounds')} interleaved rounds): "
                  f"**{jx.get('ratio', float('nan')):.3f} [{jx.get('low', float('nan')):.3f}, {jx.get('high', float('nan')):.3f}]**"
                  f"; its ratio within the record's interval: **{'yes' if hook.get('within') else 'no'}**; the two intervals "
                  f"overlap (consistent measurements): **{'yes' if hook.get('overlap') else 'no'}**. The control, plain jit against "
                  f"a second plain jit timed the same way: {ctl.get('ratio', float('nan')):.3f} [{ctl.get('low', float('nan')):.3f}, "
                  f"{ctl.get('high', float('nan')):.3f}].", ""]
    elif hook.get("note"):
        lines += [hook["note"], ""]
    return lines


def markdown(data: dict, rel) -> str:
    stages = data.get("stages") or {}
    loads = "; ".join(f"{k} {v['seconds'] / 60:.1f} min (load {v['load_before']} -> {v['load_after']})"
                      for k, v in stages.items())
    lines = ["# Measured speed from XLA's compiler options (CPU)", "",
             f"Regenerate: `{data['command']}` (stages: {loads}). Judged by XLA's CPU pipeline and timed on this "
             f"CPU, jax {data.get('jax')}. See docs/options.md for what each option does and how a claim is made.", ""]
    lines += (search_lines(data) + aa_lines(data) + race_lines(data) + hook_lines(data) + effect_lines(data)
              + claim_lines(data))
    if data.get("search"):
        lines += ["![time / default per module](options.png)", ""]
    return "\n".join(lines)
