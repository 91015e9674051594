"""``autotune.reporting.compare`` / ``autotune.reporting.report`` / ``autotune compare``: real compiler, two small modules.

Checks the budget of every run, recomputes the paper's metric (geometric mean over modules of the
seed-averaged, floored ratio tuned reduction / default reduction) from the per-run rows, checks the
wins/ties/losses and accounting, that the report files are written (HTML with embedded images), the
JSON round trip, and the CLI (a run, and an unknown strategy: exit 2 with one line).
"""

from __future__ import annotations

import json
import math

import pytest

from autotune.reporting.compare import compare
from autotune.reporting.comparison import Comparison, RunRow, family_of
from autotune.reporting.metric import RATIO_FLOOR, paper_metric
from autotune.errors import BadInput
from autotune.core.module import load
from conftest import DATA, ROOT, SMALL, run_cli

MLP = DATA / "mlp_train_step.hlo"
STRATEGIES = ["random", "greedy"]
BUDGET = 6
MAX_LENGTH = 5


@pytest.fixture(scope="module")
def comparison(engine) -> Comparison:
    return compare(engine, [load(SMALL), load(MLP)], STRATEGIES, budget=BUDGET, seeds=[0],
                   max_length=MAX_LENGTH, validate=False)


def test_every_run_spends_its_budget(comparison):
    assert len(comparison.runs) == len(STRATEGIES) * 2
    assert {(r.strategy, r.module) for r in comparison.runs} == {
        (s, m) for s in STRATEGIES for m in ("small_redundant", "mlp_train_step")}
    for r in comparison.runs:
        assert r.ok, r.error
        assert r.evaluations == BUDGET
        assert len(r.history) == BUDGET
        assert r.budget == BUDGET
        assert r.input_ops > r.default_ops  # both modules: XLA's default removes something
        assert r.best_raw_ops is not None and r.best_final_ops is not None
        assert r.valid is None  # validate=False
    for s in comparison.summaries:
        assert s.evaluations == BUDGET * 2 and s.runs == 2 and s.errors == 0


def _ratio(input_ops, tuned, default_ops):
    return (input_ops - tuned) / (input_ops - default_ops)


def test_aggregate_math_matches_the_rows(comparison):
    for s in comparison.summaries:
        rows = comparison.rows(s.strategy)
        for final, metric in ((False, s.raw), (True, s.final)):
            per_module: dict[str, list[float]] = {}
            floored = 0
            for r in rows:
                tuned = r.best_final_ops if final else r.best_raw_ops
                ratio = _ratio(r.input_ops, tuned, r.default_ops)
                assert r.ratio(final) == pytest.approx(ratio)
                if ratio < RATIO_FLOOR:
                    floored += 1
                per_module.setdefault(r.module, []).append(max(ratio, RATIO_FLOOR))
            means = [sum(v) / len(v) for v in per_module.values()]
            geo = math.exp(sum(math.log(m) for m in means) / len(means))
            assert metric.geomean_ratio == pytest.approx(geo)
            assert metric.improvement == pytest.approx(geo - 1)
            assert metric.modules == 2 and metric.floored_runs == floored and metric.excluded_modules == 0
        outcomes = [("win" if r.best_cost < r.default_cost else "loss" if r.best_cost > r.default_cost else "tie")
                    for r in rows]
        assert (s.wins, s.ties, s.losses) == (outcomes.count("win"), outcomes.count("tie"), outcomes.count("loss"))
        assert s.steps_compiled == sum(r.steps_compiled for r in rows)
        assert s.steps_cached == sum(r.steps_cached for r in rows)
        assert s.validity_failures == 0


def test_seeds_are_averaged_before_the_geometric_mean_and_edge_cases():
    def row(module, seed, input_ops, default_ops, final):
        return RunRow("s", "s", module, family_of(module), seed, 4, input_ops=input_ops, default_ops=default_ops,
                      default_cost=default_ops, best_cost=final, best_raw_ops=final, best_final_ops=final)

    rows = [row("gpt2_a", 0, 100, 80, 70), row("gpt2_a", 1, 100, 80, 80),  # ratios 1.5, 1.0 -> 1.25
            row("bert_b", 0, 50, 40, 60),  # ratio -1 -> floored
            row("resnet_c", 0, 30, 30, 25)]  # XLA removes nothing -> excluded
    m = paper_metric(rows)
    assert m.per_module == {"gpt2_a": pytest.approx(1.25), "bert_b": RATIO_FLOOR}
    assert m.geomean_ratio == pytest.approx(math.sqrt(1.25 * RATIO_FLOOR))
    assert (m.modules, m.floored_runs, m.excluded_modules) == (2, 1, 1)
    assert [family_of(n) for n in ("gpt2_x", "bert_x", "resnet_x", "mlp")] == ["gpt2", "bert", "resnet", "other"]
    assert [family_of(n) for n in ("t5_decode_x", "vit_train_x", "diffusion_sample_x")] == ["t5", "vit", "diffusion"]
    none = RunRow("s", "s", "m", "other", 0, 4, input_ops=10, default_ops=8, default_cost=8, best_cost=8)
    assert none.ratio(final=False) == 0.0 and none.ratio(final=True) == 1.0  # no valid best: untuned module


def test_report_files_and_json_round_trip(comparison, tmp_path):
    from autotune.reporting.report import write_report

    files = write_report(comparison, tmp_path / "rep")
    out = tmp_path / "rep"
    for name in ("report.md", "report.html", "comparison.json", "convergence.png", "per_module.png", "families.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
        if name.endswith(".png"):
            assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = files.markdown.read_text()
    for name in ("convergence.png", "per_module.png", "families.png"):
        assert f"]({name})" in md  # relative links
    assert "+13.3%" in md and "+10.4%" in md  # the paper's numbers for reference
    for s in STRATEGIES:
        assert f"### {s}" in md
    html = files.html.read_text()
    assert html.count('src="data:image/png;base64,') == 3
    assert ".png\"" not in html  # nothing linked: self-contained
    data = json.loads(files.json.read_text())
    again = Comparison.from_dict(data)
    assert again.summaries == comparison.summaries
    assert [r.to_dict() for r in again.runs] == [r.to_dict() for r in comparison.runs]


def test_report_from_stored_runs_matches_the_comparison(engine, comparison, db_path, tmp_path):
    """`autotune report RUN_ID...` rebuilds compare's numbers from the cache alone."""
    from autotune.reporting.comparison import comparison_of_runs

    again = comparison_of_runs(engine.cache, [r.run_id for r in comparison.runs])
    assert again.strategies == comparison.strategies and again.objective == comparison.objective
    for mine, theirs in zip(again.runs, comparison.runs):
        assert (mine.run_id, mine.module, mine.best_sequence, mine.best_cost, mine.best_raw_ops, mine.best_final_ops,
                mine.evaluations, mine.valid, mine.rejected, mine.status, mine.history, mine.history_seconds) == (
            theirs.run_id, theirs.module, theirs.best_sequence, theirs.best_cost, theirs.best_raw_ops,
            theirs.best_final_ops, theirs.evaluations, theirs.valid, theirs.rejected, theirs.status, theirs.history,
            theirs.history_seconds)
    for mine, theirs in zip(again.summaries, comparison.summaries):
        assert (mine.raw, mine.final, mine.wins, mine.ties, mine.losses, mine.evaluations) == (
            theirs.raw, theirs.final, theirs.wins, theirs.ties, theirs.losses, theirs.evaluations)
    out = tmp_path / "rep"
    ids = [r.run_id for r in comparison.runs]
    proc = run_cli("report", *ids, "--out", str(out), "--json", db=db_path)
    assert proc.returncode == 0, proc.stderr
    assert [s["strategy"] for s in json.loads(proc.stdout)["summaries"]] == STRATEGIES
    assert (out / "report.md").is_file() and (out / "report.html").is_file()
    table = run_cli("report", *ids, "--out", str(tmp_path / "rep-table"), db=db_path)  # the table for people
    assert table.returncode == 0 and "paper (2023" in table.stdout and "report:" in table.stdout, table.stderr
    bad = run_cli("report", "no-such-run", "--out", str(tmp_path / "x"), db=db_path)
    assert bad.returncode == 2 and "no run 'no-such-run'" in bad.stderr and "Traceback" not in bad.stderr
    empty = run_cli("report", "--out", str(tmp_path / "y"), db=db_path)
    assert empty.returncode == 2 and "autotune runs" in empty.stderr


def test_a_run_counts_its_own_steps_in_a_long_lived_session(tmp_path):
    """Two identical tunes in one session: the second compiles nothing, and says so."""
    from autotune.api import Session

    with Session(tmp_path / "c.db", workers=1) as s:
        first = s.tune(str(SMALL), strategy="random", budget=5, max_length=4, validate=False)
        second = s.tune(str(SMALL), strategy="random", budget=5, max_length=4, validate=False)
    assert first.steps_compiled > 0
    assert second.steps_compiled == 0 and second.steps_cached > 0


def test_session_explore_on_the_real_maml_module(tmp_path):
    """The API's exhaustive walk finds the one-pass improvement on MAML and validates it."""
    from autotune.api import Session

    with Session(tmp_path / "c.db", workers=2) as s:
        out = s.explore(str(DATA / "real" / "hloenv_maml_train_step.hlo"), depth=1)
        assert out.improved and out.best_final_ops == out.default_final_ops - 1 and out.valid
        tuned = s.apply(str(DATA / "real" / "hloenv_maml_train_step.hlo"), out.best_sequence)
        assert s.metrics(tuned).instructions == out.best_raw_ops


def test_unknown_strategy_or_option_fails_before_any_work(engine):
    with pytest.raises(BadInput, match="unknown strategy 'nope'"):
        compare(engine, [load(SMALL)], ["random", "nope"], budget=2, seeds=[0])
    with pytest.raises(BadInput):
        compare(engine, [load(SMALL)], ["random"], budget=2, seeds=[0], options_per_strategy={"random": {"x": 1}})


def test_cli_compare_writes_the_report(db_path, tmp_path):
    out = tmp_path / "cmp"
    proc = run_cli("compare", "--strategies", "random,greedy", "--budget", "4", "--max-length", "4", "--no-validate",
                   "--out", str(out), "--json", str(SMALL), str(MLP), db=db_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [s["strategy"] for s in data["summaries"]] == ["random", "greedy"]
    assert all(r["evaluations"] == 4 for r in data["runs"])
    assert (out / "report.md").is_file() and (out / "report.html").is_file() and (out / "comparison.json").is_file()


def test_cli_unknown_strategy_exits_2_with_one_line(db_path, tmp_path):
    proc = run_cli("compare", "--strategies", "random,nope", "--budget", "4", "--out", str(tmp_path / "x"),
                   str(SMALL), db=db_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown strategy 'nope'" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "x").exists()


def _paper_module():
    """``bench/paper.py`` imported from its file (``bench`` is not a package)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("bench_paper", ROOT / "bench" / "paper.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_paper"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_paper_script_presets_and_module_selection(tmp_path):
    paper = _paper_module()

    quick = paper.parse(["--quick"])
    assert quick.preset == "quick" and quick.budget == 50 and quick.test_modules and quick.test_modules <= 15
    assert paper.parse([]).preset == "quick"  # the full preset must be asked for
    full = paper.parse(["--full", "--budget", "10", "--seeds", "3,4", "--policies", "ppo-shaped-zero-shot"])
    assert (full.preset, full.budget, full.seeds, full.policies) == ("full", 10, (3, 4), ("ppo-shaped-zero-shot",))
    entries = [{"name": f"{fam}_{i}", "family": fam, "kind": "train", "config": {}, "instructions": 100 + i,
                "sha256": "", "split": "test" if i % 2 else "train", "file": f"{fam}_{i}.hlo", "jax_version": "x"}
               for fam in ("gpt2", "bert", "resnet") for i in range(8)]
    (tmp_path / "manifest.json").write_text(json.dumps({"jax_version": "x", "entries": entries}))
    picked = paper.select(tmp_path, "test", 5, max_instructions=106)
    assert len(picked) == 5 and all(e.split == "test" and e.instructions <= 106 for e in picked)
    assert {e.family for e in picked} == {"gpt2", "bert", "resnet"}  # round-robin over families
    assert picked == paper.select(tmp_path, "test", 5, max_instructions=106)  # stable
    assert len(paper.select(tmp_path, "train", None, max_instructions=10**6)) == 12


def test_rejected_candidates_survive_the_summary_round_trip(engine, comparison):
    """A run's summary lists rejected candidates as {sequence, reason}; the report keeps both."""
    from dataclasses import replace

    from autotune.reporting.comparison import _row_from_summary
    from autotune.core.runs import RunStore

    run = comparison.runs[0]
    summary = RunStore(engine.cache).get(run.run_id).summary
    summary["invalid"] = [{"sequence": ["cse", "dce"], "reason": "outputs differ"}]
    row = _row_from_summary(run.strategy, run.base_strategy, summary, run.budget, run.history, 0.0, 0, 0)
    assert row.rejected == ((("cse", "dce"), "outputs differ"),)
    assert replace(row, rejected=(), seconds=run.seconds, steps_compiled=run.steps_compiled,
                   steps_cached=run.steps_cached, history_seconds=run.history_seconds) == replace(run, rejected=())
    assert len(run.history_seconds) == len(run.history)  # the live row's wall-time axis, from the trials
