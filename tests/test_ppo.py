"""The pass-ordering environment, the PPO strategy and policy training (real compiler, small budgets)."""

from __future__ import annotations

import json
import math
import shutil
import warnings

import importlib.util

import pytest

import autotune
from autotune.errors import BadInput
from conftest import DATA, GPT2, SMALL, run_cli

#: Training, fine-tuning and hand-edited SB3 policies need the ``xla-autotune[train]`` extra; the
#: environment's tests and the torch-free roll-outs (tests/test_policy_forward.py) do not.
HAS_TORCH = all(importlib.util.find_spec(m) is not None for m in ("torch", "stable_baselines3"))
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs torch and stable-baselines3 (xla-autotune[train])")
if HAS_TORCH:
    import torch

MAML = DATA / "real" / "hloenv_maml_train_step.hlo"
TD_TARGET = DATA / "real" / "hloenv_jaxrl_td_target.hlo"


def _env(engine, path, budget=200, **kw):
    from autotune.rl.env import PassOrderingEnv
    from autotune.core.tuner import evaluation_session

    session = evaluation_session(engine, autotune.load(path), budget=budget)
    return PassOrderingEnv([session], engine.pipeline.passes(), **kw), session


@needs_torch
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


@pytest.fixture(scope="module")
def small_decode(tmp_path_factory):
    """A small generated LLM decode step (2 GQA layers under ``lax.scan``, bf16): 282 final-ops by
    default, ``gemv-rewriter`` makes it worse (283), ``cse`` then ``algsimp`` better (276), jaxlib 0.10.2."""
    from autotune.zoo import LLMConfig, lower

    path = tmp_path_factory.mktemp("llm") / "decode.hlo"
    cfg = LLMConfig(layers=2, d_model=32, heads=4, kv_heads=2, ffn=64, vocab=64, seq=16, batch=2)
    path.write_text(lower("llm", "decode", cfg))
    return path


def test_best_reward_pays_the_fraction_of_the_known_gain_and_nothing_for_a_detour(engine, small_decode):
    from autotune.rl.env import EpisodeSource, PassOrderingEnv
    from autotune.core.tuner import evaluation_session

    session = evaluation_session(engine, autotune.load(small_decode), budget=50)
    c0 = session.empty_cost
    reference = session(("cse", "algsimp"))  # the "expert's" best cost for this module
    assert reference < c0
    source = EpisodeSource(session, "decode", reference=reference)
    env = PassOrderingEnv([source], engine.pipeline.passes(), max_length=4, reward="best")
    names = env.observation_names
    obs, _ = env.reset(seed=0)
    assert obs[names.index("progress:gain_percent")] == 0 and obs[names.index("progress:above_best_percent")] == 0
    rewards = []
    obs, reward, _, _, info = env.step(env.actions.index("gemv-rewriter"))
    assert info["cost"] > c0  # a detour: the module got worse
    assert reward == 0.0 and info["best_cost"] == c0  # ...which costs nothing but the step under reward=best
    assert obs[names.index("progress:above_best_percent")] == pytest.approx(100 * (info["cost"] - c0) / c0)
    rewards.append(reward)
    for action in ("cse", "algsimp", "dce"):
        best_before = env.best
        obs, reward, terminated, _, info = env.step(env.actions.index(action))
        assert reward == pytest.approx(max(0.0, best_before - info["cost"]) / (c0 - reference))
        rewards.append(reward)
    assert terminated
    # The return is the fraction of the known gain the episode's best state recovers.
    assert sum(rewards) == pytest.approx((c0 - info["best_cost"]) / (c0 - reference))
    assert sum(rewards) > 0
    assert obs[names.index("progress:gain_percent")] == pytest.approx(100 * (c0 - info["best_cost"]) / c0)
    # The same detour under the default step reward is paid its (negative) relative change.
    step_env = PassOrderingEnv([EpisodeSource(session, "decode")], engine.pipeline.passes(), max_length=4)
    step_env.reset(seed=0)
    _, reward, _, _, info = step_env.step(step_env.actions.index("gemv-rewriter"))
    assert reward == pytest.approx((c0 - info["cost"]) / c0) and reward < 0
    with pytest.raises(BadInput, match="reward must be one of"):
        PassOrderingEnv([source], engine.pipeline.passes(), reward="final")


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


@needs_torch
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


@needs_torch
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
    with pytest.raises(BadInput, match="reward must be one of"):
        strategy.create("ppo", reward="bogus")


@needs_torch
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


@needs_torch
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

    assert (tmp_path / "p.zip.npz").is_file() and meta["xla_version"].startswith("jaxlib-")  # torch-free weights

    # A policy knowing too few of the installed passes (matched by name) is refused with one line and exit 2.
    bad = tmp_path / "bad.zip"
    shutil.copy(policy, bad)
    meta["actions"] = [f"{a}_elsewhere" if i % 3 == 0 else a for i, a in enumerate(meta["actions"])]
    (tmp_path / "bad.zip.json").write_text(json.dumps(meta))
    proc = run_cli("run", "--strategy", "ppo", "--policy", str(bad), "--budget", "5", str(SMALL), "--no-validate",
                   db=db_path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "below 80%" in proc.stderr, proc.stderr


@needs_torch
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


@needs_torch
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


# ---- shipped policies: found by name, the default one, notes -------------------------------------------
@pytest.fixture(scope="module")
def tiny_policy_dir(engine, tmp_path_factory):
    """A real (tiny) policy trained here, kept by name in a directory for $AUTOTUNE_POLICY_PATH
    (until a trained policy is shipped, no committed file stands in for one)."""
    from autotune.rl.train import train_policy

    out = tmp_path_factory.mktemp("policies")
    train_policy(engine, [autotune.load(SMALL), autotune.load(MAML)], out / "tiny.zip", timesteps=32, seed=0,
                 max_length=3)
    return out


def _copy_policy(src_dir, dst_dir, name: str, edit=None, never_stop: bool = False):
    """``tiny`` copied as ``name`` into ``dst_dir``; ``edit(meta)`` changes its sidecar, ``never_stop``
    makes STOP's logit -1e4 so the deterministic roll-out is ``max_length`` passes long."""
    from stable_baselines3 import PPO

    dst_dir.mkdir(parents=True, exist_ok=True)
    zip_path = dst_dir / f"{name}.zip"
    if never_stop:
        model = PPO.load(src_dir / "tiny.zip", device="cpu")
        with torch.no_grad():
            model.policy.action_net.bias[model.action_space.n - 1] = -1e4
        model.save(zip_path)
    else:
        shutil.copy(src_dir / "tiny.zip", zip_path)
    meta = json.loads((src_dir / "tiny.zip.json").read_text())
    if edit is not None:
        edit(meta)
    (dst_dir / f"{name}.zip.json").write_text(json.dumps(meta))
    return zip_path


@needs_torch
def test_a_policy_is_found_by_name_and_loads_with_the_pinned_versions(engine, tiny_policy_dir, monkeypatch):
    import jaxlib
    from stable_baselines3 import PPO

    from autotune import policies, strategy
    from autotune.rl.train import check_vocabulary, other_pipeline_version, read_sidecar

    monkeypatch.setenv("AUTOTUNE_POLICY_PATH", str(tiny_policy_dir))
    path = tiny_policy_dir / "tiny.zip"
    assert "tiny" in policies.names() and policies.find("tiny") == path and policies.resolve("tiny") == path
    assert strategy.create("ppo", policy="tiny").policy == path
    meta = read_sidecar(path)
    assert meta["pipeline_version"] == engine.version and jaxlib.__version__ == "0.10.2"
    assert f"jaxlib-{jaxlib.__version__}" in meta["pipeline_version"]
    check_vocabulary(meta, engine.pipeline.passes(), path)  # raises on another vocabulary
    assert other_pipeline_version(meta) is None
    # A GPU target's policy made by an older GPU engine (the same XLA) is named as such.
    from autotune.pipelines.xla import GPU_ENGINE_VERSION

    older = f".gpu-{GPU_ENGINE_VERSION - 1}"
    note = other_pipeline_version({**meta, "target": "h100-c3d9518908", "pipeline_version": meta["pipeline_version"] + older})
    assert note is not None and note.endswith(f".gpu-{GPU_ENGINE_VERSION}") and older in note
    assert [m["name"] for m in meta["modules"]] == ["small_redundant", "hloenv_maml_train_step"]
    model = PPO.load(path, device="cpu")
    assert model.observation_space.shape == (len(meta["observation_names"]),)
    with pytest.raises(BadInput, match="no policy file or shipped policy named 'nope'"):
        policies.resolve("nope")
    monkeypatch.delenv("AUTOTUNE_POLICY_PATH")
    assert policies.find("tiny") is None


@needs_torch
def test_every_shipped_policy_loads_with_the_pinned_versions(engine):
    """What autotune/policies ships must drive this pipeline: same vocabularies, same observation (a
    variant trained on another jaxlib: its weights re-laid by name onto this pipeline's layout)."""
    import jaxlib
    from stable_baselines3 import PPO

    from autotune.rl.train import DEFAULT_HYPERPARAMS, make_model, start_from
    from autotune.rl.vocabulary import trained_xla

    from autotune import policies
    from autotune.rl.env import PassOrderingEnv
    from autotune.rl.train import check_vocabulary, observation_options, read_sidecar
    from autotune.core.tuner import evaluation_session

    from autotune.core.engine import open_engine

    shipped = sorted(policies.directory().glob("*.zip")) + sorted(policies.directory().glob("*/*.zip"))
    for name in policies.names():  # a committee's members drive one MDP (``check_members``)
        found = policies.members(policies.find(name))
        if len(found) > 1:
            from autotune.rl.ensemble import check_members

            check_members(found, [read_sidecar(m) for m in found])
    if not shipped:
        pytest.skip("no policy shipped in autotune/policies yet")
    for path in shipped:
        meta = read_sidecar(path)  # every shipped file has its sidecar
        target = str(meta.get("target") or "cpu").split("-")[0]
        with open_engine(engine.cache.path, workers=1, target=None if target == "cpu" else target) as ev:
            assert meta.get("target", "cpu") == ev.pipeline.target.key  # its target's pipeline, today's digest
            check_vocabulary(meta, ev.pipeline.passes(), path, ev.pipeline.target.key)
            session = evaluation_session(ev, autotune.load(SMALL), budget=1)
            env = PassOrderingEnv([session], ev.pipeline.passes(), max_length=meta["max_length"],
                                  **observation_options(meta))
            if trained_xla(meta).startswith(f"jaxlib-{jaxlib.__version__}-"):
                assert list(env.observation_names) == meta["observation_names"]
                model = PPO.load(path, env=env, device="cpu")  # SB3 checks the spaces against the env's
            else:  # trained on another jaxlib (a NAME.jax-X.Y variant, or NAME on a newer jax): re-laid, it trains here
                model = make_model(meta["algo"], env, 0, dict(DEFAULT_HYPERPARAMS["ppo"], **meta["hyperparameters"]))
                assert start_from(model, path, meta["algo"], env.actions, env.observation_names,
                                  ev.pipeline.target.key) is not None
            obs, _ = env.reset(seed=0)
            action, _ = model.predict(obs, deterministic=True)
            assert 0 <= int(action) < env.action_space.n


@needs_torch
def test_default_policy_is_rolled_out_first_then_fine_tuned(engine, tiny_policy_dir, tmp_path, monkeypatch):
    """No --policy: the shipped default's deterministic roll-out is the run's first evaluations."""
    from stable_baselines3 import PPO

    from autotune import strategy
    from autotune.rl.env import PassOrderingEnv
    from autotune.core.runs import RunStore
    from autotune.core.tuner import evaluation_session, tune

    path = _copy_policy(tiny_policy_dir, tmp_path / "shipped", "llm", never_stop=True)
    monkeypatch.setenv("AUTOTUNE_POLICY_PATH", str(path.parent))
    assert strategy.create("ppo").policy == path and strategy.create("ppo").is_default
    assert strategy.create("ppo", policy="none").policy is None  # from scratch on request

    # The roll-out, computed here from the policy file alone.
    session = evaluation_session(engine, autotune.load(MAML), budget=10)
    env = PassOrderingEnv([session], engine.pipeline.passes(), max_length=3)
    model = PPO.load(path, device="cpu")
    obs, _ = env.reset(seed=0)
    rollout, done = [], False
    while not done:
        obs, _, done, _, info = env.step(int(model.predict(obs, deterministic=True)[0]))
        rollout.append(info["sequence"])
    assert len(rollout) == 3

    result = tune(engine, autotune.load(MAML), strategy="ppo", budget=8, seed=0, max_length=3, validate=False)
    trials = RunStore(engine.cache).trials(result.run_id)
    assert [t.sequence for t in trials[:3]] == rollout  # zero-shot first: a budget of 3 is its answer
    assert result.evaluations == 8  # then fine-tuning spends the rest

    # A run allowing longer sequences keeps the policy's own horizon (its step feature's unit).
    longer = tune(engine, autotune.load(MAML), strategy="ppo", budget=8, seed=0, max_length=6, validate=False)
    trials = RunStore(engine.cache).trials(longer.run_id)
    assert [t.sequence for t in trials[:3]] == rollout
    assert max(len(t.sequence) for t in trials) == 3


@pytest.mark.slow
@needs_torch
def test_notes_for_another_pipeline_version_and_an_unusable_default(tiny_policy_dir, tmp_path, db_path):
    def older(meta):
        meta["pipeline_version"] = "xla:jaxlib-0.4.0-cpu-x86_64:inv-000000000000:engine-1"

    def foreign(meta):  # a policy knowing too few of the installed passes (matched by name: order is no matter)
        meta["actions"] = [f"{a}_elsewhere" if i % 3 == 0 else a for i, a in enumerate(meta["actions"])]

    args = ("run", "--strategy", "ppo", str(MAML), "--budget", "4", "--max-length", "3", "--no-validate", "--json")
    _copy_policy(tiny_policy_dir, tmp_path / "same", "llm")
    proc = run_cli(*args, db=db_path, env={"AUTOTUNE_POLICY_PATH": str(tmp_path / "same")})
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "zero-shot from the shipped policy 'llm'" in notes[0], proc.stderr  # says it

    _copy_policy(tiny_policy_dir, tmp_path / "old", "llm", edit=older)
    proc = run_cli(*args, db=db_path, env={"AUTOTUNE_POLICY_PATH": str(tmp_path / "old")})
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "jaxlib-0.4.0" in notes[0] and "using it" in notes[0], proc.stderr
    assert json.loads(proc.stdout)["evaluations"] == 4

    _copy_policy(tiny_policy_dir, tmp_path / "foreign", "llm", edit=foreign)
    proc = run_cli(*args, db=db_path, env={"AUTOTUNE_POLICY_PATH": str(tmp_path / "foreign")})
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "not used" in notes[0] and "from scratch" in notes[0], proc.stderr
    assert json.loads(proc.stdout)["evaluations"] == 4

    # The same foreign policy asked for by name is refused (one line, exit 2), as a path always was.
    proc = run_cli(*args, "--policy", "llm", db=db_path, env={"AUTOTUNE_POLICY_PATH": str(tmp_path / "foreign")})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "below 80%" in proc.stderr


@needs_torch
def test_an_ensemble_rolls_out_the_mean_of_its_members_action_probabilities(engine, tiny_policy_dir, tmp_path):
    """Two members whose action distributions are set by hand (the observation ignored): A prefers
    pass x (0.6 against y's 0.4), B prefers y strongly (0.9 against 0.1). A majority vote would tie;
    the mean (x 0.35, y 0.65) picks y, and the run's first pass is y. Members of another MDP are refused."""
    from stable_baselines3 import PPO

    from autotune import strategy
    from autotune.core.runs import RunStore
    from autotune.core.tuner import tune
    from autotune.rl.ensemble import Ensemble

    actions = engine.pipeline.passes()
    x, y = actions.index("cse"), actions.index("dce")

    def member(name: str, px: float, py: float):
        model = PPO.load(tiny_policy_dir / "tiny.zip", device="cpu")
        logits = torch.full((model.action_space.n,), -1e4)
        logits[x], logits[y] = math.log(px), math.log(py)
        with torch.no_grad():
            model.policy.action_net.weight.zero_()
            model.policy.action_net.bias.copy_(logits)
        model.save(tmp_path / f"{name}.zip")
        shutil.copy(tiny_policy_dir / "tiny.zip.json", tmp_path / f"{name}.zip.json")
        return model

    from autotune.rl import forward
    from autotune.rl.actor import Actor, Layout

    a, b = member("a", 0.6, 0.4), member("b", 0.1, 0.9)
    obs = a.observation_space.sample()
    names = json.loads((tmp_path / "a.zip.json").read_text())["observation_names"]
    same = Layout.match(actions, actions, names, names)  # the installed layout: the identity
    actors = [Actor(forward.from_sb3(m.policy), same) for m in (a, b)]
    probs = Ensemble(actors).probabilities(obs)
    assert probs[x] == pytest.approx(0.35, abs=1e-4) and probs[y] == pytest.approx(0.65, abs=1e-4)
    assert int(a.predict(obs, deterministic=True)[0]) == x and int(Ensemble(actors).predict(obs)[0]) == y
    run = tune(engine, autotune.load(SMALL), strategy="ppo", budget=1, max_length=3, validate=False, prune=False,
               options={"policy": f"{tmp_path / 'a.zip'},{tmp_path / 'b.zip'}", "finetune": False})
    alone = tune(engine, autotune.load(SMALL), strategy="ppo", budget=1, max_length=3, validate=False, prune=False,
                 options={"policy": str(tmp_path / "a.zip"), "finetune": False})
    first = [RunStore(engine.cache).trials(r.run_id)[0].sequence[0] for r in (run, alone)]
    assert first == ["dce", "cse"]
    meta = json.loads((tmp_path / "b.zip.json").read_text())
    # A sidecar written before targets were recorded is the CPU's: it joins a member that says "cpu".
    (tmp_path / "b.zip.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "target"}))
    meta_a = json.loads((tmp_path / "a.zip.json").read_text())
    (tmp_path / "a.zip.json").write_text(json.dumps({**meta_a, "target": "cpu"}))
    assert strategy.create("ppo", policy=f"{tmp_path / 'a.zip'},{tmp_path / 'b.zip'}").members
    meta["max_length"] = 7
    (tmp_path / "b.zip.json").write_text(json.dumps(meta))
    with pytest.raises(BadInput, match="another max_length"):
        strategy.create("ppo", policy=f"{tmp_path / 'a.zip'},{tmp_path / 'b.zip'}")


@needs_torch
def test_a_committee_rolls_out_each_member_and_keeps_the_best(engine, tiny_policy_dir, tmp_path, capsys, monkeypatch):
    """``ensemble=each``: members set by hand (the observation ignored, STOP never chosen), A always cse,
    B always dce. The mean would roll out one of them; the committee rolls out both (cse,cse and dce,dce)
    and the run's answer is the better of the two. A budget that cannot reach the last member gets a
    note naming the budget that does; an unknown mode is refused. The same pair as a directory found
    by name (a shipped committee's form) acts as a committee without ``ensemble=each``."""
    from stable_baselines3 import PPO

    from autotune import strategy
    from autotune.core.runs import RunStore
    from autotune.core.tuner import tune

    actions = engine.pipeline.passes()

    def member(name: str, favourite: str):
        model = PPO.load(tiny_policy_dir / "tiny.zip", device="cpu")
        logits = torch.full((model.action_space.n,), -1e4)
        logits[actions.index(favourite)] = 0.0
        with torch.no_grad():
            model.policy.action_net.weight.zero_()
            model.policy.action_net.bias.copy_(logits)
        model.save(tmp_path / f"{name}.zip")
        shutil.copy(tiny_policy_dir / "tiny.zip.json", tmp_path / f"{name}.zip.json")

    member("a", "cse")
    member("b", "dce")
    policy = f"{tmp_path / 'a.zip'},{tmp_path / 'b.zip'}"

    def trials(mode: str | None, budget: int):
        options = {"policy": policy, "finetune": False} | ({"ensemble": mode} if mode else {})
        run = tune(engine, autotune.load(SMALL), strategy="ppo", budget=budget, max_length=2, validate=False,
                   prune=False, options=options)
        return run, [(tuple(t.sequence), t.cost) for t in RunStore(engine.cache).trials(run.run_id)]

    run, seen = trials("each", 4)
    assert [q for q, _ in seen] == [("cse",), ("cse", "cse"), ("dce",), ("dce", "dce")]
    assert run.best_cost == min(c for _, c in seen)
    _, mean = trials("mean", 4)  # one roll-out of the mean (a tie, broken by the lower index), then spent
    assert len({q[0] for q, _ in mean}) == 1
    capsys.readouterr()
    _, short = trials("each", 2)
    assert [q for q, _ in short] == [("cse",), ("cse", "cse")]
    assert "ensemble=each rolls out 2 policies" in capsys.readouterr().err
    with pytest.raises(BadInput, match="ensemble must be one of mean, each"):
        strategy.create("ppo", ensemble="vote")

    # A committee directory (found by name on the policy path) is its members, rolled out each alone.
    from autotune import policies

    committee = tmp_path / "shelf" / "pair"
    committee.mkdir(parents=True)
    for name in ("a", "b"):
        for suffix in (".zip", ".zip.json"):
            shutil.copy(tmp_path / f"{name}{suffix}", committee / f"{name}{suffix}")
    monkeypatch.setenv("AUTOTUNE_POLICY_PATH", str(committee.parent))
    assert "pair" in policies.names() and policies.members(policies.resolve("pair")) == [
        committee / "a.zip", committee / "b.zip"]
    made = strategy.create("ppo", policy="pair")
    assert made.ensemble == "each" and [p for p, _ in made.members] == [committee / "a.zip", committee / "b.zip"]
    assert strategy.create("ppo", policy="pair", ensemble="mean").ensemble == "mean"  # an explicit mode wins
    policy = "pair"
    capsys.readouterr()
    run, by_name = trials(None, 4)
    assert [q for q, _ in by_name] == [q for q, _ in seen] and run.best_cost == min(c for _, c in seen)
    assert "a committee of 2 policies (pair/a.zip, pair/b.zip)" in capsys.readouterr().err
    (committee / "b.zip").unlink()
    with pytest.raises(BadInput, match="a committee needs at least two"):
        strategy.create("ppo", policy=str(committee))


@needs_torch
def test_branches_roll_out_the_policys_next_most_likely_first_passes(engine, tiny_policy_dir, tmp_path):
    """A policy set by hand (the observation ignored): cse 0.5, STOP 0.3, dce 0.15, algsimp 0.05.
    Its roll-out is cse,cse,cse; ``branches=3`` also starts from dce and from algsimp (STOP is skipped:
    the empty sequence is the default), each continued by the policy, before any fine-tuning."""
    from stable_baselines3 import PPO

    from autotune import strategy
    from autotune.core.runs import RunStore
    from autotune.core.tuner import tune

    actions = engine.pipeline.passes()
    model = PPO.load(tiny_policy_dir / "tiny.zip", device="cpu")
    logits = torch.full((model.action_space.n,), -1e4)
    for name, p in (("cse", 0.5), ("dce", 0.15), ("algsimp", 0.05)):
        logits[actions.index(name)] = math.log(p)
    logits[model.action_space.n - 1] = math.log(0.3)
    with torch.no_grad():
        model.policy.action_net.weight.zero_()
        model.policy.action_net.bias.copy_(logits)
    model.save(tmp_path / "hand.zip")
    shutil.copy(tiny_policy_dir / "tiny.zip.json", tmp_path / "hand.zip.json")

    def sequences(branches: int) -> list[tuple[str, ...]]:
        run = tune(engine, autotune.load(SMALL), strategy="ppo", budget=20, max_length=3, validate=False,
                   prune=False, options={"policy": str(tmp_path / "hand.zip"), "finetune": False,
                                         "branches": branches})
        return [tuple(t.sequence) for t in RunStore(engine.cache).trials(run.run_id)]

    assert {s[0] for s in sequences(1)} == {"cse"}
    seen = sequences(3)
    assert {s[0] for s in seen} == {"cse", "dce", "algsimp"}
    assert ("dce", "cse", "cse") in seen and ("algsimp", "cse", "cse") in seen
    # When STOP is the most likely, the roll-out tries nothing and the first branch is the top pass.
    logits[model.action_space.n - 1] = math.log(0.9)
    with torch.no_grad():
        model.policy.action_net.bias.copy_(logits)
    model.save(tmp_path / "hand.zip")
    assert {s[0] for s in sequences(2)} == {"cse"}
    for bad in (0, 17, "2", True):
        with pytest.raises(BadInput, match="branches"):
            strategy.create("ppo", branches=bad)
