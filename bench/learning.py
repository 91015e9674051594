#!/usr/bin/env python
"""Zero-shot learning on the LLM family: one policy roll-out against default, random, fixed and search.

    python bench/learning.py [--quick] [--stage all|train|select|fleet|eval|seeds|report] [--work DIR]

The experiment of issue 18 (the claim of the 2023 paper, on this XLA): a PPO policy trained on the
``llm`` family's train split orders passes on modules it has never seen, in ONE deterministic
roll-out. It is compared, on a sample of the family's test split and zero-shot on the three LLM
steps of ``tests/data/real-llm`` (never used for training), with:

* ``default``: XLA's default pipeline (no sequence);
* ``random@evals``: random search with as many evaluations as the roll-out made;
* ``random@steps``: random search until it has compiled as many pass steps as the roll-out did;
* ``random@4xsteps``: the same with four times the roll-out's compiled steps (the issue's goal: the
  policy needs at most a quarter of the steps random search needs for the same result, i.e. random
  search at 4x the policy's steps should not match it);
* ``fixed``: the best single sequence for the training split (a fleet run, ``greedy``, on the
  modules the policy trained on: what ``autotune run --modules DIR`` finds);
* ``search``: per-module search (``random``, the default strategy) at budget 200, the ceiling
  (``--quick``: budget 40, and fewer modules).

Model selection (``--stage select``) chooses the variant (imitation alone, PPO at several lengths,
the step-reward ablation) and then its PPO seed (0, 1, 2) on held-out TRAIN-split modules, by the
pooled fraction of a beam-search expert's gain; the test split and the shared modules never decide.

The ``policy`` column is what ``autotune run --strategy ppo --budget 4`` (and the JAX hook's
``use(policy=...)``) return: the roll-out's best sequence, pruned as every run's answer is (one
backward sweep dropping each pass whose removal does not worsen final-ops, ``loop.prune``); the
``roll-out`` column is the bare episode (``--no-prune``), the figure the issue's goal literally names.
Every other method's answer is pruned the same way, its compiles counted, so the comparison is
between what each method would hand a user. Every method's answer is the best module it evaluated, or
XLA's default when none beat it (each of them compiles its candidates, so each knows). Each method runs on its own cold cache, so its
compiled steps and seconds are what it would cost alone; steps count every compile the run made
(pass steps and the default pipeline after each distinct state). The gain of a method on a module
is ``default - method`` final-ops (instructions after the sequence and XLA's default pipeline);
"fraction of the ceiling" divides it by the search's gain, on modules where the search found one.

The trained policy is saved to ``autotune/policies/llm.zip`` (+ sidecar): ``python bench/learning.py``
is the command that retrains the shipped policy. Stages keep their results under ``--work``
(default ``.autotune/learning``, with the generated suite and one cache database per method), so a
stage can run as its own command and an interrupted run resumes. Writes ``results/learning.md``,
``results/learning.json`` and ``results/learning.png``.

Training choices (why): ``max_length`` 4 (the wins on LLM steps are 1-3 pass prefixes such as
``algsimp``, ``cse``, ``algsimp,cse``); reward = the best-so-far reward of ``autotune.rl.env``
(``reward="best"``: a step is paid what it lowers the episode's best final-ops, divided by the gain
the demonstrations' beam search found on that module, so an episode's return is the fraction of the
known gain it recovers, which is how the policy is judged; the plain step reward relative to the
module's size is trained too, as the ``ppo-1536-step`` ablation of the selection), no shaping (flops
barely move on these modules); PPO with rollouts of 32 steps per
environment, 2 environments in parallel (``autotune train --envs 2``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import REAL_LLM as SHARED, LLM_STEPS as SHARED_LLM, require
from learn import common as C
from learn.common import (BRANCH_BUDGET, BRANCHES, ENSEMBLE_DRAWS, FAMILIES, FULL, METHODS, POLICY, QUICK,
                          RANDOM_SEEDS, ROOT, TRAINING_SEEDS, Work, log, rel)
from learn.evaluate import eval_summary, stage_eval
from learn.report import report
from learn.seeds import ship_committee, stage_ensemble, stage_seeds
from learn.selection import stage_fleet, stage_select
from learn.train import stage_train


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--quick", action="store_true", help="fewer modules and steps, search budget 40 (say so)")
    ap.add_argument("--stage", choices=("all", "train", "select", "fleet", "eval", "seeds", "ensemble", "report", "ship"),
                    default="all", help="ensemble: not part of all (trains six more seeds)")
    ap.add_argument("--branches", type=int, default=BRANCHES, help="the branches method's -O branches")
    ap.add_argument("--branch-budget", type=int, default=BRANCH_BUDGET, help="the branches method's --budget")
    ap.add_argument("--methods", default=",".join(METHODS), help="eval stage: which methods (comma-separated; also `branches`)")
    ap.add_argument("--work", default=str(ROOT / ".autotune" / "learning"), help="suite, caches and stage results")
    ap.add_argument("--policy", default=None,
                    help="where the trained policy is written / read (default: the shipped one of the run's kind)")
    ap.add_argument("--out", default=str(ROOT / "results"))
    ap.add_argument("--timesteps", type=int, default=None, help="override the training steps")
    ap.add_argument("--train-modules", type=int, default=None, help="override the number of training modules")
    ap.add_argument("--probe-modules", type=int, default=None,
                    help="training modules on which every pass is tried alone to choose the demonstrations' "
                         "candidate passes (default 12; with --spmd 0: all of them)")
    ap.add_argument("--no-stop-labels", action="store_true",
                    help="imitation without the (observation, STOP) pairs (an experiment; see imitate)")
    ap.add_argument("--obs-noise", type=float, default=0.0,
                    help="imitation on jittered composition coordinates (an experiment; see imitate)")
    ap.add_argument("--init", default=None, metavar="POLICY",
                    help="start from this policy (e.g. autotune/policies/llm.zip, trained on another jaxlib): the "
                         "imitation fits on its weights re-laid by name, PPO also runs straight from it, and it is "
                         "itself a selection candidate, so a fine-tuning ships only where it beats it")
    ap.add_argument("--target", default=None,
                    help="learn for this target (e.g. h100): its own work directory, policy (autotune/policies/"
                         "llm-TARGET.zip) and reports (results/learning-TARGET/) unless given")
    ap.add_argument("--ship-committee", default=None, metavar="DIR",
                    help="with --stage ensemble (or ship, which only writes it): the first draw of seeds as a "
                         "committee directory (autotune/policies/llm-committee ships one)")
    ap.add_argument("--spmd", action="store_true",
                    help="train on the partitioned steps (llm_spmd) too: .autotune/learning-spmd, its llm-spmd.zip "
                         "(copied to autotune/policies/ by hand when it ships), results/learning-spmd/ unless given; "
                         "--probe-modules defaults to 0")
    args = ap.parse_args(argv)
    given_policy = args.policy or str(POLICY)
    asked = args.policy is not None  # an explicit --policy (even the shipped llm.zip) is never replaced
    args.policy = given_policy
    # A --work or --out given by hand is part of the command that remakes the reports (the kind's own are not).
    given_work = args.work != str(ROOT / ".autotune" / "learning")
    given_out = Path(args.out).resolve() != (ROOT / "results").resolve()
    if args.spmd:
        FAMILIES.append("llm_spmd")
        if args.probe_modules is None:  # the first 12 are single-device llm: see demonstrations
            args.probe_modules = 0
        if args.work == str(ROOT / ".autotune" / "learning"):
            args.work = str(ROOT / ".autotune" / "learning-spmd")
        if not asked:
            args.policy = str(Path(args.work) / "llm-spmd.zip")
        if Path(args.out).resolve() == (ROOT / "results").resolve():
            args.out = str(ROOT / "results" / "learning-spmd")
    if args.target not in (None, "cpu"):
        C.TARGET = args.target
        tag = args.target.lower()
        if args.work == str(ROOT / ".autotune" / "learning"):
            args.work = str(ROOT / ".autotune" / f"learning-{tag}")
        if not asked:
            args.policy = str(POLICY.with_name(f"llm-{tag}.zip"))
        if Path(args.out).resolve() == (ROOT / "results").resolve():
            args.out = str(ROOT / "results" / f"learning-{tag}")
        Path(args.out).mkdir(parents=True, exist_ok=True)
    require([SHARED / f for f in SHARED_LLM], "real LLM step")  # before hours of training, not after
    params = dict(QUICK if args.quick else FULL)
    if args.timesteps:
        params["timesteps"] = args.timesteps
    if args.train_modules:
        params["train_modules"] = args.train_modules
    if args.probe_modules is not None:
        if args.probe_modules < 0:
            ap.error("--probe-modules must be 0 (all) or positive")
        params["probe_modules"] = args.probe_modules
    params["stop_labels"] = not args.no_stop_labels
    params["branches"], params["branch_budget"] = args.branches, args.branch_budget
    if args.obs_noise:
        params["obs_noise"] = args.obs_noise
    if args.init:
        require([Path(args.init)], "starting policy")
        params["init"] = str(Path(args.init).resolve())
    work = Work(Path(args.work) / ("quick" if args.quick else "full"), params)
    policy = Path(args.policy)
    # The command that remakes this run's reports: the kind and the paths given by hand, then for a
    # retraining its options (the eval stage's reports add their own stage options to ``base``).
    where = ((f" --policy {rel(Path(given_policy))}" if asked else "")
             + (f" --work {rel(Path(args.work))}" if given_work else "")
             + (f" --out {rel(Path(args.out))}" if given_out else ""))
    base = ("python bench/learning.py" + (" --quick" if args.quick else "") + (" --spmd" if args.spmd else "")
            + (f" --target {args.target}" if C.TARGET else "") + where)
    command = base + "".join(
        f" --{k.replace('_', '-')} {v}" for k, v in (("timesteps", args.timesteps), ("train_modules", args.train_modules),
                                                     ("probe_modules", args.probe_modules))
        if v is not None) + (" --no-stop-labels" if args.no_stop_labels else "") + (
        f" --obs-noise {args.obs_noise}" if args.obs_noise else "") + (f" --init {rel(Path(args.init))}" if args.init else "")
    C.RETRAIN = command
    stale = ["policy", "roll-out", "imitation", "ppo", "random@evals", "random@steps", "random@4xsteps"]  # the old policies'
    stale += [f"random@{k}-s{seed}" for k in ("evals", "steps", "4xsteps") for seed in range(RANDOM_SEEDS)]
    stale += [f"seed{seed}" for seed in TRAINING_SEEDS]
    stale += [f"seed{seed}" for d in ENSEMBLE_DRAWS for seed in d]
    stale += [kind + "-".join(map(str, d)) for kind in ("ensemble", "committee") for d in ENSEMBLE_DRAWS]
    if args.stage in ("all", "train"):
        stage_train(work, policy)
        for old in work.root.glob("ppo-*.zip*"):  # the previous training's selection candidates
            old.unlink()
    if args.stage in ("all", "train", "select"):
        stage_select(work, policy)
        for tag in stale:
            for path in (work.stage(f"eval-{tag}"), Path(work.db(tag))):
                path.unlink(missing_ok=True)
    if args.stage in ("all", "fleet"):
        stage_fleet(work)
    methods = [m for m in args.methods.split(",") if m]
    if args.stage in ("all", "eval"):
        stage_eval(work, policy, methods)
    if args.stage == "eval":
        written = eval_summary(work, policy, Path(args.out), base, methods)
        if written:
            log(f"eval: wrote {rel(written)}")
    if args.stage in ("all", "seeds"):
        stage_seeds(work)
    if args.ship_committee and args.stage not in ("ensemble", "ship"):
        ap.error("--ship-committee goes with --stage ensemble (measure, then write) or --stage ship (write only)")
    if args.stage == "ship" and not args.ship_committee:
        ap.error("--stage ship writes --ship-committee DIR")
    if args.stage == "ensemble":
        stage_ensemble(work)
    if args.ship_committee:
        for path in ship_committee(work, Path(args.ship_committee), policy):
            log(f"{args.stage}: wrote {rel(path)}")
    if args.stage in ("all", "report", "ensemble"):
        report(work, Path(args.out), command, args.quick, policy)
    return 0


if __name__ == "__main__":
    sys.exit(main())