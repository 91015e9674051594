"""Stage ``train``: demonstrations by beam search, imitation, PPO fine-tuning, and the roll-out helpers."""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path

from autotune.core.engine import open_engine
from autotune.core.module import load
from autotune.core.tuner import evaluation_session, tune
from autotune.strategy import SearchSpace

from learn import common as C
from learn.common import BEAM, FAMILIES, HYPERPARAMS, MAX_LENGTH, REWARD, Work, log, rel


# ---- stages ------------------------------------------------------------------------------------------
def demonstrations(ev, work: Work, paths: list[Path]) -> dict:
    """Per-module beam search on the training modules, over the passes that ever pay on them.

    The candidate passes are those whose single application lowers final-ops on one of the first
    ``probe_modules`` training modules (every one of the pipeline's passes is tried there; 0: on
    every training module, ``--probe-modules 0``, the default with ``--spmd``. Why: with ``--spmd`` the first 12
    training modules of the stratified order are all single-device ``llm`` ones, so the passes that
    pay only on partitioned steps, e.g. ``cse_barrier_expander``, were never candidates and never
    demonstrated); then, on
    every training module, a beam search of width ``BEAM`` over the candidates up to ``MAX_LENGTH``
    passes. Why a beam and not greedy: greedy keeps the single best first pass, and on LLM steps the
    best pair can start with a pass that is not the best alone, and greedy labels then teach a
    shorter, worse sequence (or STOP). The label of
    a module is the shortest sequence reaching its lowest final-ops (empty when nothing beats the
    default); that is what the policy imitates first.
    """
    p = work.params
    actions = ev.pipeline.passes()
    sessions = [evaluation_session(ev, load(x)) for x in paths]
    candidates: set[str] = set()
    for session in sessions[: p["probe_modules"] or len(sessions)]:
        c0 = session.empty_cost
        candidates.update(a for a in actions if session((a,)) < c0)
    candidates_t = tuple(a for a in actions if a in candidates)
    log(f"demos: {len(candidates_t)} candidate passes pay on the probe modules: {','.join(candidates_t)}")
    found = {x.stem: beam_search(session, candidates_t) for x, session in zip(paths, sessions)}
    best = {name: list(seq) for name, (_, seq) in found.items()}
    references = {name: cost for name, (cost, _) in found.items()}
    return {"candidates": list(candidates_t), "best": best, "references": references, "sessions": sessions}


def beam_search(session, candidates: tuple[str, ...], prefix: tuple[str, ...] = ()) -> tuple[float, tuple[str, ...]]:
    """(lowest final-ops, shortest sequence reaching it) of a width-``BEAM`` beam over ``candidates``
    up to ``MAX_LENGTH`` passes; ``(default, ())`` when nothing beats the default. With a ``prefix``
    (``bench/experiments/distill.py``'s expert at a state), the beam continues it up to ``MAX_LENGTH`` passes in
    all and returns the best continuation, ``(inf, ())`` when the prefix is at the horizon."""
    top: tuple[float, tuple[str, ...]] = (float("inf") if prefix else session.empty_cost, ())
    beam: list[tuple[str, ...]] = [()]
    for _ in range(MAX_LENGTH - len(prefix)):
        trials = sorted({(session(prefix + q + (a,)), q + (a,)) for q in beam for a in candidates},
                        key=lambda t: (t[0], len(t[1]), t[1]))
        if not trials:
            break
        top = min(top, trials[0], key=lambda t: (t[0], len(t[1])))
        beam = [q for _, q in trials[:BEAM]]
    return top


def imitate(ev, demos: dict, out: Path, seed: int = 0, stop_labels: bool = True, noise: float = 0.0,
            init: Path | None = None) -> dict:
    """Behaviour cloning: fit a fresh PPO network's policy to the demonstrations (then PPO fine-tunes it).

    Each demonstration is rolled through the environment (same observation as training and use):
    (observation, next pass) for every pass of the module's best sequence, then (observation, STOP)
    (``autotune.rl.imitation``; the pairs are kept as ``demonstrations.npz`` for the imitation term).
    Cross-entropy on the action distribution, full batch, Adam. ``stop_labels=False``
    (``--no-stop-labels``) leaves the STOP pairs out: under the best-so-far reward stopping only
    saves compiles, and the STOP labels teach the policy to stop right after the demonstration's
    winner (an experiment; the shipped policy keeps them). ``noise`` > 0 (``--obs-noise``) fits
    every epoch on the module-composition coordinates (opcode, loop and structural fractions)
    multiplied by ``exp(noise * N(0, 1))``, a fresh draw per coordinate and sample: a network
    fitted to exact fractions can key on one incidental coordinate (the share of ``convert`` in
    loop bodies) that an unseen model has at another value; the noise makes no single fraction
    decisive (an experiment, chosen or not on held-out train-split modules). ``init`` (``--init``: a
    policy trained on another jaxlib, e.g. the shipped ``llm.zip``) gives the network its weights,
    re-laid by name onto this XLA's layout (``autotune.rl.transfer``), before the fit: the
    demonstrations of this jaxlib then adjust that policy instead of teaching a fresh one.
    """
    from autotune.rl.imitation import behaviour_cloning
    from autotune.rl.train import make_model

    env, pairs = demonstration_env(ev, demos["sessions"], demos["best"], stop_labels)
    pairs.save(out.parent / "demonstrations.npz")
    hp = {k: v for k, v in HYPERPARAMS.items()}
    hp.update(gae_lambda=0.95, clip_range=0.2, net_arch=64)
    model = make_model("ppo", env, seed, hp)
    if init is not None:
        from autotune.rl.train import start_from

        start_from(model, init, "ppo", env.actions, env.observation_names, ev.pipeline.target.key)
    composition = [n.split(":")[0] in ("opcode_fraction", "loop", "struct") for n in env.observation.names]
    fit = behaviour_cloning(model.policy, pairs, seed=seed, noise=noise, jitter_mask=composition)
    out.parent.mkdir(parents=True, exist_ok=True)
    model.save(str(out))
    return fit


def demonstration_env(ev, sessions, best: dict, stop_labels: bool = True):
    """(the environment, its ``Demonstrations``): each module's best sequence rolled through one
    ``PassOrderingEnv`` over ``sessions`` (in ``best``'s order), as training sees it."""
    from autotune.rl.env import EpisodeSource, PassOrderingEnv
    from autotune.rl.imitation import demonstration_pairs

    names = list(best)
    env = PassOrderingEnv([EpisodeSource(s, n) for s, n in zip(sessions, names)], ev.pipeline.passes(),
                          max_length=MAX_LENGTH, gamma=HYPERPARAMS["gamma"])
    return env, demonstration_pairs(env, {i: best[n] for i, n in enumerate(names)}, stop_labels)


def demonstration_data(ev, work: Work):
    """The training stage's demonstrations as ``Demonstrations`` (``demonstrations.npz``, rebuilt
    from ``train.json`` on the training cache when missing), for an imitation term during PPO."""
    from autotune.rl.imitation import Demonstrations

    path = work.root / "demonstrations.npz"
    if not path.exists():
        trained = work.load("train") or {}
        if not trained.get("demonstrations"):
            raise SystemExit("error: no demonstrations yet (run --stage train first)")
        by_name = {x.stem: x for x in work.train_set()}
        best = trained["demonstrations"]
        sessions = [evaluation_session(ev, load(by_name[n])) for n in best]
        demonstration_env(ev, sessions, best, work.params.get("stop_labels", True))[1].save(path)
    return Demonstrations.load(path)


def fine_tune(ev, work: Work, out: Path, steps: int, reward: str = REWARD, seed: int = 0,
              references: dict | None = None, start: Path | None = None, **extra) -> dict:
    """PPO from the imitation weights on the training modules, as every PPO variant here is trained
    (``references``: the demonstrations' best costs, by default the training stage's; ``start``:
    another starting policy, e.g. ``--init``'s, re-laid by name when it was trained on another jaxlib)."""
    from autotune.rl.train import train_policy

    if references is None:
        references = (work.load("train") or {}).get("references") or {}
    return train_policy(ev, [load(x) for x in work.train_set()], out, timesteps=steps, seed=seed,
                        max_length=MAX_LENGTH, options={**HYPERPARAMS, "reward": reward}, envs=work.params["envs"],
                        init=start or work.root / "imitation.zip", references=references, **extra)


def rollout(ev, module, policy: Path, prune: bool = True, branches: int = 1, budget: int = MAX_LENGTH,
            ensemble: str = "mean"):
    """ONE deterministic episode of ``policy`` on ``module``, no fine-tuning, and its best sequence
    pruned as every run's is (``loop.prune``: one backward sweep dropping passes whose removal does
    not worsen final-ops; at most one evaluation per pass, counted in the run's compiled steps): what
    ``autotune run --strategy ppo --budget 4 --max-length 4 -O finetune=false`` returns, validation
    aside. ``prune=False`` is the bare roll-out (``--no-prune``, the report's ``roll-out`` column).
    ``ensemble="each"`` with several comma-separated policies: each member's roll-out (a committee),
    ``budget`` covering them all."""
    return tune(ev, module, strategy="ppo", budget=budget, max_length=MAX_LENGTH, validate=False,
                prune=prune, options={"policy": str(policy), "finetune": False, "branches": branches,
                                      "ensemble": ensemble})


def random_until_steps(ev, session, until: int, seed: int = 0) -> tuple[list, list]:
    """Random sequences (max length ``MAX_LENGTH``) evaluated through ``session`` until the engine's
    compiled-step counter reaches ``until`` (at most 1000): random search at a budget of compiled
    steps, the currency every method here is compared in."""
    rng, space = random.Random(seed), SearchSpace(ev.pipeline.passes(), MAX_LENGTH)
    seqs, costs = [], []
    while ev.stats.steps_compiled < until and len(seqs) < 1000:
        seqs.append(space.random_sequence(rng))
        costs.append(session(seqs[-1]))
    return seqs, costs


def pruned(session, seqs: list, costs: list) -> tuple[tuple[str, ...] | None, float | None]:
    """The best of ``seqs`` (evaluated through ``session`` to ``costs``) pruned as ``tune`` prunes a
    run's answer (``loop.prune``), for the methods that evaluate sequences directly (fixed, random at a
    step budget), so that every method's answer gets the same last step; (None, None) without any."""
    from autotune.core.loop import prune

    if not costs:
        return None, None
    k = min(range(len(costs)), key=costs.__getitem__)
    if costs[k] >= session.empty_cost:  # a run prunes only a candidate that beats the default
        return tuple(seqs[k]), costs[k]
    seq, _, cost = prune(tuple(seqs[k]), costs[k], lambda q: (None, session(q)))
    return seq, cost


def fractions(pairs) -> tuple[float | None, float | None]:
    """(mean of per-module fractions, pooled fraction) of ``(gain, ceiling gain)`` pairs, over those
    whose ceiling gain is positive; ``(None, None)`` when there are none. The two averages every
    table of this benchmark reports."""
    pairs = [(g, c) for g, c in pairs if c > 0]
    if not pairs:
        return None, None
    return statistics.mean(g / c for g, c in pairs), sum(g for g, _ in pairs) / sum(c for _, c in pairs)


def stage_train(work: Work, policy: Path) -> dict:
    from autotune.rl.train import sidecar_path

    p = work.params
    paths = work.train_set()
    t0 = time.perf_counter()
    with open_engine(work.db("train"), workers=2, target=C.TARGET) as ev:
        log(f"train: demonstrations on {len(paths)} train-split modules")
        demos = demonstrations(ev, work, paths)
        demo_seconds, demo_steps = time.perf_counter() - t0, ev.stats.steps_compiled
        bc_zip = work.root / "imitation.zip"
        bc = imitate(ev, demos, bc_zip, stop_labels=p.get("stop_labels", True), noise=p.get("obs_noise", 0.0),
                     init=Path(p["init"]) if p.get("init") else None)
        log(f"train: imitation fit {bc['train_accuracy']:.0%} of {bc['samples']} (observation, action) pairs "
            f"({bc['stop_samples']} STOP)")
    log(f"train: PPO from the imitation weights, {p['timesteps']} timesteps, {p['envs']} envs")
    with open_engine(work.db("train"), workers=1, target=C.TARGET) as ev:
        training_set = {"suite": "autotune suite generate" + "".join(f" --family {f}" for f in FAMILIES),
                        "split": "train", "modules": len(paths),
                        "command": "python bench/learning.py"}
        stats = fine_tune(ev, work, policy, p["timesteps"], references=demos["references"],
                          training_set=training_set)
        # The imitation-only policy gets a sidecar too (the ablation the report shows next to PPO's).
        meta = json.loads(sidecar_path(policy).read_text())
        meta.update(timesteps=0, note="behaviour cloning only (no PPO): the ablation of bench/learning.py")
        sidecar_path(bc_zip).write_text(json.dumps(meta, indent=2))
        side = json.loads(sidecar_path(policy).read_text())
        side["imitation"] = {"candidates": demos["candidates"], **bc,
                             "demonstrations": {k: v for k, v in demos["best"].items()}}
        sidecar_path(policy).write_text(json.dumps(side, indent=2))
        compiled = ev.stats.steps_compiled
    stats.update(wall_seconds=time.perf_counter() - t0, policy=rel(policy), sidecar=rel(Path(str(policy) + ".json")),
                 train_modules=[x.name for x in paths], hyperparameters=HYPERPARAMS, max_length=MAX_LENGTH,
                 steps_compiled_main=compiled, demo_seconds=demo_seconds, demo_steps=demo_steps,
                 candidates=demos["candidates"], imitation=bc, beam=BEAM,
                 demonstrations=demos["best"], references=demos["references"], reward=REWARD)
    stats.pop("modules", None)
    work.save("train", stats)
    log(f"train: {stats['timesteps']} steps in {stats['learn_seconds']:.0f}s "
        f"({stats['steps_per_second']:.1f}/s), mean return of the last 20 episodes {stats['mean_return_last20']}")
    return stats
