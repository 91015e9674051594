"""A trained policy acting on the installed pipeline: its numpy network behind a re-layout by name.

Why a layer between the network and the environment: the environment speaks the installed XLA's
layout (its passes, its opcodes, ``autotune.rl.env``), the network the layout it was trained on
(its sidecar's ``actions`` and ``observation_names``). ``Layout`` maps one onto the other by name
(``autotune.rl.vocabulary`` says why), so the same code rolls a policy out on the jaxlib it was
trained on (the identity) and on any other. ``Actor`` is what the roll-outs call: ``predict`` as an
SB3 model's, ``probabilities`` over the installed actions (then STOP) for branches and ensembles.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.rl.forward import Network


@dataclass(frozen=True)
class Layout:
    """``outputs[i]``: the installed action index the policy's output ``i`` means (its last output,
    STOP, is the installed STOP), -1 for a pass not installed. ``inputs[j]``: the installed
    observation coordinate the policy's coordinate ``j`` reads, -1 for one that reads 0."""

    outputs: tuple[int, ...]
    inputs: tuple[int, ...]
    n_installed: int  # installed actions, STOP included

    @classmethod
    def match(cls, policy_actions: Sequence[str], installed_actions: Sequence[str],
              policy_observation: Sequence[str], installed_observation: Sequence[str]) -> "Layout":
        index = {a: i for i, a in enumerate(installed_actions)}
        outputs = tuple(index.get(a, -1) for a in policy_actions) + (len(installed_actions),)
        coords = {n: i for i, n in enumerate(installed_observation)}
        return cls(outputs, tuple(coords.get(n, -1) for n in policy_observation), len(installed_actions) + 1)

    @property
    def identity(self) -> bool:
        return (self.outputs == tuple(range(self.n_installed))
                and self.inputs == tuple(range(len(self.inputs))))

    def observation(self, installed: np.ndarray) -> np.ndarray:
        """An installed observation in the policy's layout."""
        if self.identity and len(installed) == len(self.inputs):
            return installed
        src = np.asarray(installed, dtype=np.float32).reshape(-1)
        idx = np.asarray(self.inputs)
        return np.where(idx >= 0, src[np.maximum(idx, 0)], 0.0).astype(np.float32)

    def probabilities(self, policy: np.ndarray) -> np.ndarray:
        """A distribution over the policy's outputs as one over the installed actions: outputs naming a
        pass not installed are dropped and the rest renormalised; passes the policy never saw get 0."""
        out = np.zeros(self.n_installed, dtype=np.float64)
        for i, j in enumerate(self.outputs):
            if j >= 0:
                out[j] += policy[i]
        total = out.sum()
        if total <= 0:  # all its mass on passes not installed: it has nothing to offer but STOP
            out[-1] = 1.0
            return out
        return out / total

    def scores(self, policy: np.ndarray) -> np.ndarray:
        """Per-output scores (Q-values) over the installed actions: -inf where the policy has none."""
        out = np.full(self.n_installed, -np.inf)
        for i, j in enumerate(self.outputs):
            if j >= 0:
                out[j] = policy[i]
        return out


@dataclass(frozen=True)
class Actor:
    """One policy's deterministic choices on the installed pipeline."""

    network: Network
    layout: Layout

    def probabilities(self, obs) -> np.ndarray:
        """The policy's action probabilities over the installed actions (then STOP)."""
        return self.layout.probabilities(self.network.probabilities(self.layout.observation(obs)))

    def predict(self, obs, deterministic: bool = True):
        """The most likely installed action (ties: the lowest index), as ``(action, None)`` like SB3's
        ``predict``; ``deterministic`` is accepted for that signature: roll-outs are deterministic."""
        if self.network.kind == "q":
            values = self.layout.scores(self.network.scores(self.layout.observation(obs)))
            return np.int64(int(np.argmax(values))), None
        return np.int64(int(np.argmax(self.probabilities(obs)))), None
