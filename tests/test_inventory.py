"""The action vocabulary is discovered from the installed XLA, and each action runs exactly its pass."""

from __future__ import annotations

import json

import pytest

from autotune.pipelines.xla import versions
from autotune.pipelines.xla.inventory import _DUMP_NAME
from conftest import run_cli

REQUIRED = {"algsimp", "dce", "cse", "reshape-mover", "constant_folding"}


def test_vocabulary_is_discovered_and_large_enough(pipeline):
    names = pipeline.passes()
    assert len(names) >= 50
    assert REQUIRED <= set(names)
    assert len(set(names)) == len(names)
    # Target-specific passes are not actions by default ...
    assert "layout-assignment" not in names and "fusion" not in names
    assert not any(n.startswith("float-normalization") for n in names)


def test_target_specific_passes_can_be_opted_in(pipeline):
    inv = pipeline.inventory.with_target_specific(True)
    names = inv.names()
    assert {"layout-assignment", "fusion", "copy-insertion"} <= set(names)
    assert set(pipeline.passes()) < set(names)
    assert inv.actions["fusion"].target_specific


def test_cli_passes_json(db_path):
    proc = run_cli("passes", "--json", db=db_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    names = [a["name"] for a in data["actions"]]
    assert data["count"] == len(names) >= 50
    assert REQUIRED <= set(names)


def _ran(pipeline, module, action):
    """(pipeline, pass) pairs that XLA reports as run when ``action`` is applied alone."""
    names = pipeline.trace(module, action)
    matches = [m for m in map(_DUMP_NAME.match, names) if m]
    return [(m["pipeline"], m["after"]) for m in matches if m["after"] != "pipeline-start"]


# One action per class of pass: a pass directly in the main pipeline, a pass inside a fixed-point
# sub-pipeline, a pass XLA also places in top-level pipelines, an expander, and a whole sub-pipeline.
@pytest.mark.parametrize("action", ["cse", "algsimp", "dce", "dot_decomposer", "call-inliner", "simplification"])
def test_each_action_runs_exactly_its_pass(pipeline, small_root, action):
    ran = _ran(pipeline, small_root, action)
    passes = {name for _, name in ran}
    spec = pipeline.inventory.actions[action]
    assert action in passes, f"{action} did not run: {ran}"
    if spec.macro:
        allowed = spec.keep  # a sub-pipeline runs its own passes and nothing else
    else:
        allowed = {action, *spec.path}
    assert passes <= allowed, f"{action} also ran {sorted(passes - allowed)}"


def test_identity_runs_no_pass(pipeline, small_root):
    assert _ran(pipeline, small_root, "<identity>") == []


def test_dump_names_parse():
    m = _DUMP_NAME.match("module_0002.jit_step.0061.simplification.after_algsimp.before_simplify-sorts.txt")
    assert m and m["pipeline"] == "simplification" and m["after"] == "algsimp"


def _gpu_dump(version: str, numbered: str) -> list[str]:
    """A GPU dump's names shaped as XLA 0.11+ writes them (pre-SPMD ``algsimp``, a numbered
    ``apply-xla-transforms``, ``fusion-wrapper`` a pipeline of its own), from the given jaxlib."""
    runs = [("pre-spmd-partitioner", "call-inliner"), ("pre-spmd-partitioner", "algsimp"), ("sharding-removal", "dce"),
            ("optimization", "dot_decomposer"), ("simplification", "algsimp"), ("simplification", "dce"),
            ("optimization", "simplification"), ("optimization", "cse"), ("optimization", numbered),
            ("layout_assignment", "layout-assignment"), ("fusion-wrapper", "fusion-wrapper")]
    return [f"module_0000.m.{k:04d}.{p}.after_{n}.before_x.txt" for k, (p, n) in enumerate(runs)]


@pytest.mark.parametrize("version,numbered", [("0.12.0.1", "apply-xla-transforms-7"), ("0.10.2", "apply-xla-transforms")])
def test_the_gpu_region_starts_at_optimization_and_numbered_passes_read_as_their_family(version, numbered):
    """Offline, for any installed jax: the actions are the post-SPMD ``optimization`` passes even where
    the pre-partitioning pipeline runs ``algsimp`` too, ``apply-xla-transforms-N`` is its family (and
    excluded), and a step leaves on what ends the compile on that version (``versions.GPU_STOP``)."""
    from autotune.pipelines.xla.inventory import PassInventory

    inv = PassInventory.from_dump_names(f"jaxlib-{version}-cpu-x86_64", _gpu_dump(version, numbered), platform="gpu")
    assert inv.tunable == ("optimization",)
    assert set(inv.actions) == {"dot_decomposer", "algsimp", "dce", "simplification", "cse"}
    assert inv.actions["algsimp"].path == ("simplification",)  # its post-SPMD run, not the pre-partitioning one
    assert "apply-xla-transforms" in inv.all_names and not any(n.startswith("apply-xla-transforms-") for n in inv.all_names)
    assert inv.always_on == (("fusion-wrapper", "autotuner") if version == "0.10.2" else ("fusion-wrapper",))
    assert PassInventory.from_json(inv.to_json()).actions == inv.actions


def test_a_new_database_takes_the_inventory_this_machine_discovered_for_the_same_compiler(tmp_path, monkeypatch):
    """The probe runs once per compiler build on a machine, not once per cache database: a second database
    reads the machine's record (shown by a record edited to lack a pass: the new pipeline lacks it too),
    a record that does not parse is discovered again and rewritten, and ``off`` writes none."""
    from autotune.core.cache import Cache
    from autotune.pipelines.xla import XlaPipeline

    monkeypatch.setenv("AUTOTUNE_MACHINE_CACHE", str(tmp_path / "machine"))

    def inventory_of(db):
        pipe = XlaPipeline(workers=1, cache=Cache(tmp_path / db))
        try:
            return pipe.inventory
        finally:
            pipe.close()

    first = inventory_of("a.db")
    (folder,) = (tmp_path / "machine" / "inventory").iterdir()  # one folder: this compiler build
    (record,) = [p for p in folder.glob("*.json") if p.name != "compiler.json"]
    assert json.loads((folder / "compiler.json").read_text())["jaxlib"] == versions.installed()
    assert json.loads(record.read_text()) == json.loads(first.to_json())
    data = json.loads(record.read_text())
    data["invocations"] = [i for i in data["invocations"] if i[2] != "reshape-mover"]
    record.write_text(json.dumps(data))
    assert "reshape-mover" in first.names() and "reshape-mover" not in inventory_of("b.db").names()
    record.write_text('{"invocations": [[1]]}')  # JSON, but no inventory: read as none, never a failed run
    assert inventory_of("c0.db").names() == first.names()
    record.write_text("{not json")
    assert inventory_of("c.db").names() == first.names()  # discovered again ...
    assert json.loads(record.read_text()) == json.loads(first.to_json())  # ... and remembered again
    monkeypatch.setenv("AUTOTUNE_MACHINE_CACHE", "off")
    record.unlink()
    assert inventory_of("d.db").names() == first.names() and [p.name for p in folder.glob("*.json")] == ["compiler.json"]
