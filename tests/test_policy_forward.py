"""Torch-free roll-outs (``autotune.rl.forward``) and policies matched to the installed XLA by name
(``autotune.rl.vocabulary``, ``autotune.rl.actor``): real shipped policies, real XLA passes.

The tests that compare against the torch policy import torch inside themselves (skipped where it is
not installed); the rest run on an installation without torch too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import autotune
from autotune import policies
from autotune.errors import BadInput
from conftest import DATA, EXAMPLES, ROOT, SMALL, run_cli

MAML = DATA / "real" / "hloenv_maml_train_step.hlo"
LLM = EXAMPLES / "llm_decode_step.hlo"
MODULES = (SMALL, MAML, LLM)


def _shipped() -> list:
    """Every shipped policy file and committee member."""
    return sorted(policies.directory().glob("*.zip")) + sorted(policies.directory().glob("*/*.zip"))


def _rollout_env(ev, path, module):
    from autotune.core.tuner import evaluation_session
    from autotune.rl.env import PassOrderingEnv
    from autotune.rl.train import observation_options, read_sidecar

    meta = read_sidecar(path)
    session = evaluation_session(ev, autotune.load(module), budget=10**6)
    return PassOrderingEnv([session], ev.pipeline.passes(), max_length=meta["max_length"],
                           **observation_options(meta)), meta


def _actor(path, meta, env):
    from autotune.rl import forward
    from autotune.rl.actor import Actor, Layout

    layout = Layout.match(meta["actions"], env.actions, meta["observation_names"], env.observation_names)
    return Actor(forward.load(path, meta["algo"]), layout)


def test_every_shipped_policy_has_current_torch_free_weights():
    """Each shipped ``.zip`` has its ``.zip.npz`` beside it, exported from that very file."""
    from autotune.rl import forward

    assert _shipped()
    for path in _shipped():
        network, digest = forward.Network.read(forward.weights_path(path))
        assert digest == forward.file_digest(path), f"{path}: stale .npz (re-export it)"
        meta = json.loads(path.with_name(path.name + ".json").read_text())
        assert network.outputs == len(meta["actions"]) + 1 and network.inputs == len(meta["observation_names"])


def test_numpy_forward_pass_matches_torch_on_every_shipped_policy(engine):
    """On observations of real modules (each policy's own roll-out, then a branch from its second
    choice), laid out as the policy reads them, the numpy pass gives the torch policy's probabilities
    within 1e-5 and its choice, so the roll-out sequence is the same. A policy trained on another
    jaxlib (a ``NAME.jax-X.Y`` variant) is compared through its re-layout; one trained on the
    installed jaxlib through the identity."""
    torch = pytest.importorskip("torch")
    from stable_baselines3 import PPO

    compared = 0
    # Each policy on one module, in turn (every policy and every module covered, a third of the compiles
    # of every pair: the committee members share one architecture, their weights are what differs).
    for i, path in enumerate(_shipped()):
        meta = json.loads(path.with_name(path.name + ".json").read_text())
        with _engine_for(engine, meta) as ev:
            for module in (MODULES[i % len(MODULES)],):
                env, meta = _rollout_env(ev, path, module)
                model = PPO.load(path, device="cpu")
                actor = _actor(path, meta, env)
                if _trained_here(meta):  # same jaxlib: the identity re-layout
                    assert actor.layout.identity, path
                for branch in (False, True):
                    obs, _ = env.reset(seed=0)
                    done, sequence, first = False, [], True
                    while not done:
                        laid = actor.layout.observation(obs)
                        with torch.no_grad():
                            tensor, _ = model.policy.obs_to_tensor(laid)
                            probs = model.policy.get_distribution(tensor).distribution.probs[0].numpy()
                        ours = actor.network.probabilities(laid)
                        np.testing.assert_allclose(ours, probs, atol=1e-5, err_msg=f"{path} on {module.name}")
                        theirs = int(model.predict(laid, deterministic=True)[0])
                        assert int(np.argmax(ours)) == theirs, f"{path} on {module.name} after {sequence}"
                        if actor.layout.identity:
                            assert int(actor.predict(obs)[0]) == theirs, f"{path} on {module.name} after {sequence}"
                        installed = actor.probabilities(obs)
                        action = int(np.argsort(installed, kind="stable")[-2]) if branch and first else \
                            int(actor.predict(obs)[0])
                        first = False
                        obs, _, done, _, info = env.step(action)
                        sequence.append(action)
                        compared += 1
    assert compared >= len(_shipped()) * 2 and len(_shipped()) >= len(MODULES)


def _engine_for(engine, meta: dict):
    """An engine for the policy's target: the session's own for the CPU (same cache, same target; a fresh
    one per policy only cost a worker's start each), one opened on the same cache for a GPU target."""
    from autotune.core.engine import open_engine

    target = str(meta.get("target") or "cpu").split("-")[0]
    if target == "cpu":
        return contextlib.nullcontext(engine)
    return open_engine(engine.cache.path, workers=1, target=target)


def _trained_here(meta: dict) -> bool:
    """Whether a policy (its sidecar) was trained on the installed jaxlib."""
    import jaxlib

    from autotune.rl.vocabulary import trained_xla

    return trained_xla(meta).startswith(f"jaxlib-{jaxlib.__version__}-")


BLOCK_TORCH = ("import sys, runpy; sys.modules['torch'] = None; sys.modules['stable_baselines3'] = None; "
               "sys.argv = ['autotune'] + sys.argv[1:]; runpy.run_module('autotune.cli', run_name='__main__')")


def _cli_without_torch(*args, db):
    env = dict(os.environ, AUTOTUNE_DB=str(db))
    return subprocess.run([sys.executable, "-c", BLOCK_TORCH, *args], capture_output=True, text=True, timeout=600,
                          env=env, cwd=ROOT)


def _policy_rollout(engine, name: str, module) -> list[str]:
    """The shipped policy's deterministic roll-out on ``module``, stepped here with its numpy actor."""
    path = policies.find(name)
    env, meta = _rollout_env(engine, path, module)
    actor = _actor(path, meta, env)
    obs, _ = env.reset(seed=0)
    done, info = False, {"sequence": ()}
    while not done:
        obs, _, done, _, info = env.step(int(actor.predict(obs)[0]))
    return list(info["sequence"])


def test_zero_shot_runs_with_torch_unimportable_and_gives_the_policys_answer(engine, db_path, tmp_path):
    """``torch`` and ``stable_baselines3`` made unimportable in the CLI's process: the shipped policy's
    roll-out is the run's first evaluations; fine-tuning is skipped in one line saying what to install;
    PPO from scratch and ``autotune train`` fail in one line (exit 2)."""
    expected = _policy_rollout(engine, "llm", LLM)
    proc = _cli_without_torch("run", "--strategy", "ppo", str(LLM), "-O", "policy=llm", "--budget", "8",
                              "--no-validate", "--json", db=db_path)
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if "fine-tuning skipped" in line]
    assert len(notes) == 1 and "pip install 'xla-autotune[train]'" in notes[0], proc.stderr
    run_id = json.loads(proc.stdout)["run_id"]
    from autotune.core.runs import RunStore

    trials = [list(t.sequence) for t in RunStore(engine.cache).trials(run_id)]
    assert trials[: len(expected)] == [expected[:k] for k in range(1, len(expected) + 1)]  # the roll-out first

    proc = _cli_without_torch("run", "--strategy", "ppo", str(SMALL), "-O", "policy=none", "--budget", "4",
                              db=db_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "PPO from scratch needs torch" in proc.stderr and "xla-autotune[train]" in proc.stderr
    proc = _cli_without_torch("train", str(SMALL), "-o", str(tmp_path / "p.zip"), "--timesteps", "8", db=db_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "xla-autotune[train]" in proc.stderr, proc.stderr
    assert not (tmp_path / "p.zip").exists()


def test_a_committee_and_branches_run_without_torch(db_path):
    proc = _cli_without_torch("run", "--strategy", "ppo", str(SMALL), "--policy", "llm-committee", "--budget", "12",
                              "-O", "finetune=false", "--no-validate", "--json", db=db_path)
    assert proc.returncode == 0 and "a committee of 3 policies" in proc.stderr, proc.stderr
    # Four branches of up to four passes outlast --budget 8: no fine-tuning to skip, so no word of torch.
    proc = _cli_without_torch("run", "--strategy", "ppo", str(SMALL), "-O", "branches=4", "--budget", "8",
                              "--no-validate", "--json", db=db_path)
    assert proc.returncode == 0, proc.stderr
    assert "torch" not in proc.stderr and "then fine-tuning" not in proc.stderr, proc.stderr


# ---- vocabularies across XLA versions: a shipped sidecar edited in a temporary directory -----------------
def _edited_llm(tmp_path, edit):
    """The shipped ``llm`` policy copied into ``tmp_path/NAME`` (its .zip, .npz and an edited sidecar)."""
    src = policies.find("llm")
    dst = tmp_path / "llm.zip"
    for suffix in ("", ".npz"):
        shutil.copy(f"{src}{suffix}", f"{dst}{suffix}")
    meta = json.loads(src.with_name(src.name + ".json").read_text())
    edit(meta)
    dst.with_name(dst.name + ".json").write_text(json.dumps(meta))
    return dst, meta


def _rename(meta, pass_names=(), opcodes=()):
    """A policy as if trained on an XLA whose passes and opcodes had other names (its network unchanged)."""
    meta["actions"] = [a + "_gone" if a in pass_names else a for a in meta["actions"]]
    meta["opcodes"] = [o + "_gone" if o in opcodes else o for o in meta["opcodes"]]
    names = []
    for n in meta["observation_names"]:
        group, _, item = n.partition(":")
        gone = (group in ("opcode_fraction", "loop") and item in opcodes) or (group == "applied" and item in pass_names)
        names.append(f"{n}_gone" if gone else n)
    meta["observation_names"] = names


def test_outputs_and_observations_are_matched_by_name(engine, tmp_path):
    """A policy whose ``cse`` is a pass this XLA lacks (``cse_gone``) and whose ``add`` opcode is one it
    lacks: its cse output is masked out and the rest renormalised, the installed ``cse`` (never seen
    by it) gets probability 0, and its ``add`` coordinates read 0 while every other coordinate is the
    installed one."""
    from autotune.rl import forward

    path, meta = _edited_llm(tmp_path, lambda m: _rename(m, pass_names=("cse",), opcodes=("add",)))
    env, meta = _rollout_env(engine, path, LLM)
    actor = _actor(path, meta, env)
    obs, _ = env.reset(seed=0)
    laid = actor.layout.observation(obs)
    names = list(meta["observation_names"])
    installed = dict(zip(env.observation_names, obs))
    assert obs[env.observation_names.index("opcode_fraction:add")] > 0
    for i, n in enumerate(names):
        assert laid[i] == (0.0 if n.endswith("_gone") else installed.get(n, 0.0)), n  # absent here: 0
    raw = forward.softmax(actor.network.scores(laid))
    missing = [i for i, a in enumerate(meta["actions"]) if a not in env.actions]  # cse_gone (and, on
    assert meta["actions"].index("cse_gone") in missing  # another jaxlib, the passes it dropped)
    kept = 1 - sum(raw[i] for i in missing)
    probs = actor.probabilities(obs)
    assert probs[env.actions.index("cse")] == 0.0 and probs.sum() == pytest.approx(1.0)
    for i, a in enumerate(meta["actions"]):
        if i not in missing:
            assert probs[env.actions.index(a)] == pytest.approx(raw[i] / kept, rel=1e-9)
    assert probs[-1] == pytest.approx(raw[-1] / kept, rel=1e-9)  # STOP is STOP


def test_run_uses_a_policy_of_another_vocabulary_and_says_so_in_one_line(engine, tmp_path, db_path):
    """Two of its passes renamed (not installed here) and one opcode: the run names the difference in
    one line, never asks for the installed pass it never saw, and skips fine-tuning in one line."""
    path, _ = _edited_llm(tmp_path, lambda m: _rename(m, pass_names=("cse", "dce"), opcodes=("add",)))
    proc = run_cli("run", "--strategy", "ppo", str(LLM), "--policy", str(path), "--budget", "8", "-O", "branches=3",
                   "--no-validate", "--json", db=db_path)
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if line.startswith("note:")]
    from autotune.rl.train import read_sidecar, vocabulary_diff

    diff = vocabulary_diff(read_sidecar(path), engine.pipeline.passes())
    theirs, their_ops = len(read_sidecar(path)["actions"]), len(read_sidecar(path)["opcodes"])
    assert diff.passes_unseen >= 2 and diff.passes_present <= theirs - 2
    line = (f"policy llm: {diff.passes_present} of its {theirs} passes present; {diff.passes_unseen} passes it "
            f"never saw; {diff.opcodes_present} of its {their_ops} opcodes present")
    assert diff.opcodes_present == their_ops - 1 and sum(line in n for n in notes) == 1, proc.stderr
    assert sum("fine-tuning skipped" in line for line in notes) <= 1
    from autotune.core.runs import RunStore

    trials = RunStore(engine.cache).trials(json.loads(proc.stdout)["run_id"])
    assert trials and not any({"cse", "dce"} & set(t.sequence) for t in trials)


def test_a_policy_knowing_too_few_of_the_installed_passes_is_refused_in_one_line(engine, tmp_path, db_path):
    passes = engine.pipeline.passes()
    path, _ = _edited_llm(tmp_path, lambda m: _rename(m, pass_names=passes[: len(passes) // 4]))
    proc = run_cli("run", "--strategy", "ppo", str(SMALL), "--policy", str(path), "--budget", "4", db=db_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "below 80%" in proc.stderr and "trained on jaxlib-" in proc.stderr


def test_trained_xla_is_read_from_old_and_new_sidecars():
    from autotune.rl.vocabulary import trained_xla

    assert trained_xla({"pipeline_version": "xla:jaxlib-0.10.2-cpu-x86_64:inv-1:engine-6"}) == "jaxlib-0.10.2-cpu-x86_64"
    assert trained_xla({"xla_version": "jaxlib-0.12.0-cpu-x86_64"}) == "jaxlib-0.12.0-cpu-x86_64"
    assert trained_xla({}) == "an unrecorded XLA"


def test_a_network_the_numpy_pass_cannot_reproduce_is_refused(tmp_path):
    pytest.importorskip("torch")
    import torch.nn as nn

    from autotune.rl import forward

    class Odd(nn.Module):
        pass

    with pytest.raises(BadInput, match="layer Odd is not one the numpy forward pass reproduces"):
        forward._sequential([nn.Linear(3, 2), Odd()], "odd")
    with pytest.raises(BadInput, match="LeakyReLU with slope"):
        forward._sequential([nn.LeakyReLU(0.2)], "odd")


def test_every_shipped_policy_drives_the_installed_pipeline_without_torch(engine):
    """Whatever jaxlib is installed: every shipped policy and committee member is accepted for its
    target (vocabularies matched by name), and its numpy actor takes a real step; a pass it chooses
    is an installed one. On the jaxlib it was trained on, the re-layout is the identity."""
    from autotune.rl.train import check_vocabulary, vocabulary_diff

    for path in _shipped():
        meta = json.loads(path.with_name(path.name + ".json").read_text())
        with _engine_for(engine, meta) as ev:
            check_vocabulary(meta, ev.pipeline.passes(), path, ev.pipeline.target.key)
            env, meta = _rollout_env(ev, path, SMALL)
            actor = _actor(path, meta, env)
            assert actor.layout.identity == (_trained_here(meta) and vocabulary_diff(
                meta, ev.pipeline.passes()).same_names)
            obs, _ = env.reset(seed=0)
            probs = actor.probabilities(obs)
            assert probs.shape == (len(env.actions) + 1,) and probs.sum() == pytest.approx(1.0)
            assert all(probs[env.actions.index(a)] == 0 for a in env.actions if a not in meta["actions"])
            action = int(actor.predict(obs)[0])
            env.step(action)


HOOK = """
import json, sys
sys.modules['torch'] = None
sys.modules['stable_baselines3'] = None
import jax, jax.numpy as jnp, numpy as np
import autotune.jax as autotune_jax

def f(x, w):
    y = jnp.tanh(x @ w)
    return (y.reshape(8, 8).T.reshape(64) * 2.0).sum() + (x @ w).sum()

x = jnp.ones((8, 8), jnp.float32) * 0.1
w = jnp.eye(8, dtype=jnp.float32)
with autotune_jax.use(policy="llm", cache=sys.argv[1]) as stats:
    out = jax.jit(f)(x, w)
print(json.dumps({"decisions": stats.policy_decisions, "errors": stats.errors,
                  "close": bool(np.allclose(np.asarray(out), np.asarray(f(x, w)), rtol=1e-5))}))
"""


def test_the_jax_hook_rolls_a_shipped_policy_out_without_torch(db_path):
    """``autotune.jax.use(policy="llm")`` (the ppo strategy, finetune=False) with torch unimportable:
    one roll-out decides the compile, and the program's result is unchanged."""
    proc = subprocess.run([sys.executable, "-c", HOOK, str(db_path)], capture_output=True, text=True, timeout=600,
                          cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not report["errors"] and report["close"], report
    ((_, sequence, how),) = report["decisions"]
    assert how == "rollout" and "fine-tuning" not in proc.stderr


@pytest.mark.parametrize("algo,activation", [("dqn", "ReLU"), ("a2c", "Tanh"), ("ppo", "ReLU"), ("ppo", "ELU")])
def test_numpy_forward_pass_matches_torch_for_each_algorithm_and_activation(engine, algo, activation):
    """Freshly initialised SB3 networks of each algorithm the sidecar allows, with other activations
    than the shipped Tanh: the numpy pass gives their Q-values or probabilities on real observations."""
    torch = pytest.importorskip("torch")
    from stable_baselines3 import A2C, DQN, PPO

    from autotune.core.tuner import evaluation_session
    from autotune.rl import forward
    from autotune.rl.env import PassOrderingEnv

    session = evaluation_session(engine, autotune.load(MAML), budget=100)
    env = PassOrderingEnv([session], engine.pipeline.passes(), max_length=3)
    cls = {"dqn": DQN, "a2c": A2C, "ppo": PPO}[algo]
    model = cls("MlpPolicy", env, seed=0, device="cpu",
                policy_kwargs={"net_arch": [32, 16], "activation_fn": getattr(torch.nn, activation)})
    network = forward.from_sb3(model.policy)
    obs, _ = env.reset(seed=0)
    for action in (engine.pipeline.passes().index("cse"), None):
        with torch.no_grad():
            tensor, _ = model.policy.obs_to_tensor(obs)
            if algo == "dqn":
                theirs, ours = model.q_net(tensor)[0].numpy(), network.scores(obs)
            else:
                theirs = model.policy.get_distribution(tensor).distribution.probs[0].numpy()
                ours = network.probabilities(obs)
        np.testing.assert_allclose(ours, theirs, atol=1e-5)
        assert int(np.argmax(ours)) == int(model.predict(obs, deterministic=True)[0])
        if action is not None:
            obs, *_ = env.step(action)


# ---- a policy retrained on another jaxlib: NAME.jax-X.Y beside NAME, chosen by the installed jaxlib ----------
def _variant_folder(tmp_path, trained: dict[str, str]) -> None:
    """``mine.zip`` copies of the shipped ``llm`` in ``tmp_path``, one per ``{file stem: jaxlib version}``."""
    src = policies.find("llm")
    meta = json.loads(src.with_name(src.name + ".json").read_text())
    for stem, version in trained.items():
        for suffix in ("", ".npz"):
            shutil.copy(f"{src}{suffix}", tmp_path / f"{stem}.zip{suffix}")
        (tmp_path / f"{stem}.zip.json").write_text(json.dumps({**meta, "xla_version": f"jaxlib-{version}-cpu-x86_64"}))


def test_the_variant_trained_on_the_installed_jaxlib_answers_to_the_plain_name(tmp_path, monkeypatch):
    _variant_folder(tmp_path, {"mine": "0.10.2", "mine.jax-0.11": "0.11.2", "mine.jax-0.12": "0.12.0.1"})
    files = [tmp_path / f"{s}.zip" for s in ("mine", "mine.jax-0.11", "mine.jax-0.12")]
    base, v11, v12 = files
    assert policies.for_jaxlib(files, (0, 10, 2)) == base
    assert policies.for_jaxlib(files, (0, 11, 0)) == v11
    assert policies.for_jaxlib(files, (0, 12, 0, 1)) == v12 and policies.for_jaxlib(files, (0, 12, 3)) == v12
    assert policies.for_jaxlib(files, (0, 13, 0)) == v12  # nearest release
    assert policies.for_jaxlib([base, v12], (0, 11, 2)) == base  # equally near: the older
    assert policies.trained_on(v11) == (0, 11, 2)
    from autotune.pipelines.xla import versions

    monkeypatch.setenv("AUTOTUNE_POLICY_PATH", str(tmp_path))
    installed = versions.parse(versions.installed())[:2]
    expected = {(0, 10): base, (0, 11): v11, (0, 12): v12}[installed]
    assert policies.find("mine") == expected and policies.resolve("mine") == expected
    assert policies.resolve("mine.jax-0.11") == v11  # one variant by its own name
    assert "mine" in policies.names() and not any(".jax-" in n for n in policies.names())


def test_run_rolls_out_the_variant_for_the_installed_jaxlib_and_names_it(tmp_path, db_path):
    """``--policy mine`` with ``mine`` trained on an older jaxlib and ``mine.jax-X.Y`` on this one: the
    run rolls out the variant and says so in one line."""
    from autotune.pipelines.xla import versions

    here = versions.installed()
    minor = ".".join(here.split(".")[:2])
    _variant_folder(tmp_path, {"mine": "0.9.0", f"mine.jax-{minor}": here})
    proc = run_cli("run", "--strategy", "ppo", str(SMALL), "--policy", "mine", "--budget", "4", "-O", "finetune=false",
                   "--no-validate", "--json", db=db_path, env={"AUTOTUNE_POLICY_PATH": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "variant" in line]
    assert said == [f"note: ppo: policy 'mine' is its variant mine.jax-{minor} here (trained on jaxlib {here}, "
                    "nearest this jaxlib)"], proc.stderr
    assert json.loads(proc.stdout)["evaluations"] >= 1


# ---- a policy of another vocabulary, fine-tuned from its weights re-laid by name (autotune.rl.transfer) ----
def _other_vocabulary_llm(tmp_path):
    """The shipped ``llm`` as if trained on an XLA where ``cse`` and ``dce`` had other names (so two
    of its passes are gone here and two installed ones are new to it) and ``add`` another opcode."""
    return _edited_llm(tmp_path, lambda m: _rename(m, pass_names=("cse", "dce"), opcodes=("add",)))


def test_relaid_weights_choose_as_the_policy_does_and_give_new_passes_its_lowest_score(engine, tmp_path):
    """A fresh SB3 network on the installed layout, given the renamed policy's weights re-laid by
    name: over the passes the policy knew its probabilities, renormalised, are the roll-out's
    (``Actor`` through ``Layout``), on every state of an episode; the two passes new to it score
    the policy's lowest bias (possible, never its first choice here); the counts are reported."""
    pytest.importorskip("stable_baselines3")
    from autotune.rl import forward
    from autotune.rl.train import DEFAULT_HYPERPARAMS, make_model, start_from

    path, _ = _other_vocabulary_llm(tmp_path)
    env, meta = _rollout_env(engine, path, LLM)
    actor = _actor(path, meta, env)
    model = make_model("ppo", env, 0, dict(DEFAULT_HYPERPARAMS["ppo"], **meta["hyperparameters"]))
    relaid = start_from(model, path, "ppo", env.actions, env.observation_names)
    assert (relaid.passes_new, relaid.passes_dropped) == (2, 2)
    assert relaid.passes_kept == len(meta["actions"]) - 2
    assert relaid.inputs_new == sum(n not in meta["observation_names"] for n in env.observation_names) > 0
    assert relaid.inputs_kept == sum(not n.endswith("_gone") and n in env.observation_names
                                     for n in meta["observation_names"])
    network = forward.from_sb3(model.policy)
    new = [env.actions.index(a) for a in ("cse", "dce")]
    bias = model.policy.action_net.bias.detach().numpy()
    obs, _ = env.reset(seed=0)
    for step in range(3):
        old = actor.probabilities(obs)
        probs = network.probabilities(obs)
        known = np.ones(len(probs), dtype=bool)
        known[new] = False
        assert probs[known] / probs[known].sum() == pytest.approx(old[known], abs=1e-9)
        assert all(0 < probs[i] < probs.max() for i in new)
        assert all(bias[i] == pytest.approx(bias[known].min()) for i in new)
        obs, _, terminated, truncated, _ = env.step(int(np.argmax(old[:-1])))
        if terminated or truncated:
            break


def test_train_init_fine_tunes_a_policy_of_another_vocabulary_and_records_it(tmp_path, db_path):
    """``autotune train --init POLICY`` on a policy trained on "another XLA": it trains on the
    installed layout (its sidecar lists the installed passes), says in one line how the weights were
    re-laid, records where it started, and its numpy weights are written beside it."""
    pytest.importorskip("stable_baselines3")
    from autotune.rl import forward

    path, meta = _other_vocabulary_llm(tmp_path)
    out = tmp_path / "tuned.zip"
    proc = run_cli("train", str(SMALL), "--init", str(path), "--timesteps", "16", "-O", "n_steps=8",
                   "-O", "batch_size=8", "-o", str(out), db=db_path)
    assert proc.returncode == 0, proc.stderr
    assert "weights re-laid by name onto this XLA's layout (" in proc.stdout
    assert "2 new at its lowest score, 2 dropped" in proc.stdout
    side = json.loads(out.with_name(out.name + ".json").read_text())
    assert "cse" in side["actions"] and "cse_gone" not in side["actions"]
    assert side["initialised_from"]["policy"] == "llm.zip"
    assert side["initialised_from"]["relaid"]["passes_new"] == 2
    network, digest = forward.Network.read(forward.weights_path(out))
    assert digest == forward.file_digest(out) and network.outputs == len(side["actions"]) + 1


@pytest.mark.parametrize("init,says", [("llm-committee", "a committee cannot start a training"),
                                       ("no-such-policy", "no policy file or shipped policy named"),
                                       ("llm", "a ppo policy cannot start a a2c training")])
def test_train_init_bad_input_is_one_line(tmp_path, db_path, init, says):
    pytest.importorskip("stable_baselines3")
    algo = ["--strategy", "a2c"] if init == "llm" else []
    proc = run_cli("train", str(SMALL), *algo, "--init", init, "--timesteps", "8", "-o", str(tmp_path / "p.zip"),
                   db=db_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr
    assert not (tmp_path / "p.zip").exists()


def test_a_run_fine_tunes_a_policy_of_another_vocabulary_after_its_roll_out(tmp_path, db_path):
    """Budget beyond the roll-out: fine-tuning follows it (re-laid weights), never skipped for the
    vocabulary; it may now try the installed passes the policy never saw, never the gone ones."""
    pytest.importorskip("stable_baselines3")
    path, _ = _other_vocabulary_llm(tmp_path)
    proc = run_cli("run", "--strategy", "ppo", str(SMALL), "--policy", str(path), "--budget", "40",
                   "--no-validate", "--json", db=db_path)
    assert proc.returncode == 0, proc.stderr
    assert "fine-tuning skipped" not in proc.stderr and "not fine-tuned" not in proc.stderr, proc.stderr
    result = json.loads(proc.stdout)
    assert result["evaluations"] > 4
    from autotune.core.cache import Cache
    from autotune.core.runs import RunStore

    trials = RunStore(Cache(db_path)).trials(result["run_id"])
    assert len(trials) > 4 and not any({"cse_gone", "dce_gone"} & set(t.sequence) for t in trials)
