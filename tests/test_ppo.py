"""The pass-ordering environment, the PPO strategy and policy training (real compiler, small budgets)."""

from __future__ import annotations

import json
import shutil
import warnings

import pytest
import torch

import autotune
from autotune.errors import BadInput
from conftest import DATA, GPT2, SMALL, run_cli

MAML = DATA / "real" / "hloenv_maml_train_step.hlo"
TD_TARGET = DATA / "real" / "hloenv_jaxrl_td_target.hlo"


def _env(engine, path, budget=200, **kw):
    from autotune.rl.env import PassOrderingEnv
    from autotune.core.tuner import evaluation_session

    session = evaluation_session(engine, autotune.load(path), budget=budget)
    return PassOrderingEnv([session], engine.pipeline.passes(), **kw), session


def test_check_env_passes_on_a_real_module(engine):
    from stable_baselines3.common.env_checker import check_env

    env, session = _env(engine, SMALL, max_length=4, shaping=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any checker warning fails the test
        check_env(env, warn=True)
    assert env.action_space.n == len(engine.pipeline.passes()) + 1
    assert env.observation_space.shape == (env.obs_size,)
    assert session.remaining < 200  # the checker's steps were real evaluations


def test_registered_with_gymnasium(engine):
    import gymnasium

    from autotune.rl.env import ENV_ID, register
    from autotune.core.tuner import evaluation_session

    register()  # a second registration is harmless
    session = evaluation_session(engine, autotune.load(SMALL), budget=20)
    env = gymnasium.make(ENV_ID, sources=[session], actions=engine.pipeline.passes(), max_length=2)
    obs, info = env.reset(seed=1)
    assert env.observation_space.contains(obs) and info["cost"] == session.empty_cost


def test_shaping_is_gamma_phi_next_minus_phi_on_a_real_step(engine):
    gamma, wf, wt = 0.9, 0.5, 0.5
    env, session = _env(engine, SMALL, max_length=4, shaping=True, gamma=gamma, w_flops=wf, w_transcendentals=wt)
    env.reset(seed=0)
    m0 = session.input_metrics
    c0 = session.empty_cost  # the empty sequence, free of budget

    def phi(m):
        return wf * (1 - m.flops / m0.flops) + wt * (1 - m.transcendentals / m0.transcendentals)

    assert phi(m0) == 0.0  # the start has zero potential: stopping at once earns nothing

    # cse merges the duplicated exponential: transcendentals halve, so the potential rises.
    _, reward, terminated, _, info = env.step(env.actions.index("cse"))
    m1 = session.metrics(("cse",))
    assert not terminated and m1.transcendentals < m0.transcendentals
    base = (c0 - session.history[-1].cost) / c0
    assert info["base_reward"] == pytest.approx(base)
    assert info["shaping"] == pytest.approx(gamma * phi(m1) - phi(m0))
    assert info["shaping"] > 0
    assert reward == pytest.approx(base + gamma * phi(m1) - phi(m0))

    # STOP ends the episode; the terminal state's potential is 0, so the shaping returns -Phi(s).
    _, reward, terminated, _, info = env.step(env.stop)
    assert terminated and info["base_reward"] == 0.0
    assert reward == pytest.approx(-phi(m1))


def test_reward_is_relative_cost_reduction(engine):
    env, session = _env(engine, MAML, max_length=3)
    env.reset(seed=0)
    c0 = env.cost
    _, reward, terminated, _, info = env.step(env.actions.index("tree_reduction_rewriter"))
    assert not terminated and info["cost"] < c0  # 126 -> 125 with jaxlib 0.10.2
    assert reward == pytest.approx((c0 - info["cost"]) / c0)
    env.step(env.actions.index("cse"))
    _, _, terminated, _, _ = env.step(env.actions.index("dce"))
    assert terminated  # max_length reached


def test_failed_step_ends_the_episode_with_a_penalty_and_keeps_the_state(engine):
    from autotune.rl.env import MIN_FAILURE_PENALTY

    env, session = _env(engine, GPT2, max_length=4)
    env.reset(seed=0)
    env.step(env.actions.index("cse"))
    before_obs, before_cost = env.observe(env.metrics, 1), env.cost
    # These passes error out on the GPT-2 step with jaxlib 0.10.2 (RunEvaluate returns failure_cost).
    for action in ("simplification", "gather_simplifier", "scatter_simplifier"):
        _, reward, terminated, _, info = env.step(env.actions.index(action))
        if info["failed"]:
            assert session.history[-1].ok is False
            assert terminated and reward <= -MIN_FAILURE_PENALTY
            assert info["sequence"] == ("cse",) and info["cost"] == before_cost
            assert (env.observe(env.metrics, 1) == before_obs).all()
            return
        env.reset(seed=0)
        env.step(env.actions.index("cse"))
    pytest.skip("none of these passes fails on GPT-2 with this XLA")


def test_ppo_spends_the_budget_exactly_and_is_deterministic(engine):
    from autotune.core.runs import RunStore
    from autotune.core.tuner import tune

    module = autotune.load(MAML)
    runs = [tune(engine, module, strategy="ppo", budget=30, seed=0, max_length=4, validate=False) for _ in range(2)]
    sequences = []
    for result in runs:
        assert result.evaluations == 30
        trials = RunStore(engine.cache).trials(result.run_id)
        assert len(trials) == 30
        sequences.append([t.sequence for t in trials])
    assert sequences[0] == sequences[1]
    assert len(set(sequences[0])) > 5  # it explores
    assert runs[0].best_cost <= runs[0].default_cost


def test_ppo_shaping_runs_within_budget(engine):
    from autotune.core.tuner import tune

    result = tune(engine, autotune.load(SMALL), strategy="ppo", budget=12, seed=1, max_length=3, validate=False,
                  options={"shaping": True})
    assert result.evaluations == 12


def test_ppo_rejects_unknown_and_bad_options():
    from autotune import strategy

    with pytest.raises(BadInput, match="unknown option 'bogus'"):
        strategy.create("ppo", bogus=1)
    with pytest.raises(BadInput):
        strategy.create("ppo", n_steps=0)
    with pytest.raises(BadInput):
        strategy.create("ppo", gamma=1.5)
    with pytest.raises(BadInput, match="no such policy"):
        strategy.create("ppo", policy="/nonexistent/p.zip")


@pytest.mark.parametrize("algo", ["a2c", "dqn"])
def test_other_algorithms_train_and_load_through_ppo(engine, tmp_path, algo):
    from autotune.rl.train import train_policy
    from autotune.core.tuner import tune

    out = tmp_path / f"{algo}.zip"
    stats = train_policy(engine, [autotune.load(SMALL)], out, timesteps=40, seed=0, algo=algo, max_length=3)
    assert out.is_file() and json.loads((tmp_path / f"{algo}.zip.json").read_text())["algo"] == algo
    assert stats["timesteps"] >= 40
    result = tune(engine, autotune.load(MAML), strategy="ppo", budget=8, seed=0, max_length=3, validate=False,
                  options={"policy": str(out)})
    assert result.evaluations == 8


def test_train_cli_then_zero_shot_on_an_unseen_module(tmp_path, db_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    shutil.copy(SMALL, corpus)
    shutil.copy(MAML, corpus)
    policy = tmp_path / "p.zip"
    proc = run_cli("train", "--strategy", "ppo", "--modules", str(corpus), "-o", str(policy), "--timesteps", "64",
                   "--json", db=db_path)
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout)
    assert stats["timesteps"] >= 64 and len(stats["modules"]) == 2
    meta = json.loads((tmp_path / "p.zip.json").read_text())
    assert meta["algo"] == "ppo" and meta["max_length"] == 16 and meta["actions"]

    proc = run_cli("run", "--strategy", "ppo", "--policy", str(policy), "--budget", "10", str(TD_TARGET),
                   "--no-validate", "--json", db=db_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["strategy"] == "ppo" and result["evaluations"] == 10

    # A policy trained over another action vocabulary is refused with one line and exit 2.
    bad = tmp_path / "bad.zip"
    shutil.copy(policy, bad)
    meta["actions"] = list(reversed(meta["actions"]))
    (tmp_path / "bad.zip.json").write_text(json.dumps(meta))
    proc = run_cli("run", "--strategy", "ppo", "--policy", str(bad), "--budget", "5", str(SMALL), "--no-validate",
                   db=db_path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "vocabulary differs" in proc.stderr, proc.stderr


def test_train_cli_bad_module_is_one_line_exit_2(tmp_path, db_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    shutil.copy(SMALL, corpus)
    shutil.copy(DATA / "bad" / "garbage.hlo", corpus)
    proc = run_cli("train", "--modules", str(corpus), "-o", str(tmp_path / "p.zip"), "--timesteps", "8", db=db_path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "garbage.hlo" in proc.stderr, proc.stderr
    proc = run_cli("train", "--modules", str(tmp_path / "missing"), "-o", str(tmp_path / "p.zip"), db=db_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr


def test_a_policy_that_only_stops_still_spends_the_budget(engine, tmp_path):
    """A transferred policy that always chooses STOP spends no evaluation when fine-tuned; the run
    then searches with PPO from scratch, so the user's budget is spent all the same."""
    from stable_baselines3 import PPO

    from autotune.rl.train import train_policy
    from autotune.core.tuner import tune

    out = tmp_path / "stop.zip"
    train_policy(engine, [autotune.load(SMALL)], out, timesteps=32, seed=0, algo="ppo", max_length=3)
    model = PPO.load(out, device="cpu")
    stop = model.action_space.n - 1
    with torch.no_grad():
        model.policy.action_net.bias[stop] = 1e4  # STOP with probability ~1, sampled or deterministic
    model.save(out)
    result = tune(engine, autotune.load(MAML), strategy="ppo", budget=12, seed=0, max_length=3, validate=False,
                  options={"policy": str(out)})
    assert result.evaluations == 12
    again = tune(engine, autotune.load(MAML), strategy="ppo", budget=12, seed=0, max_length=3, validate=False,
                 options={"policy": str(out), "finetune": False})
    assert again.evaluations == 0  # the roll-out alone: STOP at once
