"""PPO (stable-baselines3) on the pass-ordering MDP of ``autotune.rl.env``: the 2023 paper's method.

Every environment step appends one pass and costs one evaluation (cache hits included); STOP is
free. The episode's starting cost (the empty sequence) is free (``Evaluate.empty_cost``). The tuner keeps
the best sequence of every evaluation, so all of PPO's exploratory rollouts count as search.

Two modes:

* **From scratch** (no ``policy``): PPO trains on this module alone with
  ``model.learn(total_timesteps=remaining)`` until the budget is spent.
* **Zero-shot** (``policy=PATH`` or ``policy=NAME`` of a shipped policy, ``autotune.policies``; a
  ``.zip`` written by ``autotune train``; PPO, A2C or DQN, the algorithm read from the sidecar
  ``PATH.json``): the policy is rolled out deterministically on the
  module first (at most ``max_length`` evaluations); then, with ``finetune`` (default true) and budget
  left, it keeps learning on this module, alternating ``learn`` chunks of ``2 * n_steps`` steps with
  deterministic roll-outs of the updated policy. If the policy only stops (fine-tuning then spends
  no evaluation), the rest of the budget goes to PPO from scratch on the module, so ``--budget`` is
  spent either way. Its episodes are at most the policy's own ``max_length`` long (its
  observation counts steps in those units), and never longer than the run's.
  Roll-outs (and branches, committees, the mean of an ensemble) run the policy's numpy forward
  pass (``autotune.rl.forward``, its ``NAME.zip.npz``), with or without torch: a shipped policy's
  zero-shot use needs neither torch nor stable-baselines3. Fine-tuning and PPO from scratch do:
  without them fine-tuning is skipped with one line saying what to install, and PPO from scratch
  is refused (``BadInput``). Why: the zero-shot answer is a few small matrix products, and the
  JAX hook and CPU-only installs should not pull in torch for them.
  Vocabularies are matched by name (``autotune.rl.vocabulary``): a policy trained on another jaxlib
  is used, its outputs naming passes not installed masked out and the observation re-laid by
  feature name (``autotune.rl.actor``), with one stderr line saying by how much the vocabularies
  differ; one knowing fewer than 80% of the installed passes is refused (``BadInput``). Fine-tuning
  one whose vocabulary differs starts from its weights re-laid by name onto the installed layout
  (``autotune.rl.transfer``: a pass it never saw starts as an unlikely choice). One trained on another pipeline version with the same
  vocabularies is used, with a one-line note on stderr.
* **Default**: with no ``policy`` option the shipped default policy (``llm``; ``llm-spmd`` for a module
  with collectives, one device's program of a partitioned step, when it is shipped; the target's own,
  ``llm-h100``, for an H100) is used zero-shot when this installation has one (one line on stderr
  says which and why), so a budget of one roll-out
  (``max_length`` evaluations) gives its zero-shot answer; if it cannot drive this pipeline (another
  target, too few of the installed passes) a one-line note says why and PPO trains from scratch. Without a shipped policy, or with
  ``policy=none``, PPO starts from scratch.

How the budget ends training: ``RunEvaluate`` raises ``BudgetExhausted`` inside ``env.step``; it
propagates out of ``collect_rollouts`` and ``learn`` (SB3 has no cleanup there that matters: the
half-filled rollout buffer and the vector env are thrown away with the model, and ``torch.no_grad``
is a context manager that exits on the exception) and out of ``minimize`` to the tuner, which
catches it. While SB3 trains, the process-wide torch thread count is set to 1 (determinism, and the
compiler workers own the cores) and restored after (``_torch_session``); torch and SB3 are imported
only there, so ``import strategies.ppo`` and every roll-out are torch-free.

Determinism: SB3's ``seed=`` (python, numpy, torch and the action space), the environment's reset
seed, one torch thread and a deterministic cache make two runs with the same seed ask the same
sequences.

Options: ``policy`` (a path, a shipped policy's name, or ``none``; several, comma-separated, roll out as
an ensemble, ``autotune.rl.ensemble``; a committee's directory, e.g. the shipped ``llm-committee``,
stands for its members, ``autotune.policies.members``; fine-tuning then continues the first),
``ensemble`` (how several policies act: ``mean``, the default for a comma-separated list, one roll-out
of the mean of their action probabilities; ``each``, the default for a committee's directory, every
member's own roll-out in turn, the tuner keeping the best, which costs one roll-out per member and so
wants ``--budget`` of members x ``max_length``), ``finetune`` (bool, default
true), ``branches`` (int, default 1: after the roll-out, also roll out from the policy's next
``branches - 1`` most likely first passes, before any fine-tuning; PPO and A2C policies), ``shaping`` (bool; default false, or the policy's own setting), ``n_steps`` (32),
``batch_size`` (16), ``n_epochs`` (10), ``learning_rate`` (1e-3), ``gamma`` (0.99, also the shaping discount), ``gae_lambda`` (0.95),
``ent_coef`` (0.01), ``clip_range`` (0.2), ``net_arch`` (hidden width, 64), ``w_flops`` and
``w_transcendentals`` (shaping weights, 0.5 each), ``reward`` (``step`` or ``best``: the reward
mode of ``autotune.rl.env``; default ``step``, or the policy's own setting when fine-tuning one).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import contextlib

from autotune.rl import forward
from autotune.rl.actor import Actor, Layout
from autotune.rl.ensemble import Ensemble, check_members
from autotune.rl.env import EpisodeSource, PassOrderingEnv
from autotune.errors import BadInput
from autotune.strategy import BudgetExhausted, BudgetShare, Evaluate, SearchSpace, Strategy, coordinate_descent
from autotune import policies
from autotune.rl.train import (DEFAULT_HYPERPARAMS, check_hyperparams, check_vocabulary, load_model, make_model,
                               observation_options, other_pipeline_version, read_sidecar, require_training,
                               start_from, training_missing, vocabulary_diff, vocabulary_mismatch)

#: ``policy=`` values that ask for PPO from scratch even when a default policy is shipped.
NO_POLICY = ("none", "scratch")

#: ``ensemble=``: ``mean`` rolls out the mean of the members' action probabilities once; ``each`` rolls
#: out every member alone (a committee: the best of their answers, at one roll-out per member).
ENSEMBLE_MODES = ("mean", "each")


class PPOStrategy(Strategy):
    name = "ppo"
    description = "PPO over the pass-ordering MDP; --policy for a trained policy (zero-shot + fine-tune)"
    options_by = "coordinate descent (greedy's) after the policy's roll-out: the policy orders passes, not options"

    def __init__(self, policy: str | None = None, finetune: bool = True, shaping: bool | None = None,
                 branches: int = 1, ensemble: str | None = None, **rest):
        if policy is not None and not isinstance(policy, (str, Path)):
            raise BadInput(f"ppo: policy must be a path, not {policy!r}")
        if not isinstance(finetune, bool):
            raise BadInput(f"ppo: finetune must be true or false, not {finetune!r}")
        if shaping is not None and not isinstance(shaping, bool):
            raise BadInput(f"ppo: shaping must be true or false, not {shaping!r}")
        if isinstance(branches, bool) or not isinstance(branches, int) or not 1 <= branches <= 16:
            raise BadInput(f"ppo: branches must be an integer from 1 to 16, not {branches!r}")
        self.branches = branches
        if ensemble is not None and ensemble not in ENSEMBLE_MODES:
            raise BadInput(f"ppo: ensemble must be one of {', '.join(ENSEMBLE_MODES)}, not {ensemble!r}")
        self.ensemble = ensemble or "mean"  # a committee's directory makes it ``each`` (below)
        self.hyperparams, self.env_options = check_hyperparams("ppo", rest)  # BadInput on unknown options
        self.given = set(rest)
        self.finetune = finetune
        self.shaping = shaping
        self.meta = None
        self.policy: Path | None = None
        self.is_default = False  # the shipped default, not asked for: fall back instead of refusing
        self.chosen_for = ""  # why the shipped default is not the target's plain one (said in its note)
        #: ``policy=a.zip,b.zip,...``: an ensemble (``autotune.rl.ensemble``), each member with its
        #: sidecar; the first is ``policy``.
        self.members: list[tuple[Path, dict]] = []
        self.notes: list[str] = []
        if policy is None:
            shipped = policies.default()
            if shipped is not None:
                try:
                    self.meta, self.policy, self.is_default = read_sidecar(shipped), shipped, True
                except BadInput as exc:
                    self._note(f"shipped policy '{policies.DEFAULT}' not used ({exc}); PPO from scratch")
        elif str(policy).lower() not in NO_POLICY:
            names = [p.strip() for p in str(policy).split(",") if p.strip()]
            resolved = [policies.resolve(p) for p in names]  # a shipped policy's name, or a path
            for name, path in zip(names, resolved):
                if (said := policies.variant_note(name, path)) is not None:
                    self._note(said)
            paths = [m for r in resolved for m in policies.members(r)]  # a committee: its members
            if ensemble is None and any(r.is_dir() for r in resolved):
                self.ensemble = "each"  # a committee acts as its members, each alone
            metas = [read_sidecar(p) for p in paths]  # a missing file fails before any compile
            self.policy, self.meta = paths[0], metas[0]
            if len(paths) > 1:
                check_members(paths, metas)
                self.members = list(zip(paths, metas))

    def _note(self, text: str) -> None:
        """One line on stderr (stdout may be --json) and in ``self.notes``."""
        self.notes.append(text)
        print(f"note: ppo: {text}", file=sys.stderr, flush=True)

    def _name(self) -> str:
        """The policy as the user named it (a committee: its directory's name)."""
        if self.members and len({p.parent for p, _ in self.members}) == 1 and self.ensemble == "each":
            return self.members[0][0].parent.name
        return self.policy.name[:-len(".zip")] if self.policy.name.endswith(".zip") else self.policy.name

    def _label(self) -> str:
        if not self.is_default:
            return f"policy {self.policy}"
        return f"shipped policy '{self.policy.name[:-len('.zip')]}'" + (f" ({self.chosen_for})" if self.chosen_for else "")

    def _default_for(self, target: str, collectives: int) -> None:
        """The shipped default is the target's own (``llm`` for the CPU, ``llm-h100`` for an H100) and,
        for one device's program of a partitioned step (``collectives`` > 0), the partitioned steps'
        policy (``llm-spmd``) where one is shipped for the target: switch to it."""
        if not self.is_default:
            return
        self.chosen_for = ""  # an instance may tune several modules in turn
        shipped = policies.default(target, partitioned=collectives > 0)
        if shipped is None or shipped == self.policy:
            return
        try:
            self.meta, self.policy = read_sidecar(shipped), shipped
        except BadInput:
            return
        if collectives and shipped.name == f"{policies.default_name(target, partitioned=True)}.zip":
            self.chosen_for = f"the default for partitioned steps: this module has {collectives} collectives"

    def minimize(self, evaluate: Evaluate, space: SearchSpace, seed: int) -> None:
        metrics = getattr(evaluate, "input_metrics", None)  # what the tuner's and a fleet's Evaluate know
        self._default_for(space.target, metrics.collectives if metrics is not None else 0)
        if space.options:
            return self._with_options(evaluate, space, seed)
        source = EpisodeSource(evaluate, "module")
        if self.policy is None:
            self._from_scratch(source, evaluate, space, seed)
        else:
            self._zero_shot(source, evaluate, space, seed)

    def _with_options(self, evaluate: Evaluate, space: SearchSpace, seed: int) -> None:
        """Compiler options in the space (``--space options|both``): the policy orders passes, not options
        (it never saw one), so the passes get its roll-out(s) alone (no fine-tuning; PPO from scratch half
        the budget), and the options ``coordinate_descent`` from the best sequence with the rest
        (``options_by``, said in the run's report)."""
        if space.passes:
            finetune, self.finetune = self.finetune, False
            share = BudgetShare(evaluate, evaluate.remaining // 2 if self.policy is None else evaluate.remaining)
            passes_only = replace(space, options=())
            try:
                if self.policy is None:
                    self._from_scratch(EpisodeSource(share, "module"), share, passes_only, seed)
                else:
                    self._zero_shot(EpisodeSource(share, "module"), share, passes_only, seed)
            except BudgetExhausted:
                pass
            finally:
                self.finetune = finetune
        done = [t for t in evaluate.history if t.ok and not t.options]
        best = min(done, key=lambda t: t.cost, default=None)
        sequence, cost = (best.sequence, best.cost) if best and best.cost < evaluate.empty_cost else ((), evaluate.empty_cost)
        coordinate_descent(evaluate, space, sequence, cost)

    def _env(self, source: EpisodeSource, space: SearchSpace, shaping: bool, gamma: float, env_options: dict):
        return PassOrderingEnv([source], space.actions, max_length=space.max_length, shaping=shaping, gamma=gamma,
                               **env_options)

    def _from_scratch(self, source, evaluate: Evaluate, space: SearchSpace, seed: int) -> None:
        require_training("PPO from scratch")
        hp = self.hyperparams
        with _torch_session(seed):
            env = self._env(source, space, bool(self.shaping), hp["gamma"], self.env_options)
            model = make_model("ppo", env, seed, hp)
            _learn_until_spent(model, evaluate, chunk=None)

    def _zero_shot(self, source, evaluate: Evaluate, space: SearchSpace, seed: int) -> None:
        meta = self.meta
        if self.is_default:
            why = vocabulary_mismatch(meta, space.actions, space.target)
            if why is not None:
                self._note(f"{self._label()} not used: {why}; PPO from scratch")
                return self._from_scratch(source, evaluate, space, seed)
        check_vocabulary(meta, space.actions, self.policy, space.target)
        diff = vocabulary_diff(meta, space.actions)
        other = other_pipeline_version(meta)
        gamma = float(meta.get("gamma", self.hyperparams["gamma"]))
        shaping = bool(meta.get("shaping", False)) if self.shaping is None else self.shaping
        policy_space = space
        if int(meta.get("max_length") or space.max_length) < space.max_length:
            # The policy's step_fraction feature is steps / its own max_length: keep that meaning.
            policy_space = SearchSpace(space.actions, int(meta["max_length"]), space.min_length, space.target)
        env_options = {k: meta.get(k, v) for k, v in self.env_options.items()}
        env_options.update({k: self.env_options[k] for k in self.given if k in self.env_options})
        env_options.update(observation_options(meta))  # the layout it was trained on
        rollout_env = self._env(source, policy_space, shaping, gamma, env_options)
        members = self.members or [(self.policy, meta)]
        try:
            networks = [forward.load(p, m["algo"]) for p, m in members]  # numpy: no torch needed
        except BadInput as exc:
            if not self.is_default:
                raise
            self._note(f"{self._label()} not used: {exc}; PPO from scratch")
            return self._from_scratch(source, evaluate, space, seed)
        layout = Layout.match(meta["actions"], space.actions, meta.get("observation_names") or (),
                              rollout_env.observation_names)
        if any(n.outputs != len(layout.outputs) or n.inputs != len(layout.inputs) for n in networks):
            raise BadInput(f"{self.policy}: its network does not match its sidecar's actions and observation")
        if self.branches > 1 and meta["algo"] not in ("ppo", "a2c"):
            raise BadInput(f"ppo: branches needs a policy's action probabilities; {self.policy} is a "
                           f"{meta['algo']} policy")
        members_actors = [Actor(n, layout) for n in networks]
        # A committee (``ensemble=each``) acts as each member alone, in the given order; the mean acts once.
        actors = (members_actors if self.ensemble == "each" or len(members_actors) == 1
                  else [Ensemble(members_actors)])
        rollouts = len(actors) * self.branches  # each actor's roll-out and its branches
        skip = self._no_fine_tuning(layout) if self.finetune else None
        # Fine-tuning's absence is worth a word only where the budget outlasts the roll-outs (said
        # after them, below, when they stop early).
        outlasts = evaluate.remaining > rollouts * policy_space.max_length
        self._say_how_it_is_used(diff, other, skip if outlasts else None, self.finetune and outlasts and skip is None)
        rollout_env.reset(seed=seed)
        if len(actors) > 1:
            names = ", ".join(f"{p.parent.name}/{p.name}" for p, _ in self.members)
            self._note(f"a committee of {len(actors)} policies ({names}): each rolled out in turn, the best answer kept")
        if len(actors) > 1 and evaluate.remaining < rollouts * policy_space.max_length:
            self._note(f"ensemble=each rolls out {len(actors)} policies of up to {policy_space.max_length} passes "
                       f"each; {evaluate.remaining} evaluations may not reach the last (--budget "
                       f"{rollouts * policy_space.max_length} does)")
        for actor in actors:
            _rollout(actor, rollout_env)
            if self.branches > 1:
                _branch(actor, rollout_env, self.branches)
        if skip is not None and not outlasts and evaluate.remaining > 0:
            self._note(f"fine-tuning skipped with {evaluate.remaining} evaluations left, the roll-out is the "
                       f"answer: {skip}")
        if not self.finetune or skip is not None or evaluate.remaining <= 0:
            return
        self._fine_tune(source, evaluate, space, policy_space, seed, shaping, gamma, env_options, layout,
                        rollout_env)

    def _no_fine_tuning(self, layout: Layout) -> str | None:
        """Why fine-tuning cannot be done right here (no torch; a network of another layout), or None."""
        missing = training_missing()
        if missing is not None:
            return f"it needs torch and stable-baselines3 ({missing}): {forward.INSTALL_TRAIN}"
        return None

    def _say_how_it_is_used(self, diff, other: str | None, skip: str | None, fine_tunes: bool) -> None:
        """ONE stderr line, when there is something to say: the shipped default being used, how the
        policy's vocabularies differ from this XLA's (or the other pipeline version it was trained
        on), and why fine-tuning will not follow the roll-out."""
        parts = []
        if self.is_default:
            then = ", then fine-tuning" if fine_tunes else ""
            parts.append(f"zero-shot from the {self._label()} (its roll-out first{then}; "
                         "--policy none for PPO from scratch)")
        if not diff.same_names:
            parts.append(diff.note(f"policy {self._name()}"))
        elif other is not None:
            parts.append(f"{'it' if self.is_default else self._label()} was {other}: using it (same action vocabulary)")
        if skip:
            parts.append(f"fine-tuning skipped, the roll-out is the answer: {skip}")
        if parts:
            self._note("; ".join(parts))

    def _fine_tune(self, source, evaluate, space, policy_space, seed, shaping, gamma, env_options, layout,
                   rollout_env) -> None:
        """Keep learning on this module from the first member (SB3, torch), alternating ``learn`` chunks
        with roll-outs of the updated network."""
        meta = self.meta
        with _torch_session(seed):
            train_env = self._env(source, policy_space, shaping, gamma, env_options)
            overrides = _overrides(meta["algo"], self.hyperparams, self.given)
            try:
                if layout.identity:
                    model = load_model(self.policy, meta, train_env, seed, overrides)
                else:  # trained on another jaxlib: its weights re-laid by name onto this XLA's layout
                    hp = {**DEFAULT_HYPERPARAMS[meta["algo"]], **(meta.get("hyperparameters") or {}), **overrides}
                    model = make_model(meta["algo"], train_env, seed, hp)
                    start_from(model, self.policy, meta["algo"], train_env.actions, train_env.observation_names,
                               space.target)
                    layout = Layout.match(train_env.actions, train_env.actions, train_env.observation_names,
                                          train_env.observation_names)
            except BadInput as exc:
                if not self.is_default:
                    raise
                self._note(f"{self._label()} not fine-tuned: {exc}")
                return
            chunk = 2 * int(getattr(model, "n_steps", 0) or self.hyperparams["n_steps"])
            # The updated network rolls out through the same numpy pass as the shipped one.
            _learn_until_spent(model, evaluate, chunk=chunk,
                               after=lambda: _rollout(Actor(forward.from_sb3(model.policy), layout), rollout_env))
        if evaluate.remaining > 0:
            # The transferred policy only stops (a policy trained where nothing helps learns STOP), so
            # fine-tuning spends nothing: the budget the user gave goes to PPO from scratch instead.
            self._from_scratch(source, evaluate, space, seed)


@contextlib.contextmanager
def _torch_session(seed: int):
    """Training's torch settings for a block: one thread (determinism; the compiler workers own the
    cores), restored after, and SB3's seeding of python, numpy and torch."""
    import torch
    from stable_baselines3.common.utils import set_random_seed

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        set_random_seed(seed)
        yield
    finally:
        torch.set_num_threads(threads)


def _overrides(algo: str, hp: dict, given: set[str]) -> dict:
    """Hyperparameters replaced when a saved policy is fine-tuned here (small rollouts; explicit options)."""
    out = {}
    if algo == "ppo":
        out.update(n_steps=hp["n_steps"], batch_size=hp["batch_size"], n_epochs=hp["n_epochs"])
    elif algo == "a2c":
        out.update(n_steps=min(hp["n_steps"], 8))
    elif algo == "dqn":
        # Learn from the first transition, and mostly exploit the trained Q-function (a fresh
        # schedule would start again from epsilon = 1, i.e. random actions).
        out.update(learning_starts=0, exploration_initial_eps=0.1, exploration_final_eps=0.05)
    for key in ("learning_rate", "ent_coef", "clip_range", "gae_lambda"):
        if key in given and (algo != "dqn" or key == "learning_rate") and not (algo == "a2c" and key == "clip_range"):
            out[key] = hp[key]
    return out


def _rollout(model, env: PassOrderingEnv, first: int | None = None) -> None:
    """One deterministic episode of the current policy (each appended pass is one evaluation), from
    ``first`` when given (``_branch``)."""
    obs, _ = env.reset()
    done = False
    if first is not None:
        obs, _, terminated, truncated, _ = env.step(first)
        done = terminated or truncated
    while not done:
        action, _ = model.predict(obs, deterministic=True)
        obs, _, terminated, truncated, _ = env.step(int(action))
        done = terminated or truncated


def _branch(policy: Actor | Ensemble, env: PassOrderingEnv, branches: int) -> None:
    """Roll out from the policy's next most likely first passes, ``branches - 1`` of them, each then
    continued deterministically (each appended pass is one evaluation; the budget ends it).

    Why: a deterministic roll-out commits to the first pass the policy ranks highest, and on modules
    unlike its training set its second or third choice is often the one a search finds (a single
    `cse_barrier_expander` or `post_scatter_expansion_simplification` where the roll-out takes
    `algsimp`). Trying those first costs a few compiled steps, and the evaluations a small budget
    leaves after one roll-out are otherwise spent on fine-tuning, which on so few steps learns little.
    """
    obs, _ = env.reset()
    probs = policy.probabilities(obs)
    taken = int(probs.argmax())  # the roll-out's first action (STOP: it tried nothing)
    # Passes the policy never saw (or not installed) have probability 0: never its choice.
    order = [int(a) for a in probs.argsort(kind="stable")[::-1]
             if int(a) not in (env.stop, taken) and probs[int(a)] > 0]
    for first in order[:branches - 1]:
        _rollout(policy, env, first)


def _learn_until_spent(model, evaluate: Evaluate, chunk: int | None, after=None) -> None:
    """``learn`` until ``BudgetExhausted`` propagates out of it (or until learning spends nothing).

    ``learn`` can return with budget left: its step count includes STOP actions, which cost no
    evaluation. It is called again (continuing its step counter) while the budget shrinks; a call
    that spends nothing means the policy only stops, and the search ends there.
    """
    first = True
    while evaluate.remaining > 0:
        before = evaluate.remaining
        steps = before if chunk is None else min(chunk, before)
        model.learn(total_timesteps=steps, reset_num_timesteps=first)
        first = False
        if after is not None:
            after()
        if evaluate.remaining >= before:
            return
