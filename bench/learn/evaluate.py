"""Stage ``eval``: every method on the test sample and the real LLM steps, and its own report."""

from __future__ import annotations

import hashlib
import os
import statistics
import time
from pathlib import Path

from autotune.core.engine import open_engine
from autotune.core.module import load
from autotune.core.tuner import evaluation_session, tune

from harness import LLM_STEPS as SHARED_LLM, REAL_LLM as SHARED, Provenance, write
from learn import common as C
from learn.common import BRANCHES, BRANCH_BUDGET, MAX_LENGTH, METHODS, RANDOM_SEEDS, SEARCH_MAX_LENGTH, SEEDS, Work, log, rel
from learn.markdown import fmt_value
from learn.selection import held_out_rows, validation_scores
from learn.train import fractions, pruned, random_until_steps, rollout


def _row(name: str, split: str, default: float, best: float | None, evaluations: int, steps: int, seconds: float,
         sequence) -> dict:
    cost = default if best is None or best >= default else best
    return {"module": name, "split": split, "default": default, "cost": cost, "evaluations": evaluations,
            "steps": steps, "seconds": seconds, "sequence": list(sequence) if cost < default else []}


def tuned_row(r, name: str, split: str) -> dict:
    """A method's row for one module from its run (``tune``'s result): what every eval table reads."""
    best = r.best.cost if r.best is not None else None
    return _row(name, split, r.default_cost, best, r.evaluations, r.steps_compiled, r.seconds, r.best_sequence)


def file_digest(*files: Path) -> str:
    """What a row or column measured for a policy is keyed by: its file's (an ensemble: its members') bytes."""
    return hashlib.sha256(b"".join(Path(f).read_bytes() for f in files)).hexdigest()[:16]


def evaluate_modules(work: Work, method: str, modules: list[tuple[Path, str]], policy: Path, fleet_seq, rows: dict,
                     done_policy: dict, seed: int = 0, tag: str | None = None) -> None:
    """Run ``method`` on every module not yet in ``rows`` (its own cold cache); saved after each module.

    A row records what it was measured for (``basis``: the policy file's digest, or for the random
    baselines the policy row's evaluations and steps they matched); a row whose basis differs is
    measured again, so evaluating another ``--policy`` in the same work directory never reports the
    previous policy's rows under its name."""
    p = work.params
    tag = tag or method
    use = {"policy": policy, "roll-out": policy, "seed": policy, "branches": policy, "committee": policy,
           "imitation": work.root / "imitation.zip", "ppo": work.root / f"ppo-{p['timesteps']}.zip"}.get(method)
    files = [Path(x) for x in str(use).split(",")] if use is not None else []  # an ensemble: its members
    digest = file_digest(*files) if files and all(f.exists() for f in files) else None

    def basis(stem: str) -> str | None:
        if use is not None:
            return digest
        if method.startswith("random@"):
            done = done_policy.get(stem) or {}
            return f"{done.get('evaluations')}/{done.get('steps')}"
        return None

    todo = [(x, s) for x, s in modules if x.stem not in rows or rows[x.stem].get("basis") != basis(x.stem)]
    if not todo:
        return
    if any(x.stem in rows for x, _ in todo):  # the cache holds another policy's states: start it cold again
        for old in (work.db(tag), work.db(tag) + "-wal", work.db(tag) + "-shm"):
            Path(old).unlink(missing_ok=True)
        rows.clear()
        todo = list(modules)
    with open_engine(work.db(tag), workers=2, target=C.TARGET) as ev:
        for path, split in todo:
            module = load(path)
            t0 = time.perf_counter()
            if method in ("policy", "roll-out", "imitation", "ppo", "seed"):
                row = tuned_row(rollout(ev, module, use, prune=method != "roll-out"), path.stem, split)
            elif method == "committee":  # each member's roll-out, the best pruned: one roll-out's budget each
                row = tuned_row(rollout(ev, module, use, budget=MAX_LENGTH * len(files), ensemble="each"), path.stem, split)
            elif method == "branches":
                row = tuned_row(rollout(ev, module, policy, branches=p.get("branches", BRANCHES),
                                     budget=p.get("branch_budget", BRANCH_BUDGET)), path.stem, split)
            elif method == "random@evals" and done_policy[path.stem]["evaluations"] > 0:
                n = done_policy[path.stem]["evaluations"]
                r = tune(ev, module, strategy="random", budget=n, max_length=MAX_LENGTH, validate=False, seed=seed)
                row = tuned_row(r, path.stem, split)
            elif method == "search":
                r = tune(ev, module, strategy="random", budget=p["search_budget"], max_length=SEARCH_MAX_LENGTH,
                         validate=False)
                row = tuned_row(r, path.stem, split)
            else:
                s0 = ev.stats.steps_compiled
                session = evaluation_session(ev, module)
                default = session.empty_cost
                s_base = ev.stats.steps_compiled
                if method == "fixed":
                    seqs = [tuple(fleet_seq)] if fleet_seq else []
                    costs = [session(q) for q in seqs]
                elif method == "random@evals":  # the policy stopped at once: zero evaluations
                    seqs, costs = [], []
                else:  # random@steps (4xsteps): random sequences until as many steps compiled as the policy's (x4)
                    target = done_policy[path.stem]["steps"] * (4 if method == "random@4xsteps" else 1)
                    seqs, costs = random_until_steps(ev, session, s0 + target, seed)
                seq, cost = pruned(session, seqs, costs)
                row = _row(path.stem, split, default, cost, len(seqs), ev.stats.steps_compiled - s0,
                           time.perf_counter() - t0, seq or ())
                row["steps_default"] = s_base - s0
            row["basis"] = basis(path.stem)
            rows[path.stem] = row
            work.save(f"eval-{tag}", rows)
            log(f"{tag}: {path.stem[:60]}: default {row['default']:.0f} -> {row['cost']:.0f} "
                f"({','.join(row['sequence']) or 'default'}; {row['evaluations']} evals, {row['steps']} steps, "
                f"{row['seconds']:.1f}s)")


def stage_eval(work: Work, policy: Path, methods=METHODS) -> dict:
    fleet = work.load("fleet")
    modules = [(x, "test") for x in work.test_set()] + [(SHARED / f, "shared") for f in SHARED_LLM]
    out = {}
    for method in methods:
        rows = work.load(f"eval-{method}") or {}
        if method == "fixed" and fleet is None:
            log("fixed: no fleet result yet (run --stage fleet)")
            continue
        if method.startswith("random@"):
            # Random search is one draw: averaged over RANDOM_SEEDS seeds, each on its own cold cache.
            # random@branches: at the compiled steps the branches method spent (run it first).
            done_policy = (work.load(f"eval-{branches_tag(work, policy)}") or {} if method == "random@branches"
                           else out.get("policy") or work.load("eval-policy") or {})
            if method == "random@branches" and not done_policy:
                log("random@branches: no branches rows for this policy yet (run --methods branches first)")
                continue
            base = f"random@{branches_tag(work, policy)}" if method == "random@branches" else method
            per_seed = []
            for seed in range(RANDOM_SEEDS):
                tag = f"{base}-s{seed}"
                seed_rows = work.load(f"eval-{tag}") or {}
                evaluate_modules(work, method, modules, policy, None, seed_rows, done_policy, seed=seed, tag=tag)
                per_seed.append(seed_rows)
            rows = {}
            for x, split in modules:
                runs = [r[x.stem] for r in per_seed]
                rows[x.stem] = {"module": x.stem, "split": split, "default": runs[0]["default"],
                                "cost": statistics.mean(r["cost"] for r in runs),
                                "evaluations": statistics.mean(r["evaluations"] for r in runs),
                                "steps": statistics.mean(r["steps"] for r in runs),
                                "seconds": statistics.mean(r["seconds"] for r in runs),
                                "sequence": [f"{len(runs)} seeds: " + " / ".join(f"{r['cost']:.0f}" for r in runs)],
                                "seeds": runs}
            work.save(f"eval-{base}", rows)
        elif method == "branches":  # per policy: the shipped one and the run's own are compared this way
            tag = branches_tag(work, policy)
            rows = work.load(f"eval-{tag}") or {}
            evaluate_modules(work, method, modules, policy, None, rows, {}, tag=tag)
        else:
            evaluate_modules(work, method, modules, policy, fleet["sequence"] if fleet else None, rows,
                             out.get("policy", {}))
        out[method] = rows
    for method, rows in out.items():
        for group, g in eval_groups(work, rows).items():
            log(f"{method}{f' ({branches_tag(work, policy)})' if 'branches' in method else ''}: {group} ({g['modules']}): "
                f"{fmt_value(g['mean_fraction'])} of the search's gain ({fmt_value(g['pooled_fraction'])} pooled), "
                f"{g['steps']:.1f} compiled steps per module")
    return out


def eval_summary(work: Work, policy: Path, out: Path, base: str, asked=METHODS) -> Path | None:
    """``eval.md`` / ``eval.json`` in ``out``: every method whose rows the work directory keeps for
    ``policy``, by group, against the search. Why: the full report needs every stage (fleet, seeds,
    ...), and a policy measured with a few methods (``--stage eval --methods policy,search,branches``)
    should still leave a file that its figures can be read from, with the command that remakes them
    (``base``: the invocation up to its stage options)."""
    search = work.load("eval-search")
    if not search:
        return None
    bt = branches_tag(work, policy)
    stored = {**{m: m for m in METHODS[:-1]}, "branches": bt, "random@branches": f"random@{bt}", "search": "search"}
    # The policy's own methods and the random baselines at its cost only where measured for it now (the
    # work directory may keep another policy's); the search, fixed, imitation and ppo rows are the run's.
    keep = set(asked) | {"search", "fixed", "imitation", "ppo"}
    methods = {m: work.load(f"eval-{tag}") for m, tag in stored.items() if m in keep}
    methods = {m: rows for m, rows in methods.items() if rows}
    b, bb = work.params.get("branches", BRANCHES), work.params.get("branch_budget", BRANCH_BUDGET)
    command = (base + " --stage eval --methods " + ",".join(methods)
               + (f" --branches {b} --branch-budget {bb}" if "branches" in methods else ""))
    alone = "alone (one roll-out, pruned)"
    if "policy" not in methods and policy.exists():
        # This policy's single roll-out where the run already measured it (the shipped seed's `policy`
        # rows, the other seeds' `--stage seeds` rows), found by the file's digest and not re-measured:
        # a seed's branches then sit beside what the same seed gets alone.
        digest = file_digest(policy)
        for tag in ("policy", *(f"seed{s}" for s in SEEDS)):  # --stage seeds: every seed but the shipped one
            rows = work.load(f"eval-{tag}") or {}
            if rows and all(r.get("basis") == digest for r in rows.values()):
                methods = {alone: rows, **methods}
                break
    groups = {m: eval_groups(work, rows) for m, rows in methods.items()}
    data = {"command": command, "policy": rel(policy), "target": C.TARGET or "cpu", "groups": groups}
    names = [g for g in ("llm", "llm_spmd", "shared") if any(g in v for v in groups.values())]
    lines = [f"# `{rel(policy)}` on the work directory's test modules and the real LLM steps", "",
             f"Made by `{command}` on {os.cpu_count()} shared CPUs (work directory `{rel(work.root)}`; the rows of "
             "each method are kept there, each measured on its own cold cache). Judged by XLA's "
             f"{'CPU' if not C.TARGET else C.TARGET} pipeline on final-ops, nothing timed, answers not validated here. "
             "Fractions of the search's gain per module, mean (pooled in brackets); compiled steps per module.", "",
             "| method | " + " | ".join(f"{g} ({next(v[g]['modules'] for v in groups.values() if g in v)})"
                                       for g in names) + " |",
             "|---|" + "---:|" * len(names)]
    for m, v in groups.items():
        cells = [f"{fmt_value(v[g]['mean_fraction'])} ({fmt_value(v[g]['pooled_fraction'])}) at {v[g]['steps']:.1f}" if g in v else "-"
                 for g in names]
        lines.append(f"| {m}{f' (-O branches={b} --budget {bb})' if m == 'branches' else ''} | " + " | ".join(cells) + " |")
    selected = work.load("select") or {}
    if selected.get("rows") and policy.exists():
        # The selection's criterion for this policy: it can be set beside the run's choice (an older
        # shipped policy against a retraining, say) without looking at the test modules.
        cached = work.load("eval-held-out") or {}
        column = "policy-" + file_digest(policy)
        seed = int(selected.get("seed", SEEDS[0]))
        chosen = selected["chosen"] if seed == SEEDS[0] else f"seed{seed}"
        # held_out_rows rolls out only the columns the rows lack (the chosen seed's when the selection kept none)
        rows = held_out_rows(work, {column: policy, chosen: work.seed_policy(selected["chosen"], seed)}, cached)
        work.save("eval-held-out", cached)
        means, pooled = validation_scores(rows, {"policy": column, "chosen": chosen})
        data["held_out"] = {"modules": len(rows), "pooled": pooled, "mean": means, "chosen": selected["chosen"],
                            "seed": selected.get("seed")}
        lines += ["", f"On the selection's {len(rows)} held-out train-split modules (the criterion the run's selection "
                  f"uses), this policy recovers {fmt_value(pooled['policy'])} of the beam-search expert's gain, pooled "
                  f"({fmt_value(means['policy'])} mean); the run's selected `{selected['chosen']}` (PPO seed "
                  f"{selected.get('seed')}) {fmt_value(pooled['chosen'])} ({fmt_value(means['chosen'])})."]
    return write(out, "eval", data, "\n".join(lines), Provenance.now(target=C.TARGET or "cpu"), indent=1)


def branches_tag(work: Work, policy: Path) -> str:
    """Where the branches method keeps one policy's rows (and random@branches its own, per seed)."""
    b, bb = work.params.get("branches", BRANCHES), work.params.get("branch_budget", BRANCH_BUDGET)
    return f"branches-{policy.stem}" + ("" if (b, bb) == (BRANCHES, BRANCH_BUDGET) else f"-{b}b{bb}")


def eval_groups(work: Work, rows: dict) -> dict:
    """A method's rows against the search's, by group (the test modules of each family, the shared real
    steps): the figures the tables of docs/policies.md quote."""
    search = work.load("eval-search") or {}
    groups: dict[str, list] = {}
    for name, ref in search.items():
        if name in rows:
            group = "shared" if ref["split"] == "shared" else "llm_spmd" if name.startswith("llm_spmd_") else "llm"
            groups.setdefault(group, []).append((ref["default"] - rows[name]["cost"], ref["default"] - ref["cost"],
                                                 rows[name]["steps"]))
    out = {}
    for group, v in groups.items():
        mean, pooled = fractions((g, c) for g, c, _ in v)
        out[group] = {"modules": len(v), "mean_fraction": mean, "pooled_fraction": pooled,
                      "steps": statistics.mean(st for _, _, st in v)}
    return out
