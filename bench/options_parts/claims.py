"""``bench/options.py --stage claim``: the searches' answers claimed again under the runtime objective's claim.

Why. The claim changed (``Runtime.measured_claim``: independent measurements, four first and more while the
estimate straddles the bar, a t interval over them, where it was 30 rounds in one process replicated once).
A search ranks about a hundred candidates and then claims its best; the ranking did not change, so the
answers an earlier run of the search stage found (the one offered where it won, its best found where it
did not: ``effect.answer_of``) are claimed again here, exactly as the run's end claims its best. The row
says what each would now offer. Nothing is tuned to a module: the claim's rule and its constants are the
objective's defaults. The answers were executed and compared in the search that found them.
"""

from __future__ import annotations

import statistics

from options_parts.effect import answer_of


def claim_stage(ev, rows: list[dict], module_file, tmp, confirm, log) -> list[dict]:
    """Per searched module with an answer other than XLA's default: the claim at the objective's defaults
    (``confirm``: ``bench/runtime.py``'s, which runs ``Runtime.measured_claim``), beside the old claim."""
    from autotune.core.module import load
    from autotune.core.objectives.runtime import Runtime

    out = []
    for row in rows:
        if row.get("skipped"):
            continue
        options, sequence = answer_of(row)
        old = {"win": bool(row.get("win")), "ratio": row.get("ratio"), "low": row.get("low"), "high": row.get("high")}
        if not (options or sequence):
            out.append({"module": row["module"], "path": row["path"], "options": {}, "sequence": [], "old": old,
                        "claim": None})
            continue
        root = ev.prepare(load(module_file(row["path"], tmp)))
        module = ev.answer(root, sequence, options)
        claim = confirm(ev, root, module, seed=0, rounds=Runtime().rounds)
        log(f"claim {row['module']}: {'win' if claim['win'] else 'no win'} {claim['ratio']:.3f} "
            f"[{claim['low']:.3f}, {claim['high']:.3f}] over {claim['instances']} measurements "
            f"(old claim {'win' if old['win'] else 'no win'} {old['ratio'] or 0:.3f})")
        out.append({"module": row["module"], "path": row["path"], "options": options, "sequence": sequence,
                    "old": old, "claim": claim})
    return out


def claim_summary(rows: list[dict]) -> dict:
    """Wins now and before over the searched modules (a module without an answer or a win counts 1.0 in
    the median, as the README's row counts it)."""
    now = [r["claim"]["ratio"] if r["claim"] and r["claim"]["win"] else 1.0 for r in rows]
    before = [r["old"]["ratio"] if r["old"]["win"] else 1.0 for r in rows]
    return {"modules": len(rows), "wins": sum(bool(r["claim"] and r["claim"]["win"]) for r in rows),
            "wins_before": sum(r["old"]["win"] for r in rows),
            "median": statistics.median(now) if now else None,
            "median_before": statistics.median(before) if before else None,
            "instances": sum(r["claim"]["instances"] for r in rows if r["claim"]),
            "seconds": sum(r["claim"]["seconds"] for r in rows if r["claim"])}


def _fmt(ratio, low, high) -> str:
    return "-" if ratio is None else f"{ratio:.3f} [{low:.3f}, {high:.3f}]"


def claim_lines(data: dict) -> list[str]:
    rows = data.get("claim") or []
    if not rows:
        return []
    s = data["claim_summary"]
    lines = ["## The answers claimed again, over independent measurements", "",
             f"The answers of {', '.join(f'`{f}`' for f in data.get('claim_from') or [])} (the one offered where "
             "the search won, its best found where it did not), each claimed again as a run's end claims its best: "
             "independent measurements (each its own inputs and buffers) of 10 interleaved rounds, four first and "
             "two more while the estimate straddles 0.98, at most 12, a t interval over them "
             f"(`{data['command']} --stage claim --from ...`). **Confirmed wins: {s['wins']} of {s['modules']} "
             f"(the old claim: {s['wins_before']}); median with non-wins as 1.0: {s['median']:.3f} (old: "
             f"{s['median_before']:.3f})**; {s['instances']} measurements, {s['seconds'] / 60:.1f} min of claiming.",
             "", "| module | answer | old claim (30 rounds, replicated) | claim now | measurements | verdict |",
             "|---|---|---|---|---:|---|"]
    for r in rows:
        old = r["old"]
        answer = ", ".join(f"{k}={v}" for k, v in r["options"].items()) or "-"
        if r["sequence"]:
            answer += f"; `{','.join(r['sequence'])}`"
        c = r["claim"]
        lines.append(f"| `{r['module']}` | {answer if c else 'XLA default (nothing found)'} | "
                     f"{_fmt(old['ratio'], old['low'], old['high'])}{' win' if old['win'] else ''} | "
                     + (f"{_fmt(c['ratio'], c['low'], c['high'])} | {c['instances']} | "
                        f"{'**win**' if c['win'] else 'keep XLA default'} |" if c else "- | 0 | keep XLA default |"))
    return lines + [""]
