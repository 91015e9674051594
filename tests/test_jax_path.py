"""From a jax function or an unmodified script to the tuning store and back (real jax, real XLA, small
functions): ``autotune.jax.tune``, the store, the public ``compiler_options`` path, capture/tune/exec and
the ``autotune store`` commands."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import autotune
import autotune.jax as aj
from autotune.core.record import TuningRecord
from autotune.core.store import Host, Store
from autotune.jax.process import BOOTSTRAP
from tests.conftest import ROOT, assert_one_line_error, run_cli


def f(x, w):
    return jnp.tanh((x @ w) * 2.0 + 1.0).sum(axis=0) * 3.0


X = jnp.asarray(np.random.default_rng(0).normal(size=(16, 16)), jnp.float32)
W = jnp.asarray(np.random.default_rng(1).normal(size=(16, 16)) * 0.1, jnp.float32)
#: Switching XLA's fusion pass off changes what f compiles to: the option's effect is visible in the executable.
OPTION = {"xla_disable_hlo_passes": "fusion"}


def _program(compiled) -> str:
    """What XLA compiled, canonical, without metadata or the header line (it carries jax's compile options)."""
    from autotune.pipelines.xla import hlo

    return hlo.canonical_text(compiled.runtime_executable().hlo_modules()[0]).partition("\n")[2]


@pytest.fixture(scope="module")
def fingerprint(engine):
    return engine.prepare(autotune.load(jax.jit(f).lower(X, W))).fingerprint


def _record(engine, fingerprint, sequence=(), options=None) -> TuningRecord:
    return TuningRecord(module="f", fingerprint=fingerprint, sequence=tuple(sequence), objective="runtime",
                        pipeline_version=engine.version, xla_version=engine.pipeline.compiler_version,
                        autotune_version=autotune.__version__, metrics={"cost": 1.0, "default_cost": 2.0},
                        valid=True, validation="executed", compiler_options=dict(options or {}))


def test_tune_stores_a_record_and_the_next_call_hits_it(tmp_path, db_path):
    store = Store(tmp_path / "store")
    first = aj.tune(f, X, W, budget=2, strategy="greedy", space="options", store=store, cache=db_path,
                    workers=1, progress=False, confirm_rounds=4)
    assert not first.from_store and first.run_id
    assert [e.path for e in store.entries()] == [first.entry.path]
    # a confirmed, executed win or "keep XLA's default": either way the answer is stored with its evidence
    assert first.keeps_default or (first.claim.win and first.validation)
    assert "store entry" in first.describe() and first.record.target == "cpu"
    t0 = time.perf_counter()
    second = aj.tune(f, X, W, budget=2, strategy="greedy", space="options", store=store, cache=db_path,
                     workers=1, progress=False)
    assert second.from_store and second.entry.path == first.entry.path and second.run_id == first.run_id
    assert "not tuned again" in second.describe()
    assert time.perf_counter() - t0 < 30  # a lookup, not a search


def test_options_record_goes_through_jax_compiler_options(tmp_path, engine, db_path, fingerprint):
    store = Store(tmp_path / "store")
    store.put(_record(engine, fingerprint, options=OPTION))
    lowered = jax.jit(f).lower(X, W)
    public = _program(lowered.compile(compiler_options=OPTION))
    plain = _program(lowered.compile())
    assert public != plain
    compiled, via = aj.compile(f, X, W, store=store, cache=db_path)
    assert via == "compiler_options" and _program(compiled) == public
    with aj.use(store=store, cache=db_path) as stats:  # the hook, for programs that do not call autotune
        hooked = jax.jit(f).lower(X, W).compile()
        out = jax.jit(f)(X, W)
    assert stats.applied_via == {fingerprint: "compiler_options"} and stats.options[fingerprint] == OPTION
    assert _program(hooked) == public
    np.testing.assert_allclose(np.asarray(out), np.asarray(f(X, W)), rtol=1e-5)
    assert "1 via compiler_options" in stats.summary()


def test_sequence_record_goes_through_the_compile_patch(tmp_path, engine, db_path, fingerprint):
    store = Store(tmp_path / "store")
    store.put(_record(engine, fingerprint, sequence=("algsimp",)))
    with aj.use(store=store, cache=db_path, strict=True) as stats:
        jax.jit(f)(X, W)
    assert stats.applied_via == {fingerprint: "compile-patch"}


def test_an_entry_of_another_host_or_xla_is_not_applied(tmp_path, engine, db_path, fingerprint):
    store = Store(tmp_path / "store")
    store.put(_record(engine, fingerprint, options=OPTION), host=Host("Another CPU", "0123456789ab", "x86_64"))
    store.put(replace(_record(engine, fingerprint, options=OPTION), xla_version="jaxlib-0.0.1-cpu-x86_64"))
    with aj.use(store=store, cache=db_path) as stats:
        jax.jit(f)(X, W)
    assert not stats.applied_via
    whys = sorted(why for _, why in stats.foreign)
    assert len(whys) == 2 and "another XLA" in whys[0] and "another host" in whys[1]
    assert "not applied" in stats.summary()


def test_empty_store_passes_every_compile_through(tmp_path, db_path):
    with aj.use(store=tmp_path / "nothing", cache=db_path) as stats:
        jax.jit(f)(X, W)
    assert stats.passed_through >= 1 and not stats.seen and not stats.applied_via


SCRIPT = """
import jax, jax.numpy as jnp
@jax.jit
def step(x, w):
    return jnp.tanh(x @ w) * 0.5 + x
x = jnp.ones((384, 384)); w = jnp.eye(384) * 0.1
for _ in range(20):
    x = step(x, w)
print("out", float(x.sum()))
"""


@pytest.mark.slow
def test_capture_tune_exec_on_an_unmodified_script(tmp_path, db_path):
    import sys

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {"AUTOTUNE_STORE": str(tmp_path / "store"), "JAX_PLATFORMS": "cpu", "AUTOTUNE_WORKERS": "1",
           "PYTHONPATH": str(ROOT)}
    cap = run_cli("capture", "-o", str(tmp_path / "cap"), "--", sys.executable, str(script), env=env, db=db_path)
    assert cap.returncode == 0, cap.stderr
    assert "out " in cap.stdout and "autotune capture:" in cap.stderr
    index = json.loads((tmp_path / "cap" / "index.json").read_text())
    top = index["modules"][0]
    assert top["name"] == "jit_step" and top["runs"] == 20 and top["arguments"] == ["tensor<384x384xf32>"] * 2
    tuned = run_cli("tune", str(tmp_path / "cap"), "--top", "1", "--budget", "1", "--strategy", "greedy",
                    "--space", "options", "--confirm-rounds", "4", "--json", env=env, db=db_path)
    assert tuned.returncode == 0, tuned.stderr
    assert [m["module"] for m in json.loads(tuned.stdout)["modules"]] == ["jit_step"]
    report = tmp_path / "applied.json"
    ran = run_cli("exec", "--report", str(report), "--", sys.executable, str(script), env=env, db=db_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == cap.stdout  # the program's own output, unchanged
    applied = json.loads(report.read_text())
    # the step's entry matched its compile in the program: applied (options or passes) or kept XLA's default
    assert len(applied["kept_default"]) + len(applied["applied_via"]) == 1, applied
    assert ran.stderr.strip().splitlines()[-1].startswith("autotune: ")
    # and the hook is jax's own plugin discovery: the bootstrap folder holds no sitecustomize or .pth
    assert not list(BOOTSTRAP.rglob("sitecustomize.py")) and not list(BOOTSTRAP.rglob("*.pth"))


def cli(capsys, *args: str):
    """The real CLI in this process (its startup is most of a subprocess's cost): (exit code, out, err)."""
    from autotune.cli import main

    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def one_line(code, err) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("autotune: error: "), (code, err)
    return lines[0]


def test_store_commands(tmp_path, engine, fingerprint, capsys, monkeypatch):
    store = Store(tmp_path / "store")
    entry = store.put(_record(engine, fingerprint, options=OPTION))
    store.put(_record(engine, "f" * 32), host=Host("Another CPU", "0123456789ab", "x86_64"))
    monkeypatch.setenv("AUTOTUNE_STORE", str(store.root))
    code, out, err = cli(capsys, "store", "list", "--json")
    assert code == 0, err
    rows = {r["id"]: r for r in json.loads(out)["entries"]}
    assert rows[entry.id]["applies_here"] and len(rows) == 2
    code, out, err = cli(capsys, "store", "show", entry.id[:10])
    assert code == 0 and TuningRecord.from_dict(json.loads(out)).compiler_options == OPTION
    assert "applied on this host" in err
    exported = tmp_path / "exported"
    assert cli(capsys, "store", "export", "-o", str(exported))[0] == 0
    assert len(list(exported.glob("*.json"))) == 2
    code, out, err = cli(capsys, "store", "prune")
    assert code == 0 and "removed 1 entry" in out
    assert [e.id for e in store.entries()] == [entry.id]
    other = Store(tmp_path / "other")
    monkeypatch.setenv("AUTOTUNE_STORE", str(other.root))
    code, out, err = cli(capsys, "store", "import", *map(str, sorted(exported.glob("*.json"))))
    assert code == 0, err
    assert len(other.entries()) == 2 and out.count("imported") == 2


def test_bad_input_is_one_line(tmp_path, capsys, monkeypatch):
    assert "no such capture folder" in one_line(*cli(capsys, "tune", str(tmp_path / "missing"))[::2])
    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("AUTOTUNE_STORE", str(tmp_path / "afile"))
    assert "must be a folder" in one_line(*cli(capsys, "store", "list")[::2])
    monkeypatch.setenv("AUTOTUNE_STORE", str(tmp_path / "s"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert "bad.json" in one_line(*cli(capsys, "store", "import", str(bad))[::2])
    assert "give the program" in one_line(*cli(capsys, "exec")[::2])
    # and through a real process, as a user meets it
    assert "no such capture folder" in assert_one_line_error(run_cli("tune", str(tmp_path / "gone")))
