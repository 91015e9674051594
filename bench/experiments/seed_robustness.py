#!/usr/bin/env python
"""Does the policy's quality depend on the PPO seed, with and without an imitation term kept during PPO?

    python bench/experiments/seed_robustness.py --quick [--spmd] [--weights 0.1,0.3,1] [--bc-steps 10]

Issue 31: the recipe of ``bench/learning.py`` (behaviour cloning on a beam search's winners, then
PPO fine-tuning) gives policies whose result on unseen steps depends on PPO's seed. This script
takes a finished ``bench/learning.py`` work directory (same ``--quick``/``--spmd``/``--target``),
its selected variant (reward and length) and its demonstrations, and trains that variant again
with PPO seeds 0, 1, 2 with a behaviour-cloning term kept during PPO
(``autotune.rl.imitation.ImitationTerm``: after each PPO update, ``--bc-steps`` gradient steps of
``weight x`` the demonstrations' cross-entropy), once per ``--weights`` value.

The weight is chosen on the selection stage's held-out TRAIN-split modules only, by the worst of
the three seeds' pooled fractions of the expert's gain (the criterion a seed-robust recipe should
meet: whichever seed a retraining draws). Then every seed of every weight, and the recipe's own
seeds without the term, are rolled out once (``--budget 4``, pruned, as ``autotune run --strategy
ppo`` returns them) on the work directory's test modules and the shared real LLM steps, each seed
on its own cold cache, against the work directory's search ceiling.

Writes ``<out>/seed_robustness.md`` and ``.json`` (``--out``: results/ for the llm work directory,
results/learning-spmd/ with ``--spmd``, results/learning-<target>/ with ``--target``). Nothing is
timed; final-ops of XLA's pipeline for the work directory's target, answers not validated here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autotune.core.engine import open_engine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: the harness
from harness import LLM_STEPS as SHARED_LLM, REAL_LLM as SHARED, Provenance, require, write  # noqa: E402
import learn as L  # noqa: E402

SEEDS = L.SEEDS
DEFAULT_WEIGHTS = (0.1, 0.3, 1.0)
DEFAULT_BC_STEPS = 10


def variant_name(chosen: str, weight: float, steps: int) -> str:
    return f"{chosen}-bc{weight:g}x{steps}"


def policy_path(work, name: str, seed: int) -> Path:
    return work.root / f"{name}-seed{seed}.zip"


def train_seeds(work, chosen: str, recipe: dict, weights, steps: int) -> dict[str, dict[int, Path]]:
    """Every (weight, seed) policy, trained unless already in the work directory."""
    out: dict[str, dict[int, Path]] = {}
    from autotune.rl.imitation import ImitationTerm

    with open_engine(work.db("train"), workers=2, target=L.common.TARGET) as ev:
        demos = L.demonstration_data(ev, work)
        for weight in weights:
            term = ImitationTerm(demos, weight=weight, steps=steps)
            name = variant_name(chosen, weight, steps)
            out[name] = {}
            for seed in SEEDS:
                path = policy_path(work, name, seed)
                if not path.exists():
                    L.log(f"bc: {name} with PPO seed {seed}")
                    stats = L.fine_tune(ev, work, path, recipe["timesteps"], recipe["reward"], seed=seed,
                                        imitation=term)
                    t = stats["imitation_term"]
                    L.log(f"bc: {path.name}: {stats['learn_seconds']:.0f}s, {t['updates']} imitation updates, "
                          f"demonstrations' cross-entropy {t['loss_last']:.3f}")
                out[name][seed] = path
    return out


def validation(work, policies: dict[str, dict[int, Path]], chosen: str) -> dict:
    """Pooled and mean fractions of the expert's gain on the selection's held-out train modules, per
    (variant, seed); the recipe's own seeds come from the selection stage's rows."""
    trained = {(name, seed): (f"{name}-seed{seed}", path) for name, seeds in policies.items()
               for seed, path in seeds.items()}
    columns = {(chosen, k): (chosen if k == SEEDS[0] else f"seed{k}") for k in SEEDS}
    columns.update({key: column for key, (column, _) in trained.items()})
    cached = work.load("bc-validation") or {}
    rows = L.held_out_rows(work, dict(trained.values()), cached)
    work.save("bc-validation", cached)
    missing = [c for c in columns.values() if any(c not in r for r in rows.values())]
    if missing:
        raise SystemExit(f"error: selection rows lack {missing[0]} (run bench/learning.py --stage select)")
    means, pooled = L.validation_scores(rows, {f"{n}|{s}": c for (n, s), c in columns.items()})
    out: dict = {}
    for (name, seed) in columns:
        out.setdefault(name, {})[seed] = {"pooled_fraction": pooled[f"{name}|{seed}"], "mean_fraction": means[f"{name}|{seed}"]}
    return out


def test_rows(work, chosen: str, policies: dict[str, dict[int, Path]], branches: int = 1, budget: int = 4) -> dict:
    """Roll-outs on the test modules and shared steps, per (variant, seed), each on its own cold cache
    (``branches`` > 1: the roll-out and the policy's next most likely first passes within ``budget``,
    ``-O branches``)."""
    modules = [(x, "test") for x in work.test_set()] + [(SHARED / f, "shared") for f in SHARED_LLM]
    all_policies = {chosen: {k: work.seed_policy(chosen, k) for k in SEEDS}, **policies}
    work.params.update(branches=branches, branch_budget=budget)  # what evaluate_modules' branches method reads
    out: dict = {}
    for name, seeds in all_policies.items():
        for seed, path in seeds.items():
            if not path.exists():
                raise SystemExit(f"error: no {L.rel(path)} (run bench/learning.py --stage select first)")
            tag = f"rollout-{name}-seed{seed}" + (f"-{branches}b{budget}" if branches > 1 else "")
            rows = work.load(f"eval-{tag}") or {}
            L.evaluate_modules(work, "branches" if branches > 1 else "seed", modules, path, None, rows, {}, tag=tag)
            out.setdefault(name, {})[seed] = L.eval_groups(work, rows)
    return out


def choose(val: dict, names) -> str:
    """The variant whose worst seed has the highest pooled validation fraction (ties: the first, so
    the recipe without the term when it is listed first)."""
    return max(names, key=lambda n: round(min(v["pooled_fraction"] for v in val[n].values()), 6))


def pct(x) -> str:
    return "-" if x is None else f"{x:.0%}"


def markdown(data: dict) -> str:
    groups = data["groups"]
    lines = [
        "# Seed robustness: the learning recipe with and without an imitation term during PPO",
        "",
        f"Made by `{data['command']}` on {data['machine']} with `{data['version']}` "
        f"(work directory `{data['work']}`, {'--quick' if data['quick'] else 'full'} scale; target "
        f"{data['target']}). Final-ops of XLA's pipeline for that target, nothing timed, answers compared on "
        "final-ops and not validated here; " + (
            "one roll-out per module (`--budget 4`, pruned)." if data["branches"] == 1 else
            f"on the test modules and shared steps, `-O branches={data['branches']} --budget {data['branch_budget']}` "
            "per module (the roll-out, then the policy's next most likely first passes; pruned); on the held-out "
            "train modules, one roll-out."),
        "",
        f"* **Recipe**: the work directory's selected variant `{data['chosen']}` (PPO {data['recipe']['timesteps']} "
        f"steps, reward `{data['recipe']['reward']}`, from the same imitation start), trained with PPO seeds "
        f"{', '.join(map(str, SEEDS))}.",
        f"* **Imitation term** (`autotune.rl.imitation.ImitationTerm`): after each PPO update, {data['bc_steps']} "
        "full-batch gradient steps of weight x the cross-entropy of the demonstrations' "
        f"{data['pairs']} (observation, action) pairs, with the policy's own optimizer; weights tried: "
        f"{', '.join(f'{w:g}' for w in data['weights'])}.",
        "* **Choice**: on the selection stage's held-out TRAIN-split modules only, among the recipe without the term "
        "and each weight, the one whose WORST seed has the highest pooled fraction of the beam-search expert's gain: "
        f"**{data['selected']}**.",
        "",
        "## Fraction of the gain recovered, per seed",
        "",
        "Validation: the expert's gain on held-out train modules (pooled; mean of fractions in brackets). "
        "The other columns: the search ceiling's gain (mean of per-module fractions; pooled in brackets).",
        "",
        "| variant | seed | validation | " + " | ".join(f"{g} ({data['group_sizes'][g]})" for g in groups) + " |",
        "|---|---:|---:|" + "---:|" * len(groups),
    ]
    for name in [data["chosen"], *data["variants"]]:
        for seed in SEEDS:
            v = data["validation"][name][str(seed)]
            cells = []
            for g in groups:
                r = data["test"][name][str(seed)].get(g)
                cells.append("-" if r is None else f"{pct(r['mean_fraction'])} ({pct(r['pooled_fraction'])})")
            tag = (" (without the term)" if name == data["chosen"] else "") + (" (selected)" if name == data["selected"] else "")
            lines.append(f"| `{name}`{tag} | {seed} | {pct(v['pooled_fraction'])} ({pct(v['mean_fraction'])}) | "
                         + " | ".join(cells) + " |")
    lines += ["", "## Spread across the three seeds (max - min of the mean of fractions)", "",
              "| variant | validation (pooled) | " + " | ".join(groups) + " | worst seed on each group |",
              "|---|---:|" + "---:|" * len(groups) + "---|"]
    for name, s in data["spread"].items():
        lines.append(f"| `{name}` | {s['validation']:.0%} | " + " | ".join(
            f"{s['groups'][g]:.0%}" if g in s["groups"] else "-" for g in groups) + " | " + ", ".join(
            f"{g} {pct(s['worst'][g])}" for g in groups if g in s["worst"]) + " |")
    lines += ["", "## Verdict", "", data["verdict"], ""]
    return "\n".join(lines)


def spread(val: dict, test: dict, name: str) -> dict:
    vs = [v["pooled_fraction"] for v in val[name].values()]
    groups: dict = {}
    worst: dict = {}
    for g in sorted({g for s in test[name].values() for g in s}):
        xs = [test[name][s][g]["mean_fraction"] for s in test[name] if g in test[name][s]
              and test[name][s][g]["mean_fraction"] is not None]
        if xs:
            groups[g], worst[g] = max(xs) - min(xs), min(xs)
    return {"validation": max(vs) - min(vs), "groups": groups, "worst": worst}


def verdict(data: dict) -> str:
    if data["selected"] == data["chosen"]:
        best = max(data["variants"], key=lambda n: min(v["pooled_fraction"] for v in data["validation"][n].values()))
        base = data["spread"][data["chosen"]]
        return (f"The recipe without the term is chosen: its worst seed on the held-out train modules "
                f"({min(v['pooled_fraction'] for v in data['validation'][data['chosen']].values()):.0%}) is above every "
                f"weight's (best: `{best}`, {min(v['pooled_fraction'] for v in data['validation'][best].values()):.0%}). "
                "Its spread across seeds: " + "; ".join(
                    f"{g} {base['groups'][g]:.0%} (worst seed {base['worst'][g]:.0%})" for g in data["groups"]
                    if g in base["groups"]) + ". Three seeds per variant, one search draw as the ceiling.")
    base, sel = data["spread"][data["chosen"]], data["spread"][data["selected"]]
    parts = []
    for g in data["groups"]:
        if g in base["groups"] and g in sel["groups"]:
            parts.append(f"{g}: spread {base['groups'][g]:.0%} -> {sel['groups'][g]:.0%}, worst seed "
                         f"{base['worst'][g]:.0%} -> {sel['worst'][g]:.0%}")
    narrower = sum(sel["groups"].get(g, 1) < base["groups"].get(g, 0) for g in data["groups"])
    better_worst = sum(sel["worst"].get(g, 0) > base["worst"].get(g, 1) for g in data["groups"])
    return (f"With the term (`{data['selected']}`, chosen on held-out train modules) against the recipe without it: "
            + "; ".join(parts) + f". The spread across seeds is narrower on {narrower} of {len(data['groups'])} groups "
            f"and the worst seed better on {better_worst}. Three seeds per variant, one search draw as the ceiling.")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--quick", action="store_true", help="the --quick work directory of bench/learning.py")
    ap.add_argument("--spmd", action="store_true", help="the --spmd work directory (llm and llm_spmd)")
    ap.add_argument("--target", default=None, help="the --target work directory (e.g. h100)")
    ap.add_argument("--work", default=None, help="the work directory's parent (default: bench/learning.py's)")
    ap.add_argument("--weights", default=",".join(f"{w:g}" for w in DEFAULT_WEIGHTS),
                    help="imitation weights to try (comma-separated)")
    ap.add_argument("--bc-steps", type=int, default=DEFAULT_BC_STEPS, help="imitation steps after each PPO update")
    ap.add_argument("--branches", type=int, default=1,
                    help="roll out with -O branches=N on the test modules (the weight is still chosen on single "
                         "roll-outs)")
    ap.add_argument("--branch-budget", type=int, default=12, help="--budget of the branches roll-outs")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    try:
        weights = tuple(float(w) for w in args.weights.split(",") if w)
    except ValueError:
        ap.error(f"--weights: not numbers: {args.weights}")
    if not weights or min(weights) <= 0 or args.bc_steps < 1:
        ap.error("--weights must be positive numbers and --bc-steps at least 1")
    if args.branches < 1 or args.branch_budget < 4:
        ap.error("--branches must be at least 1 and --branch-budget at least 4")
    suffix = f"_br{args.branches}b{args.branch_budget}" if args.branches > 1 else ""
    tag = ""
    if args.spmd:
        L.FAMILIES.append("llm_spmd")
        tag = "learning-spmd"
    if args.target not in (None, "cpu"):
        L.common.TARGET = args.target
        tag = f"learning-{args.target.lower()}"
    parent = Path(args.work) if args.work else L.ROOT / ".autotune" / (tag or "learning")
    out = Path(args.out) if args.out else L.ROOT / "results" / tag if tag else L.ROOT / "results"
    params = dict(L.QUICK if args.quick else L.FULL)
    work = L.Work(parent / ("quick" if args.quick else "full"), params)
    selected = work.load("select") or {}
    chosen = selected.get("chosen")
    recipe = (selected.get("recipes") or {}).get(chosen or "", {})
    if not recipe.get("timesteps"):
        raise SystemExit(f"error: {L.rel(work.root)} has no selected PPO variant (run bench/learning.py first)")
    require([SHARED / f for f in SHARED_LLM], "real LLM step")
    policies = train_seeds(work, chosen, recipe, weights, args.bc_steps)
    val = validation(work, policies, chosen)
    selected_name = choose(val, [chosen, *policies])  # the recipe without the term competes too
    L.log("bc: worst seed's pooled validation fraction: " + ", ".join(
        f"{n} {min(v['pooled_fraction'] for v in val[n].values()):.0%}" for n in [chosen, *policies])
        + f" -> {selected_name}")
    test = test_rows(work, chosen, policies, args.branches, args.branch_budget if args.branches > 1 else 4)
    groups = sorted({g for n in test.values() for s in n.values() for g in s}, key=lambda g: (g == "shared", g))
    with open_engine(work.db("policy"), workers=1, target=L.common.TARGET) as ev:
        version = ev.version
    from autotune.rl.imitation import Demonstrations

    data = {
        "command": "python bench/experiments/seed_robustness.py" + " ".join(
            [""] + (["--quick"] if args.quick else []) + (["--spmd"] if args.spmd else [])
            + ([f"--target {args.target}"] if L.common.TARGET else []) + ([f"--work {args.work}"] if args.work else [])
            + ([f"--out {args.out}"] if args.out else []) + [f"--weights {args.weights}",
                                                                     f"--bc-steps {args.bc_steps}"]
            + ([f"--branches {args.branches} --branch-budget {args.branch_budget}"] if suffix else [])),
        "machine": "2 shared CPUs", "version": version, "work": L.rel(work.root), "quick": args.quick,
        "target": L.common.TARGET or "cpu", "chosen": chosen, "recipe": recipe, "weights": list(weights),
        "bc_steps": args.bc_steps, "branches": args.branches,
        "branch_budget": args.branch_budget if args.branches > 1 else 4, "pairs": len(Demonstrations.load(work.root / "demonstrations.npz")),
        "variants": list(policies), "selected": selected_name, "groups": groups,
        "group_sizes": {g: next(s[g]["modules"] for n in test.values() for s in n.values() if g in s) for g in groups},
        "validation": {n: {str(k): v for k, v in s.items()} for n, s in val.items()},
        "test": {n: {str(k): v for k, v in s.items()} for n, s in test.items()},
    }
    data["spread"] = {n: spread(val, test, n) for n in [chosen, *policies]}
    data["verdict"] = verdict(data)
    write(out, f"seed_robustness{suffix}", data, markdown(data), Provenance.now(target=L.common.TARGET or "cpu"))
    L.log(f"wrote {L.rel(out / f'seed_robustness{suffix}.md')}: {data['verdict']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
