#!/usr/bin/env python
"""A search-distilled policy (DAgger over the beam-search expert), and whether it depends on its seed.

    python bench/experiments/distill.py --quick [--spmd] [--iterations 2]

Issue 31 asks for training that does not depend on luck, e.g. DAgger or a search-distilled policy.
The recipe of ``bench/learning.py`` clones the beam search's winners (the states on the expert's
own path), then lets PPO explore; PPO's draws make the three seeds end tens of points apart.
DAgger (Ross, Gordon & Bagnell 2011) keeps the expert and removes PPO: roll the current policy
out deterministically on the training modules, ask the expert what to do in every state the
POLICY reached (also the states after its mistakes, which the demonstrations never show), add
those (observation, expert action) pairs to the demonstrations, and fit a fresh network to all of
them; repeat. Only the network's initialisation depends on the seed.

The expert at a state (a pass prefix ``p``): a width-``BEAM`` beam search over the demonstrations'
candidate passes continuing ``p`` up to ``MAX_LENGTH`` passes; its label is the first pass of the
best continuation when that lowers the episode's best-so-far final-ops (the reward the policy is
judged by), else STOP. Labels are kept in the work directory (``distill-labels.json``) and shared by
the seeds, and every expert evaluation lands in the training cache.

Seeds 0, 1, 2 are then rolled out once (``--budget 4``, pruned) like ``bench/experiments/seed_robustness.py``
does (held-out train modules, test modules, shared real steps) beside the recipe's own three PPO
seeds. Writes ``<out>/distill.md`` and ``.json``. Final-ops, nothing timed, not validated here.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from autotune.core.engine import open_engine
from autotune.core.module import load
from autotune.core.tuner import evaluation_session

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/: the harness
from harness import LLM_STEPS as SHARED_LLM, REAL_LLM as SHARED, Provenance, require, write  # noqa: E402
import learn as L  # noqa: E402
import seed_robustness as R  # noqa: E402


def expert_label(session, prefix: tuple[str, ...], candidates: tuple[str, ...]) -> str:
    """The expert's action at ``prefix``: the first pass of the best continuation
    (``learning.beam_search`` continuing the prefix) when it lowers the best final-ops seen along the
    prefix (the empty sequence's included), else ``STOP``."""
    best_so_far = min([session.empty_cost] + [session(prefix[:i]) for i in range(1, len(prefix) + 1)])
    cost, continuation = L.beam_search(session, candidates, prefix)
    return continuation[0] if continuation and cost < best_so_far else "STOP"


def visited_states(model, env, n_sources: int) -> list[tuple[int, tuple[str, ...], np.ndarray]]:
    """(source, prefix, observation) of every state a deterministic roll-out of ``model`` reaches."""
    out = []
    for i in range(n_sources):
        obs, _ = env.reset(options={"source": i})
        prefix: tuple[str, ...] = ()
        while True:
            out.append((i, prefix, obs))
            action = int(model.predict(obs, deterministic=True)[0])
            if action == env.stop:
                break
            obs, _, done, _, info = env.step(action)
            if info.get("failed") or done:
                break
            prefix = prefix + (env.actions[action],)
    return out


def distill(ev, work, seed: int, iterations: int, labels: dict) -> tuple[Path, list[dict]]:
    """DAgger from a fresh network of ``seed``: fit the demonstrations, then ``iterations`` rounds of
    roll-out, expert labels on the visited states, refit on everything. Returns the policy and a log."""
    from autotune.rl.imitation import Demonstrations, behaviour_cloning
    from autotune.rl.train import make_model, sidecar_path

    trained = work.load("train") or {}
    candidates = tuple(trained.get("candidates") or ())
    by_name = {x.stem: x for x in work.train_set()}
    names = list(trained["demonstrations"])
    sessions = [evaluation_session(ev, load(by_name[n])) for n in names]
    env, demos = L.demonstration_env(ev, sessions, trained["demonstrations"], work.params.get("stop_labels", True))
    hp = dict(L.HYPERPARAMS, gae_lambda=0.95, clip_range=0.2, net_arch=64)
    obs, acts = [demos.observations], [demos.actions]
    history = []
    model = None
    for it in range(iterations + 1):
        data = Demonstrations(np.concatenate(obs), np.concatenate(acts), demos.observation_names, demos.action_names)
        model = make_model("ppo", env, seed, hp)
        fit = behaviour_cloning(model.policy, data, seed=seed)
        entry = {"iteration": it, "pairs": len(data), "fit": fit["train_accuracy"]}
        if it < iterations:
            states = visited_states(model, env, len(sessions))
            new_obs, new_acts, disagree = [], [], 0
            for i, prefix, o in states:
                key = f"{names[i]}|{','.join(prefix)}"
                if key not in labels:
                    labels[key] = expert_label(sessions[i], prefix, candidates)
                label = labels[key]
                action = env.stop if label == "STOP" else env.actions.index(label)
                new_obs.append(o)
                new_acts.append(action)
                disagree += int(model.predict(o, deterministic=True)[0]) != action
            obs.append(np.asarray(new_obs, dtype=np.float32))
            acts.append(np.asarray(new_acts, dtype=np.int64))
            entry.update(states=len(states), disagree=disagree)
            work.save("distill-labels", labels)
        history.append(entry)
        L.log(f"distill: seed {seed} iteration {it}: {entry}")
    out = R.policy_path(work, f"distill{iterations}", seed)
    model.save(str(out))
    side = json.loads(sidecar_path(work.root / "imitation.zip").read_text())
    side.update(timesteps=0, seed=seed, note=f"search-distilled (DAgger, {iterations} iterations over the beam-search "
                                            "expert; bench/experiments/distill.py), no PPO", distill=history)
    sidecar_path(out).write_text(json.dumps(side, indent=2))
    return out, history


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--spmd", action="store_true")
    ap.add_argument("--iterations", type=int, default=2, help="DAgger rounds after the first fit")
    ap.add_argument("--work", default=None, help="the work directory's parent (default: bench/learning.py's)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.iterations < 0:
        ap.error("--iterations must be at least 0")
    tag = ""
    if args.spmd:
        L.FAMILIES.append("llm_spmd")
        tag = "learning-spmd"
    parent = Path(args.work) if args.work else L.ROOT / ".autotune" / (tag or "learning")
    out = Path(args.out) if args.out else (L.ROOT / "results" / tag if tag else L.ROOT / "results")
    work = L.Work(parent / ("quick" if args.quick else "full"), dict(L.QUICK if args.quick else L.FULL))
    selected = work.load("select") or {}
    chosen = selected.get("chosen")
    if not (work.load("train") or {}).get("demonstrations") or not chosen:
        raise SystemExit(f"error: {L.rel(work.root)} has no training and selection yet (run bench/learning.py)")
    require([SHARED / f for f in SHARED_LLM], "real LLM step")
    labels = work.load("distill-labels") or {}
    name = f"distill{args.iterations}"
    histories = {}
    with open_engine(work.db("train"), workers=2, target=L.common.TARGET) as ev:
        for seed in L.SEEDS:
            path = R.policy_path(work, name, seed)
            if path.exists():
                histories[seed] = json.loads(Path(str(path) + ".json").read_text())["distill"]
            else:
                histories[seed] = distill(ev, work, seed, args.iterations, labels)[1]
    named = {name: {k: R.policy_path(work, name, k) for k in L.SEEDS}}
    val = R.validation(work, named, chosen)
    test = R.test_rows(work, chosen, named)
    groups = sorted({g for n in test.values() for s in n.values() for g in s}, key=lambda g: (g == "shared", g))
    with open_engine(work.db("policy"), workers=1, target=L.common.TARGET) as ev:
        version = ev.version
    data = {
        "command": "python bench/experiments/distill.py" + (" --quick" if args.quick else "") + (" --spmd" if args.spmd else "")
                   + (f" --work {args.work}" if args.work else "") + (f" --out {args.out}" if args.out else "")
                   + f" --iterations {args.iterations}",
        "version": version, "work": L.rel(work.root), "chosen": chosen, "name": name, "groups": groups,
        "iterations": args.iterations, "labels": len(labels), "history": {str(k): v for k, v in histories.items()},
        "validation": {n: {str(k): v for k, v in s.items()} for n, s in val.items()},
        "test": {n: {str(k): v for k, v in s.items()} for n, s in test.items()},
        "spread": {n: R.spread(val, test, n) for n in (chosen, name)},
    }
    write(out, "distill", data, markdown(data), Provenance.now(target=L.common.TARGET or "cpu"))
    L.log(f"wrote {L.rel(out / 'distill.md')}")
    return 0


def markdown(data: dict) -> str:
    groups, chosen, name = data["groups"], data["chosen"], data["name"]
    lines = [
        "# A search-distilled policy (DAgger over the beam-search expert) against the PPO recipe, per seed", "",
        f"Made by `{data['command']}` on 2 shared CPUs with `{data['version']}` (work directory `{data['work']}`). "
        "CPU pipeline, final-ops, nothing timed, answers not validated here; one roll-out per module "
        "(`--budget 4`, pruned); fractions of the beam-search expert's gain on the selection's held-out train modules "
        "(validation, pooled; mean in brackets) and of the search ceiling's gain on the test modules and shared real "
        "steps (mean of fractions; pooled in brackets).", "",
        f"* `{name}`: behaviour cloning on the demonstrations, then {data['iterations']} DAgger rounds (deterministic "
        "roll-outs on the training modules, the beam-search expert's label in every state reached, refit from a "
        f"fresh network on all pairs); {data['labels']} expert labels in all; no PPO. Only the network's "
        "initialisation depends on the seed.",
        f"* `{chosen}`: the work directory's PPO recipe (imitation, then PPO), its three PPO seeds.", "",
        "| policy | seed | validation | " + " | ".join(f"{g}" for g in groups) + " |",
        "|---|---:|---:|" + "---:|" * len(groups),
    ]
    for n in (chosen, name):
        for seed in map(str, L.SEEDS):
            v = data["validation"][n][seed]
            cells = [("-" if (r := data["test"][n][seed].get(g)) is None else
                      f"{R.pct(r['mean_fraction'])} ({R.pct(r['pooled_fraction'])})") for g in groups]
            lines.append(f"| `{n}` | {seed} | {R.pct(v['pooled_fraction'])} ({R.pct(v['mean_fraction'])}) | "
                         + " | ".join(cells) + " |")
    lines += ["", "| policy | spread of validation | " + " | ".join(f"spread {g}" for g in groups)
              + " | worst seed |", "|---|---:|" + "---:|" * len(groups) + "---|"]
    for n, s in data["spread"].items():
        lines.append(f"| `{n}` | {s['validation']:.0%} | " + " | ".join(
            f"{s['groups'][g]:.0%}" if g in s["groups"] else "-" for g in groups) + " | " + ", ".join(
            f"{g} {R.pct(s['worst'][g])}" for g in groups if g in s["worst"]) + " |")
    lines += ["", "DAgger rounds (pairs fitted, states reached by the policy, of which the expert disagreed with it):", ""]
    for seed, hist in data["history"].items():
        lines.append(f"* seed {seed}: " + "; ".join(
            f"round {h['iteration']}: {h['pairs']} pairs, fit {h['fit']:.0%}"
            + (f", {h['states']} states, {h['disagree']} disagreements" if "states" in h else "") for h in hist))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
