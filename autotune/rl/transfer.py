"""A saved policy's SB3 weights re-laid by name onto the installed XLA's layout, to train on from there.

Why: a policy's network is tied to the layout it was trained on (``autotune.rl.vocabulary``): its
first layers read the coordinates named in its sidecar's ``observation_names``, its last layer has
one output per pass in ``actions`` (then STOP). Roll-outs bridge the gap at run time
(``autotune.rl.actor.Layout``), but SB3 can only continue training a network whose shapes are the
environment's. So fine-tuning a policy trained on another jaxlib (``autotune train --init``, the
learning benchmark's ``--init``, a run's fine-tuning after its roll-out) starts from a fresh network
of the installed layout whose weights are the saved ones moved by name:

* an input layer's column for a coordinate the policy knew is its old column; one for a coordinate
  it never saw (a new opcode, a new pass's ``applied:`` flag) is 0, so that coordinate changes
  nothing until training gives it weight;
* an output layer's row for a pass the policy knew is its old row (STOP is STOP); a pass it never
  saw gets a zero row and the policy's lowest bias, the score of the pass it liked least, so it
  starts as an unlikely but possible choice that training can raise (a pass scored -inf could never
  be sampled, and so never learned);
* every other tensor (hidden layers, the value head) is copied as it is.

The re-laid network chooses, on the installed pipeline, what the saved one chooses through
``Layout`` (the passes it knew keep their scores relative to each other), so fine-tuning starts
from the policy's zero-shot behaviour, not from scratch. Only PPO and A2C ``MlpPolicy`` networks
and DQN's ``q_net`` are re-laid (what ``autotune train`` writes); anything else is refused in one
line rather than guessed at.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autotune.errors import BadInput
from autotune.rl.actor import Layout


@dataclass(frozen=True)
class Relaid:
    """What re-laying did, for the one line a command prints: coordinates and passes moved, new ones."""

    passes_kept: int
    passes_new: int
    passes_dropped: int
    inputs_kept: int
    inputs_new: int

    def note(self, label: str) -> str:
        return (f"{label}: weights re-laid by name onto this XLA's layout ({self.passes_kept} passes kept, "
                f"{self.passes_new} new at its lowest score, {self.passes_dropped} dropped; "
                f"{self.inputs_kept} observation coordinates kept, {self.inputs_new} new at weight 0)")


def relay_state(state: dict, layout: Layout, n_inputs: int) -> tuple[dict, Relaid]:
    """``state`` (a policy's ``state_dict``: name -> tensor, in the saved layout) re-laid for an
    installed layout of ``n_inputs`` observation coordinates and ``layout.n_installed`` actions
    (STOP included). Tensors are torch's; only their ``shape``, ``numpy()`` and ``new_tensor`` are used."""
    old_in, old_out = len(layout.inputs), len(layout.outputs)
    out = {}
    for name, tensor in state.items():
        arr = tensor.detach().cpu().numpy()
        # PPO/A2C's output layer is ``action_net``; DQN's is the last Linear of ``q_net`` (and its target).
        output = name.startswith("action_net.") or ("q_net" in name and arr.shape[0] == old_out)
        if output and arr.ndim == 2:  # an output layer's weights: rows are actions
            arr = _rows(arr, layout.outputs, layout.n_installed, fill=0.0)
        elif output:  # its bias: unseen passes at the lowest score
            arr = _rows(arr, layout.outputs, layout.n_installed, fill=float(arr.min()))
        elif arr.ndim == 2 and arr.shape[1] == old_in:  # an input layer: columns are observation coordinates
            arr = _columns(arr, layout.inputs, n_inputs)
        out[name] = tensor.new_tensor(np.ascontiguousarray(arr))
    kept = sum(1 for j in layout.outputs[:-1] if j >= 0)
    seen_inputs = sum(1 for j in layout.inputs if j >= 0)
    return out, Relaid(kept, layout.n_installed - 1 - kept, old_out - 1 - kept, seen_inputs, n_inputs - seen_inputs)


def _columns(arr: np.ndarray, sources: Sequence[int], n: int) -> np.ndarray:
    new = np.zeros((arr.shape[0], n), dtype=arr.dtype)
    for j, k in enumerate(sources):
        if k >= 0:
            new[:, k] = arr[:, j]
    return new


def _rows(arr: np.ndarray, targets: Sequence[int], n: int, fill: float) -> np.ndarray:
    new = np.full((n, *arr.shape[1:]), fill, dtype=arr.dtype)
    for i, j in enumerate(targets):
        if j >= 0:
            new[j] = arr[i]
    return new


def relaid_parameters(model, zip_path: Path, meta: dict, actions: Sequence[str],
                      observation_names: Sequence[str]) -> Relaid | None:
    """Load the saved policy at ``zip_path`` into ``model`` (a fresh SB3 model on the installed
    layout: ``actions`` and ``observation_names``): as it is when the layouts are the same (None),
    else re-laid by name (``relay_state``; its ``Relaid``). BadInput in one line when the saved
    network is not one this can re-lay."""
    layout = Layout.match(meta["actions"], actions, meta.get("observation_names") or (), observation_names)
    if layout.identity and len(layout.inputs) == len(observation_names):
        model.set_parameters(str(zip_path), exact_match=True, device="cpu")
        return None
    from stable_baselines3.common.save_util import load_from_zip_file

    try:
        _, params, _ = load_from_zip_file(str(zip_path), device="cpu", print_system_info=False)
    except (ValueError, KeyError, OSError, RuntimeError) as exc:
        raise BadInput(f"{zip_path}: cannot read its network: {str(exc).splitlines()[0] if str(exc) else exc}") from None
    saved = (params or {}).get("policy")
    if not saved:
        raise BadInput(f"{zip_path}: no policy network in this file")
    state, relaid = relay_state(saved, layout, len(observation_names))
    target = model.policy.state_dict()
    wrong = sorted(k for k in target if k not in state or tuple(state[k].shape) != tuple(target[k].shape))
    if wrong:
        raise BadInput(f"{zip_path}: its network cannot be re-laid onto this layout ({wrong[0]} does not match; "
                       "a network other than MlpPolicy's)")
    model.policy.load_state_dict(state)
    return relaid
