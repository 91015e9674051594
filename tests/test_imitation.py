"""Demonstrations, behaviour cloning and the imitation term kept during PPO (real XLA passes, small modules)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import autotune
from autotune.errors import BadInput
from conftest import SMALL
from test_ppo import MAML, needs_torch

MAX_LENGTH = 3


def _sources(engine):
    from autotune.core.tuner import evaluation_session
    from autotune.rl.env import EpisodeSource

    return [EpisodeSource(evaluation_session(engine, autotune.load(p)), p.stem) for p in (SMALL, MAML)]


@pytest.fixture(scope="module")
def demos(engine):
    """Two real demonstrations rolled through the environment: two passes on one module, one on the other."""
    from autotune.rl.env import PassOrderingEnv
    from autotune.rl.imitation import demonstration_pairs

    actions = engine.pipeline.passes()
    env = PassOrderingEnv(_sources(engine), actions, max_length=MAX_LENGTH)
    best = {0: ("algsimp", "cse"), 1: ("dot_decomposer",)}
    return env, demonstration_pairs(env, best)


def test_demonstrations_are_one_pair_per_pass_then_stop_in_the_envs_layout(demos, tmp_path):
    from autotune.rl.imitation import Demonstrations

    env, pairs = demos
    assert len(pairs) == 3 + 2 and pairs.stop_pairs == 2  # both sequences end before the horizon
    assert pairs.observations.shape == (5, env.obs_size)
    assert [env.actions[a] if a < env.stop else "STOP" for a in pairs.actions] == [
        "algsimp", "cse", "STOP", "dot_decomposer", "STOP"]
    # The second pair is observed after algsimp: its history coordinate says so, the first's does not.
    applied = env.observation_names.index("applied:algsimp")
    assert pairs.observations[0, applied] == 0 and pairs.observations[1, applied] > 0
    path = tmp_path / "d.npz"
    pairs.save(path)
    back = Demonstrations.load(path)
    assert np.array_equal(back.observations, pairs.observations) and np.array_equal(back.actions, pairs.actions)
    assert back.observation_names == pairs.observation_names and back.action_names == pairs.action_names


def test_another_layout_or_a_bad_term_is_refused(demos, tmp_path):
    from autotune.rl.imitation import Demonstrations, ImitationTerm

    env, pairs = demos
    other = Demonstrations(pairs.observations, pairs.actions, tuple(reversed(pairs.observation_names)),
                           pairs.action_names)
    with pytest.raises(BadInput, match="observation layout"):
        other.check_layout(env.observation_names, env.actions)
    with pytest.raises(BadInput, match="action vocabulary"):
        pairs.check_layout(env.observation_names, env.actions[1:])
    with pytest.raises(BadInput, match="weight must be positive"):
        ImitationTerm(pairs, weight=0.0)
    with pytest.raises(BadInput, match="steps must be at least 1"):
        ImitationTerm(pairs, steps=0)
    (tmp_path / "bad.npz").write_bytes(b"not numpy")
    with pytest.raises(BadInput, match="not a demonstrations file"):
        Demonstrations.load(tmp_path / "bad.npz")


@pytest.mark.slow
@needs_torch
def test_the_term_keeps_ppo_near_the_demonstrations(engine, demos, tmp_path):
    """The same PPO fine-tuning from the same behaviour-cloned start, with and without the term: with
    it the demonstrations stay the policy's choices (lower cross-entropy, every pair still its most
    likely action); the sidecar records the term; DQN cannot take one."""
    from stable_baselines3 import PPO

    from autotune.rl.imitation import ImitationTerm, accuracy, behaviour_cloning, cross_entropy
    from autotune.rl.train import make_model, train_policy

    env, pairs = demos
    hp = {"n_steps": 32, "batch_size": 16, "n_epochs": 10, "learning_rate": 3e-3, "gamma": 0.99,
          "gae_lambda": 0.95, "ent_coef": 0.05, "clip_range": 0.2, "net_arch": 64}
    start = make_model("ppo", env, 0, hp)
    fit = behaviour_cloning(start.policy, pairs, epochs=200)
    assert fit["train_accuracy"] == 1.0 and fit["loss_last"] < fit["loss_first"]
    start.save(str(tmp_path / "bc.zip"))
    modules = [autotune.load(SMALL), autotune.load(MAML)]
    options = {k: v for k, v in hp.items() if k != "net_arch"}
    runs = {}
    for name, term in (("plain", None), ("term", ImitationTerm(pairs, weight=1.0, steps=10))):
        stats = train_policy(engine, modules, tmp_path / f"{name}.zip", timesteps=96, seed=0, max_length=MAX_LENGTH,
                             options=options, init=tmp_path / "bc.zip", imitation=term)
        runs[name] = PPO.load(str(tmp_path / f"{name}.zip"), device="cpu").policy
        if term is not None:
            assert stats["imitation_term"]["updates"] == 3  # after each of the 3 PPO updates (the last at the end)
            meta = json.loads((tmp_path / "term.zip.json").read_text())
            assert meta["imitation_term"] == {"weight": 1.0, "steps": 10, "pairs": 5, "stop_pairs": 2}
        else:
            assert stats["imitation_term"] is None
    ce = {k: float(cross_entropy(p, pairs).detach()) for k, p in runs.items()}
    assert ce["term"] < ce["plain"], ce
    assert accuracy(runs["term"], pairs) == 1.0
    with pytest.raises(BadInput, match="policy-gradient"):
        train_policy(engine, modules, tmp_path / "dqn.zip", timesteps=8, algo="dqn", max_length=MAX_LENGTH,
                     imitation=ImitationTerm(pairs))
