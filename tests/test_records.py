"""Tuning records as a CI gate: export, check (0 / 1 / 2), validate command."""

from __future__ import annotations

import json

import pytest

from conftest import DATA, GPT2, SMALL, run_cli

# A module where a better ordering than XLA's default exists (126 -> 125 final-ops with
# tree_reduction_rewriter; results/exhaustive.md): only a run that beats the default can be exported.
MAML = DATA / "real" / "hloenv_maml_train_step.hlo"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rec")
    db = tmp / "c.db"
    proc = run_cli("run", "--strategy", "greedy", "--budget", "60", "--max-length", "3", str(MAML), "--json", db=db)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["beats_default"] is True
    run_id = json.loads(proc.stdout)["run_id"]
    record = tmp / "tuned.json"
    proc = run_cli("export", run_id, "-o", str(record), db=db)
    assert proc.returncode == 0, proc.stderr
    return db, record, tmp


def test_record_contents(exported):
    _, record, _ = exported
    data = json.loads(record.read_text())
    assert data["format"] == 1 and data["valid"] is True
    assert data["sequence"] and data["pipeline_version"].startswith("xla:")
    assert {"input_ops", "default_ops", "tuned_ops", "tuned_final_ops", "cost", "default_cost"} <= set(data["metrics"])


def test_check_passes_on_unchanged_module(exported):
    db, record, _ = exported
    proc = run_cli("check", str(MAML), "--record", str(record), "--json", db=db)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] and data["valid"] and data["regression"] == 0.0


def test_check_fails_on_edited_module(exported):
    db, record, tmp = exported
    edited = tmp / "edited.hlo"
    edited.write_text(MAML.read_text().replace("constant(0.9)", "constant(0.8)"))
    proc = run_cli("check", str(edited), "--record", str(record), db=db)
    assert proc.returncode == 1
    assert "module changed" in proc.stdout


def test_check_fails_on_regression_and_tolerates_within_limit(exported):
    db, record, tmp = exported
    data = json.loads(record.read_text())
    data["metrics"]["cost"] = data["metrics"]["cost"] * 0.9  # pretend the record was 10% better
    tighter = tmp / "tighter.json"
    tighter.write_text(json.dumps(data))
    failed = run_cli("check", str(MAML), "--record", str(tighter), "--json", db=db)
    assert failed.returncode == 1 and "regressed" in " ".join(json.loads(failed.stdout)["reasons"])
    allowed = run_cli("check", str(MAML), "--record", str(tighter), "--max-regression", "20", db=db)
    assert allowed.returncode == 0, allowed.stdout


def test_record_from_another_xla_is_judged_against_todays_default(exported):
    """XLA's default moves between versions (DLRM: 929 -> 961 final-ops from jaxlib 0.10.2 to 0.12): a
    record made by another XLA is judged by its gain over each version's default, and says so."""
    db, record, tmp = exported
    data = json.loads(record.read_text())
    now_cost, now_default = data["metrics"]["cost"], data["metrics"]["default_cost"]
    data["xla_version"] = "jaxlib-0.9.0-cpu-x86_64"
    # The same relative gain on an older XLA whose default was 10% larger: still holds.
    data["metrics"].update(cost=now_cost * 1.1, default_cost=now_default * 1.1)
    older = tmp / "older.json"
    older.write_text(json.dumps(data))
    proc = run_cli("check", str(MAML), "--record", str(older), "--json", "--no-validate", db=db)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["judged"] == "relative" and "jaxlib-0.9.0" in out["judged_note"]
    assert abs(out["regression"]) < 1e-9
    table = run_cli("check", str(MAML), "--record", str(older), "--no-validate", db=db, env={"COLUMNS": "200"})
    assert table.returncode == 0 and "judged by its gain" in table.stdout
    # A record that won by more on its XLA than the sequence wins today: a relative regression.
    data["metrics"].update(cost=now_cost * 0.9, default_cost=now_default)
    better = tmp / "older-better.json"
    better.write_text(json.dumps(data))
    failed = run_cli("check", str(MAML), "--record", str(better), "--json", "--no-validate", db=db)
    assert failed.returncode == 1
    assert "relative to XLA's default regressed" in " ".join(json.loads(failed.stdout)["reasons"])
    # The same record from this XLA is judged on its absolute figure, as before.
    same = dict(data, xla_version=json.loads(record.read_text())["xla_version"])
    path = tmp / "same.json"
    path.write_text(json.dumps(same))
    absolute = json.loads(run_cli("check", str(MAML), "--record", str(path), "--json", "--no-validate", db=db).stdout)
    assert absolute["judged"] == "absolute" and absolute["judged_note"] is None


def test_check_fails_when_the_sequence_fails(exported):
    db, record, tmp = exported
    data = json.loads(record.read_text())
    gpt2_record = dict(data)
    # A record whose sequence hits XLA's RET_CHECK on the GPT-2 module (gather_simplifier).
    from autotune.api import Session

    with Session(db, 1) as s:
        gpt2_record["fingerprint"] = s.normalize(str(GPT2)).fingerprint
    gpt2_record["sequence"] = ["gather_simplifier"]
    path = tmp / "failing.json"
    path.write_text(json.dumps(gpt2_record))
    proc = run_cli("check", str(GPT2), "--record", str(path), "--no-validate", "--json", db=db)
    assert proc.returncode == 1
    assert "fails at step 1" in json.loads(proc.stdout)["reasons"][0]


@pytest.mark.parametrize("content", ["not json", "[]", '{"format": 1}', '{"format": 99, "module": "x"}',
                                     '{"format": 1, "module": "m", "fingerprint": "f", "sequence": "cse", '
                                     '"objective": "final-ops", "pipeline_version": "v", "metrics": {}}'])
def test_check_bad_record_is_bad_input(exported, content):
    db, _, tmp = exported
    path = tmp / "bad.json"
    path.write_text(content)
    proc = run_cli("check", str(SMALL), "--record", str(path), db=db)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_check_missing_record_and_bad_export(exported):
    db, _, tmp = exported
    assert run_cli("check", str(SMALL), "--record", str(tmp / "nope.json"), db=db).returncode == 2
    assert run_cli("export", "no-such-run", "-o", str(tmp / "x.json"), db=db).returncode == 2


def test_validate_command(exported, tmp_path):
    db, _, _ = exported
    tuned = tmp_path / "tuned.hlo"
    assert run_cli("apply", "--passes", "cse,dce", str(SMALL), "-o", str(tuned), db=db).returncode == 0
    ok = run_cli("validate", str(SMALL), str(tuned), "--json", db=db)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["ok"]
    wrong = tmp_path / "wrong.hlo"
    wrong.write_text(tuned.read_text().replace("constant(5)", "constant(6)"))
    assert "constant(6)" in wrong.read_text()
    bad = run_cli("validate", str(SMALL), str(wrong), db=db)
    assert bad.returncode == 1 and "MISMATCH" in bad.stdout
    assert run_cli("validate", str(SMALL), str(tmp_path / "missing.hlo"), db=db).returncode == 2


def test_committed_example_record_holds(tmp_path):
    """The repository's own CI gate (`make check-record`): the committed DLRM record still holds."""
    from conftest import ROOT

    proc = run_cli("check", str(ROOT / "tests/data/real/xla_dlrm_train_step.hlo"), "--record",
                   str(ROOT / "examples/xla_dlrm_train_step.tuned.json"), "--max-regression", "1", "--json",
                   db=tmp_path / "c.db")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] and data["valid"] and data["cost"] < data["default_cost"]


def test_runs_lists_the_run_that_export_took(exported, tmp_path):
    db, record, _ = exported
    rec = json.loads(record.read_text())
    proc = run_cli("runs", "--json", db=db)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    run = next(r for r in rows if r["fingerprint"] == rec["fingerprint"])
    assert run["strategy"] == "greedy" and run["status"] == "finished"
    assert run["evaluations"] == run["budget"] == 60
    assert run["best_cost"] <= run["default_cost"]
    assert [r["run_id"] for r in json.loads(run_cli("runs", "--json", "--module", "nope", db=db).stdout)] == []
    table = run_cli("runs", db=db, env={"COLUMNS": "160"})
    assert table.returncode == 0 and run["run_id"] in table.stdout
    empty = run_cli("runs", db=tmp_path / "empty.db")
    assert empty.returncode == 0 and "no runs" in empty.stdout
    bad = run_cli("runs", db=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    rep = run_cli("report", "--module", run["module"], "--out", str(tmp_path / "rep"), "--json", db=db)
    assert rep.returncode == 0, rep.stderr
    assert run["run_id"] in [r["run_id"] for r in json.loads(rep.stdout)["runs"]]
    none = run_cli("report", "--module", "nope", "--out", str(tmp_path / "rep2"), db=db)
    assert none.returncode == 2 and "no finished runs on module 'nope'" in none.stderr


def test_export_refuses_a_run_that_only_ties_with_the_default(tmp_path):
    """Nothing beats XLA's default on the GPT-2 example (see results/exhaustive.md): a record of such
    a run would pin a sequence of passes that change nothing, so export says so and writes nothing."""
    db = tmp_path / "c.db"
    proc = run_cli("run", "--strategy", "random", "--budget", "4", "--max-length", "3", str(GPT2), "--json", db=db)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["beats_default"] is False
    proc = run_cli("export", out["run_id"], "-o", str(tmp_path / "t.json"), db=db)
    assert proc.returncode == 2 and "nothing better than XLA's default" in proc.stderr
    assert not (tmp_path / "t.json").exists()
