"""Fleet tuning: one sequence for several modules (aggregation, disqualification, records)."""

from __future__ import annotations

import json

import pytest

from conftest import DATA, SMALL, run_cli

MAML = DATA / "real" / "hloenv_maml_train_step.hlo"
MLP = DATA / "mlp_train_step.hlo"


def test_fleet_objective_aggregates_and_disqualifies_regressions():
    from autotune.core.fleet import FAILURE_COST, FleetObjective

    defaults = [100.0, 50.0, 10.0]
    better = FleetObjective().score([98.0, 50.0, 10.0], defaults)
    assert better.cost == pytest.approx((0.98 + 1.0 + 1.0) / 3) and not better.disqualified
    assert better.mean_relative_change == pytest.approx(-0.02 / 3)
    # Better on average (-10% on the first) but one module worse than its default: disqualified.
    mixed = [90.0, 51.0, 10.0]
    score = FleetObjective().score(mixed, defaults)
    assert score.disqualified and score.cost == FAILURE_COST and score.regressed == (1,)
    allowed = FleetObjective(allow_regressions=True).score(mixed, defaults)
    assert not allowed.disqualified and allowed.regressed == (1,)
    assert allowed.cost == pytest.approx((0.9 + 1.02 + 1.0) / 3)
    # A failure on any module fails the sequence, regressions allowed or not.
    failed = FleetObjective(allow_regressions=True).score([90.0, None, 10.0], defaults)
    assert failed.disqualified and failed.failed == (1,) and failed.cost == FAILURE_COST
    # Equal to the default everywhere is 1.0 (the default's own fleet cost), not a regression.
    assert FleetObjective().score(defaults, defaults).cost == 1.0


@pytest.fixture(scope="module")
def roots(engine):
    from autotune.core.module import load

    return [engine.prepare(load(p)) for p in (MAML, SMALL, MLP)]


def test_fleet_cost_is_the_mean_ratio_of_real_modules(engine, roots):
    """With the raw-ops objective every single pass is worse than XLA's default (which runs them
    all), so a real sequence is disqualified; allowed, its cost is the mean of per-module ratios
    measured here independently."""
    from autotune.core import objectives
    from autotune.core.fleet import FAILURE_COST, FleetObjective, FleetSearch
    from autotune.core.observer import Observer
    from autotune.core.spec import RunSpec

    seq = ("dce",)
    fleet = FleetSearch(engine, roots, objectives.get("ops"), RunSpec(budget=10), "test-fleet", [], Observer())
    score, states = fleet.score_many([seq])[0]
    ratios = []
    for root in roots:
        raw = engine.evaluate(root, list(seq)).metrics.instructions
        default = engine.default(root).metrics.instructions
        ratios.append(raw / default)
    assert all(r > 1.0 for r in ratios)
    assert score.disqualified and score.cost == FAILURE_COST and score.regressed == (0, 1, 2)
    allowed = FleetObjective(allow_regressions=True).score(fleet.costs(states), fleet.default_costs)
    assert allowed.cost == pytest.approx(sum(ratios) / len(ratios))


@pytest.fixture(scope="module")
def fleet_run(engine, roots):
    from autotune.core.tuner import tune_fleet

    return tune_fleet(engine, roots, strategy="greedy", budget=60, max_length=1)


def test_fleet_run_finds_the_win_without_hurting_the_others(engine, fleet_run):
    """Greedy over three modules finds MAML's win (126 -> 125) and leaves the others at their default."""
    r = fleet_run
    assert r.beats_default and r.best_sequence == ("tree_reduction_rewriter",)
    assert r.evaluations <= 60
    by_name = {m.name: m for m in r.members}
    assert by_name["hloenv_maml_train_step"].tuned.instructions == 125
    assert all(not m.regressed and m.cost <= m.default_cost for m in r.members)
    assert all(m.validation.ok for m in r.members)
    assert r.best_cost == pytest.approx((125 / 126 + 1 + 1) / 3)
    # budget accounting: one fleet evaluation = one trial of the run
    n = engine.cache.db.execute("SELECT COUNT(*) FROM trials WHERE run=?", [r.run_id]).fetchone()[0]
    assert n == r.evaluations
    data = r.to_dict()
    assert data["fleet"] and len(data["members"]) == 3 and data["regressions"] == []


def test_fleet_record_applies_to_every_member(engine, roots, fleet_run):
    from autotune.core.module import load
    from autotune.core.record import TuningRecord, check, from_run

    record = from_run(engine, fleet_run.run_id)
    assert record.applies_to == tuple(r.fingerprint for r in roots) and record.valid
    record = TuningRecord.from_dict(json.loads(record.dumps()))  # survives the file format
    for root in roots:
        result = check(engine, root, record)
        assert result.ok, result.reasons
        assert result.cost == record.metrics_for(root.fingerprint)["cost"]
    other = check(engine, load(DATA / "tiny_gpt2_train_step.hlo"), record, validate=False)
    assert not other.ok and "module changed" in other.reasons[0]


def test_explain_a_fleet_member(engine, fleet_run):
    from autotune.reporting.explain import explain_run

    e = explain_run(engine, fleet_run.run_id)  # default: the biggest win
    assert e.module == "hloenv_maml_train_step" and e.diff.opcodes == (("negate", 2, 1),)
    with pytest.raises(Exception, match="no module 'nope'"):
        explain_run(engine, fleet_run.run_id, member="nope")


def test_cli_fleet_run_with_modules_dir(tmp_path, db_path, roots):
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    for p in (MAML, SMALL):
        (fleet / p.name).write_text(p.read_text())
    proc = run_cli("run", "--strategy", "random", "--budget", "3", "--max-length", "2", "--modules", str(fleet),
                   "--json", "--no-validate", db=db_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["fleet"] and data["evaluations"] == 3 and sorted(data["modules"]) == ["hloenv_maml_train_step",
                                                                                      "small_redundant"]
    assert all(m["cost"] <= m["default_cost"] or m["regressed"] for m in data["members"])
    proc = run_cli("run", "--modules", str(tmp_path / "missing"), db=db_path)
    assert proc.returncode == 2 and "no such file or directory" in proc.stderr
    # the runtime claim's settings reach a fleet too (checked before anything compiles, not dropped)
    proc = run_cli("run", "--min-effect", "5", "--modules", str(fleet), db=db_path)
    assert proc.returncode == 2 and "apply to measured objectives (runtime), not final-ops" in proc.stderr


def test_cli_fleet_require_level(db_path, fleet_run):
    """--require applies to the fleet's weakest member (the search itself is answered by the cache)."""
    args = ["run", "--strategy", "greedy", "--budget", "60", "--max-length", "1", str(MAML), str(SMALL), str(MLP)]
    proc = run_cli(*args, "--no-validate", "--require", "executed", db=db_path)
    assert proc.returncode == 1 and "--require executed: the fleet's weakest member" in proc.stderr
    proc = run_cli(*args, "--require", "executed", "--json", db=db_path)
    assert proc.returncode == 0, proc.stderr
    levels = {m["name"]: m["validity"]["level"] for m in json.loads(proc.stdout)["members"]}
    assert levels["hloenv_maml_train_step"] == "executed" and levels["small_redundant"] == "identical"


def test_jax_hook_matches_every_member_of_a_fleet_record(engine, fleet_run):
    from autotune.core.record import from_run
    from autotune.jax import _Hook

    record = from_run(engine, fleet_run.run_id)
    hook = _Hook([record], cache=None, workers=1, strict=False)
    assert set(hook.records) == set(record.applies_to) and len(hook.records) == 3
    assert all(r is record for r in hook.records.values())


def test_fleet_run_reports_and_resumes_like_any_run(db_path, fleet_run):
    """A fleet is a run: ``report`` reads it (its figures summed over the members, its cost the mean
    ratio to XLA's default), and ``--resume`` replays its recorded trials to the same answer."""
    out = db_path.parent / "rep"
    proc = run_cli("report", fleet_run.run_id, "--out", str(out), "--json", db=db_path)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads((out / "comparison.json").read_text())["runs"]
    assert len(rows) == 1 and rows[0]["run_id"] == fleet_run.run_id
    assert rows[0]["best_sequence"] == ["tree_reduction_rewriter"] and rows[0]["module"] == "fleet of 3"
    assert rows[0]["best_cost"] == pytest.approx(fleet_run.best_cost) and rows[0]["default_cost"] == 1.0
    assert rows[0]["best_final_ops"] == sum(m.tuned.instructions for m in fleet_run.members)
    resumed = run_cli("run", "--resume", fleet_run.run_id, "--json", db=db_path)
    assert resumed.returncode == 0, resumed.stderr
    data = json.loads(resumed.stdout)
    assert data["fleet"] and data["run_id"] == fleet_run.run_id and data["evaluations"] == fleet_run.evaluations
    assert data["best"]["sequence"] == list(fleet_run.best_sequence)
    assert data["steps_compiled"] == 0  # every trial answered by the record and the cache


def test_a_fleet_refuses_the_runtime_claim_options_it_would_ignore(tmp_path):
    """A fleet confirms no runtime claim: --min-effect / --confirm-rounds are refused, not ignored."""
    for option in (("--min-effect", "5"), ("--confirm-rounds", "8")):
        out = run_cli("run", str(SMALL), str(DATA / "mlp_train_step.hlo"), "--objective", "runtime", *option,
                      "--budget", "2", db=tmp_path / "c.db")
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
        assert "a fleet makes no confirmed runtime claim" in out.stderr
