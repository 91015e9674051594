"""``pipelines/xla/versions.py``: each version-dependent name, checked against the installed XLA.

The tables say which name plays a role on which jaxlib; these tests compile real modules with the
installed jax (its CPU compiler, and its GPU compiler deviceless through the CUDA plugin) and find
each name where the table says it is. A new jax that moves one fails here, naming the table.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from autotune.errors import BadInput
from autotune.pipelines.xla import versions

from conftest import ROOT, needs_plugin


# ---- the supported range (no compiler) ------------------------------------------------------------------
def test_versions_parse_and_tables_pick_the_newest_key_not_above_the_version():
    assert versions.parse("0.12.0.1") == (0, 12, 0, 1) and versions.parse("0.11.2+cuda13") == (0, 11, 2)
    assert versions.parse("0.12.0.dev20260101") == (0, 12, 0)
    table = {"0.10.2": "old", "0.11.0": "new", "0.12.0": "newest"}
    assert [versions.at(table, v) for v in ("0.10.2", "0.10.9", "0.11.0", "0.11.2", "0.12.0.1", "0.13")] == [
        "old", "old", "new", "new", "newest", "newest"]
    assert versions.parse(versions.OLDEST) < versions.parse(versions.NEWEST_TESTED)


def test_the_installed_jax_is_supported():
    assert versions.check_supported() == versions.installed()


@pytest.mark.parametrize("version", ["0.10.1", "0.9.2", "0.12.1", "0.13.0", "garbage"])
def test_an_unsupported_jax_is_refused_in_one_line_naming_the_range_and_the_version(monkeypatch, version):
    monkeypatch.delenv(versions.ALLOW_UNTESTED_ENV, raising=False)
    monkeypatch.setattr(versions, "installed", lambda: version)
    with pytest.raises(BadInput) as err:
        versions.check_supported()
    message = str(err.value)
    assert "\n" not in message and f"jaxlib {version} is not supported" in message
    assert f"{versions.OLDEST} to {versions.NEWEST_TESTED}" in message
    monkeypatch.setenv(versions.ALLOW_UNTESTED_ENV, "1")  # trying a new release anyway
    assert versions.check_supported() == version


@pytest.mark.parametrize("version", ["0.10.2", "0.11.2", "0.12.0.1"])
def test_every_tested_version_is_supported(monkeypatch, version):
    monkeypatch.delenv(versions.ALLOW_UNTESTED_ENV, raising=False)
    monkeypatch.setattr(versions, "installed", lambda: version)
    assert versions.check_supported() == version


def test_the_version_line_says_when_the_installed_jax_is_not_supported(monkeypatch):
    """``autotune --version`` answers on any jax (it is how a user finds out which one they have)."""
    monkeypatch.delenv(versions.ALLOW_UNTESTED_ENV, raising=False)
    monkeypatch.setattr(versions, "installed", lambda: "0.13.0")
    line = versions.describe_installed()
    assert "jaxlib 0.13.0: XLA jaxlib-0.13.0-cpu-" in line
    assert f"NOT supported: autotune runs on jax/jaxlib {versions.OLDEST} to {versions.NEWEST_TESTED}" in line


# ---- names that carry a number ---------------------------------------------------------------------------
def test_numbered_families_read_as_their_family_only_where_numbered():
    assert versions.family("apply-xla-transforms-12", "0.12.0.1") == "apply-xla-transforms"
    assert versions.family("apply-xla-transforms-12", "0.10.2") == "apply-xla-transforms-12"
    assert versions.family("apply-xla-transforms", "0.12.0.1") == "apply-xla-transforms"
    assert versions.family("all-reduce-folder", "0.12.0.1") == "all-reduce-folder"  # no number: not a family
    assert versions.runs_in_every_step("0.10.2") == frozenset()


# ---- the partitioner's text ------------------------------------------------------------------------------
def test_the_parameter_sharding_pattern_matches_each_versions_spelling():
    """The three spellings as each version printed the llm_spmd tensor-parallel step's query weight
    (the installed version's real text is checked in ``test_zoo_spmd.py``)."""
    seen = {
        "0.10.2": "parameter(10), sharding={devices=[1,1,2]<=[2]}",
        "0.11.2": "parameter(10), sharding={mesh['model'=2], [{}, {}, {'model'}]}",
    }
    for version, line in seen.items():
        pattern = versions.parameter_sharding((1, 1, 2), "model", version)
        assert re.search(pattern, line), version
        other = seen["0.11.2" if version == "0.10.2" else "0.10.2"]
        assert not re.search(pattern, other)
    assert versions.parameter_sharding((1, 1, 2), "model", "0.12.0.1") is None


# ---- the GPU pipeline, as the installed XLA runs it ------------------------------------------------------
_GPU_PROBE = r"""
import json, os
os.environ["JAX_PLATFORMS"] = "cpu"
from autotune.pipelines.xla import hlo, pjrt_hlo, targets, versions
from autotune.pipelines.xla.gpu_worker import XlaGpuWorker, _DUMP
from autotune.pipelines.xla.worker import PROBE_HLO

worker = XlaGpuWorker(None, False, targets.resolve("h100").config, "h100")
first, second = worker.discover(), worker.discover()
proto = hlo.parse_text(PROBE_HLO).as_serialized_hlo_module_proto()
tmp, _ = worker.gpu_compile(proto, [], ".+")
prints = {}
for f in sorted(os.listdir(tmp)):
    m = _DUMP.match(f)
    if m and versions.family(m["after"]) == "apply-xla-transforms":
        prints["after"] = hlo.fingerprint(hlo.parse_proto(hlo.unwrap_hlo_proto(open(os.path.join(tmp, f), "rb").read())))
    if m and versions.family(m["before"]) == "apply-xla-transforms":
        prints["before"] = hlo.fingerprint(hlo.parse_proto(hlo.unwrap_hlo_proto(open(os.path.join(tmp, f), "rb").read())))
module, library = pjrt_hlo.cuda_plugin()
print(json.dumps({"first": first, "second": second, "prints": prints, "plugin": module, "library": str(library),
                  "mapped": str(library) in open("/proc/self/maps").read()}))
"""


@pytest.fixture(scope="module")
def gpu_probe():
    """The probe module's H100 pipeline as the installed XLA dumps it, compiled twice in one process."""
    out = subprocess.run([sys.executable, "-c", _GPU_PROBE], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def gpu_inventory(gpu_probe):
    from autotune.pipelines.xla import xla_version
    from autotune.pipelines.xla.inventory import PassInventory

    return PassInventory.from_dump_names(xla_version(), gpu_probe["first"], platform="gpu")


@needs_plugin
def test_the_gpu_compile_stops_after_the_pass_and_pipeline_versions_names(gpu_inventory):
    stop = versions.at(versions.GPU_STOP)
    runs = [(i.pipeline, i.name) for i in gpu_inventory.invocations if i.name != "pipeline-start"]
    assert (stop.pipeline, stop.pass_) in runs, f"versions.GPU_STOP: no {stop.pass_} in {stop.pipeline}"
    assert stop.pipeline in gpu_inventory.top_level
    # the compile ends there: the autotuning stage after it fails (no device), nothing after is dumped
    after = runs[runs.index((stop.pipeline, stop.pass_)) + 1:]
    assert all(gpu_inventory.chain(p)[-1] not in gpu_inventory.region for p, _ in after)
    assert not any(name in ("gpu-kernel-scheduling", "latency-hiding-scheduler", "copy-insertion") for _, name in after)
    # every name a step leaves on exists in this pipeline
    assert set(stop.always_on) <= gpu_inventory.all_names | gpu_inventory.top_level


@needs_plugin
def test_the_gpu_region_starts_at_the_post_spmd_optimization_pipeline(gpu_inventory):
    start = versions.at(versions.GPU_REGION_START)
    region = gpu_inventory.region
    assert start in region and gpu_inventory.tunable == region[region.index(start):]
    assert "algsimp" in gpu_inventory.descendants(start)
    before = region[:region.index(start)]
    assert "pre-spmd-partitioner" in before  # what prepares partitioning is not tuned, on every version
    chain = {a.name: gpu_inventory.chain(a.pipeline)[-1] for a in gpu_inventory.actions.values()}
    assert set(chain.values()) <= set(gpu_inventory.tunable)
    assert chain["algsimp"] == chain["dce"] == start  # their post-SPMD run, never the pre-partitioning one


@needs_plugin
def test_numbered_families_are_numbered_per_compile_as_versions_says(gpu_probe, gpu_inventory):
    def names(dump):
        return {m["after"] for m in map(_match, dump) if m and m["after"].startswith("apply-xla-transforms")}

    first, second = names(gpu_probe["first"]), names(gpu_probe["second"])
    if "apply-xla-transforms" in versions.runs_in_every_step():
        assert re.fullmatch(r"apply-xla-transforms-\d+", *first) and first != second  # a new number per compile
    else:
        assert first == second == {"apply-xla-transforms"}
    # read as the family in the inventory, and kept out of the vocabulary on every version
    assert "apply-xla-transforms" in gpu_inventory.all_names and "apply-xla-transforms" not in gpu_inventory.actions
    # what a step cannot switch off does nothing: the GPU worker registers no transform
    assert gpu_probe["prints"]["before"] == gpu_probe["prints"]["after"]


def _match(name: str):
    from autotune.pipelines.xla.inventory import _DUMP_NAME

    return _DUMP_NAME.match(name)


@needs_plugin
def test_the_cuda_plugin_driven_is_the_one_jax_loaded(gpu_probe):
    assert gpu_probe["plugin"] in versions.at(versions.CUDA_PLUGINS)
    assert gpu_probe["mapped"], gpu_probe["library"]  # jax mapped that library: its table is initialised


def test_whether_a_decided_compile_keeps_donation_is_as_versions_says():
    """``HOOK_KEEPS_ALIASING``: a jitted function that donates its first argument, compiled once plainly
    and once with a per-site decision through the pre-scheduler transformation (``site_hook``). The plain
    executable donates (the argument is deleted by the call); the decided one does too exactly where the
    table says the installed jaxlib keeps aliasing, and the rewrite's report says when it does not."""
    import jax
    import jax.numpy as jnp

    from autotune.pipelines.xla import site_hook, sites

    def f(x, w):
        return x + 1.0, jnp.tanh(x @ w)

    x0 = jnp.linspace(-1, 1, 64 * 64, dtype=jnp.float32).reshape(64, 64)
    w = jnp.linspace(1, -1, 64 * 32, dtype=jnp.float32).reshape(64, 32)
    plain = jax.jit(f, donate_argnums=0).lower(x0, w).compile()
    dot = next(s for s in sites.find_sites(plain.as_text()) if s.opcode == "dot")
    with site_hook.deciding({dot.name: sites.AS_XLA}) as report:
        decided = jax.jit(lambda a, b: f(a, b), donate_argnums=0).lower(x0, w).compile()
    assert report and report[0].applied == (dot.name,)
    keeps = versions.hook_keeps_aliasing()
    assert report[0].aliasing_dropped is (not keeps)
    donated = {}
    for name, exe in (("plain", plain), ("decided", decided)):
        x = x0 + 0.0
        exe(x, w)
        donated[name] = x.is_deleted()
    assert donated == {"plain": True, "decided": keeps}, (versions.installed(), donated)
