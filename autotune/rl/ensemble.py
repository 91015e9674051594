"""Several trained policies acting as one: the mean of their action probabilities, then the most likely.

Why: PPO's result depends on its seed (the same recipe, trained with three seeds, recovered 93%,
24% and 59% of a search's gain on the real LLM steps at the full scale). Averaging the action
distributions of policies trained with different seeds keeps what they agree on and lets no single
seed's quirk decide alone; ``bench/learning.py --stage ensemble`` measures it against its members.

Members must drive the same MDP: the same actions, observation layout, ``max_length`` and target
(``check_members``). Only roll-outs use the mean; fine-tuning continues the first member alone.
The members are ``autotune.rl.actor.Actor``s (numpy forward passes, each already re-laid onto the
installed pipeline's actions by name), so an ensemble needs no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from autotune.errors import BadInput
from autotune.rl.train import sidecar_target

#: Sidecar keys every member must share: they define the MDP a policy was trained on.
SAME_MDP = ("actions", "observation_names", "observation_size", "max_length", "target", "algo", "opcodes")


def check_members(paths: Sequence[Path], metas: Sequence[dict]) -> None:
    """``BadInput`` naming the first member whose sidecar describes another MDP than the first's."""
    if len(paths) < 2:
        raise BadInput("an ensemble needs at least two policies")
    first = metas[0]
    if first.get("algo") not in ("ppo", "a2c"):
        raise BadInput(f"ensemble: {paths[0]} is a {first.get('algo')} policy; only PPO and A2C policies "
                       "(action distributions) can be averaged")
    for path, meta in zip(paths[1:], metas[1:]):
        for key in SAME_MDP:
            if _value(meta, key) != _value(first, key):
                raise BadInput(f"ensemble: {path} was trained with another {key} than {paths[0]}; "
                               "members must share actions, observations, max_length and target")


def _value(meta: dict, key: str):
    """A sidecar's value for ``key``, its target read as ``autotune.rl.train`` reads it."""
    return sidecar_target(meta) if key == "target" else meta.get(key)


class Ensemble:
    """``predict`` as an SB3 model's, over ``actors`` (``autotune.rl.actor.Actor``, the same installed actions)."""

    def __init__(self, actors: Sequence):
        if not actors:
            raise BadInput("an ensemble needs at least one policy")
        self.actors = list(actors)

    def probabilities(self, obs) -> np.ndarray:
        """The members' mean probability of each installed action (then STOP) for one observation."""
        return sum(actor.probabilities(obs) for actor in self.actors) / len(self.actors)

    def predict(self, obs, deterministic: bool = True):
        """The most likely action under the mean distribution (ties: the lowest index); ``deterministic``
        is accepted for the SB3 signature: an ensemble is only rolled out deterministically."""
        return np.int64(int(np.argmax(self.probabilities(obs)))), None
