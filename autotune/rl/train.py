"""Train one pass-ordering policy over many modules, save it, load it back for zero-shot tuning.

``train_policy`` opens one evaluation session per module (``autotune.core.tuner.evaluation_session``:
trials are recorded in the cache like any run's, so training also fills the cache), builds one
``PassOrderingEnv`` whose ``reset`` draws a module per episode, and trains a stable-baselines3
algorithm (PPO, A2C or DQN) on it.

With ``envs=N > 1`` it steps N environments in parallel instead: an SB3 ``SubprocVecEnv`` whose
every subprocess builds its env with ``autotune.rl.env.make_env`` over the same modules, with its
own engine (one compiler worker) on the SAME cache file (the SQLite cache is made for many
processes: a step one env compiled is a cache hit for the others). The learner sees N transitions
per vector step (PPO's rollout is ``n_steps * N``), the compiles of N envs overlap, and the policy
file is the same kind as with one env. Each env is seeded ``seed + i`` by SB3, so they draw
different modules and explore differently.

It writes the SB3 ``.zip``, its torch-free weights (``<zip>.npz``, ``autotune.rl.forward``: what
roll-outs run, so a policy's zero-shot use needs no torch) and a JSON sidecar next to it
(``<zip>.json``, e.g. ``policy.zip.json``) that records what the policy's inputs and outputs mean:
the algorithm, the action vocabulary (the pipeline's passes, in order: action ``i`` of the policy
is the pass named ``actions[i]``), the opcode vocabulary and the name of every observation
coordinate (``observation_names``), ``max_length``, shaping settings, gamma, the XLA build
(``xla_version``) and pipeline version and the training set (module names and fingerprints, and
where they came from). A policy is matched to the installed pipeline by those names
(``autotune.rl.vocabulary``); ``check_vocabulary`` refuses (``BadInput``) only one trained for
another target or knowing too few of the installed passes.

stable-baselines3 and torch are imported inside the functions only: ``import autotune.rl.train`` is
cheap and never imports torch. Training needs them (the ``xla-autotune[train]`` extra):
``require_training`` says so in one line when they are missing.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from dataclasses import dataclass

from autotune.core.spec import DEFAULT_MAX_LENGTH, DEFAULT_OBJECTIVE, check_max_length
from autotune.errors import BadInput
from autotune.core.module import Module
from autotune.pipelines.xla.hlo import opcode_vocabulary
from autotune.pipelines.xla import ENGINE_VERSION, GPU_ENGINE_VERSION, SAME_STEPS_SINCE, xla_version
from autotune.core import objectives
from autotune.rl.observation import Observation
from autotune.rl.vocabulary import VocabularyDiff, trained_xla
from autotune.rl import forward
from autotune.rl.transfer import relaid_parameters
from autotune.rl.forward import INSTALL_TRAIN
from autotune.core.tuner import evaluation_session

ALGOS = ("ppo", "a2c", "dqn")
SIDECAR_FORMAT = 1

#: Small defaults that learn something within a few hundred environment steps.
DEFAULT_HYPERPARAMS: dict[str, dict] = {
    "ppo": {"n_steps": 32, "batch_size": 16, "n_epochs": 10, "learning_rate": 1e-3, "gamma": 0.99,
            "gae_lambda": 0.95, "ent_coef": 0.01, "clip_range": 0.2, "net_arch": 64},
    "a2c": {"n_steps": 8, "learning_rate": 7e-4, "gamma": 0.99, "gae_lambda": 1.0, "ent_coef": 0.01,
            "net_arch": 64},
    "dqn": {"learning_rate": 1e-3, "gamma": 0.99, "buffer_size": 20_000, "learning_starts": 32, "batch_size": 32,
            "train_freq": 4, "target_update_interval": 128, "exploration_fraction": 0.3,
            "exploration_final_eps": 0.05, "net_arch": 64},
}
#: Settings of the environment (not the algorithm) accepted alongside the hyperparameters:
#: the shaping weights, and the reward mode (``step`` or ``best``, ``autotune.rl.env``).
ENV_OPTIONS = {"w_flops": 0.5, "w_transcendentals": 0.5, "reward": "step"}


def sidecar_path(zip_path: Path) -> Path:
    return Path(str(zip_path) + ".json")


def zip_path_of(out: Path) -> Path:
    """SB3 appends ``.zip`` to a name without it; say so up front."""
    out = Path(out)
    return out if out.suffix == ".zip" else out.with_name(out.name + ".zip")


def check_hyperparams(algo: str, options: dict) -> tuple[dict, dict]:
    """Split ``options`` into (algorithm hyperparameters, env options) with defaults; BadInput on unknowns."""
    if algo not in ALGOS:
        raise BadInput(f"unknown algorithm '{algo}' (choose from {', '.join(ALGOS)})")
    hp = dict(DEFAULT_HYPERPARAMS[algo])
    env = dict(ENV_OPTIONS)
    for key, value in options.items():
        if key in hp:
            default = hp[key]
            hp[key] = _typed(algo, key, value, default)
        elif key == "reward":
            from autotune.rl.env import REWARDS

            if value not in REWARDS:
                raise BadInput(f"{algo}: reward must be one of {', '.join(REWARDS)}, not {value!r}")
            env[key] = value
        elif key in env:
            env[key] = _typed(algo, key, value, env[key])
        else:
            known = sorted([*hp, *env])
            raise BadInput(f"{algo}: unknown option '{key}' (known: {', '.join(known)})")
    return hp, env


def _typed(algo: str, key: str, value, default):
    if isinstance(value, bool):
        raise BadInput(f"{algo}: {key} must be a number, not {value!r}")
    if isinstance(default, int):
        if not isinstance(value, int) and not (isinstance(value, float) and value.is_integer()):
            raise BadInput(f"{algo}: {key} must be an integer, not {value!r}")
        value = int(value)
        if value < (0 if key == "learning_starts" else 1):
            raise BadInput(f"{algo}: {key} must be positive, not {value}")
        return value
    if not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
        raise BadInput(f"{algo}: {key} must be a non-negative number, not {value!r}")
    value = float(value)
    if key == "gamma" and not 0 < value <= 1:
        raise BadInput(f"{algo}: gamma must be in (0, 1], not {value}")
    if key in ("learning_rate", "clip_range") and value <= 0:
        raise BadInput(f"{algo}: {key} must be positive, not {value}")
    return value


def make_model(algo: str, env, seed: int, hyperparams: dict):
    """A fresh SB3 model of ``algo`` on ``env`` (CPU, seeded, silent)."""
    from stable_baselines3 import A2C, DQN, PPO

    hp = dict(hyperparams)
    width = hp.pop("net_arch")
    kwargs = dict(policy_kwargs={"net_arch": [width, width]}, seed=seed, device="cpu", verbose=0)
    if algo == "ppo":
        return PPO("MlpPolicy", env, **hp, **kwargs)
    if algo == "a2c":
        return A2C("MlpPolicy", env, **hp, **kwargs)
    if algo == "dqn":
        return DQN("MlpPolicy", env, **hp, **kwargs)
    raise BadInput(f"unknown algorithm '{algo}' (choose from {', '.join(ALGOS)})")


def read_sidecar(zip_path: Path) -> dict:
    zip_path = Path(zip_path)
    if not zip_path.is_file():
        raise BadInput(f"{zip_path}: no such policy file")
    side = sidecar_path(zip_path)
    if not side.is_file():
        raise BadInput(f"{zip_path}: missing its sidecar {side.name} (written by `autotune train`)")
    try:
        meta = json.loads(side.read_text())
    except (OSError, ValueError) as exc:
        raise BadInput(f"{side}: not a readable policy sidecar ({exc})") from None
    if not isinstance(meta, dict) or meta.get("algo") not in ALGOS or not isinstance(meta.get("actions"), list):
        raise BadInput(f"{side}: not a policy sidecar (needs algo and actions)")
    return meta


def sidecar_target(meta: dict) -> str:
    """The target a policy was trained for; a sidecar without one was written for the CPU (before
    targets were recorded)."""
    return str(meta.get("target") or "cpu")


def vocabulary_diff(meta: dict, actions: Sequence[str]) -> VocabularyDiff:
    """How the policy's pass and opcode names compare with the installed pipeline's ``actions`` and
    this jaxlib's opcodes."""
    return VocabularyDiff.of(meta, actions, opcode_vocabulary())


def vocabulary_mismatch(meta: dict, actions: Sequence[str], target: str = "cpu") -> str | None:
    """Why a policy cannot drive this pipeline (trained for another target, or it knows fewer than
    ``MIN_SHARED`` of the installed passes), or None. Vocabularies are matched by name
    (``autotune.rl.vocabulary``): a policy from another jaxlib is used. A sidecar without a target
    was trained for the CPU."""
    theirs_target = sidecar_target(meta)
    if theirs_target != target:
        return (f"policy was trained for target '{theirs_target}', not '{target}' (use a policy trained for "
                f"{target.split('-')[0]}: bench/learning.py --target {target.split('-')[0]})")
    return vocabulary_diff(meta, actions).refusal()


def check_vocabulary(meta: dict, actions: Sequence[str], zip_path: Path, target: str = "cpu") -> None:
    """BadInput unless the policy was trained for ``target`` and knows enough of the installed passes."""
    reason = vocabulary_mismatch(meta, actions, target)
    if reason is not None:
        raise BadInput(f"{zip_path}: {reason}; retrain it with `autotune train`")


def training_missing() -> str | None:
    """What is missing for training and fine-tuning (torch, stable-baselines3), or None. Asked of the
    import system without importing either (a roll-out must not pay torch's import to learn this)."""
    for name in ("torch", "stable_baselines3"):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return f"{name} is not installed"
    return None


def require_training(what: str) -> None:
    """BadInput in one line when ``what`` (training, PPO from scratch) cannot run here."""
    missing = training_missing()
    if missing is not None:
        raise BadInput(f"{what} needs torch and stable-baselines3 ({missing}): {INSTALL_TRAIN}")


def other_pipeline_version(meta: dict) -> str | None:
    """A one-line note when the policy was trained on another pipeline version than the installed
    XLA pipeline's (its compiler build and engine version), else None. The inventory digest part
    of the version is not compared: with the same jaxlib it is the same, and a vocabulary that
    differs is refused by ``vocabulary_mismatch`` anyway."""
    theirs = str(meta.get("pipeline_version") or "")
    ours = f"xla:{xla_version()}:"
    gpu = f".gpu-{GPU_ENGINE_VERSION}" if sidecar_target(meta) != "cpu" else ""  # a GPU target's own
    engine = f":engine-{ENGINE_VERSION}{gpu}"
    # Engines from SAME_STEPS_SINCE on differ only in structural counts; a policy that does not
    # observe the newer ones (no partition: coordinates) was trained on what it sees here.
    same = [f":engine-{v}{gpu}" for v in range(SAME_STEPS_SINCE, ENGINE_VERSION)
            if not observation_options(meta)["partition_features"]]
    if theirs.startswith(ours) and any(theirs.endswith(e) for e in [engine, *same]):
        return None
    return f"trained on pipeline {theirs or '(unrecorded)'}, this is {ours}...{engine}"


def observation_options(meta: dict) -> dict:
    """The ``PassOrderingEnv`` options that give a saved policy the observation layout it was trained
    on: one trained before the partition counts existed has no ``partition:`` coordinates."""
    return {"partition_features": Observation.has_partition_features(meta.get("observation_names") or ())}


def load_model(zip_path: Path, meta: dict, env, seed: int, overrides: dict | None = None):
    """Load the SB3 model of a checked sidecar onto ``env`` (the algorithm comes from the sidecar)."""
    from stable_baselines3 import A2C, DQN, PPO

    cls = {"ppo": PPO, "a2c": A2C, "dqn": DQN}[meta["algo"]]
    try:
        model = cls.load(str(zip_path), env=env, device="cpu", custom_objects=overrides or None)
    except (ValueError, KeyError, OSError, RuntimeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BadInput(f"{zip_path}: cannot load this {meta['algo']} policy: {first}") from None
    model.set_random_seed(seed)
    return model


class _StepCallback:
    """SB3 callback factory (built lazily: importing the callback base imports torch)."""

    @staticmethod
    def make(observer, timesteps: int, stats=None):
        from stable_baselines3.common.callbacks import BaseCallback

        class Callback(BaseCallback):
            def __init__(self):
                super().__init__()
                self.t0 = time.perf_counter()
                self.returns: list[float] = []
                self._rets: list[float] = []
                self.best: float | None = None  # best cost / start cost seen in any env

            def _on_step(self) -> bool:
                rewards = self.locals.get("rewards", [])
                if len(self._rets) != len(rewards):
                    self._rets = [0.0] * len(rewards)  # one running return per (vectorised) env
                for i, (r, done) in enumerate(zip(rewards, self.locals.get("dones", []))):
                    self._rets[i] += float(r)
                    if done:
                        self.returns.append(self._rets[i])
                        self._rets[i] = 0.0
                for info in self.locals.get("infos", []):
                    c, c0 = info.get("cost"), info.get("start_cost")
                    if c is not None and c0 and not info.get("failed"):
                        self.best = c / c0 if self.best is None else min(self.best, c / c0)
                if observer is not None:
                    best = self.best
                    elapsed = max(1e-9, time.perf_counter() - self.t0)
                    observer.on_trial(min(self.num_timesteps, timesteps), best, self.num_timesteps / elapsed,
                                    stats.hit_rate if stats is not None else 0.0)
                return True

        return Callback()


def check_training(algo: str, timesteps: int, max_length: int, objective: str,
                   options: dict | None) -> tuple[dict, dict]:
    """Every training argument checked before any worker starts (BadInput names the bad one);
    returns ``check_hyperparams``'s (hyperparameters, environment options)."""
    if timesteps < 1:
        raise BadInput(f"--timesteps must be positive, not {timesteps}")
    check_max_length(max_length)
    objectives.get(objective)
    hp_env = check_hyperparams(algo, options or {})
    require_training("training a policy")
    return hp_env


def train_policy(
    evaluator,
    modules: list[Module],
    out: Path,
    timesteps: int = 2048,
    seed: int = 0,
    shaping: bool = False,
    objective: str = DEFAULT_OBJECTIVE,
    algo: str = "ppo",
    max_length: int = DEFAULT_MAX_LENGTH,
    observer=None,
    options: dict | None = None,
    envs: int = 1,
    training_set: dict | None = None,
    init: Path | None = None,
    references: dict[str, float] | None = None,
    imitation=None,
) -> dict:
    """Train one ``algo`` policy over ``modules``; write ``out`` (.zip) and its sidecar; return stats.

    ``observer`` is an ``autotune.core.observer.Observer`` (or None); ``options`` are hyperparameters
    (see ``DEFAULT_HYPERPARAMS``) and the shaping weights ``w_flops``/``w_transcendentals``.
    Every environment step is one evaluation in its module's session (cache hits included).
    ``envs`` environments are stepped in parallel (subprocesses sharing ``evaluator``'s cache file);
    ``training_set`` (e.g. the suite directory and split) is recorded in the sidecar.
    ``init`` (a policy ``.zip`` of the same algorithm and observation layout) gives the starting
    weights instead of a fresh network: continue training a policy, or fine-tune a pre-trained one.
    ``references`` (module name -> best known cost, e.g. an expert search's) scale the best-so-far
    reward (``options={"reward": "best"}``) per module, so each episode's return is the fraction of
    that module's known gain it recovers (``autotune.rl.env``).
    ``imitation`` (an ``autotune.rl.imitation.ImitationTerm``, PPO and A2C) keeps a behaviour-cloning
    term on demonstrations during training; the sidecar records it.
    """
    if not modules:
        raise BadInput("no modules to train on")
    if envs < 1:
        raise BadInput(f"--envs must be at least 1, not {envs}")
    hp, env_opts = check_training(algo, timesteps, max_length, objective, options)
    if imitation is not None and algo == "dqn":
        raise BadInput("an imitation term needs a policy-gradient algorithm (ppo or a2c), not dqn")
    zip_path = zip_path_of(out)
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    envset = None
    try:
        roots = [evaluator.prepare(m) for m in modules]
        envset = _TrainingEnvs.open(evaluator, modules, roots, envs, objective, max_length, shaping, hp, env_opts,
                                    references)
        model = make_model(algo, envset.env, seed, hp)
        relaid = start_from(model, init, algo, envset.actions, envset.observation_names,
                            evaluator.pipeline.target.key)
        # With envs > 1 the steps are compiled in the subprocesses: this evaluator's hit rate says nothing.
        callback = _StepCallback.make(observer, timesteps, evaluator.stats if envs == 1 else None)
        callbacks = [callback]
        if imitation is not None:
            imitation.demonstrations.check_layout(envset.observation_names, envset.actions)
            callbacks.append(imitation.callback())
        learn_seconds = _learn(model, timesteps, callbacks, observer,
                               f"{algo} on {len(modules)} module(s)" + (f", {envs} envs" if envs > 1 else ""))
        stats_per_env = envset.episode_stats()
        zip_path.parent.mkdir(parents=True, exist_ok=True)
        model.save(str(zip_path))
        forward.write(zip_path, forward.from_sb3(model.policy, str(zip_path)))  # roll-outs run these
    finally:
        if envset is not None:
            envset.close()
        torch.set_num_threads(threads)
    meta = _sidecar(evaluator, envset, roots, algo, shaping, hp, env_opts, references, max_length, objective,
                    int(model.num_timesteps), seed, envs, training_set)
    if imitation is not None:
        meta["imitation_term"] = imitation.record()
    if init is not None:
        meta["initialised_from"] = _init_record(init, relaid)
    side = sidecar_path(zip_path)
    side.write_text(json.dumps(meta, indent=2))
    returns, merged = callback.returns, _merge_episode_stats(stats_per_env)
    tail = returns[-20:]
    return {
        "algo": algo, "policy": str(zip_path), "sidecar": str(side), "timesteps": int(model.num_timesteps),
        "initialised_from": meta.get("initialised_from"),
        "relaid_note": relaid.note(f"started from {Path(init).name}") if relaid is not None else None,
        "episodes": len(returns), "mean_return_last20": (sum(tail) / len(tail)) if tail else None,
        "shaping": bool(shaping), "objective": objective, "seed": seed, "max_length": max_length,
        "seconds": time.perf_counter() - t0, "learn_seconds": learn_seconds,
        "steps_per_second": int(model.num_timesteps) / max(1e-9, learn_seconds), "envs": envs,
        "evaluations": sum(m["evaluations"] for m in merged),
        "imitation_term": (dict(imitation.record(), updates=callbacks[-1].updates,
                                loss_last=callbacks[-1].losses[-1] if callbacks[-1].losses else None)
                           if imitation is not None else None),
        "per_env": [{"env": i, "episodes": sum(m["episodes"] for m in e), "evaluations": sum(m["evaluations"] for m in e)}
                    for i, e in enumerate(stats_per_env)],
        "modules": [{key: m[key] for key in ("name", "episodes", "start_cost", "best_cost", "best_sequence")}
                    for m in merged],
    }


def start_from(model, init: Path | None, algo: str, actions: Sequence[str], observation_names: Sequence[str],
               target: str = "cpu"):
    """Give ``model`` (fresh, on the installed layout) the weights of the policy ``init``: as they are
    when ``init`` has no sidecar (a network made for this layout moments ago, e.g. the learning
    benchmark's imitation), else checked and re-laid by name onto this XLA's passes and opcodes
    (``autotune.rl.transfer``), so a policy trained on another jaxlib is fine-tuned here instead of
    retrained from scratch. Returns the ``Relaid`` summary (None: nothing to re-lay)."""
    if init is None:
        return None
    init = Path(init)
    if not sidecar_path(init).is_file():
        model.set_parameters(str(init), exact_match=True, device="cpu")
        return None
    meta = read_sidecar(init)
    if meta["algo"] != algo:
        raise BadInput(f"{init}: a {meta['algo']} policy cannot start a {algo} training")
    reason = vocabulary_mismatch(meta, actions, target)
    if reason is not None:
        raise BadInput(f"{init}: {reason}")
    return relaid_parameters(model, init, meta, actions, observation_names)


def _init_record(init: Path, relaid) -> dict:
    """The sidecar's record of the policy a training started from (and how it was re-laid)."""
    record: dict = {"policy": Path(init).name}
    side = sidecar_path(Path(init))
    if side.is_file():
        meta = json.loads(side.read_text())
        record["xla_version"] = meta.get("xla_version") or trained_xla(meta)
    if relaid is not None:
        record["relaid"] = {k: getattr(relaid, k) for k in relaid.__dataclass_fields__}
    return record


def _sidecar(evaluator, envset, roots, algo, shaping, hp, env_opts, references, max_length, objective, timesteps,
             seed, envs, training_set) -> dict:
    """What a policy's sidecar records: how it was trained, on what, for which pipeline and target,
    and the observation and action layout a later load checks against the installed pipeline."""
    return {
        "format": SIDECAR_FORMAT, "algo": algo, "shaping": bool(shaping), "gamma": hp["gamma"],
        "w_flops": env_opts["w_flops"], "w_transcendentals": env_opts["w_transcendentals"],
        "reward": env_opts["reward"], "references": len(references or {}),
        "max_length": max_length, "objective": objective, "cost_features": envset.cost_features,
        "observation_size": envset.obs_size, "observation_names": list(envset.observation_names),
        "actions": list(envset.actions), "opcodes": list(_opcode_vocabulary()), "pipeline_version": evaluator.version,
        "xla_version": xla_version(), "target": evaluator.pipeline.target.key,
        "timesteps": timesteps, "seed": seed, "envs": envs, "hyperparameters": hp,
        "training_set": dict(training_set or {}),
        "modules": [{"name": r.name, "fingerprint": r.fingerprint} for r in roots],
    }


def _opcode_vocabulary():
    """The opcode names the observation counts (XLA's; the policies are trained on HLO modules)."""
    return opcode_vocabulary()


def _learn(model, timesteps: int, callback, observer, what: str) -> float:
    """``model.learn`` for ``timesteps`` with the observer told when it starts and ends; its seconds."""
    if observer is not None:
        observer.on_run_start(timesteps, what)
    t_learn = time.perf_counter()
    try:
        model.learn(total_timesteps=timesteps, callback=callback)
    finally:
        if observer is not None:
            observer.on_run_end()
    return time.perf_counter() - t_learn


def _merge_episode_stats(stats_per_env: list[list[dict]]) -> list[dict]:
    """Each module's episode statistics summed over the environments (the best cost: the lowest)."""
    merged: dict[int, dict] = {}
    for env_stats in stats_per_env:
        for k, m in enumerate(env_stats):
            into = merged.setdefault(k, {**m, "episodes": 0, "evaluations": 0, "best_cost": None})
            into["episodes"] += m["episodes"]
            into["evaluations"] += m["evaluations"]
            if m["best_cost"] is not None and (into["best_cost"] is None or m["best_cost"] < into["best_cost"]):
                into["best_cost"], into["best_sequence"] = m["best_cost"], m["best_sequence"]
    return [merged[k] for k in sorted(merged)]


@dataclass
class _TrainingEnvs:
    """The environment(s) a policy learns in: one in this process over ``evaluator``, or ``envs``
    subprocesses (``SubprocVecEnv``) each building the same backend for the same target on the
    same cache file. What the sidecar needs of them is read once here."""

    env: object
    actions: tuple[str, ...]
    observation_names: tuple[str, ...]
    obs_size: int
    cost_features: bool
    vec: object = None

    @classmethod
    def open(cls, evaluator, modules, roots, envs: int, objective: str, max_length: int, shaping: bool, hp: dict,
             env_opts: dict, references) -> "_TrainingEnvs":
        from autotune.rl.env import EpisodeSource, PassOrderingEnv, make_env

        actions = evaluator.pipeline.passes()
        if envs == 1:
            sources = [EpisodeSource(evaluation_session(evaluator, m, objective=objective), r.name,
                                     reference=(references or {}).get(r.name))
                       for m, r in zip(modules, roots)]
            env = PassOrderingEnv(sources, actions, max_length=max_length, shaping=shaping, gamma=hp["gamma"],
                                  **env_opts)
            return cls(env, actions, env.observation_names, env.obs_size, env.cost_features)
        from stable_baselines3.common.vec_env import SubprocVecEnv

        pipeline = evaluator.pipeline
        build = functools.partial(make_env, modules=roots, db=str(evaluator.cache.path), workers=1,
                                  backend=pipeline.name, target=pipeline.target_option,
                                  objective=objective, max_length=max_length, shaping=shaping,
                                  gamma=hp["gamma"], references=references, **env_opts)
        vec = SubprocVecEnv([build] * envs)
        return cls(vec, actions, tuple(vec.get_attr("observation_names", [0])[0]),
                   int(vec.get_attr("obs_size", [0])[0]), bool(vec.get_attr("cost_features", [0])[0]), vec)

    def episode_stats(self) -> list[list[dict]]:
        """Per environment, per module: episodes, evaluations, start and best cost."""
        return self.vec.env_method("episode_stats") if self.vec is not None else [self.env.episode_stats()]

    def close(self) -> None:
        if self.vec is not None:
            self.vec.close()  # each subprocess closes its env: its worker and its cache connection
