"""The engine depends on the Backend contract and nothing else: the same engine, cache, tuner,
validation and strategy tests pass on XLA and on the toy string-rewriting compiler
(``autotune.testing.toy``, registered through the ``autotune.backends`` entry point)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from autotune.core.backend import BackendBase, available, contract_problems, get, supports
from autotune.core.module import Module, load
from autotune.core.tuner import tune, validity_of
from autotune.errors import UnknownName
from conftest import GPT2, SMALL

TOY_PROGRAM = "x*1 + 0 + y*z + x*1 + y*z*1"
#: A program where a sequence beats the toy's default ordering: ``combine`` before the default
#: pipeline merges the terms twice (2*2*x), the default alone once (2*x + 2*x).
TOY_WIN = "2*x + x + x + y*1"


@dataclass
class Case:
    name: str
    engine: object
    module: Module  # a small module where some passes change things and many do nothing
    crash_module: Module  # a module on which ``crash`` kills the compiler process
    crash: tuple[str, ...]  # a sequence whose second step crashes the compiler
    bigger: tuple[str, ...]  # a sequence that reduces the instruction count of ``module``


@pytest.fixture(scope="module", params=["toy", "xla"])
def case(request, tmp_path_factory):
    """Each backend on a cache of its own, so what one test compiled is never another test's cache hit."""
    from autotune.core.engine import open_engine

    db = tmp_path_factory.mktemp(request.param) / "cache.db"
    if request.param == "xla":
        with open_engine(db, workers=2) as ev:
            yield Case("xla", ev, load(SMALL), load(GPT2), ("dce", "scatter_simplifier", "cse"), ("cse", "dce"))
        return
    from autotune.testing.toy import ToyBackend

    with open_engine(db, workers=2, backend="toy") as ev:
        yield Case("toy", ev, ToyBackend.module(TOY_PROGRAM), ToyBackend.module("boom*2 + x"),
                   ("canon", "abort", "canon"), ("fold-one", "drop-zero", "combine"))


def test_the_toy_backend_is_registered_by_entry_point():
    assert available()["toy"] == "autotune.testing.toy:ToyBackend"


def test_backend_satisfies_the_protocol(case):
    backend = case.engine.pipeline
    assert contract_problems(backend) == []
    assert backend.passes() and len(backend.describe()) == len(backend.passes())
    assert backend.version and backend.compiler_version
    with pytest.raises(UnknownName):
        backend.check_passes(["no-such-pass"])


def test_a_sequence_reduces_the_module_and_the_second_evaluation_compiles_nothing(case):
    ev = case.engine
    root = ev.prepare(case.module)
    first = ev.evaluate(root, case.bigger)
    assert first.ok and first.metrics.instructions < ev.metrics(root.fingerprint).instructions
    second = ev.evaluate(root, case.bigger)
    assert second.compiled == 0 and second.cached == len(case.bigger) and second.state == first.state


def test_prefixes_reaching_the_same_state_share_later_work(case):
    ev = case.engine
    root = ev.prepare(case.module)
    singles = ev.evaluate_many(root, [[p] for p in ev.pipeline.passes()])
    noops = [p for p, r in zip(ev.pipeline.passes(), singles) if r.ok and r.state == root.fingerprint]
    assert noops, "some pass leaves the module unchanged"
    ev.evaluate(root, list(case.bigger))
    shared = ev.evaluate(root, [noops[0], *case.bigger])
    assert shared.ok and shared.compiled == 0  # everything after the no-op was cached from the root


def test_a_compiler_crash_costs_one_worker(case):
    ev = case.engine
    root = ev.prepare(case.crash_module)
    crashes = ev.pipeline.pool.crashes
    result = ev.evaluate(root, case.crash)
    assert result.status == "crash" and result.failed_at == 1
    assert ev.pipeline.pool.crashes == crashes + 1
    assert ev.evaluate(root, case.crash[:1]).ok  # the pool replaced the worker
    assert ev.evaluate(root, case.crash).compiled == 0  # the failure itself is cached


def test_tune_spends_the_budget_and_reports_a_valid_best(case):
    result = tune(case.engine, case.module, strategy="random", budget=12, seed=3, max_length=3, validate=True)
    assert result.evaluations == 12
    if result.best is not None:
        assert result.validation.ok
        assert result.best_cost <= result.default_cost or not result.beats_default


def test_validation_catches_a_miscompiling_pass_on_the_toy(tmp_path):
    from autotune.core.engine import open_engine
    from autotune.testing.toy import ToyBackend

    with open_engine(tmp_path / "toy.db", workers=1, backend="toy") as ev:
        root = ev.prepare(ToyBackend.module("x*y + 2"))
        bad = ev.evaluate(root, ["shuffle-bug"])
        assert bad.ok and bad.state != root.fingerprint
        report = validity_of(ev, root, bad.state)
        assert not report.ok and "differ" in report.reason
        good = ev.evaluate(root, ["canon"])
        assert validity_of(ev, root, good.state).ok


@pytest.mark.parametrize("strategy", ["random", "greedy", "optuna", "nevergrad"])
def test_every_search_strategy_spends_the_budget_exactly_on_the_toy(tmp_path, strategy):
    from autotune.core.engine import open_engine
    from autotune.testing.toy import ToyBackend

    with open_engine(tmp_path / "toy.db", workers=2, backend="toy") as ev:
        runs = [tune(ev, ToyBackend.module(TOY_PROGRAM), strategy=strategy, budget=15, seed=1, max_length=4,
                     validate=False) for _ in range(2)]
    assert all(r.evaluations == 15 for r in runs)
    assert runs[0].best_sequence == runs[1].best_sequence  # deterministic under the seed
    assert runs[0].best_cost <= runs[0].default_cost


def test_a_toy_run_imports_no_jax(tmp_path):
    """Core, tuner and explain on the toy backend never load XLA: nothing in core names it."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from autotune.core.engine import open_engine\n"
        "from autotune.core.module import load\n"
        "from autotune.core.tuner import tune\n"
        "from autotune.reporting.explain import explain\n"
        f"with open_engine({str(tmp_path / 'c.db')!r}, workers=1, backend='toy') as ev:\n"
        f"    m = load({TOY_WIN!r}, backend=ev.pipeline)\n"
        "    r = tune(ev, m, strategy='random', budget=6, seed=0, max_length=3)\n"
        "    e = explain(ev, ev.prepare(m), ['fold-one', 'combine'])\n"
        "    assert r.evaluations == 6 and e.diff.vanished_total > 0, (r.evaluations, e.diff)\n"
        "print(sorted(k for k in sys.modules if k.split('.')[0] in ('jax', 'jaxlib')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_toy_backend_through_the_cli_local_ray_fleet_and_explain(tmp_path):
    """``--backend toy`` from the command line: a run, the same run on Ray, a fleet, explain."""
    import json

    from conftest import run_cli

    db = tmp_path / "c.db"
    models = tmp_path / "models"
    models.mkdir()
    (models / "a.toy").write_text(TOY_WIN + "\n")
    (models / "b.toy").write_text("a*1 + b*0 + a*1\n")
    args = ("--strategy", "greedy", "--budget", "12", "--max-length", "3", "--json")
    local = run_cli("run", "--backend", "toy", *args, str(models / "a.toy"), db=db)
    assert local.returncode == 0, local.stderr
    first = json.loads(local.stdout)
    assert first["executor"]["name"] == "local" and first["evaluations"] == 12 and first["beats_default"]
    on_ray = run_cli("run", "--backend", "toy", "--executor", "ray", "--workers", "2", *args, str(models / "a.toy"),
                     db=tmp_path / "ray.db")
    assert on_ray.returncode == 0, on_ray.stderr
    second = json.loads(on_ray.stdout)
    assert second["executor"]["name"] == "ray"
    assert (second["best"]["sequence"], second["evaluations"]) == (first["best"]["sequence"], 12)
    fleet = run_cli("run", "--backend", "toy", *args, "--modules", str(models), db=db)
    assert fleet.returncode == 0, fleet.stderr
    assert json.loads(fleet.stdout)["modules"] == ["a", "b"]
    explained = run_cli("explain", first["run_id"], "--json", env={"AUTOTUNE_BACKEND": "toy"}, db=db)
    assert explained.returncode == 0, explained.stderr
    e = json.loads(explained.stdout)
    assert e["minimal_sequence"] and e["diff"]["delta"] < 0
    assert e["reproduce"]["autotune"][0].startswith("autotune baseline --backend toy")
    bad = run_cli("run", "--backend", "no-such-backend", str(models / "a.toy"), db=db)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no-such-backend" in bad.stderr


def test_run_json_round_trips_and_a_tie_reports_the_empty_sequence(tmp_path):
    """``TuneResult.from_dict`` inverts ``to_dict``; the validation report appears once; a run
    where nothing beats the default reports the empty sequence (``found_sequence`` keeps the search's)."""
    import json

    from autotune.core.engine import open_engine
    from autotune.core.tuner import TuneResult
    from autotune.testing.toy import ToyBackend

    with open_engine(tmp_path / "toy.db", workers=1, backend="toy") as ev:
        win = tune(ev, ToyBackend.module(TOY_WIN), strategy="greedy", budget=12, seed=0, max_length=2)
        tie = tune(ev, ToyBackend.module("x + y"), strategy="random", budget=6, seed=0, max_length=3)
    assert win.beats_default and win.best_sequence and win.validation_level == "executed"
    for result in (win, tie):
        data = json.loads(json.dumps(result.to_dict()))
        back = TuneResult.from_dict(data)
        assert back == result and back.to_dict() == data
    validity = win.to_dict()["validity"]  # executed: the output comparison is there, once
    assert "outputs" not in validity and len(validity["report"]["outputs"]) == 1
    assert not tie.beats_default and tie.best is not None
    data = tie.to_dict()
    assert data["best"]["sequence"] == [] and data["best"]["found_sequence"]


def test_the_api_session_tunes_a_toy_file(tmp_path):
    """``Session(backend="toy")`` loads files with its own backend's parser."""
    import autotune

    path = tmp_path / "p.toy"
    path.write_text(TOY_WIN + "\n")
    with autotune.Session(tmp_path / "c.db", workers=1, backend="toy") as s:
        result = s.tune(str(path), strategy="greedy", budget=12, max_length=2)
        tuned = s.apply(str(path), result.best_sequence)
    assert result.beats_default and s.evaluator.pipeline.name == "toy"
    assert result.best_cost < result.default_cost and tuned.fingerprint == result.best.state


def test_every_registered_backend_keeps_the_contract_signatures_included():
    """The required members, each declared capability's members and the worker handler against its
    typed interface, for every backend registered (as classes: nothing starts), and for XLA's GPU
    target as built (another worker, fewer capabilities) where the extra is installed."""
    from autotune.core.plugins import import_object
    from autotune.pipelines.xla import targets

    names = available()
    assert {"xla", "toy"} <= set(names)
    for name, path in names.items():
        cls = import_object(path)
        assert contract_problems(cls) == [], name
        assert len(cls.capabilities) >= 1 and cls.baseline.__doc__  # declared, and worded by the backend
    if targets.plugin_available():
        gpu = get("xla", target="h100")
        assert contract_problems(gpu) == [] and not supports(gpu, "regions") and supports(gpu, "execute")
        assert not supports(gpu, "memory")  # the device's memory, which the host's compile does not give


def test_the_contract_check_names_what_a_bad_backend_breaks():
    """Proven on bad snippets: a capability declared without its members fails at class definition;
    a wrong signature, a missing required member and a worker off its interface are each named."""
    from typing import Protocol

    from autotune.testing.toy import ToyBackend, ToyWorker

    with pytest.raises(TypeError, match="time: time_ab"):
        type("NoTimeAB", (ToyBackend,), {"capabilities": frozenset({"time"}), "time_ab": None})
    with pytest.raises(TypeError, match="unknown capability"):
        type("Flies", (ToyBackend,), {"capabilities": frozenset({"fly"})})

    class NoTimeout(ToyBackend):
        def execute(self, module, seed=0, floats="normal", int_high=4):  # lacks timeout=
            return []

    class Required(BackendBase):  # nothing but the base: every required method is missing
        name = "bare"

    class Api(Protocol):
        def run_steps(self, proto: bytes, key: str | None, actions: list[str]): ...
        def measure(self, proto: bytes) -> dict: ...
        def ping(self, loud: bool = False) -> int: ...

    class OffApi(ToyBackend):
        worker_api = Api

    assert contract_problems(NoTimeout) == ["NoTimeout.execute lacks parameter 'timeout'"]
    assert "Required lacks Backend.normalize" in contract_problems(Required)
    assert contract_problems(OffApi) == ["ToyWorker.ping lacks parameter 'loud'"]
    assert ToyWorker.ping  # the handler itself is untouched


def test_remote_calls_declared_requests_only(tmp_path):
    from autotune.core.engine import open_engine

    with open_engine(tmp_path / "c.db", workers=1, backend="toy") as ev:
        pid = ev.pipeline.remote().ping()
        assert isinstance(pid, int) and pid in ev.pipeline.pool.pids()
        with pytest.raises(AttributeError, match="declares no request 'execute'"):
            ev.pipeline.remote().execute(b"x")


def test_a_backend_without_optional_capabilities_tunes_and_says_what_it_could_not_do(tmp_path):
    """Capabilities are optional: with none, a run still tunes (steps and metrics only), its
    validation says nothing was executed, runtime is refused in one line and explain has no diff."""
    from autotune.core.engine import open_engine
    from autotune.errors import BadInput
    from autotune.reporting.explain import explain
    from autotune.testing.toy import ToyBackend

    with open_engine(tmp_path / "c.db", workers=1, backend="toy") as ev:
        ev.pipeline.capabilities = frozenset()
        result = tune(ev, ToyBackend.module(TOY_WIN), strategy="greedy", budget=12, seed=0, max_length=2)
        assert result.beats_default and result.validation_level == "unverified"
        assert "cannot compile and run" in result.validation.reason
        with pytest.raises(BadInput, match="needs a backend that times"):
            tune(ev, ToyBackend.module(TOY_WIN), strategy="random", budget=2, objective="runtime", validate=False)
        e = explain(ev, ev.prepare(ToyBackend.module(TOY_WIN)), list(result.best_sequence))
        assert e.diff.vanished_total == 0 and e.diff.appeared_total == 0 and e.minimal


def test_reports_name_the_backends_own_baseline(tmp_path):
    """The words for the baseline come from the backend: a toy run's table, summary and explain
    report say "toy's default" and never name XLA."""
    import json

    from conftest import run_cli

    db = tmp_path / "c.db"
    prog = tmp_path / "p.toy"
    prog.write_text(TOY_WIN + "\n")
    shown = run_cli("run", "--backend", "toy", "--strategy", "greedy", "--budget", "12", "--max-length", "2",
                    str(prog), "--out", str(tmp_path / "out"), db=db)
    assert shown.returncode == 0, shown.stderr
    assert "toy's default" in shown.stdout and "XLA" not in shown.stdout
    explained = (tmp_path / "out" / "explain.md").read_text()
    assert "toy's default" in explained and "XLA" not in explained.split("## Reproduce")[0]
    tie = tmp_path / "tie.toy"
    tie.write_text("x + y\n")
    none = run_cli("run", "--backend", "toy", "--strategy", "random", "--budget", "4", str(tie), "--json", db=db)
    assert json.loads(none.stdout)["target"]["compiler"] == "toy"
