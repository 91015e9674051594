#!/usr/bin/env python
"""Real multi-device LLM steps: the three real steps of tests/data/real-llm partitioned by their own shardings.

Why: issue 31 judges the zero-shot policy on real multi-device steps it has never seen, and the
repository held none: every partitioned step here was generated (``llm_spmd``). The three real LLM
steps (MaxText dumps of LLaMA-3 8B decode, DeepSeek-V2 16B decode and gpt-oss 20B prefill, run on one
device) keep MaxText's mesh and every sharding MaxText wrote for them as Shardy attributes;
:func:`autotune.zoo.remesh` resizes the mesh and lets XLA's partitioner make the per-device program,
collectives included (``autotune/zoo/reshard.py``). Nothing of the partitioning is chosen here but
the mesh, and the meshes are fixed by one rule for every step: each axis of the step's own mesh
alone over 4 devices (MaxText's twelve: data, fsdp, tensor, expert, context, ...), and ``tensor`` x
``fsdp`` over 2 x 2; a mesh whose per-device program has no collective (the step's shardings never
name that axis), or is the same module as an earlier mesh's (two axes the step's rules use alike),
is left out. (A first rule, ``tensor``, ``fsdp`` and ``expert`` alone and the 2 x 2, was measured
first; it was widened to every axis to take in ``context``, the axis of the context-parallel step
issue 31 names, and the rest with it.) No policy was trained on these steps or on their source modules.

    python bench/real_spmd.py [--out DIR]     # writes the modules and manifest.json into DIR

``bench/spmd_policy.py --family real_spmd`` measures a policy on them.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from harness import REAL_LLM as SOURCES, ROOT

DEFAULT_DIR = ROOT / ".autotune" / "real-spmd"
#: The meshes, one rule for every step (see the module docstring): each axis of the step's mesh alone
#: over 4 devices, then these (where the step's mesh has their axes).
DEVICES = 4
COMBINED = ({"tensor": 2, "fsdp": 2},)
RULE = "every axis alone over 4 devices; tensor2 x fsdp2"


def meshes(axes: dict[str, int]) -> list[dict[str, int]]:
    """The meshes a step with these mesh axes is partitioned over."""
    return [{axis: DEVICES} for axis in axes] + [dict(m) for m in COMBINED if set(m) <= set(axes)]


@dataclass(frozen=True)
class RealEntry:
    """One partitioned real step, shaped like a suite manifest entry for the benchmarks that read both."""

    name: str
    file: str
    sha256: str
    source: str
    mesh: dict = field(hash=False)
    devices: int = 0
    collectives: int = 0
    family: str = "real_spmd"
    kind: str = "real"
    split: str = "test"

    @property
    def config(self) -> dict:
        return {"parallel": mesh_tag(self.mesh, "x"), "devices": self.devices, "source": self.source}


def mesh_tag(mesh: dict, sep: str = "_") -> str:
    """``{"tensor": 2, "fsdp": 2}`` -> ``tensor2_fsdp2`` (file names; reports join with ``x``)."""
    return sep.join(f"{axis}{size}" for axis, size in mesh.items())


def ensure(directory: Path = DEFAULT_DIR) -> list[RealEntry]:
    """The partitioned real steps in ``directory``, made when missing or made from other sources or by
    another jax (the manifest records both)."""
    import jax

    from autotune import zoo
    from autotune.zoo import reshard
    from autotune.zoo.common import sha256_text

    sources = sorted(SOURCES.glob("*.hlo"))
    key = {"jax": jax.__version__, "rule": RULE,
           "sources": {p.name: sha256_text(p.read_text(encoding="utf-8")) for p in sources}}
    manifest = directory / "manifest.json"
    if manifest.exists():
        data = json.loads(manifest.read_text())
        if data.get("key") == key:
            return [RealEntry(**e) for e in data["entries"]]
    directory.mkdir(parents=True, exist_ok=True)
    entries, left_out = [], []
    for path in sources:
        text = path.read_text(encoding="utf-8")
        for mesh in meshes(reshard.mesh_axes(text)):
            name = f"{path.stem}_{mesh_tag(mesh)}"
            print(f"partitioning {name} ...", file=sys.stderr, flush=True)
            out = zoo.remesh(text, mesh)
            collectives = reshard.collective_count(out)
            sha = sha256_text(out)
            same = next((e.name for e in entries if e.sha256 == sha), None)
            if not collectives or same:
                left_out.append({"name": name, "why": f"the same module as {same}" if same else "no collective"})
                continue
            (directory / f"{name}.hlo").write_text(out, encoding="utf-8")
            entries.append(RealEntry(name=name, file=f"{name}.hlo", sha256=sha,
                                     source=path.name, mesh=dict(mesh),
                                     devices=reshard.devices_of(mesh), collectives=collectives))
    manifest.write_text(json.dumps({"key": key, "entries": [e.__dict__ for e in entries], "left_out": left_out},
                                   indent=1) + "\n")
    return entries


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=DEFAULT_DIR)
    args = p.parse_args(argv)
    for e in ensure(args.out):
        print(f"{e.name}: {e.devices} devices, {e.collectives} collectives")
    return 0


if __name__ == "__main__":
    sys.exit(main())
