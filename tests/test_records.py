"""Tuning records as a CI gate: export, check (0 / 1 / 2), validate command."""

from __future__ import annotations

import json

import pytest

from conftest import DATA, GPT2, SMALL, assert_one_line_error, run_cli

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


def test_record_from_another_xla_is_judged_by_what_it_saves(exported):
    """XLA's default moves between versions (DLRM: 929 -> 961 final-ops from jaxlib 0.10.2 to 0.12): a
    record made by another XLA is judged by what its sequence saves over each version's own default,
    at least the lesser of the same count and the same share, and says so."""
    db, record, tmp = exported
    data = json.loads(record.read_text())
    now_cost, now_default = data["metrics"]["cost"], data["metrics"]["default_cost"]
    data["xla_version"] = "jaxlib-0.9.0-cpu-x86_64"

    def check_as(name, cost, default_cost, *extra, env=None):
        data["metrics"].update(cost=cost, default_cost=default_cost)
        path = tmp / f"{name}.json"
        path.write_text(json.dumps(data))
        return run_cli("check", str(MAML), "--record", str(path), "--no-validate", *extra, db=db, env=env)

    # The same share on an older XLA whose default was 10% larger (a larger count then): holds.
    proc = check_as("same-share", now_cost * 1.1, now_default * 1.1, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["judged"] == "saving" and "jaxlib-0.9.0" in out["judged_note"]
    assert abs(out["regression"]) < 1e-9
    # The same count on an older XLA whose default was smaller (a larger share then): holds too.
    proc = check_as("same-count", now_cost - 40, now_default - 40, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert abs(json.loads(proc.stdout)["regression"]) < 1e-9
    table = check_as("same-count", now_cost - 40, now_default - 40, env={"COLUMNS": "200"})
    assert table.returncode == 0
    assert "judged: the record was made by jaxlib-0.9.0-cpu-x86_64" in table.stdout
    assert "judged by what it saves over each one's own XLA default" in table.stdout
    # A record that saved more on its XLA than the sequence saves today, by count and by share: fails.
    failed = check_as("saved-more", now_cost - 2, now_default, "--json")
    assert failed.returncode == 1
    assert "less than the 3 required" in " ".join(json.loads(failed.stdout)["reasons"])
    # ... unless the stated tolerance allows that much more cost.
    assert check_as("saved-more", now_cost - 2, now_default, "--max-regression", "5").returncode == 0
    # The same record from this XLA is judged on its absolute figure, as before.
    data["metrics"].update(cost=now_cost, default_cost=now_default)
    same = dict(data, xla_version=json.loads(record.read_text())["xla_version"])
    path = tmp / "same.json"
    path.write_text(json.dumps(same))
    absolute = json.loads(run_cli("check", str(MAML), "--record", str(path), "--json", "--no-validate", db=db).stdout)
    assert absolute["judged"] == "absolute" and absolute["judged_note"] is None


def test_the_saving_rule_on_the_dlrm_numbers():
    """The rule of ``core/record_judge.py`` on the committed DLRM record's figures: 913 of 929 on jax
    0.10.2; on jax 0.12.0.1 the default is 961 and the same sequence gives 945 (the same 16 saved)."""
    from autotune.core import record_judge

    def judge(cost, default, max_regression=0.0):
        return record_judge.saving("final-ops", 913, 929, cost, default, max_regression, "jaxlib-0.10.2", "jaxlib-0.12")

    assert judge(945, 961).reason is None and judge(945, 961).regression == 0.0
    assert "16 of 929 final-ops then, 16 of 961 now" in judge(945, 961).note
    assert "saves 15 over this XLA's default" in judge(946, 961).reason
    assert judge(946, 961, max_regression=1).reason is None  # 1% more cost than 945 allowed
    assert "no longer saves anything" in judge(961, 961, max_regression=50).reason  # whatever the tolerance
    assert judge(884, 900).reason is None and judge(885, 900).reason  # a smaller default: the same share, 15.5
    assert record_judge.required_saving(913, 929, 961) == 16


def test_a_measured_records_allowed_ratio_follows_the_same_rule():
    from autotune.core import record_judge

    metrics = {"cost": 0.9e-3, "default_cost": 1.0e-3, "ratio": 0.9}  # 0.1 ms (10%) saved on its XLA
    assert record_judge.allowed_ratio(metrics, 2.0e-3, other_xla=False) == 0.9
    assert abs(record_judge.allowed_ratio(metrics, 2.0e-3, other_xla=True) - 0.95) < 1e-12  # the same 0.1 ms
    assert abs(record_judge.allowed_ratio(metrics, 0.5e-3, other_xla=True) - 0.9) < 1e-12  # the same share
    assert record_judge.allowed_ratio({}, 1.0, other_xla=True) == 1.0  # nothing recorded: no slower than XLA


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


def test_check_confirm_rounds_is_for_measured_records(exported):
    """``--confirm-rounds`` re-times a runtime record in that many rounds; a counted record has no timing
    to shorten, and fewer than four rounds is no confirmation: one line each, exit 2."""
    db, record, _ = exported
    line = assert_one_line_error(run_cli("check", str(MAML), "--record", str(record), "--confirm-rounds", "8", db=db))
    assert "applies to a measured record" in line
    runtime = json.loads(record.read_text()) | {"objective": "runtime"}
    timed = record.with_name("timed.json")
    timed.write_text(json.dumps(runtime))
    line = assert_one_line_error(run_cli("check", str(MAML), "--record", str(timed), "--confirm-rounds", "2", db=db))
    assert "at least 4 rounds" in line


@pytest.mark.slow
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


DLRM = DATA / "real" / "xla_dlrm_train_step.hlo"


@pytest.fixture(scope="module")
def dlrm_record(tmp_path_factory):
    """The committed record (made on jax 0.10.2) and a database shared by the checks of it below."""
    from conftest import ROOT

    return ROOT / "examples" / "xla_dlrm_train_step.tuned.json", tmp_path_factory.mktemp("dlrm") / "c.db"


def test_committed_example_record_holds(dlrm_record):
    """The repository's own CI gate (`make check-record`) with no tolerance given: the committed DLRM record
    holds on every supported jax; on one that is not 0.10.2 it is judged by what it saves, and says so."""
    record, db = dlrm_record
    proc = run_cli("check", str(DLRM), "--record", str(record), "--json", db=db)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] and data["valid"] and data["cost"] < data["default_cost"]
    made_here = data["xla_version"] == data["record_xla_version"]
    assert data["judged"] == ("absolute" if made_here else "saving"), data
    assert made_here or "judged by what it saves" in data["judged_note"]


def _variant(record, tmp, name, **changes):
    data = dict(json.loads(record.read_text()), **changes)
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def test_a_dlrm_record_whose_sequence_saves_nothing_fails(dlrm_record, tmp_path):
    """``dce`` leaves the DLRM step as it is: a record of it saves nothing over XLA's default, and fails
    on the XLA that made it (its figure) and on another (its saving), whatever the tolerance."""
    record, db = dlrm_record
    for xla in (None, "jaxlib-0.9.0-cpu-x86_64"):
        extra = {"xla_version": xla} if xla else {}
        path = _variant(record, tmp_path, f"nothing-{xla}", sequence=["dce"], **extra)
        proc = run_cli("check", str(DLRM), "--record", str(path), "--no-validate", "--json", db=db)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        data = json.loads(proc.stdout)
        if data["judged"] == "saving":
            assert "no longer saves anything" in data["reasons"][0], data
            loose = run_cli("check", str(DLRM), "--record", str(path), "--no-validate", "--max-regression", "50",
                            db=db)
            assert loose.returncode == 1 and "no longer saves anything" in loose.stdout


def test_a_record_whose_passes_are_gone_is_judged_on_what_remains(dlrm_record, tmp_path):
    """A record from an XLA that had a pass this one has not: said, the rest applied and judged; when none
    is left, one reason and exit 1; never a traceback."""
    record, db = dlrm_record
    old = "jaxlib-0.9.0-cpu-x86_64"
    path = _variant(record, tmp_path, "gone", xla_version=old,
                    sequence=["constant_folding", "a-pass-of-0.9", "algsimp", "reshape-mover"])
    proc = run_cli("check", str(DLRM), "--record", str(path), "--no-validate", db=db, env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "judged: passes gone in jaxlib-" in proc.stdout and "a-pass-of-0.9; judged on the 3 of 4" in proc.stdout
    data = json.loads(run_cli("check", str(DLRM), "--record", str(path), "--no-validate", "--json", db=db).stdout)
    assert data["ok"] and data["dropped"] == ["a-pass-of-0.9"]
    none_left = _variant(record, tmp_path, "none-left", xla_version=old, sequence=["a-pass-of-0.9"])
    proc = run_cli("check", str(DLRM), "--record", str(none_left), "--no-validate", db=db)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    assert "none of the record's passes (a-pass-of-0.9) exist in jaxlib-" in proc.stdout
    # On the XLA that made it, a pass it does not have means the record was edited: it does not hold.
    from autotune.pipelines.xla.versions import xla_build

    edited = _variant(record, tmp_path, "edited", xla_version=xla_build(), sequence=["constant_folding", "a-pass-of-0.9"])
    proc = run_cli("check", str(DLRM), "--record", str(edited), "--no-validate", db=db)
    assert proc.returncode == 1 and "passes no longer offered by this XLA: a-pass-of-0.9" in proc.stdout


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
