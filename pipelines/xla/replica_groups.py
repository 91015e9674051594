"""Collectives' device groups written over a mesh, rewritten as the explicit lists every XLA path reads.

Why: jax >= 0.10 partitions with Shardy, and the per-device module it leaves (what a dump of a
real multi-device step holds) writes a collective's groups over the device mesh:
``replica_groups=mesh['axis_0'=2,'axis_1'=4], device_ids=([4,2]T(1,0)) {'axis_0'}``. XLA's HLO
parser reads that, but its conversion to StableHLO (the road every compile here takes) rejects it
("Unknown axis axis_0"), and the serialized module keeps only the mesh form. The same groups as a
list (``{{0,4},{2,6},...}``) mean the same thing to every pass, so HLO text is rewritten before it is
parsed (:func:`expand`).

The form, as XLA prints it (``MeshAxesReplicaGroupList``): the mesh's axes and sizes; optionally the
device at each mesh position (row-major), as an iota tile ``[dims]T(perm)`` (``iota(n)`` reshaped to
``dims``, transposed by ``perm``, flattened) or a plain list; and the axes the groups span. Devices
that share their coordinates on every other axis form one group, ordered by the spanned axes'
coordinates in the order they are listed; groups come in the row-major order of the other axes.
A variant this does not understand (sub-axes, say) is refused with the text it could not read,
never guessed.
"""

from __future__ import annotations

import math
import re

import numpy as np

from autotune.errors import BadInput

_MESH_GROUPS = re.compile(
    r"replica_groups=mesh\[(?P<axes>[^\]]*)\]"
    r"(?:, device_ids=\((?P<ids>[^()]*(?:\([^()]*\))?)\))?"
    r" \{(?P<over>[^{}]*)\}"
)
_AXIS = re.compile(r"'([^']+)'=(\d+)")
_TILE = re.compile(r"^\[([\d,]+)\](?:T\(([\d,]+)\))?$")


def expand(text: str) -> str:
    """``text`` with every mesh-form ``replica_groups`` written as an explicit list of groups."""
    if "replica_groups=mesh[" not in text:
        return text
    out = _MESH_GROUPS.sub(_expanded, text)
    if "replica_groups=mesh[" in out:
        at = out.index("replica_groups=mesh[")
        raise BadInput(f"a collective's device groups are in a form not understood here: {out[at:at + 120]!r}")
    return out


def _expanded(m: re.Match) -> str:
    groups = mesh_groups(m["axes"], m["ids"], m["over"])
    return "replica_groups={" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}"


def mesh_groups(axes_text: str, ids_text: str | None, over_text: str) -> list[list[int]]:
    """The device groups of one mesh-form group list (its three parts, as printed)."""
    axes = [(name, int(size)) for name, size in _AXIS.findall(axes_text)]
    if ",".join(f"'{n}'={s}" for n, s in axes) != axes_text.replace(" ", ""):
        raise BadInput(f"mesh axes not understood: {axes_text!r}")
    names = [n for n, _ in axes]
    sizes = [s for _, s in axes]
    over = re.findall(r"'([^']+)'", over_text)
    if not over or ",".join(f"'{a}'" for a in over) != over_text.replace(" ", "") or set(over) - set(names):
        raise BadInput(f"mesh axes of a collective not understood: {{{over_text}}} over {names}")
    grid = device_ids(ids_text, math.prod(sizes)).reshape(sizes)
    spanned = [names.index(a) for a in over]
    others = [i for i in range(len(names)) if i not in spanned]
    size = math.prod(sizes[i] for i in spanned)
    return np.transpose(grid, others + spanned).reshape(-1, size).tolist()


def device_ids(text: str | None, n: int) -> np.ndarray:
    """The device at each mesh position (row-major): an iota tile ``[dims]T(perm)``, a list, or iota."""
    if text is None:
        return np.arange(n)
    tile = _TILE.match(text.replace(" ", ""))
    if tile:
        dims = [int(d) for d in tile[1].split(",")]
        perm = [int(p) for p in tile[2].split(",")] if tile[2] else list(range(len(dims)))
        ids = np.arange(math.prod(dims)).reshape(dims).transpose(perm).ravel()
    else:
        try:
            ids = np.array([int(x) for x in text.strip("[]").split(",")])
        except ValueError:
            raise BadInput(f"mesh device ids not understood: {text!r}") from None
    if ids.size != n or sorted(ids.tolist()) != list(range(n)):
        raise BadInput(f"mesh device ids {text!r} are not a permutation of the mesh's {n} devices")
    return ids

