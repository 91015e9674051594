#!/usr/bin/env python
"""A policy, zero-shot, on the partitioned LLM steps (``llm_spmd``) against a search's ceiling.

    python bench/spmd_policy.py [--policy PATH] [--split test|train|all] [--style S] [--budget 40]
                                [--branches N] [--policy-budget B] [--family llm_spmd|t5|vit|diffusion]

``--family t5`` (or ``vit``, ``diffusion``): the same measurement on a family no shipped policy was
trained on (encoder-decoder, vision transformer, diffusion), into ``results/policy_<family><tag>.md``:
how far a policy learned on LLM steps carries to other architectures.

Why: issue 31 asks that the zero-shot policy reach 80% of a search's gain on the multi-device part
of the family's test split, and the shipped ``llm`` policy has never seen a partitioned program.
For every module of the chosen split: the policy's ONE deterministic roll-out, pruned (what
``autotune run --strategy ppo --budget 4 -O finetune=false --no-validate`` returns; ``--branches``
adds roll-outs from its next most likely first passes within ``--policy-budget``) and random search
at ``--budget`` evaluations (the ceiling), each on its own cold cache so that its compiled steps are
what it costs alone (the search's rows are kept in the work directory and reused by the next policy
measured, with the steps they cost the first time), and random search stopped at the policy's
compiled steps (``random@steps``, the same cold start: what the policy's steps buy without it).
Judged by XLA's CPU pipeline (final-ops, instruction counts; nothing timed).
Writes ``results/spmd_policy.md`` and ``results/spmd_policy.json`` (``--tag`` names another pair).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from harness import RESULTS, ROOT, Provenance, ensure_suite, write  # first: the repository on the path

from autotune.api import Session
from autotune.core.tuner import evaluation_session

import real_spmd
from learn.train import pruned, random_until_steps
from llm_headroom import stratum

POLICY = ROOT / "autotune" / "policies" / "llm.zip"
#: Families of partitioned steps: rows by parallel style or mesh, validated by running N partitions.
PARTITIONED = frozenset({"llm_spmd", "real_spmd"})


def run_method(session: Session, path: Path, method: str, policy: Path, budget: int, branches: int = 1,
               policy_budget: int = 4, finetune: bool = False) -> dict:
    t0 = time.perf_counter()
    if method == "policy":
        r = session.tune(path, strategy="ppo", budget=policy_budget, max_length=4, validate=False,
                         options={"policy": str(policy), "finetune": finetune, "branches": branches})
    else:
        r = session.tune(path, strategy="random", budget=budget, validate=False)
    best = r.best.cost if r.best and r.beats_default else r.default_cost
    return {"final_ops": int(best), "default": int(r.default_cost), "steps": r.steps_compiled,
            "sequence": list(r.best_sequence) if r.beats_default else [], "seconds": round(time.perf_counter() - t0, 1)}


def random_at_steps(session: Session, path: Path, steps: int, seed: int = 0) -> dict:
    """Random sequences (max length 4) until ``steps`` pass steps are compiled, the best pruned as a
    run's answer is: what the policy's compiled steps buy without the policy (learning.py's
    ``random@steps``)."""
    t0 = time.perf_counter()
    ev = session.evaluator
    s0 = ev.stats.steps_compiled
    es = evaluation_session(ev, session.load(path))
    seq, cost = pruned(es, *random_until_steps(ev, es, s0 + steps, seed))
    beats = cost is not None and cost < es.empty_cost
    return {"final_ops": int(cost if beats else es.empty_cost), "default": int(es.empty_cost),
            "steps": ev.stats.steps_compiled - s0, "sequence": list(seq) if beats else [],
            "seconds": round(time.perf_counter() - t0, 1)}


def fraction(row: dict, method: str = "policy") -> float | None:
    ceiling = row["default"] - row["search"]["final_ops"]
    if ceiling <= 0 or method not in row:
        return None
    return (row["default"] - row[method]["final_ops"]) / ceiling


def markdown(data: dict) -> str:
    s = data["summary"]
    family = data.get("family", "llm_spmd")
    lines = [
        "# A policy zero-shot on the " + {"llm_spmd": "partitioned LLM steps",
                                          "real_spmd": "real LLM steps partitioned by their own shardings "
                                                       "(bench/real_spmd.py)"}.get(family, f"`{family}` family"),
        "",
        f"Made by `{data['command']}` ({data['cpus']} CPUs, shared machine). Judged by "
        f"{data.get('judged_by', 'XLA' + chr(39) + 's CPU pipeline')} (target `{data.get('target', 'cpu')}`; "
        "final-ops: instructions after the sequence and XLA's default pipeline); nothing was timed, and the "
        "answers were not validated here" + (" (`autotune run` validates a partitioned step by running it as N "
                                             "partitions on N CPU devices)" if family in PARTITIONED else "")
        + ".", "",
        f"Policy `{data['policy']}` (trained on: {data['trained_on']}), "
        + (f"a committee of {data['members']} policies, each member's roll-out (the best kept)"
           if data.get("members", 1) > 1 else "one roll-out" if data.get("branches", 1) == 1 else
           f"its roll-out and its next {data['branches'] - 1} most likely first passes (`-O branches="
           f"{data['branches']}`)")
        + f" at `--budget {data.get('policy_budget', 4)}`"
        + (", fine-tuned on the module with the evaluations left" if data.get("finetune") else "")
        + ", pruned, against random search at "
        f"budget {data['budget']} (the ceiling), on the `{data['split']}` split of `{family}` "
        f"({s['modules']} modules, {s['with_headroom']} where the search beats XLA's default).", "",
        (f"**The policy recovers {s['mean_fraction']:.0%} of the ceiling's gain on average ({s['pooled']:.0%} pooled) "
         if s["mean_fraction"] is not None else
         "**The search beats XLA's default on none of these modules: there is no gain to recover; the policy ran ")
        + f"at {s['policy_steps']:.1f} compiled steps per module; the search costs {s['search_steps']:.1f}.** "
        f"It beats the default on {s['policy_wins']} modules and is worse than it on none (an answer is never "
        "worse than the default: a run returns the default when nothing beats it)."
        + (f" Random search stopped at the policy's compiled steps ({s['random_steps']:.1f} per module, cold cache) "
           f"recovers {s['random_mean_fraction']:.0%}." if s.get("random_mean_fraction") is not None else ""), "",
        f"| {'style' if family == 'llm_spmd' else 'mesh' if family == 'real_spmd' else 'stratum'} | modules | with headroom | mean fraction | "
        "random@steps |", "|---|---:|---:|---:|---:|",
    ]

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.0%}"

    for style, sub in data["by_style"].items():
        lines.append(f"| {style} | {sub['modules']} | {sub['with_headroom']} | {pct(sub['mean_fraction'])} | "
                     f"{pct(sub.get('random_mean_fraction'))} |")
    lines += ["", "| module | default | policy | search | random@steps | policy sequence | search sequence |",
              "|---|---:|---:|---:|---:|---|---|"]
    for r in data["rows"]:
        rnd = r["random"]["final_ops"] if "random" in r else "-"
        lines.append(f"| {r['module']} | {r['default']} | {r['policy']['final_ops']} | {r['search']['final_ops']} | "
                     f"{rnd} | `{','.join(r['policy']['sequence']) or '(default)'}` | "
                     f"`{','.join(r['search']['sequence']) or '(default)'}` |")
    return "\n".join(lines) + "\n"


def summarize(rows: list[dict]) -> dict:
    fr = [f for f in (fraction(r) for r in rows) if f is not None]
    fr_random = [f for f in (fraction(r, "random") for r in rows) if f is not None]
    gained = [r for r in rows if r["default"] > r["search"]["final_ops"]]
    pooled_ceiling = sum(r["default"] - r["search"]["final_ops"] for r in gained)
    pooled = sum(r["default"] - r["policy"]["final_ops"] for r in gained) / pooled_ceiling if pooled_ceiling else 0.0
    return {
        "modules": len(rows), "with_headroom": len(gained),
        "mean_fraction": round(statistics.mean(fr), 3) if fr else None, "pooled": round(pooled, 3),
        "policy_wins": sum(r["policy"]["final_ops"] < r["default"] for r in rows),
        "policy_steps": statistics.mean(r["policy"]["steps"] for r in rows) if rows else 0.0,
        "search_steps": statistics.mean(r["search"]["steps"] for r in rows) if rows else 0.0,
        "random_mean_fraction": round(statistics.mean(fr_random), 3) if fr_random else None,
        "random_steps": statistics.mean(r["random"]["steps"] for r in rows) if rows and "random" in rows[0] else 0.0,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--policy", type=Path, default=POLICY)
    p.add_argument("--split", choices=("test", "train", "all"), default="test")
    p.add_argument("--style", default=None,
                   help="only llm_spmd modules of these parallel styles (comma-separated, e.g. ring)")
    p.add_argument("--budget", type=int, default=40, help="random search evaluations (the ceiling)")
    p.add_argument("--family", default="llm_spmd", choices=("llm_spmd", "llm", "t5", "vit", "diffusion", "real_spmd"),
                   help="the family whose split is measured (default llm_spmd; real_spmd: the real LLM steps "
                        "partitioned by their own shardings, bench/real_spmd.py)")
    p.add_argument("--suite", type=Path, default=None, help="generated family (default .autotune/<family>-suite)")
    p.add_argument("--work", type=Path, default=None, help="caches and search rows (default .autotune/<family>_policy)")
    p.add_argument("--branches", type=int, default=1,
                   help="the policy's roll-out, then its next most likely first passes (ppo option branches)")
    p.add_argument("--policy-budget", type=int, default=4, help="the policy's evaluations (--budget of its run)")
    p.add_argument("--finetune", action="store_true", help="fine-tune the policy on the module with the budget left")
    p.add_argument("--tag", default="", help="suffix of the result files (results/spmd_policy<tag>.md)")
    p.add_argument("--target", default="cpu", help="judge for this target (default cpu; e.g. h100, with the "
                                                   "policy trained for it: --policy autotune/policies/llm-h100.zip)")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    target_tag = "" if args.target == "cpu" else f"_{args.target}"
    args.suite = args.suite or (real_spmd.DEFAULT_DIR if args.family == "real_spmd"
                                else ROOT / ".autotune" / f"{args.family.replace('_', '-')}-suite")
    args.work = args.work or ROOT / ".autotune" / ("spmd_policy" if args.family == "llm_spmd"
                                                   else f"{args.family}_policy")
    stem = ("spmd_policy" if args.family == "llm_spmd" else f"policy_{args.family}") + target_tag
    args.work = args.work / args.target if target_tag else args.work
    if not args.policy.exists():
        print(f"error: no policy at {args.policy}", file=sys.stderr)
        return 2
    if args.family == "real_spmd":  # held out from every training set: all on the test side
        entries = [e for e in real_spmd.ensure(args.suite) if args.split in ("all", "test")]
    else:
        entries = [e for e in ensure_suite(args.suite, args.family).entries
                   if e.family == args.family and (args.split == "all" or e.split == args.split)]
    entries = [e for e in entries if not args.style or e.config.get("parallel") in args.style.split(",")]
    if not entries:
        print(f"error: no {args.family} modules on the {args.split} split"
              + (f" of style {args.style}" if args.style else ""), file=sys.stderr)
        return 2
    args.work.mkdir(parents=True, exist_ok=True)
    policy_db = args.work / f"policy-{args.policy.stem}{args.tag}.db"
    policy_db.unlink(missing_ok=True)  # cold: its compiled steps are what it costs alone
    random_db = args.work / f"random-at-steps-{args.policy.stem}{args.tag}.db"
    random_db.unlink(missing_ok=True)
    searched_file = args.work / f"search-b{args.budget}.jsonl"
    searched = {}
    if searched_file.exists():
        for line in searched_file.read_text().splitlines():
            row = json.loads(line)
            searched[row["sha256"]] = row["search"]
    rows = []
    target = args.target
    with Session(cache=policy_db, target=target) as pol, \
            Session(cache=args.work / f"search-b{args.budget}.db", target=target) as search, \
            Session(cache=random_db, target=target) as rand:
        judged_by = search.target.judged_by()
        for i, e in enumerate(entries, 1):
            path = args.suite / e.file
            if e.sha256 not in searched:
                searched[e.sha256] = run_method(search, path, "search", args.policy, args.budget)
                with searched_file.open("a") as f:
                    f.write(json.dumps({"sha256": e.sha256, "search": searched[e.sha256]}) + "\n")
            style = e.config["parallel"] if args.family in PARTITIONED else stratum(e)
            row = {"module": e.name, "split": e.split, "style": style, "devices": e.config.get("devices", 1),
                   "policy": run_method(pol, path, "policy", args.policy, args.budget, args.branches,
                                        args.policy_budget, args.finetune), "search": searched[e.sha256]}
            row["default"] = row["policy"]["default"]
            row["random"] = random_at_steps(rand, path, row["policy"]["steps"])
            rows.append(row)
            print(f"[{i}/{len(entries)}] {e.name}: default {row['default']}, policy {row['policy']['final_ops']} "
                  f"{row['policy']['sequence']}, search {row['search']['final_ops']} {row['search']['sequence']}",
                  file=sys.stderr, flush=True)
    from autotune import policies

    sidecar = Path(str(policies.members(args.policy)[0]) + ".json")  # a committee: its first member's
    meta = json.loads(sidecar.read_text()) if sidecar.exists() else {}
    trained = (meta.get("training_set") or {}).get("suite", "?")
    command = "python bench/spmd_policy.py" + (f" --family {args.family}" if args.family != "llm_spmd" else "") \
        + (f" --policy {os.path.relpath(args.policy, ROOT)}"
                                              if args.policy != POLICY else "") \
        + (f" --split {args.split}" if args.split != "test" else "") \
        + (f" --style {args.style}" if args.style else "") \
        + (f" --budget {args.budget}" if args.budget != 40 else "") \
        + (f" --branches {args.branches}" if args.branches != 1 else "") \
        + (f" --policy-budget {args.policy_budget}" if args.policy_budget != 4 else "") \
        + (" --finetune" if args.finetune else "") \
        + (f" --tag {args.tag}" if args.tag else "") + (f" --target {args.target}" if target_tag else "")
    styles = sorted({r["style"] for r in rows})
    data = {"command": command, "family": args.family, "target": args.target, "judged_by": judged_by,
            "cpus": os.cpu_count(),
            "policy": os.path.relpath(args.policy, ROOT),
            "trained_on": trained, "members": len(policies.members(args.policy)),
            "split": args.split, "budget": args.budget, "branches": args.branches,
            "policy_budget": args.policy_budget, "finetune": args.finetune, "summary": summarize(rows),
            "by_style": {s: summarize([r for r in rows if r["style"] == s]) for s in styles}, "rows": rows}
    write(args.out, f"{stem}{args.tag}", data, markdown(data), Provenance.now(target=args.target or "cpu"), indent=1)
    s = data["summary"]
    print(f"policy: {s['mean_fraction']} of the ceiling (pooled {s['pooled']}) on {s['modules']} modules; "
          f"wrote {args.out / f'{stem}{args.tag}.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
