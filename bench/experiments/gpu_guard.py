#!/usr/bin/env python
"""What the GPU guard changes: budget-40 answers for a GPU target with and without it.

For a GPU target, ``autotune run`` sets aside an answer that adds kernel launches or roofline time over
XLA's default (``autotune/core/gpu_guard.py``), because on the H200 the answers that made steps slower
were the ones that added launches (docs/gpu.md). This measures, on the real modules of tests/data (the
three shared LLM steps among them), the bundled decode step and ``--family`` modules of the ``llm``
family's test split, how often a search's answer would have added launches or estimated time, and what
the guarded run offers instead: instructions, launches and the roofline estimate of the GPU-compiled
module, against XLA's default. Both runs share one cache and one seed; the guarded search is told that
a state the guard sets aside failed, so it is steered elsewhere and may find another answer.

    python bench/experiments/gpu_guard.py [--target h100] [--budget 40] [--family 12] [--strategy nevergrad]

Writes ``results/gpu_guard.md`` and ``results/gpu_guard.json``. Compile-only figures (XLA's GPU
pipeline, deviceless); nothing is timed on a GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: the harness
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from harness import REAL, ROOT, Provenance, llm_steps, log, require, write  # noqa: E402


def figures(metrics) -> dict:
    return {"instructions": metrics.instructions, "kernels": metrics.figure("kernels"),
            "estimate_us": metrics.figure("estimate_us")}


def answer(result) -> dict:
    """What a run offers: its sequence and the GPU-compiled figures (XLA's default's when it offers none)."""
    offered = result.best is not None and result.beats_default and result.best.final is not None
    final = result.best.final if offered else result.default
    return {"sequence": list(result.best_sequence) if offered else [], **figures(final),
            "set_aside": [{"sequence": list(s), "reason": r} for s, r in result.invalid if "GPU guard:" in r]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="h100")
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--strategy", default="nevergrad")
    ap.add_argument("--family", type=int, default=12, help="llm family test-split modules (0: none)")
    ap.add_argument("--out", default=str(ROOT / "results" / "gpu_guard"))
    args = ap.parse_args()

    from autotune.api import Session

    paths = sorted(REAL.glob("*.hlo")) + llm_steps() + [ROOT / "examples" / "llm_decode_step.hlo"]
    require(paths)
    modules = [(p.stem, "real" if p.parent != ROOT / "examples" else "example", p.read_text()) for p in paths]
    if args.family:
        from gpu_parts.prepare import family_sample

        log(f"lowering {args.family} llm family modules")
        modules += [(name, "llm family", text) for name, text in family_sample(args.family)]
    rows = []
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp, Session(Path(tmp) / "c.db", workers=2, target=args.target) as s:
        for name, group, text in modules:
            t = time.time()
            try:
                module = s.load(text)
                free = s.tune(module, strategy=args.strategy, budget=args.budget, validate=False,
                              allow_regressions=True)
                guarded = s.tune(module, strategy=args.strategy, budget=args.budget, validate=False)
            except Exception as exc:  # one module's failure is a row, not the end of the benchmark
                log(f"{name}: {type(exc).__name__}: {exc}")
                rows.append({"module": name, "group": group, "error": f"{type(exc).__name__}: {exc}"})
                continue
            row = {"module": name, "group": group, "default": figures(free.default),
                   "unguarded": answer(free), "guarded": answer(guarded), "seconds": round(time.time() - t, 1)}
            rows.append(row)
            log(f"{name}: default {row['default']}, unguarded {row['unguarded']['sequence']} "
                f"{row['unguarded']['kernels']}, guarded {row['guarded']['sequence']} {row['guarded']['kernels']}")
        target = s.target
        report(args, rows, target, time.time() - t0)


def rises(ans: dict, default: dict) -> bool:
    from autotune.core.gpu_guard import GUARDED

    return any(ans[f] is not None and default[f] is not None and ans[f] > default[f] + slack * abs(default[f])
               for f, _, _, slack in GUARDED)


def report(args, rows: list[dict], target, seconds: float) -> None:
    import jax

    ok = [r for r in rows if "error" not in r]
    changed = [r for r in ok if r["unguarded"]["sequence"] != r["guarded"]["sequence"]]
    rising = [r for r in ok if rises(r["unguarded"], r["default"])]
    still_win = [r for r in changed if r["guarded"]["sequence"]]
    wins = {k: sum(1 for r in ok if r[k]["sequence"]) for k in ("unguarded", "guarded")}
    out = Path(args.out)
    data = {"command": "python bench/experiments/gpu_guard.py " + " ".join(sys.argv[1:]), "target": target.key,
            "judged_by": target.judged_by(), "budget": args.budget, "strategy": args.strategy, "jax": jax.__version__,
            "seconds": round(seconds), "rows": rows,
            "summary": {"modules": len(ok), "errors": len(rows) - len(ok), "unguarded_raise": len(rising),
                        "changed": len(changed), "changed_still_beat_default": len(still_win),
                        "beat_default": wins}}

    def fig(a: dict) -> str:
        est = "-" if a["estimate_us"] is None else f"{a['estimate_us']:.1f}"
        return f"{a['instructions']} / {a['kernels']:g} / {est}"

    lines = [
        "# What the GPU guard changes", "",
        f"`{data['command']}` (target {target.key}: {target.judged_by()}; jax {jax.__version__}; "
        f"{args.strategy} at budget {args.budget}, seed 0, not validated; {seconds / 60:.0f} min on this machine). "
        "Compile-only figures, nothing timed on a GPU. Each cell: instructions / kernel launches / roofline "
        "estimate (us) of the GPU-compiled module.", "",
        f"* {len(ok)} modules ({len(rows) - len(ok)} failed); the unguarded answer adds launches or estimated "
        f"time over XLA's default on **{len(rising)}**; the guard changed the answer on **{len(changed)}**, "
        f"{len(still_win)} of them to another sequence that still beats the default, the rest to XLA's default. "
        f"Answers that beat XLA's default: {wins['unguarded']} unguarded, {wins['guarded']} guarded.", "",
        "| module | group | XLA's default | unguarded answer | guarded answer |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['module']} | {r['group']} | error: {r['error'][:80]} | | |")
            continue
        u, g = r["unguarded"], r["guarded"]
        lines.append(f"| {r['module']} | {r['group']} | {fig(r['default'])} | `{','.join(u['sequence']) or '(default)'}` "
                     f"{fig(u)} | `{','.join(g['sequence']) or '(default)'}` {fig(g)} |")
    path = write(out.parent, out.name, data, "\n".join(lines), Provenance.now(target=target.key), indent=1)
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
