"""The environment as a researcher gets it: ``gymnasium.make`` from paths or a suite split, both env
checkers, named features and actions, ``close()``; and parallel training over it (real XLA)."""

from __future__ import annotations

import json
import sqlite3
import warnings

import pytest

import autotune
from autotune.errors import BadInput
from conftest import DATA, SMALL, run_cli
from test_ppo import needs_torch

MAML = DATA / "real" / "hloenv_maml_train_step.hlo"
ENV_ID = "autotune/PassOrdering-v0"


def _check_both(env) -> None:
    """gymnasium's and stable-baselines3's checkers, any checker warning failing the test."""
    from gymnasium.utils.env_checker import check_env as gymnasium_check
    from stable_baselines3.common.env_checker import check_env as sb3_check

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", ResourceWarning)  # not the checkers' (unrelated file handles)
        gymnasium_check(env.unwrapped)
        sb3_check(env.unwrapped, warn=True)


@pytest.fixture(scope="module")
def tiny_suite(tmp_path_factory):
    """Three modules of a real generated suite (the ResNet family), with its manifest and split."""
    from autotune.zoo import suite

    out = tmp_path_factory.mktemp("suite")
    suite.generate(out, limit=3, families=["resnet"], jobs=1)
    return out


@needs_torch
def test_make_from_a_path_after_import_autotune_passes_both_checkers(db_path):
    import gymnasium

    env = gymnasium.make(ENV_ID, module=str(SMALL), db=str(db_path), max_length=4)
    try:
        inner = env.unwrapped
        _check_both(env)
        obs, info = env.reset(seed=3)
        assert env.observation_space.contains(obs) and info["source"] == "small_redundant"
        # Every index has a name, and the names say what the index is.
        assert len(inner.observation_names) == env.observation_space.shape[0] == len(set(inner.observation_names))
        assert inner.observation_names[-1] == "step_fraction" and obs[-1] == 0.0
        add = inner.observation_names.index("opcode_fraction:add")
        assert obs[add] > 0  # the module has adds
        assert len(inner.action_names) == env.action_space.n and inner.action_names[-1] == "STOP"
        cse = inner.action_names.index("cse")
        _, _, _, _, info = env.step(cse)
        assert info["sequence"] == ("cse",)
        # No budget unless asked: training needs many evaluations.
        assert inner.sources[0].evaluate.remaining > 10**9
        evaluator = inner.evaluator
    finally:
        env.close()
    env.close()  # idempotent
    with pytest.raises(sqlite3.ProgrammingError):  # close() released the cache (and the workers)
        evaluator.cache.db.execute("SELECT 1")


@needs_torch
def test_make_from_a_list_and_from_a_suite_split(db_path, tiny_suite):
    import gymnasium

    from autotune.zoo.suite import modules

    env = gymnasium.make(ENV_ID, modules=[str(SMALL), str(MAML)], db=str(db_path), max_length=3, budget=50)
    try:
        assert [s.name for s in env.unwrapped.sources] == ["small_redundant", "hloenv_maml_train_step"]
        assert env.unwrapped.sources[0].evaluate.remaining == 50  # budget= is per module
        seen = {env.reset(seed=k)[1]["source"] for k in range(12)}
        assert seen == {"small_redundant", "hloenv_maml_train_step"}  # reset draws every module
    finally:
        env.close()

    train = modules(tiny_suite, "train")
    assert train
    env = gymnasium.make(ENV_ID, suite=str(tiny_suite), split="train", db=str(db_path), max_length=3,
                         objective="ops")
    try:
        assert sorted(s.name for s in env.unwrapped.sources) == sorted(p.stem for p in train)
        _check_both(env)
    finally:
        env.close()
    if not modules(tiny_suite, "test"):
        with pytest.raises(BadInput, match="no test modules"):
            gymnasium.make(ENV_ID, suite=str(tiny_suite), split="test", db=str(db_path))


def test_make_rejects_bad_arguments_with_one_line(db_path, tmp_path):
    import gymnasium

    with pytest.raises(BadInput, match="exactly one of"):
        gymnasium.make(ENV_ID, db=str(db_path))
    with pytest.raises(BadInput, match="exactly one of"):
        gymnasium.make(ENV_ID, module=str(SMALL), modules=[str(SMALL)], db=str(db_path))
    with pytest.raises(BadInput, match="not a suite directory"):
        gymnasium.make(ENV_ID, suite=str(tmp_path), db=str(db_path))
    with pytest.raises(BadInput, match="no such file"):
        gymnasium.make(ENV_ID, module=str(tmp_path / "missing.hlo"), db=str(db_path))


def test_observation_names_match_what_observe_writes(engine):
    """The names are not decoration: the coordinate called ``relative:instructions`` moves with the
    instruction count, and ``step_fraction`` with the step."""
    from autotune.rl.env import PassOrderingEnv
    from autotune.core.tuner import evaluation_session

    session = evaluation_session(engine, autotune.load(SMALL), budget=20)
    env = PassOrderingEnv([session], engine.pipeline.passes(), max_length=4)
    env.reset(seed=0)
    names = env.observation_names
    obs, _, _, _, info = env.step(env.action_names.index("cse"))
    m0, m1 = session.input_metrics, session.metrics(("cse",))
    assert m1.instructions < m0.instructions  # cse merges the duplicated exponential
    assert obs[names.index("relative:instructions")] == pytest.approx((m1.instructions + 1) / (m0.instructions + 1))
    assert obs[names.index("step_fraction")] == pytest.approx(1 / 4)


@needs_torch
def test_parallel_training_uses_every_env_and_writes_a_loadable_policy(tmp_path, db_path):
    from stable_baselines3 import PPO

    policy = tmp_path / "par.zip"
    proc = run_cli("train", "--modules", str(SMALL), "--modules", str(MAML), "--envs", "2", "--timesteps", "64",
                   "--max-length", "3", "-O", "reward=best", "-o", str(policy), "--json", db=db_path)
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout)
    assert stats["envs"] == 2 and stats["timesteps"] >= 64
    assert len(stats["per_env"]) == 2
    assert all(e["episodes"] > 0 and e["evaluations"] > 0 for e in stats["per_env"])  # every env stepped
    assert sum(m["episodes"] for m in stats["modules"]) == sum(e["episodes"] for e in stats["per_env"])
    meta = json.loads((tmp_path / "par.zip.json").read_text())
    assert meta["envs"] == 2 and meta["observation_size"] == len(meta["observation_names"])
    assert meta["reward"] == "best"  # the reward mode reached the subprocess envs and is recorded
    assert meta["training_set"]["files"] == [SMALL.name, MAML.name]
    model = PPO.load(policy, device="cpu")  # the same kind of file as with one env
    assert model.observation_space.shape == (meta["observation_size"],)
    assert model.action_space.n == len(meta["actions"]) + 1


def test_train_rejects_bad_envs(tmp_path, db_path):
    proc = run_cli("train", "--modules", str(SMALL), "--envs", "0", "-o", str(tmp_path / "p.zip"), db=db_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
