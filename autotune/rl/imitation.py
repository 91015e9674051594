"""Imitation for pass-ordering policies: demonstrations as (observation, action) pairs, behaviour
cloning, and behaviour cloning as a term kept during PPO.

Why a term during PPO. Every shipped policy starts from behaviour cloning on a search's winners
and is then fine-tuned by PPO. PPO's own draws (which module each episode gets, which action is
sampled, which minibatch comes first) carry the weights away from that start differently for
each seed, and on unseen steps the seeds ended tens of points apart (issue 31: 93% / 59% / 24% of
a search's gain on the shared real LLM steps at the full scale). A behaviour-cloning term kept
during fine-tuning (the "BC regulariser" of demonstration-augmented policy gradient, e.g.
Rajeswaran et al. 2018, DAPG, or the BC loss of Nair et al. 2018) holds the policy near what the
demonstrations taught on the states they cover, and lets PPO change it where they are silent.

``ImitationTerm`` is applied as an SB3 callback: after every PPO update (before the next rollout,
and once at the end), ``steps`` full-batch gradient steps of ``weight x`` the cross-entropy of
the demonstrations' actions, with the policy's own optimizer. Alternating rather than one summed
loss keeps SB3's ``PPO.train`` as the library wrote it; the saved policy is a plain PPO ``.zip``.

The demonstrations are rolled through a ``PassOrderingEnv`` (``demonstration_pairs``), so their
observations have exactly the layout the policy sees in training and use; ``Demonstrations``
carries the observation names and is refused (``BadInput``) by an environment of another layout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autotune.errors import BadInput


@dataclass(frozen=True)
class Demonstrations:
    """(observation, action) pairs in one environment's layout: ``observations`` (n, d) float32,
    ``actions`` (n,) int64 action indices (the last index is STOP), ``observation_names`` (d) and
    ``action_names`` (the env's actions, STOP not included) that say what the numbers mean."""

    observations: np.ndarray
    actions: np.ndarray
    observation_names: tuple[str, ...]
    action_names: tuple[str, ...]

    def __post_init__(self):
        if self.observations.ndim != 2 or self.observations.shape[0] != self.actions.shape[0]:
            raise BadInput(f"demonstrations: {self.observations.shape} observations for {self.actions.shape} actions")
        if self.observations.shape[1] != len(self.observation_names):
            raise BadInput("demonstrations: observation width differs from its names")

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    @property
    def stop_pairs(self) -> int:
        return int((self.actions == len(self.action_names)).sum())

    def check_layout(self, observation_names: Sequence[str], action_names: Sequence[str]) -> None:
        """BadInput unless an environment with these names sees what the demonstrations recorded."""
        if tuple(observation_names) != self.observation_names:
            raise BadInput("demonstrations were recorded with another observation layout than this environment's")
        if tuple(action_names) != self.action_names:
            raise BadInput("demonstrations were recorded with another action vocabulary than this environment's")

    def save(self, path: Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, observations=self.observations, actions=self.actions,
                 observation_names=np.array(self.observation_names), action_names=np.array(self.action_names))

    @classmethod
    def load(cls, path: Path) -> "Demonstrations":
        try:
            with np.load(Path(path)) as f:
                return cls(f["observations"].astype(np.float32), f["actions"].astype(np.int64),
                           tuple(str(x) for x in f["observation_names"]), tuple(str(x) for x in f["action_names"]))
        except (OSError, KeyError, ValueError) as exc:
            raise BadInput(f"{path}: not a demonstrations file ({exc})") from None


def demonstration_pairs(env, best: Mapping[int, Sequence[str]], stop_labels: bool = True) -> Demonstrations:
    """Roll each demonstration through ``env`` (a ``PassOrderingEnv``): ``best`` maps an episode
    source index to its winning sequence. One pair per pass (the observation before it, the pass),
    then (observation, STOP) when the sequence is shorter than the horizon and ``stop_labels``."""
    obs, acts = [], []
    for source, sequence in best.items():
        o, _ = env.reset(options={"source": source})
        for name in sequence:
            obs.append(o)
            acts.append(env.actions.index(name))
            o, *_ = env.step(env.actions.index(name))
        if stop_labels and len(sequence) < env.max_length:
            obs.append(o)
            acts.append(env.stop)
    width = len(env.observation_names)
    return Demonstrations(np.asarray(obs, dtype=np.float32).reshape(-1, width), np.asarray(acts, dtype=np.int64),
                          tuple(env.observation_names), tuple(env.actions))


def cross_entropy(policy, demos: Demonstrations, observations=None):
    """Mean negative log-likelihood of the demonstrations' actions under ``policy`` (an SB3
    ``ActorCriticPolicy``); ``observations`` replaces the recorded ones (e.g. jittered)."""
    import torch

    x = torch.as_tensor(demos.observations if observations is None else observations, dtype=torch.float32)
    y = torch.as_tensor(demos.actions, dtype=torch.long)
    return -policy.get_distribution(x).log_prob(y).mean()


def accuracy(policy, demos: Demonstrations) -> float:
    """Share of the pairs whose action is the policy's most likely one."""
    import torch

    with torch.no_grad():
        x = torch.as_tensor(demos.observations, dtype=torch.float32)
        probs = policy.get_distribution(x).distribution.probs
        return float((probs.argmax(-1) == torch.as_tensor(demos.actions)).float().mean())


def behaviour_cloning(policy, demos: Demonstrations, epochs: int = 300, lr: float = 3e-3, seed: int = 0,
                      noise: float = 0.0, jitter_mask: Sequence[bool] | None = None) -> dict:
    """Fit ``policy`` to the demonstrations: full batch, Adam, ``epochs`` steps. ``noise`` > 0
    multiplies the coordinates where ``jitter_mask`` is true by ``exp(noise * N(0, 1))`` each epoch
    (a fresh draw per coordinate and pair), so no single composition fraction becomes decisive."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    x = torch.as_tensor(demos.observations, dtype=torch.float32)
    mask = torch.as_tensor(list(jitter_mask), dtype=torch.bool) if jitter_mask is not None else None
    losses = []
    for _ in range(epochs):
        xe = x
        if noise > 0 and mask is not None:
            xe = torch.where(mask, x * torch.exp(noise * torch.randn(x.shape, generator=gen)), x)
        loss = cross_entropy(policy, demos, xe)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return {"samples": len(demos), "stop_samples": demos.stop_pairs, "loss_first": losses[0] if losses else None,
            "loss_last": losses[-1] if losses else None, "train_accuracy": accuracy(policy, demos)}


@dataclass(frozen=True)
class ImitationTerm:
    """Behaviour cloning kept during PPO: after each update, ``steps`` gradient steps of ``weight x``
    the demonstrations' cross-entropy with the policy's own optimizer (see the module docstring)."""

    demonstrations: Demonstrations
    weight: float = 1.0
    steps: int = 10

    def __post_init__(self):
        if not self.weight > 0:
            raise BadInput(f"imitation weight must be positive, not {self.weight}")
        if self.steps < 1:
            raise BadInput(f"imitation steps must be at least 1, not {self.steps}")
        if len(self.demonstrations) == 0:
            raise BadInput("imitation term: no demonstration pairs")

    def record(self) -> dict:
        """What a policy's sidecar says of the term."""
        return {"weight": self.weight, "steps": self.steps, "pairs": len(self.demonstrations),
                "stop_pairs": self.demonstrations.stop_pairs}

    def callback(self):
        """An SB3 callback applying the term (SB3 and torch imported here, not at module import)."""
        from stable_baselines3.common.callbacks import BaseCallback

        term = self

        class KeepImitation(BaseCallback):
            def __init__(self):
                super().__init__()
                self.updates = 0
                self.losses: list[float] = []

            def _apply(self) -> None:
                policy = self.model.policy
                for _ in range(term.steps):
                    loss = term.weight * cross_entropy(policy, term.demonstrations)
                    policy.optimizer.zero_grad()
                    loss.backward()
                    policy.optimizer.step()
                self.losses.append(float(loss.detach()) / term.weight)
                self.updates += 1

            def _on_rollout_start(self) -> None:
                if self.model.num_timesteps > 0:  # a PPO update has happened since the last rollout
                    self._apply()

            def _on_training_end(self) -> None:
                self._apply()

            def _on_step(self) -> bool:
                return True

        return KeepImitation()
