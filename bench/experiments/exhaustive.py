#!/usr/bin/env python
"""Exhaustive search over short pass sequences on several modules: the optimum the strategies chase.

``autotune explore`` (``autotune/explore.py``) for each module: a breadth-first walk over every
*distinct* module state up to ``--depth`` passes, each state followed by XLA's default pipeline
(objective ``final-ops``), the best validated like any ``autotune run`` result.

This answers the question a search result alone cannot: when every strategy ties with XLA's
default, is there nothing better within reach, or did the searches miss it?

    python bench/experiments/exhaustive.py [--depth 3] [--db PATH] [MODULE ...]

Writes ``results/exhaustive.md`` and ``results/exhaustive.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: the harness
from harness import ROOT, Provenance, require, write  # noqa: E402

from autotune.core.engine import open_engine  # noqa: E402
from autotune.core.explore import Outcome, explore  # noqa: E402
from autotune.core.module import load  # noqa: E402

DEFAULT_MODULES = (
    ROOT / "examples/gpt2_train_step.hlo",
    ROOT / "examples/bert_encoder_step.hlo",
    ROOT / "examples/resnet_train_step.hlo",
    ROOT / "tests/data/real/xla_dlrm_train_step.hlo",
    ROOT / "tests/data/real/hloenv_maml_train_step.hlo",
)


def markdown(outcomes: list[Outcome], depth: int, command: str, version: str, n_actions: int) -> str:
    lines = [
        "# Exhaustive search over short sequences",
        "",
        f"Every sequence of up to {depth} of the {n_actions} actions, followed by XLA's default pipeline "
        "(objective `final-ops`), walked breadth-first over distinct module states so each state is "
        "expanded once. A better ordering than XLA's default that is at most "
        f"{depth} passes long cannot be missed here; a longer one can.",
        "",
        f"Made by `{command}` on {os.cpu_count()} CPUs with `{version}`.",
        "",
        "| module | input ops | XLA default final-ops | best final-ops | best sequence (shortest) | valid | "
        "sequences covered | distinct states | steps compiled | time |",
        "|---|---:|---:|---:|---|---|---:|---:|---:|---:|",
    ]
    for o in outcomes:
        seq = ", ".join(f"`{a}`" for a in o.best_sequence) if o.best_final_ops < o.default_final_ops else "(none better)"
        valid = "-" if o.valid is None else ("yes" if o.valid else f"no: {o.validity_message}")
        lines.append(f"| {o.module} | {o.input_ops} | {o.default_final_ops} | {o.best_final_ops} | {seq} | {valid} | "
                     f"{o.sequences_covered:,} | {o.distinct_states} | {o.steps_compiled} | {o.seconds:.0f}s |")
    lines += ["", "Distinct states first reached at each depth (steps tried / failed / new):", ""]
    for o in outcomes:
        lines.append(f"* {o.module}: " + "; ".join(f"depth {lv.depth}: {lv.steps} / {lv.failed} / {lv.new_states}"
                                                  for lv in o.levels))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/experiments/exhaustive.py", description=__doc__.splitlines()[0])
    p.add_argument("modules", nargs="*", type=Path, help="modules (default: the bundled examples and two real ones)")
    p.add_argument("--depth", type=int, default=3, help="longest sequence enumerated (default 3)")
    p.add_argument("--db", help="cache database (default: .autotune/cache.db or $AUTOTUNE_DB)")
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--out", type=Path, default=ROOT / "results", help="directory for exhaustive.md/.json")
    args = p.parse_args(argv)
    if args.depth < 1:
        p.error("--depth must be at least 1")
    modules = args.modules or list(DEFAULT_MODULES)
    require(modules, "module")
    command = "python bench/experiments/exhaustive.py" + (f" --depth {args.depth}" if args.depth != 3 else "") + (
        "" if not args.modules else " " + " ".join(str(m) for m in args.modules))

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    outcomes = []
    with open_engine(args.db, workers=args.workers) as ev:
        for path in modules:
            log(f"{path.name}:")
            o = explore(ev, load(path), args.depth)
            outcomes.append(o)
            for lv in o.levels:
                log(f"  depth {lv.depth}: {lv.steps} steps, {lv.failed} failed, {lv.new_states} new states")
            log(f"  default {o.default_final_ops}, best {o.best_final_ops} {list(o.best_sequence)} "
                f"({o.distinct_states} states, {o.steps_compiled} steps compiled, {o.seconds:.0f}s)")
        version, n_actions = ev.version, len(ev.pipeline.passes())
    data = {"command": command, "depth": args.depth, "pipeline_version": version, "cpus": os.cpu_count(),
            "outcomes": [o.to_dict() for o in outcomes]}
    write(args.out, "exhaustive", data, markdown(outcomes, args.depth, command, version, n_actions), Provenance.now())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
