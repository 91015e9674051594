"""Every discovered strategy keeps the plugin contract, on real modules through real XLA workers.

The contract: a run spends exactly its budget (the tuner's count and the trials table agree), is
deterministic under its seed, and reports the cheapest sequence it evaluated. Plus the
strategy-specific options (optuna samplers and storage, nevergrad optimisers, greedy patience)
and the error paths (unknown strategy, option, sampler, optimiser).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from autotune import strategy as strategy_mod
from autotune.errors import BadInput, UnknownName
from autotune.core.module import load
from autotune.core.tuner import tune
from conftest import DATA, ROOT, SMALL, run_cli

MLP = DATA / "mlp_train_step.hlo"
MODULES = [p for p in (SMALL, MLP) if p.exists()]
STRATEGIES = sorted(strategy_mod.available())
#: PPO spends a budget by learning (fine-tuning, or from scratch): torch, from ``xla-autotune[train]``. Without
#: it (CI's newest-jax leg) the contract runs on the other strategies; the torch-free roll-outs are
#: tested in tests/test_policy_forward.py.
HAS_TORCH = importlib.util.find_spec("torch") is not None


def _learning(name: str):
    marks = [] if HAS_TORCH or name != "ppo" else [pytest.mark.skip(reason="ppo learns with torch (xla-autotune[train])")]
    return pytest.param(name, marks=marks)
BUILTIN = {"random", "greedy", "optuna", "nevergrad"}
BUDGET = {"ppo": 8}  # per-strategy budget of the contract runs; others get DEFAULT_BUDGET
DEFAULT_BUDGET = 12
MAX_LENGTH = 5


def trials_of(engine, run_id: str) -> list[tuple[str, float, str]]:
    return engine.cache.db.execute(
        "SELECT sequence, cost, status FROM trials WHERE run=? ORDER BY n", [run_id]
    ).fetchall()


def run(engine, path, strategy, budget=None, seed=7, options=None, max_length=MAX_LENGTH, validate=False):
    budget = budget or BUDGET.get(strategy, DEFAULT_BUDGET)
    return tune(engine, load(path), strategy=strategy, budget=budget, seed=seed, max_length=max_length,
                options=options, validate=validate)


@pytest.fixture(scope="module")
def contract_runs(engine):
    """Two runs with the same seed per (strategy, module), made once and shared by the checks."""
    done: dict = {}

    def get(strategy: str, path):
        key = (strategy, path)
        if key not in done:
            done[key] = (run(engine, path, strategy), run(engine, path, strategy))
        return done[key]

    return get


def assert_contract(engine, result, budget: int):
    # (a) exactly the budget, counted by the tuner and recorded in the trials table
    assert result.evaluations == budget
    rows = trials_of(engine, result.run_id)
    count = engine.cache.db.execute("SELECT COUNT(*) FROM trials WHERE run=?", [result.run_id]).fetchone()[0]
    assert count == len(rows) == budget
    # (c) the best sequence found is the cheapest ok trial, and it was evaluated; the reported one is
    # that sequence pruned of passes whose removal costs nothing, so it is never worse.
    ok = [(seq, cost) for seq, cost, status in rows if status == "ok"]
    assert ok, "no sequence evaluated successfully"
    cheapest = min(cost for _, cost in ok)
    found = result.best.found or result.best_sequence
    assert ",".join(found) in {seq for seq, cost in ok if cost == cheapest}
    assert result.best_cost <= cheapest
    assert set(result.best_sequence) <= set(found) and len(result.best_sequence) <= len(found)
    assert all(1 <= len(seq.split(",")) <= MAX_LENGTH for seq, _, _ in rows)
    assert len(result.history) == budget and result.history[-1] == cheapest


# ---- the contract, for every discovered strategy --------------------------------------------------------
def test_builtin_strategies_are_discovered():
    assert BUILTIN <= set(STRATEGIES)


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
@pytest.mark.parametrize("strategy", [_learning(s) for s in STRATEGIES])
def test_contract(engine, contract_runs, strategy, path):
    first, second = contract_runs(strategy, path)
    budget = BUDGET.get(strategy, DEFAULT_BUDGET)
    for result in (first, second):
        assert result.status == "finished"
        assert_contract(engine, result, budget)
    # (b) deterministic under the seed: the same trials in the same order, the same best
    assert first.run_id != second.run_id
    assert trials_of(engine, first.run_id) == trials_of(engine, second.run_id)
    assert first.best_sequence == second.best_sequence and first.best_cost == second.best_cost
    # (d) a real module, measured against XLA's own ordering
    assert first.default_cost > 0 and first.best_cost >= 0


@pytest.mark.parametrize("strategy", [_learning(s) for s in sorted(BUILTIN - {"greedy"})])
def test_seed_changes_the_search(engine, contract_runs, strategy):
    first, _ = contract_runs(strategy, SMALL)
    other = run(engine, SMALL, strategy, seed=8)
    assert_contract(engine, other, DEFAULT_BUDGET)
    assert trials_of(engine, other.run_id) != trials_of(engine, first.run_id)


def test_contract_with_validation(engine):
    result = run(engine, SMALL, "optuna", validate=True)
    assert result.evaluations == DEFAULT_BUDGET
    assert result.validation is not None and result.validation.ok
    ok = [cost for _, cost, status in trials_of(engine, result.run_id) if status == "ok"]
    assert result.best_cost <= min(ok)  # rejected candidates are marked invalid, not ok; pruning never worsens


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_unknown_option_is_bad_input(strategy):
    with pytest.raises(BadInput, match="bogus"):
        strategy_mod.create(strategy, bogus_option=1)


# ---- greedy ----------------------------------------------------------------------------------------------
def check_greedy(rows, actions, empty: float, patience: int, max_length: int, budget: int) -> None:
    """Replay greedy's rule over its recorded trials: each block of ``len(actions)`` trials extends the
    previous block's best (first in action order on ties) by every action, in action order, and the
    run stops exactly where the rule says."""
    n = len(actions)
    prefix, best, stale, i = (), empty, 0, 0
    while len(prefix) < max_length and i < budget:
        block = rows[i:i + n]
        assert [seq for seq, _, _ in block] == [",".join(prefix + (a,)) for a in actions][: len(block)]
        i += len(block)
        if len(block) < n:
            break  # the budget ran out inside this position
        costs = [cost for _, cost, _ in block]
        k = costs.index(min(costs))
        prefix = prefix + (actions[k],)
        if costs[k] < best:
            best, stale = costs[k], 0
        else:
            stale += 1
            if stale >= patience:
                break
    assert len(rows) == i  # nothing evaluated after the rule said stop


@pytest.mark.parametrize("patience, max_length", [(1, 4), (2, 3), (3, 3)])
def test_greedy_follows_its_rule(engine, pipeline, patience, max_length):
    actions = pipeline.passes()
    budget = 4 * len(actions)
    result = run(engine, SMALL, "greedy", budget=budget, max_length=max_length,
                 options={"patience": patience, "restarts": False})
    rows = trials_of(engine, result.run_id)
    assert rows and result.evaluations == len(rows) <= budget
    check_greedy(rows, actions, result.default_cost, patience, max_length, budget)
    assert result.best_cost <= min(cost for _, cost, status in rows if status == "ok")
    if patience == 3:  # never 3 stale positions in a row before max_length 3: runs to the end
        assert len(rows) == 3 * len(actions)


def test_greedy_budget_cut_inside_a_position(engine, pipeline):
    actions = pipeline.passes()
    budget = len(actions) + 5
    result = run(engine, SMALL, "greedy", budget=budget, max_length=3, options={"patience": 2, "restarts": False})
    rows = trials_of(engine, result.run_id)
    assert result.evaluations == len(rows) == budget  # patience 2 always reaches the second position
    check_greedy(rows, actions, result.default_cost, 2, 3, budget)


def test_greedy_patience_looks_further(engine, pipeline):
    n = len(pipeline.passes())
    one = run(engine, SMALL, "greedy", budget=6 * n, max_length=3, options={"restarts": False})
    three = run(engine, SMALL, "greedy", budget=6 * n, max_length=3, options={"patience": 3, "restarts": False})
    assert three.evaluations == 3 * n  # runs to max_length
    assert one.evaluations <= three.evaluations
    assert trials_of(engine, three.run_id)[: one.evaluations] == trials_of(engine, one.run_id)
    assert three.best_cost <= one.best_cost


def test_greedy_restarts_spend_the_budget_on_runners_up(engine, pipeline):
    n = len(pipeline.passes())
    plain = run(engine, SMALL, "greedy", budget=4 * n, max_length=3, options={"restarts": False})
    restarting = run(engine, SMALL, "greedy", budget=4 * n, max_length=3)
    assert plain.evaluations < 4 * n == restarting.evaluations
    rows = trials_of(engine, restarting.run_id)
    assert rows[: plain.evaluations] == trials_of(engine, plain.run_id)  # the first descent is plain greedy
    # The restart descends from the cheapest prefix not yet expanded: a one-pass runner-up.
    restart_prefix = rows[plain.evaluations][0].split(",")[:-1]
    assert len(restart_prefix) >= 1
    assert restarting.best_cost <= plain.best_cost


@pytest.mark.parametrize("bad", [0, -1, "x", 1.5])
def test_greedy_rejects_bad_patience(bad):
    with pytest.raises(BadInput, match="patience"):
        strategy_mod.create("greedy", patience=bad)


# ---- optuna ----------------------------------------------------------------------------------------------
def _optuna_samplers() -> list:
    out = []
    for name in ("tpe", "random", "cmaes", "qmc", "gp", "nsga2", "nsga3"):
        marks = []
        if name == "cmaes" and importlib.util.find_spec("cmaes") is None:
            marks = [pytest.mark.skip(reason="optuna's CmaEsSampler needs the 'cmaes' package")]
        if name == "gp" and not HAS_TORCH:
            marks = [pytest.mark.skip(reason="optuna's GPSampler needs torch (xla-autotune[train])")]
        out.append(pytest.param(name, marks=marks))
    return out


@pytest.mark.parametrize("sampler", _optuna_samplers())
def test_optuna_samplers(engine, sampler):
    options = {"sampler": sampler, "n_startup_trials": 4}
    first = run(engine, SMALL, "optuna", budget=8, options=options)
    second = run(engine, SMALL, "optuna", budget=8, options=options)
    assert_contract(engine, first, 8)
    assert trials_of(engine, first.run_id) == trials_of(engine, second.run_id)


@pytest.mark.skipif(HAS_TORCH, reason="torch is installed: the gp sampler works here")
def test_optuna_gp_without_torch_is_one_line():
    with pytest.raises(BadInput, match=r"needs torch.*autotune\[train\]"):
        strategy_mod.create("optuna", sampler="gp")


def test_optuna_unknown_sampler_lists_the_valid_ones():
    with pytest.raises(UnknownName) as info:
        strategy_mod.create("optuna", sampler="tpee")
    message = str(info.value)
    assert "tpee" in message and all(s in message for s in ("tpe", "random", "gp", "nsga2"))


def test_optuna_unknown_encoding():
    with pytest.raises(BadInput, match="encoding"):
        strategy_mod.create("optuna", encoding="onehot")


def test_optuna_shared_storage_continues_one_study(engine, tmp_path):
    import optuna

    url = f"sqlite:///{tmp_path / 'study.db'}"
    options = {"storage": url, "study_name": "shared"}
    run(engine, SMALL, "optuna", budget=6, options=options)
    run(engine, SMALL, "optuna", budget=6, options=options, seed=8)
    study = optuna.load_study(study_name="shared", storage=url)
    states = [t.state for t in study.trials]
    assert sum(s == optuna.trial.TrialState.COMPLETE for s in states) >= 12
    assert optuna.trial.TrialState.RUNNING not in states  # trials cut off by the budget are closed
    assert {"length", "p0", f"p{MAX_LENGTH - 1}"} <= set(study.trials[0].params)


def test_optuna_bad_storage_is_bad_input(engine, tmp_path):
    with pytest.raises(BadInput, match="storage"):
        run(engine, SMALL, "optuna", budget=2, options={"storage": "nosuchdb://x"})


# ---- nevergrad -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("optimizer, encoding", [
    ("DiscreteOnePlusOne", "transition"), ("DiscreteOnePlusOne", "choice"), ("NGOpt", "transition"),
    ("TwoPointsDE", "choice"), ("Powell", "transition"),
])
def test_nevergrad_optimizers(engine, optimizer, encoding):
    # Powell cannot run in parallel: it gets one candidate per round and must still keep the contract
    options = {"optimizer": optimizer, "encoding": encoding}
    first = run(engine, SMALL, "nevergrad", budget=8, options=options)
    second = run(engine, SMALL, "nevergrad", budget=8, options=options)
    assert_contract(engine, first, 8)
    assert trials_of(engine, first.run_id) == trials_of(engine, second.run_id)


def test_nevergrad_unknown_optimizer_suggests_close_names():
    with pytest.raises(UnknownName) as info:
        strategy_mod.create("nevergrad", optimizer="DiscreteOnePlusOn")
    assert "DiscreteOnePlusOne" in str(info.value)


def test_nevergrad_unknown_encoding():
    with pytest.raises(BadInput, match="encoding"):
        strategy_mod.create("nevergrad", encoding="onehot")


def test_nevergrad_optimizer_name_is_case_insensitive():
    assert strategy_mod.create("nevergrad", optimizer="ngopt").optimizer_name == "NGOpt"


# ---- discovery, errors and the CLI -----------------------------------------------------------------------
def test_unknown_strategy(engine):
    with pytest.raises(UnknownName):
        strategy_mod.create("nosuch")
    with pytest.raises(BadInput):
        tune(engine, load(SMALL), strategy="nosuch", budget=2)


def test_listing_imports_no_strategy_library():
    code = (
        "import sys, autotune.strategy as s; names = s.available(); "
        "assert {'random', 'greedy', 'optuna', 'nevergrad'} <= set(names), names; "
        "heavy = [m for m in ('torch', 'optuna', 'nevergrad') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_cli_strategies_json(tmp_path):
    proc = run_cli("strategies", "--json", db=tmp_path / "c.db")
    assert proc.returncode == 0, proc.stderr
    data = {s["name"]: s for s in json.loads(proc.stdout)}
    assert BUILTIN <= set(data)
    for name in BUILTIN:
        assert data[name]["description"] and data[name]["target"].startswith("autotune.strategies.")


def _one_line_error(proc, code: int = 2) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    return lines[0]


def test_cli_unknown_strategy(tmp_path):
    line = _one_line_error(run_cli("run", "--strategy", "nosuch", str(SMALL), db=tmp_path / "c.db"))
    assert "nosuch" in line


def test_cli_unknown_sampler_and_optimizer(tmp_path):
    line = _one_line_error(run_cli("run", "-s", "optuna", "--sampler", "nosuch", "--budget", "2",
                                   "--no-validate", str(SMALL), db=tmp_path / "c.db"))
    assert "nosuch" in line and "tpe" in line
    line = _one_line_error(run_cli("run", "-s", "nevergrad", "--optimizer", "DiscreteOnePlusOn", "--budget", "2",
                                   "--no-validate", str(SMALL), db=tmp_path / "c.db"))
    assert "DiscreteOnePlusOne" in line


def test_cli_run_with_strategy_options(tmp_path):
    proc = run_cli("run", "-s", "nevergrad", "--optimizer", "NGOpt", "-O", "batch_size=2", "--budget", "6",
                   "--max-length", "4", "--no-validate", "--json", str(SMALL), db=tmp_path / "c.db")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["strategy"] == "nevergrad" and data["evaluations"] == 6
    assert data["best"] is not None and data["default_cost"] > 0


def test_pruning_that_lowers_the_cost_is_reported_with_the_found_cost(engine):
    """On the bundled LLM decode step, ``dot_decomposer`` in front of ``algsimp,reshape-mover,cse``
    costs final-ops: a run whose best carries it reports the pruned, cheaper sequence and keeps the
    sequence as found with ITS cost (the shipped policy's DeepSeek-V2 roll-out is such a case), and
    the found cost survives the result's JSON."""
    from autotune.core.loop import summarise
    from autotune.core.tuner import TuneResult, evaluation_session

    session = evaluation_session(engine, load(ROOT / "examples" / "llm_decode_step.hlo"))
    found = ("dot_decomposer", "algsimp", "reshape-mover", "cse")
    found_cost = session(found)  # the run's only trial
    result = summarise(session.t, "finished", validate=False, validation_seed=0)
    assert result.best.found == found and result.best.found_cost == found_cost
    assert result.best.cost < found_cost and "dot_decomposer" not in result.best_sequence
    assert result.best.cost == session(result.best_sequence) < result.default_cost
    assert TuneResult.from_dict(result.to_dict()).best.found_cost == found_cost
    from autotune.cli.run import _dropped  # what `run` names as dropped when it prints the lower cost

    assert "dot_decomposer" in _dropped(found, result.best_sequence)
    assert sorted(_dropped(found, result.best_sequence) + list(result.best_sequence)) == sorted(found)


def test_best_sequence_is_pruned_to_the_passes_that_matter(engine):
    """On MAML one pass (tree_reduction_rewriter) beats XLA's default; random search finds it inside a
    longer sequence of passes that change nothing, and the reported sequence keeps only what counts."""
    maml = load(DATA / "real" / "hloenv_maml_train_step.hlo")
    result = tune(engine, maml, strategy="random", budget=100, seed=0, max_length=8)
    assert result.beats_default and result.best_cost < result.default_cost
    assert len(result.best.found) > len(result.best_sequence) >= 1
    final = engine.final(engine.evaluate(engine.prepare(maml), result.best_sequence).state)
    assert final.metrics.instructions == result.best_cost
    assert result.validation and result.validation.ok
    unpruned = tune(engine, maml, strategy="random", budget=100, seed=0, max_length=8, prune=False)
    assert unpruned.best_sequence == result.best.found and unpruned.best_cost == result.best_cost
