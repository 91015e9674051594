"""Stages ``seeds`` and ``ensemble``: the PPO seeds' spread, ensembles and the shipped committee."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from autotune.core.engine import open_engine

from harness import REAL_LLM as SHARED, LLM_STEPS as SHARED_LLM
from learn import common as C
from learn.common import ENSEMBLE_DRAWS, SEEDS, Work, log, rel
from learn.evaluate import branches_tag, evaluate_modules
from learn.selection import held_out_rows, validation_scores
from learn.train import fine_tune, fractions


def stage_seeds(work: Work) -> dict:
    """The selected variant's other PPO seeds (``stage_select`` trained them and shipped the one the
    validation set prefers), rolled out on the same modules as the shipped policy: the spread a
    retraining brings, and whether the validation's choice holds on the test split.

    PPO training here is meant to be deterministic for a seed (same imitation start, same cache
    values), so that what differs between training runs is the seed: its draws of modules, actions
    and minibatches. It was not across work directories: the ``--spmd`` recipe trained twice from
    scratch (the same 168 demonstration pairs, the same choice of variant and seed) gave different
    weights (seeds at 92/92/94% and 90/90/97% of the expert on the held-out modules), so a seed's
    figures are one training draw's, and the spread across seeds a lower bound on a retraining's.
    The imitation start is seed 0's for every seed; only PPO's own randomness changes. Each seed's roll-outs run on their own cold cache (``seed<N>.db``).
    """
    selected = work.load("select") or {}
    chosen, shipped = selected.get("chosen", ""), int(selected.get("seed", SEEDS[0]))
    if not (selected.get("recipes") or {}).get(chosen, {}).get("timesteps"):
        log(f"seeds: the shipped variant is {chosen or 'unknown'}, not a PPO fine-tuning: no seeds to compare")
        return {}
    modules = [(x, "test") for x in work.test_set()] + [(SHARED / f, "shared") for f in SHARED_LLM]
    out = {}
    for seed in SEEDS:
        if seed == shipped:  # its roll-outs are the report's policy column
            continue
        zip_path = work.seed_policy(chosen, seed)
        if not zip_path.exists():
            raise SystemExit(f"error: no {rel(zip_path)}; run --stage select first")
        rows = work.load(f"eval-seed{seed}") or {}
        evaluate_modules(work, "seed", modules, zip_path, None, rows, {}, tag=f"seed{seed}")
        out[seed] = rows
    return out


def stage_ensemble(work: Work) -> dict:
    """The selected variant trained with more PPO seeds, each rolled out alone and as ensembles of three
    (``ENSEMBLE_DRAWS``: the mean of the members' action probabilities, ``autotune.rl.ensemble``) on the
    same modules and against the same ceiling as the shipped policy. Why: one seed's policy can be
    lucky or not (the spread ``--stage seeds`` shows); the question is whether averaging three seeds
    makes the result not depend on which three. The same draws are also rolled out as committees
    (``-O ensemble=each``: each member's own roll-out, the best kept and pruned, at one roll-out's budget
    per member), which keep what each seed finds instead of averaging it away; and each seed alone with
    ``-O branches`` (``--branches``, ``--branch-budget``: its next most likely first passes too), the
    other way to try more than one roll-out, which needs no more training. Each method runs on its own
    cold cache."""
    selected = work.load("select") or {}
    chosen, recipe = selected.get("chosen", ""), (selected.get("recipes") or {}).get(selected.get("chosen", ""), {})
    if not recipe.get("timesteps"):
        raise SystemExit(f"error: the shipped variant is {chosen or 'unknown'}, not a PPO fine-tuning: no seeds")
    seeds = sorted({k for draw in ENSEMBLE_DRAWS for k in draw})
    with open_engine(work.db("train"), workers=2, target=C.TARGET) as ev:
        for seed in seeds:
            if not work.seed_policy(chosen, seed).exists():
                log(f"ensemble: {chosen} with PPO seed {seed}")
                fine_tune(ev, work, work.seed_policy(chosen, seed), recipe["timesteps"], recipe["reward"], seed=seed,
                          start=Path(recipe["start"]) if recipe.get("start") else None)
    modules = [(x, "test") for x in work.test_set()] + [(SHARED / f, "shared") for f in SHARED_LLM]
    shipped = int(selected.get("seed", SEEDS[0]))
    out = {}
    for seed in seeds:
        tag = "policy" if seed == shipped else f"seed{seed}"
        rows = work.load(f"eval-{tag}") or {}
        evaluate_modules(work, "seed", modules, work.seed_policy(chosen, seed), None, rows, {}, tag=tag)
        out[f"seed{seed}"] = rows
    for draw in ENSEMBLE_DRAWS:
        members = ",".join(str(work.seed_policy(chosen, k)) for k in draw)
        for kind, method in (("ensemble", "seed"), ("committee", "committee")):
            tag = kind + "-".join(map(str, draw))
            rows = work.load(f"eval-{tag}") or {}
            evaluate_modules(work, method, modules, members, None, rows, {}, tag=tag)
            out[tag] = rows
    for seed in seeds:  # each seed alone with -O branches: a seed-robust roll-out that needs one training
        path = work.seed_policy(chosen, seed)
        tag = branches_tag(work, path)
        rows = work.load(f"eval-{tag}") or {}
        evaluate_modules(work, "branches", modules, path, None, rows, {}, tag=tag)
        out[tag] = rows
    out["validation"] = seed_validation(work, chosen, seeds)
    return out


def ship_committee(work: Work, out: Path, policy: Path) -> list[Path]:
    """Write the first draw of ``ENSEMBLE_DRAWS`` (fixed before any result, so no draw is picked by its
    score) as a committee directory (``autotune.policies.members``): ``out/seedK.zip`` with sidecars
    saying what they are (how the start was made and the training set, as the selection stage gives the
    shipped ``policy``'s sidecar: a seed's own sidecar lacks them). ``--stage ensemble`` measured it as
    ``committee0-1-2``. Why a draw and not
    the best three seeds: choosing members by their test scores would make those scores no test."""
    import shutil

    from autotune.rl.train import sidecar_path

    selected = work.load("select") or {}
    chosen = selected.get("chosen", "")
    draw = ENSEMBLE_DRAWS[0]
    paths = [work.seed_policy(chosen, k) for k in draw]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise SystemExit(f"error: no seed policies {', '.join(missing)} (run --stage ensemble first)")
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.zip*"):
        old.unlink()
    written = []
    for seed, path in zip(draw, paths):
        target = out / f"seed{seed}.zip"
        shutil.copyfile(path, target)
        side = json.loads(sidecar_path(path).read_text())
        shipped = json.loads(sidecar_path(policy).read_text()) if sidecar_path(policy).exists() else {}
        side.update({k: shipped[k] for k in ("imitation", "training_set") if shipped.get(k) and not side.get(k)})
        side["seed"] = seed
        side["note"] = (f"member {draw.index(seed) + 1} of {len(draw)} of the committee {out.name} ({chosen}, PPO "
                        f"seeds {', '.join(map(str, draw))}): --policy {out.name} rolls out each member and keeps "
                        f"the best; written by {C.RETRAIN} --stage ship --ship-committee {rel(out)} from the seeds that work "
                        "directory's --stage select trains")
        sidecar_path(target).write_text(json.dumps(side, indent=2))
        written.append(target)
    return written


def seed_validation(work: Work, chosen: str, seeds: list[int]) -> dict:
    """Every seed's roll-outs on the selection stage's held-out train-split modules (its rows and
    expert, reused; the seeds it did not train are rolled out here), so that "train three seeds, ship
    the one validation prefers" can be measured for each draw of ``ENSEMBLE_DRAWS``."""
    column = {k: (chosen if k == SEEDS[0] else f"seed{k}") for k in seeds}
    rows = held_out_rows(work, {column[k]: work.seed_policy(chosen, k) for k in seeds})
    means, scores = validation_scores(rows, column)
    data = {"scores": {str(k): scores[k] for k in seeds}, "mean_fractions": {str(k): means[k] for k in seeds}}
    work.save("ensemble-validation", data)
    return data


def ensemble_spread(work: Work, summary: dict) -> dict:
    """Per single seed and per ensemble of ``ENSEMBLE_DRAWS``: mean and pooled fraction of the ceiling
    on each group, as ``seed_spread`` (empty when ``--stage ensemble`` has not run)."""
    selected = work.load("select") or {}
    shipped = int(selected.get("seed", SEEDS[0]))
    seeds = sorted({k for d in ENSEMBLE_DRAWS for k in d})
    stored = {f"seed{k}": "policy" if k == shipped else f"seed{k}" for k in seeds}
    stored.update({kind + "-".join(map(str, d)): kind + "-".join(map(str, d))
                   for kind in ("ensemble", "committee") for d in ENSEMBLE_DRAWS})
    if selected.get("chosen"):
        stored.update({f"branches{k}": branches_tag(work, work.seed_policy(selected["chosen"], k)) for k in seeds})
    out = {}
    for tag, name in stored.items():
        rows = work.load(f"eval-{name}") or {}
        if not rows:
            continue
        per_group = {}
        for label in ("test", "shared"):
            entries = [e for e in summary["per_module"] if e["split"] == label and e["module"] in rows]
            if entries:
                mean, pooled = fractions((e["default"] - rows[e["module"]]["cost"], e["ceiling_gain"]) for e in entries)
                per_group[label] = {"mean_fraction": mean, "pooled_fraction": pooled,
                                    "mean_steps": statistics.mean(rows[e["module"]]["steps"] for e in entries)}
        out[tag] = per_group
    return out


def seed_spread(work: Work, summary: dict) -> dict:
    """Per training seed, mean and pooled fraction of the ceiling on each group (the shipped seed's
    roll-outs are the policy column's), with the seed's validation score from ``stage_select``."""
    selected = work.load("select") or {}
    shipped = int(selected.get("seed", SEEDS[0]))
    runs = {seed: work.load("eval-policy" if seed == shipped else f"eval-seed{seed}") or {} for seed in SEEDS}
    out = {}
    for seed, rows in runs.items():
        if not rows:
            continue
        per_group = {"shipped": seed == shipped}
        validation = (selected.get("seed_scores") or {}).get(str(seed))
        if validation is not None:
            per_group["validation"] = {"mean_fraction": selected["seed_mean_fractions"][str(seed)],
                                       "pooled_fraction": validation}
        for label in ("test", "shared"):
            entries = [e for e in summary["per_module"] if e["split"] == label and e["module"] in rows]
            if not entries:
                continue
            mean, pooled = fractions((e["default"] - rows[e["module"]]["cost"], e["ceiling_gain"]) for e in entries)
            per_group[label] = {  # steps over every module of the group, as in the cost table
                "mean_fraction": mean, "pooled_fraction": pooled,
                "mean_steps": statistics.mean(rows[e["module"]]["steps"] for e in entries)}
        out[seed] = per_group
    return out
