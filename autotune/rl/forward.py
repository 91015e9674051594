"""A trained policy's forward pass in plain numpy: roll-outs need neither torch nor stable-baselines3.

Why: a shipped policy's zero-shot use (``--strategy ppo`` roll-outs, ``-O branches=N``, committees,
the JAX hook's ``policy=``) only evaluates a small MLP, and installing torch for that is hundreds of
megabytes. So every policy's network is exported once, with torch, to ``NAME.zip.npz`` beside its
``.zip`` (``autotune train`` writes it; ``export`` does it for an existing policy), and every roll-out
runs this numpy pass, with or without torch installed (one code path). Training and fine-tuning
stay with stable-baselines3.

What it reproduces, and nothing else (``from_sb3`` refuses anything it cannot reproduce, loudly):

* PPO and A2C (SB3 ``ActorCriticPolicy``, ``MlpPolicy``): a 1-D ``Box`` observation through the
  ``FlattenExtractor`` (no normalisation: SB3 only scales image spaces), the ``mlp_extractor``'s
  policy net (``Linear`` and activation layers), then ``action_net``: logits of a categorical
  distribution, whose softmax is the action probabilities;
* DQN (``DQNPolicy``): ``q_net``'s ``Linear``/activation stack: one Q-value per action.

The ``.npz`` records the SHA-256 of the ``.zip`` it came from: a policy retrained or edited since
(``model.save``) has a stale ``.npz``, which ``load`` ignores and rebuilds from the ``.zip`` when
torch is there, and refuses in one line when it is not.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autotune.errors import BadInput
from autotune.version import install_line

NPZ_FORMAT = 1
#: The ``.npz`` keeps what the roll-out needs: the policy's own outputs (logits or Q-values).
KINDS = ("logits", "q")
#: Activations the numpy pass reproduces (SB3's ``activation_fn`` choices in practice).
ACTIVATIONS = {
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0.0),
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))),
    "leakyrelu": lambda x: np.where(x > 0, x, 0.01 * x),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "identity": lambda x: x,
}
INSTALL_TRAIN = install_line("train")


def weights_path(zip_path: Path) -> Path:
    """Where a policy's torch-free weights live: ``NAME.zip.npz`` beside ``NAME.zip``."""
    return Path(f"{zip_path}.npz")


def file_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@dataclass(frozen=True)
class Network:
    """An MLP: ``layers`` in order, each ``("linear", W, b)`` (``y = x @ W.T + b``) or ``(activation,)``.
    ``kind`` says what the last layer outputs: ``logits`` (PPO, A2C) or ``q`` (DQN)."""

    kind: str
    layers: tuple[tuple, ...]

    @property
    def inputs(self) -> int:
        return int(next(layer[1].shape[1] for layer in self.layers if layer[0] == "linear"))

    @property
    def outputs(self) -> int:
        return int(next(layer[1].shape[0] for layer in reversed(self.layers) if layer[0] == "linear"))

    def scores(self, obs) -> np.ndarray:
        """The last layer's outputs for one observation (float64)."""
        x = np.asarray(obs, dtype=np.float64).reshape(-1)
        if x.shape[0] != self.inputs:
            raise BadInput(f"policy network takes {self.inputs} observation coordinates, not {x.shape[0]}")
        for layer in self.layers:
            if layer[0] == "linear":
                x = layer[1].astype(np.float64) @ x + layer[2].astype(np.float64)
            else:
                x = ACTIVATIONS[layer[0]](x)
        return x

    def probabilities(self, obs) -> np.ndarray:
        """The action distribution (softmax of the logits); PPO and A2C policies only."""
        if self.kind != "logits":
            raise BadInput("a DQN policy has Q-values, not action probabilities (branches and ensembles need them)")
        return softmax(self.scores(obs))

    def save(self, path: Path, source_digest: str) -> Path:
        arrays = {}
        spec = []
        for i, layer in enumerate(self.layers):
            spec.append(layer[0])
            if layer[0] == "linear":
                arrays[f"w{i}"], arrays[f"b{i}"] = layer[1], layer[2]
        header = {"format": NPZ_FORMAT, "kind": self.kind, "layers": spec, "source_sha256": source_digest}
        path = Path(path)
        with open(path, "wb") as f:
            np.savez_compressed(f, header=np.array(json.dumps(header)), **arrays)
        return path

    @classmethod
    def read(cls, path: Path) -> tuple["Network", str]:
        """A saved network and the digest of the ``.zip`` it was exported from."""
        try:
            with np.load(path, allow_pickle=False) as data:
                header = json.loads(str(data["header"]))
                layers = tuple(("linear", np.array(data[f"w{i}"]), np.array(data[f"b{i}"])) if name == "linear"
                               else (name,) for i, name in enumerate(header["layers"]))
        except (OSError, ValueError, KeyError) as exc:
            raise BadInput(f"{path}: not a policy weights file ({exc})") from None
        if header.get("format") != NPZ_FORMAT or header.get("kind") not in KINDS or any(
                layer[0] not in ACTIVATIONS and layer[0] != "linear" for layer in layers):
            raise BadInput(f"{path}: a policy weights file of another format (re-export it with torch installed)")
        return cls(header["kind"], layers), str(header.get("source_sha256") or "")


def softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - np.max(x))
    return z / z.sum()


def from_sb3(policy, where: str = "policy") -> Network:
    """The numpy ``Network`` of an SB3 policy object (``model.policy``); ``BadInput`` naming what the
    numpy pass cannot reproduce (another extractor, observation space, distribution or layer)."""
    from gymnasium import spaces
    from stable_baselines3.common.distributions import CategoricalDistribution
    from stable_baselines3.common.policies import ActorCriticPolicy
    from stable_baselines3.common.torch_layers import FlattenExtractor
    from stable_baselines3.dqn.policies import DQNPolicy

    space = policy.observation_space
    if not isinstance(space, spaces.Box) or len(space.shape) != 1:
        raise BadInput(f"{where}: observation space {space} is not a flat Box; the numpy forward pass cannot run it")
    if isinstance(policy, ActorCriticPolicy):
        if type(policy.pi_features_extractor) is not FlattenExtractor:
            raise BadInput(f"{where}: features extractor {type(policy.pi_features_extractor).__name__} is not "
                           "FlattenExtractor; the numpy forward pass cannot run it")
        if not isinstance(policy.action_dist, CategoricalDistribution) or getattr(policy, "squash_output", False):
            raise BadInput(f"{where}: action distribution {type(policy.action_dist).__name__} is not categorical")
        layers = _sequential(policy.mlp_extractor.policy_net, where) + _sequential([policy.action_net], where)
        return Network("logits", tuple(layers))
    if isinstance(policy, DQNPolicy):
        q_net = policy.q_net
        if type(q_net.features_extractor) is not FlattenExtractor:
            raise BadInput(f"{where}: features extractor {type(q_net.features_extractor).__name__} is not "
                           "FlattenExtractor; the numpy forward pass cannot run it")
        return Network("q", tuple(_sequential(q_net.q_net, where)))
    raise BadInput(f"{where}: a {type(policy).__name__}; the numpy forward pass runs ActorCriticPolicy and DQNPolicy")


def _sequential(modules, where: str) -> list[tuple]:
    import torch.nn as nn

    out = []
    for module in modules:
        if isinstance(module, nn.Linear):
            bias = (module.bias.detach().cpu().numpy() if module.bias is not None
                    else np.zeros(module.out_features, dtype=np.float32))
            out.append(("linear", module.weight.detach().cpu().numpy().copy(), bias.copy()))
        elif isinstance(module, nn.LeakyReLU) and module.negative_slope != 0.01:
            raise BadInput(f"{where}: LeakyReLU with slope {module.negative_slope}; the numpy pass has 0.01")
        elif isinstance(module, nn.ELU) and module.alpha != 1.0:
            raise BadInput(f"{where}: ELU with alpha {module.alpha}; the numpy pass has 1.0")
        elif type(module).__name__.lower() in ACTIVATIONS:
            out.append((type(module).__name__.lower(),))
        else:
            raise BadInput(f"{where}: layer {type(module).__name__} is not one the numpy forward pass reproduces "
                           f"(Linear, {', '.join(ACTIVATIONS)})")
    return out


def export(zip_path: Path, algo: str) -> Network:
    """Load ``zip_path`` with stable-baselines3 (torch) and return its numpy network."""
    try:
        from stable_baselines3 import A2C, DQN, PPO
    except ImportError:
        raise BadInput(f"{zip_path}: has no current torch-free weights ({weights_path(zip_path).name}); "
                       f"exporting them needs torch and stable-baselines3: {INSTALL_TRAIN}") from None
    cls = {"ppo": PPO, "a2c": A2C, "dqn": DQN}[algo]
    try:
        model = cls.load(str(zip_path), device="cpu")
    except (ValueError, KeyError, OSError, RuntimeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BadInput(f"{zip_path}: cannot load this {algo} policy: {first}") from None
    return from_sb3(model.policy, str(zip_path))


def write(zip_path: Path, network: Network) -> Path:
    """Save ``network`` as ``zip_path``'s torch-free weights (stamped with the zip's digest)."""
    return network.save(weights_path(zip_path), file_digest(zip_path))


def load(zip_path: Path, algo: str) -> Network:
    """A policy's numpy network: its ``.npz`` when it matches the ``.zip``, else exported from the
    ``.zip`` now (torch needed; nothing is written next to the policy)."""
    zip_path = Path(zip_path)
    npz = weights_path(zip_path)
    if npz.is_file():
        network, digest = Network.read(npz)
        if digest == file_digest(zip_path):
            return network
    return export(zip_path, algo)
