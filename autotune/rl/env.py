"""Pass ordering as a gymnasium environment (the MDP of the 2023 paper, over this project's actions).

One episode builds one pass sequence for one module:

* **Episode sources.** The environment holds several ``Evaluate`` objects, one per module (from a
  tuner run, or ``autotune.core.tuner.evaluation_session`` for any module). ``reset()`` draws one of
  them with the environment's seeded RNG (``self.np_random``), so one policy trains over many
  modules and a run is reproducible under ``reset(seed=...)``.
* **Actions.** ``Discrete(n_actions + 1)``: action ``i < n_actions`` appends pass ``actions[i]``;
  the last action is STOP. STOP, or reaching ``max_length`` passes, terminates the episode (the
  step fraction is part of the observation, so the horizon is part of the state: termination, not
  truncation).
* **Cost and budget.** Appending a pass evaluates the whole sequence (``cost = evaluate(seq)``, one
  budget unit, cache hits included; the prefix is a cache hit, so only the new step compiles).
  STOP costs nothing. The cost of the empty sequence (the episode's starting cost) comes free from
  ``Evaluate.empty_cost`` (the tuner measures it anyway as its baseline) and is shared by every
  environment holding the same ``EpisodeSource``. When the budget is spent, ``evaluate`` raises
  ``BudgetExhausted`` out of ``step``/``reset``; that is how a tuner run ends a training loop.
* **Reward** (``reward="step"``, the default). ``(previous cost - new cost) / scale`` with ``scale``
  the episode's starting cost, so the undiscounted return of an episode is the relative cost
  reduction of its final sequence (``(c0 - c_T) / c0``) whatever the module's size.
* **Best-so-far reward** (``reward="best"``). What a roll-out returns is the best state it visited
  (the tuner keeps every evaluation's best, and XLA's default when none beat it), not its last one;
  so a step is paid what it lowers the episode's best cost: ``(best - min(best, new cost)) / scale``.
  A pass that makes the module worse costs nothing but the step (the next passes start from the
  worse state, and the observation's ``progress:above_best_percent`` says so), and the return is the
  best state's reduction. ``scale`` is the module's *known gain* when its ``EpisodeSource`` has a
  ``reference`` cost below its start (``c0 - reference``, e.g. the best an expert search found), so
  the return is the fraction of that gain recovered: a module whose best ordering saves one
  instruction weighs as much as one that saves a hundred, which is how a policy is judged
  (``bench/learning.py``); without a reference, the starting cost as above. Why: under the step
  reward with the starting cost as scale, a one-instruction win on a 500-instruction module pays
  0.002, below PPO's entropy bonus, and the trained policies never learned those. The failure
  penalty below is in the same units: with a reference it is the tuner's failure surcharge over the
  module's known gain (``0.25 * c0 / (c0 - reference)``, tens to hundreds on LLM steps whose best
  ordering saves a few instructions), so such a policy learns to avoid failing passes hard; the
  shipped policy was trained that way. A failed sequence (cost ==
  ``failure_cost``: a pass errored or crashed, or XLA's pipeline fails after it) ends the episode
  with reward ``-failure_penalty`` and leaves the module state at the previous one, so failing is
  always strictly worse than having chosen STOP one step earlier. The default penalty is the relative
  surcharge the tuner itself puts on a failure, ``(failure_cost - c0) / c0`` (0.25 for the
  default objectives), at least ``MIN_FAILURE_PENALTY``.
  A state the GPU guard sets aside (a GPU target; it adds kernel launches over XLA's default,
  ``core/gpu_guard.py``) is not a failure: the pass ran, so the episode goes on from it with reward 0
  and the cost of the last state the guard let through (a later pass may take the launches back),
  and it is never offered as an answer (``info["guarded"]``).
* **Observation** (``Box`` float32, in ``[0, OBS_HIGH]``): ``autotune.rl.observation.Observation``,
  every coordinate named (``env.observation_names``, same order as the vector): the opcode histogram
  of the whole module and of its loop bodies, structural counts (CSE candidates, layout-op chains,
  ...) and, with ``partition_features`` (default), how a partitioned step is wired around its
  collectives, all relative to the episode's initial instruction count; with ``cost_features`` (default)
  instructions, flops, transcendentals and bytes accessed relative to the initial module; how many
  times each action is already in the sequence; the step fraction ``len(sequence) / max_length``.
  Dividing by the initial count (rather than ``log1p``) makes the vector the module's composition
  relative to where the episode started, so one policy transfers across module sizes.

* **Shaping** (``shaping=True``, the paper's best variant): adds the potential-based term
  ``F = gamma * Phi(s') - Phi(s)`` with
  ``Phi(s) = w_flops * (1 - flops(s) / flops(s0)) + w_transcendentals * (1 - transcendentals(s) / transcendentals(s0))``,
  the weighted relative reduction of flops and transcendentals since the episode's start; a term
  whose initial value is zero or NaN is left out (no signal to scale). ``Phi(s0) = 0`` matters in
  practice: with ``Phi(s) = -flops(s)/flops(s0) - ...`` (same differences, offset by a constant)
  a STOP at the first step is paid ``-Phi(s0) = +1`` at once, and the trained policies learned to
  stop immediately on every module; with the start at zero, stopping early earns nothing. Ng, Harada & Russell
  (1999, "Policy invariance under reward transformations") show that adding a potential difference
  leaves the optimal policies unchanged: along any trajectory the shaping terms telescope to
  ``gamma^T Phi(s_T) - Phi(s_0)``. In an episodic task that only holds if the potential of the
  terminal (absorbing) state is zero, otherwise the agent is paid for *where* and *when* it stops;
  so on terminating transitions (STOP, ``max_length``, failure) ``Phi(s') = 0`` and the shaped
  return is exactly the base return minus the constant ``Phi(s_0)``. The shaping only redistributes
  credit over the steps (flop and transcendental reductions pay immediately), which is what speeds
  learning. ``gamma`` must equal the learner's discount factor (PPO's ``gamma``) for the telescoping
  to hold under discounting.

``info`` of every step holds ``cost``, ``best_cost``, ``start_cost``, ``sequence``, ``failed``, ``base_reward``,
``shaping`` and ``source``. ``observation_names`` and ``action_names`` say which index is which.

**Making one** (what a researcher does)::

    import autotune, gymnasium
    env = gymnasium.make("autotune/PassOrdering-v0", module="model.hlo")    # or modules=[...],
    env = gymnasium.make("autotune/PassOrdering-v0", suite="suite/", split="train")  # a generated suite
    ...
    env.close()  # stops the compiler workers and closes the cache

``make_env`` (the registered entry point) opens an engine (the cache at ``db``, default the project's
``.autotune/cache.db`` or ``$AUTOTUNE_DB``; ``workers`` compiler processes, default 1: one env steps one
sequence at a time), one evaluation session per module with an unbounded budget (``budget=N`` to stop
after N evaluations per module), and owns them: ``close()`` releases them. The lower-level
``PassOrderingEnv(sources, actions, ...)`` is what the strategies use: it owns nothing.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium
import numpy as np
from gymnasium import spaces

from autotune.errors import BadInput
from autotune.pipelines.xla.hlo import opcode_vocabulary
from autotune.core.metrics import Metrics
from autotune.rl import ENV_ID, register_env  # noqa: F401  (ENV_ID: re-exported)
from autotune.rl.observation import COST_FEATURES, OBS_HIGH, Observation  # noqa: F401 (re-exported)
from autotune.strategy import Evaluate
from autotune.core.spec import DEFAULT_MAX_LENGTH, DEFAULT_OBJECTIVE
from autotune.core.engine import open_engine
from autotune.core.module import Module, load
from autotune.core.tuner import evaluation_session

#: Smallest penalty of a failed step (in units of the episode's starting cost).
MIN_FAILURE_PENALTY = 0.1
#: Name of the last action.
STOP_NAME = "STOP"
#: Reward modes (see the module docstring).
REWARDS = ("step", "best")


@dataclass
class EpisodeSource:
    """One module episodes can start from: its ``Evaluate`` and (once measured) its starting cost."""

    evaluate: Evaluate
    name: str = "module"
    start_cost: float | None = None  # cost of the empty sequence (free: ``Evaluate.empty_cost``)
    reference: float | None = None  # best known cost (scales the best-so-far reward; see the module docstring)
    episodes: int = 0
    best_cost: float = math.inf
    best_sequence: tuple[str, ...] = field(default=())

    def initial_cost(self) -> float:
        if self.start_cost is None:
            self.start_cost = float(self.evaluate.empty_cost)  # no budget: the tuner knows it already
        return self.start_cost

    def _offer(self, sequence: tuple[str, ...], cost: float) -> None:
        if cost < self.best_cost:
            self.best_cost, self.best_sequence = cost, sequence

    def summary(self) -> dict:
        """Plain data about this source's episodes (picklable: what a subprocess env reports back)."""
        return {"name": self.name, "episodes": self.episodes, "start_cost": self.start_cost,
                "best_cost": None if math.isinf(self.best_cost) else self.best_cost,
                "best_sequence": list(self.best_sequence), "evaluations": len(self.evaluate.history)}


def _reduction(x: float, x0: float) -> float:
    """``1 - x / x0`` for the potential, or 0 when there is nothing to scale by (x0 zero or NaN)."""
    if x0 is None or math.isnan(x0) or x0 <= 0 or x is None or math.isnan(x):
        return 0.0
    return 1.0 - x / x0


class PassOrderingEnv(gymnasium.Env):
    """Build a pass sequence step by step; see the module docstring for the MDP."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        sources: Sequence[Evaluate | EpisodeSource],
        actions: Sequence[str],
        max_length: int = 16,
        shaping: bool = False,
        gamma: float = 0.99,
        w_flops: float = 0.5,
        w_transcendentals: float = 0.5,
        cost_features: bool = True,
        partition_features: bool = True,
        failure_penalty: float | None = None,
        names: Sequence[str] | None = None,
        reward: str = "step",
    ):
        super().__init__()
        if reward not in REWARDS:
            raise BadInput(f"reward must be one of {', '.join(REWARDS)}, not {reward!r}")
        if not sources:
            raise BadInput("PassOrderingEnv needs at least one episode source")
        if not actions:
            raise BadInput("PassOrderingEnv needs at least one action")
        if max_length < 1:
            raise BadInput("max_length must be at least 1")
        if not 0.0 < gamma <= 1.0:
            raise BadInput(f"gamma must be in (0, 1], not {gamma}")
        self.sources: list[EpisodeSource] = []
        for k, s in enumerate(sources):
            if isinstance(s, EpisodeSource):
                self.sources.append(s)
            else:
                self.sources.append(EpisodeSource(s, names[k] if names else f"module{k}"))
        self.actions = tuple(actions)
        self.max_length = int(max_length)
        self.shaping = bool(shaping)
        self.gamma = float(gamma)
        self.w_flops = float(w_flops)
        self.w_transcendentals = float(w_transcendentals)
        self.cost_features = bool(cost_features)
        self.partition_features = bool(partition_features)
        self.failure_penalty = failure_penalty
        self.reward = reward
        self.opcodes = opcode_vocabulary()
        self.observation = Observation(tuple(self.opcodes), self.actions, self.cost_features,
                                       self.partition_features)
        self.obs_size = self.observation.size
        self.observation_space = spaces.Box(0.0, OBS_HIGH, shape=(self.obs_size,), dtype=np.float32)
        self.action_space = spaces.Discrete(len(self.actions) + 1)
        self.stop = len(self.actions)
        self.source: EpisodeSource | None = None
        self._done = True
        self._owned: contextlib.ExitStack | None = None  # set by make_env: the engine this env opened

    # ---- names ----------------------------------------------------------------------------------
    @property
    def observation_names(self) -> tuple[str, ...]:
        """Name of every observation coordinate, by index (see the module docstring for their meaning)."""
        return self.observation.names

    @property
    def action_names(self) -> tuple[str, ...]:
        """Name of every action, by index: the pipeline's passes, then ``STOP``."""
        return (*self.actions, STOP_NAME)

    def episode_stats(self) -> list[dict]:
        """Per-module episode counts and best results so far (``EpisodeSource.summary``)."""
        return [s.summary() for s in self.sources]

    def close(self) -> None:
        """Release what ``make_env`` opened for this env (worker processes, cache); idempotent."""
        owned, self._owned = self._owned, None
        if owned is not None:
            owned.close()
        super().close()

    # ---- features -------------------------------------------------------------------------------
    def observe(self, metrics: Metrics, steps: int) -> np.ndarray:
        """The observation of a module state ``steps`` passes into the episode (``self.sequence[:steps]``)."""
        return self.observation.vector(metrics, self._m0, self.sequence[:steps], self.max_length,
                                       (self._c0, self.cost, self.best))

    def potential(self, metrics: Metrics) -> float:
        """``Phi(s)`` of a (non-terminal) state: the weighted relative flop/transcendental reduction."""
        m0 = self._m0
        return (self.w_flops * _reduction(metrics.flops, m0.flops)
                + self.w_transcendentals * _reduction(metrics.transcendentals, m0.transcendentals))

    # ---- gymnasium API ----------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "source" in options:
            index = int(options["source"])
        else:
            index = int(self.np_random.integers(len(self.sources))) if len(self.sources) > 1 else 0
        self.source = self.sources[index]
        evaluate = self.source.evaluate
        self._m0 = evaluate.input_metrics
        self._c0 = self.source.initial_cost()  # may raise BudgetExhausted (first episode only)
        self._scale = self._c0 if self._c0 > 0 else 1.0
        ref = self.source.reference
        if self.reward == "best" and ref is not None and math.isfinite(ref) and ref < self._c0:
            self._scale = self._c0 - ref
        fail = (evaluate.failure_cost - self._c0) / self._scale
        self._failure_penalty = (float(self.failure_penalty) if self.failure_penalty is not None
                                 else max(MIN_FAILURE_PENALTY, fail))
        self.sequence: tuple[str, ...] = ()
        self.cost = self.best = self._c0
        self.metrics = self._m0
        self._done = False
        self.source.episodes += 1
        return self.observe(self.metrics, 0), {"source": self.source.name, "cost": self.cost, "start_cost": self._c0,
                                               "sequence": ()}

    def step(self, action):
        if self._done:
            raise RuntimeError("the episode has ended: call reset()")
        action = int(action)
        if not 0 <= action <= self.stop:
            raise ValueError(f"action {action} is outside Discrete({self.stop + 1})")
        phi = self.potential(self.metrics) if self.shaping else 0.0
        failed = guarded = False
        if action == self.stop:
            base = 0.0
            terminated = True
        else:
            seq = self.sequence + (self.actions[action],)
            cost = float(self.source.evaluate(seq))  # raises BudgetExhausted when the budget is spent
            evaluate = self.source.evaluate
            guarded = cost == evaluate.failure_cost and evaluate.guarded(seq)
            metrics = evaluate.metrics(seq) if cost != evaluate.failure_cost or guarded else None
            if guarded and metrics is not None:
                # the GPU guard set this state aside (it adds launches): no credit and never an answer,
                # but the pass ran and a later one may take the launches back, so the episode goes on
                base = 0.0
                self.sequence, self.metrics = seq, metrics
                terminated = len(seq) >= self.max_length
            elif metrics is None or math.isnan(cost):
                failed = True
                base = -self._failure_penalty
                terminated = True
            else:
                if self.reward == "best":
                    base = max(0.0, self.best - cost) / self._scale
                else:
                    base = (self.cost - cost) / self._scale
                self.sequence, self.cost, self.metrics = seq, cost, metrics
                self.best = min(self.best, cost)
                self.source._offer(seq, cost)
                terminated = len(seq) >= self.max_length
        shaping = 0.0
        if self.shaping:
            phi_next = 0.0 if terminated else self.potential(self.metrics)
            shaping = self.gamma * phi_next - phi
        self._done = terminated
        info = {"source": self.source.name, "cost": self.cost, "best_cost": self.best, "start_cost": self._c0,
                "sequence": self.sequence,
                "failed": failed, "guarded": guarded, "base_reward": base,
                "shaping": shaping}
        obs = self.observe(self.metrics, len(self.sequence))
        return obs, float(base + shaping), terminated, False, info


def module_list(module=None, modules=None, suite=None, split: str | None = "train") -> list:
    """What ``make_env`` trains on, as given: exactly one of a module, a list of modules or a suite
    directory (one side of its split, ``split=None`` for all). Items are paths or ``Module`` objects."""
    given = [k for k, v in (("module", module), ("modules", modules), ("suite", suite)) if v is not None]
    if len(given) != 1:
        raise BadInput("give exactly one of module=PATH, modules=[PATHS] or suite=DIR"
                       + (f" (got {', '.join(given)})" if given else ""))
    if module is not None:
        return [module]
    if modules is not None:
        if isinstance(modules, (str, os.PathLike)):
            raise BadInput("modules= takes a list of paths (module= takes one)")
        items = list(modules)
        if not items:
            raise BadInput("modules= is empty")
        return items
    if split not in (None, "train", "test"):
        raise BadInput(f"split must be 'train', 'test' or None, not {split!r}")
    if not (Path(suite) / "manifest.json").is_file():
        raise BadInput(f"{suite}: not a suite directory (no manifest.json; see `autotune suite generate`)")
    from autotune.zoo.suite import modules as suite_modules  # the zoo package imports jax

    try:
        found = suite_modules(suite, split)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInput(f"{suite}/manifest.json: unreadable ({exc})") from None
    if not found:
        raise BadInput(f"{suite}: no {split or ''} modules in its manifest")
    return found


def make_env(module=None, modules=None, suite=None, split: str | None = "train", *,
             sources: Sequence[Evaluate | EpisodeSource] | None = None, actions: Sequence[str] | None = None,
             db=None, workers: int = 1, objective: str | None = None, max_length: int | None = None,
             budget: int | None = None, references: dict[str, float] | None = None,
             target: str | None = None, backend: str | None = None, **options) -> PassOrderingEnv:
    """The environment ``gymnasium.make("autotune/PassOrdering-v0", ...)`` builds.

    From ``module`` (a path or ``autotune.Module``), ``modules`` (a list of them) or ``suite`` (a
    directory written by ``autotune suite generate``) and ``split``: opens an engine (cache ``db``,
    ``workers`` compiler processes) and one evaluation session per module (``objective``, default
    final-ops; ``budget`` evaluations per module, default unbounded; ``target``: the machine whose
    pipeline judges, default cpu; ``backend``: default xla), owned by the env and released by ``close()``. ``references`` (module name -> best known cost) scale the ``reward="best"`` reward. ``options`` go to ``PassOrderingEnv`` (``shaping``, ``gamma``, ...).
    With ``sources`` and ``actions`` instead: the lower-level constructor, nothing opened.
    """
    max_length = DEFAULT_MAX_LENGTH if max_length is None else max_length
    if sources is not None:
        if actions is None:
            raise BadInput("sources= needs actions= (the pass names)")
        return PassOrderingEnv(sources, actions, max_length=max_length, **options)
    items = module_list(module, modules, suite, split)
    if budget is not None and budget < 1:
        raise BadInput(f"budget must be positive, not {budget}")

    loaded = [m if isinstance(m, Module) else load(str(m), backend=backend) for m in items]  # BadInput names a bad file
    stack = contextlib.ExitStack()
    try:
        evaluator = stack.enter_context(open_engine(db, workers=workers, target=target, backend=backend))
        sessions = []
        for m in loaded:
            root = evaluator.prepare(m)
            sessions.append(EpisodeSource(
                evaluation_session(evaluator, m, objective=objective or DEFAULT_OBJECTIVE,
                                   budget=budget if budget is not None else 10**12), root.name,
                reference=(references or {}).get(root.name)))
        env = PassOrderingEnv(sessions, evaluator.pipeline.passes(), max_length=max_length, **options)
    except BaseException:
        stack.close()
        raise
    env._owned = stack
    env.evaluator = evaluator
    return env


def register() -> None:
    """Register ``autotune/PassOrdering-v0`` with gymnasium (idempotent; ``import autotune`` does it)."""
    register_env()


register()
