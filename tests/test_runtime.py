"""The runtime objective's protocol on real XLA: one measurement per compiled module, and no claim
without an interleaved A/B confirmation and its confidence interval. No assertion here depends on
absolute speed; a real difference is one we create (XLA's fusion pass disabled) or none at all.

The module is ``mlp_train_step``: of its single-pass sequences that succeed, all but one leave XLA's default executable
unchanged (same final module) and one (``algsimp``) gives a genuinely different but equally fast one.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from autotune.core import objectives, stats
from autotune.core.module import load
from autotune.core.objectives import ObjectiveContext
from autotune.core.objectives.runtime import Runtime, runtime_key
from autotune.core.record import TuningRecord, check
from autotune.core.runs import RunStore
from autotune.core.tuner import tune
from autotune.errors import BadInput
from conftest import DATA, run_cli

MLP = DATA / "mlp_train_step.hlo"
NO_FUSION = [("xla_disable_hlo_passes", "fusion")]


def _runtime_reports(engine) -> int:
    return engine.cache.db.execute("SELECT COUNT(*) FROM reports WHERE kind='runtime'").fetchone()[0]


@pytest.fixture(scope="module")
def mlp(engine):
    root = engine.prepare(load(MLP))
    default = engine.default(root)
    singles = [r for r in engine.evaluate_many(root, [[p] for p in engine.pipeline.passes()]) if r.ok]
    finals = engine.final_many([r.state for r in singles])
    different = [(r, f) for r, f in zip(singles, finals) if f.state != default.state]
    assert len(different) == 1 and different[0][0].sequence == ("algsimp",)  # what the module doc says
    return root, default, different[0][0].state, different[0][1].state


# ---- statistics on synthetic samples --------------------------------------------------------------------
def test_statistics_detect_a_known_difference_and_not_identical_distributions():
    rng = np.random.default_rng(0)
    drift = 1 + 0.3 * rng.random(30)  # the machine slows down and speeds up: both arms alike
    a = 1e-3 * drift * (1 + 0.01 * rng.standard_normal(30))
    b = 0.9e-3 * drift * (1 + 0.01 * rng.standard_normal(30))
    faster = stats.time_ratio(a, b)
    assert faster.faster and faster.verdict == "faster"
    assert faster.low <= 0.9 <= faster.high < 0.98 and faster.p_value < 0.05
    slower = stats.time_ratio(b, a)
    assert slower.slower and not slower.faster

    wins = excluded_one = 0
    for trial in range(100):  # identical distributions: A/A
        drift = 1 + 0.3 * rng.random(30)
        a = 1e-3 * drift * (1 + 0.05 * rng.standard_normal(30))
        b = 1e-3 * drift * (1 + 0.05 * rng.standard_normal(30))
        c = stats.time_ratio(a, b, seed=trial)
        wins += c.faster
        excluded_one += c.high < 1 or c.low > 1
    assert wins == 0  # 2% minimum effect on top of 95% confidence
    assert excluded_one <= 10  # the interval itself is roughly calibrated (nominal 5 of 100)


def test_statistics_refuse_unpaired_or_tiny_samples():
    with pytest.raises(ValueError):
        stats.time_ratio([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        stats.time_ratio([1.0], [1.0])


# ---- identity sharing --------------------------------------------------------------------------------------
def test_candidates_with_the_same_compiled_module_share_one_measurement(engine, mlp):
    root, default, algsimp_state, algsimp_final = mlp
    seed = 101  # a seed no other test uses: nothing of this run is cached yet
    before = _runtime_reports(engine)
    result = tune(engine, load(MLP), strategy="greedy", budget=57, max_length=1, objective="runtime", seed=seed,
                  validate=False, screen=False)
    trials = RunStore(engine.cache).trials(result.run_id)
    assert len(trials) == 57 and sum(t.status == "ok" for t in trials) >= 50
    # 57 candidates, two compiled modules: XLA's default executable and algsimp's. Two timings.
    assert _runtime_reports(engine) - before == 2
    for key in (runtime_key(engine, default.state, seed), runtime_key(engine, algsimp_final, seed)):
        assert engine.cache.get_report("runtime", key) is not None
    for t in trials:
        if t.status == "ok" and t.sequence != ("algsimp",):
            assert t.cost == result.default_cost  # the default's own executable: its time, no timing
    tune(engine, load(MLP), strategy="greedy", budget=57, max_length=1, objective="runtime", seed=seed,
                 validate=False, screen=False)
    assert _runtime_reports(engine) - before == 2  # cached per compiled module


def test_a_default_executable_is_never_timed_or_claimed(engine, mlp):
    root, default, _, _ = mlp
    ctx = ObjectiveContext(engine, root, default, seed=102)
    obj = Runtime()
    state = engine.evaluate(root, ["dce"]).state
    assert ctx.final(state).state == default.state
    before = _runtime_reports(engine)
    claim = obj.confirm(state, -math.inf, ctx)  # even a "search sample" of -inf claims nothing
    assert not claim.win and claim.ratio == 1.0 and claim.rounds == 0 and "XLA's default" in claim.message
    assert _runtime_reports(engine) - before == 1  # the default's own search-time measurement, nothing else


# ---- confirmation ----------------------------------------------------------------------------------------
def test_a_poisoned_search_sample_is_not_claimed(engine, mlp):
    """The search's cached sample of algsimp's executable says 1 ns (a lucky, here fake, sample):
    it wins the search, and the interleaved confirmation refuses the claim."""
    root, default, algsimp_state, algsimp_final = mlp
    seed = 103
    key = runtime_key(engine, algsimp_final, seed)
    engine.cache.put_report("runtime", key, {"median_us": 1e-3, "poisoned": True})
    # min_effect 25%: two equally fast executables are never 25% apart, whatever the machine's load.
    obj = objectives.get("runtime", min_effect=0.25)
    result = tune(engine, load(MLP), strategy="greedy", budget=57, max_length=1, objective=obj, seed=seed,
                  validate=False, screen=False)
    assert result.best is not None and result.best.found == ("algsimp",) and result.best.cost == 1e-3
    assert result.best.sequence == ()  # the claim is refused: nothing beats the default, apply nothing
    claim = result.claim
    assert claim.measured and claim.rounds == 30 and claim.confidence == 0.95
    assert not claim.win and not result.beats_default
    assert claim.low <= claim.ratio <= claim.high and claim.high > 0.75
    assert "keep XLA's default" in claim.message
    summary = json.loads(json.dumps(result.to_dict()))
    assert summary["beats_default"] is False and summary["claim"]["high"] == claim.high


def test_a_claimed_win_carries_its_interval(engine, mlp):
    """A real difference: the same module compiled without XLA's fusion pass (A) and with it (B)."""
    root, default, _, _ = mlp
    obj = Runtime()
    timings = []

    def timed(seed):
        timings.append(engine.pipeline.time_ab(root, root, seed=seed, rounds=obj.rounds, options_a=NO_FUSION))
        return timings[-1]

    claim = obj.measured_claim(timed, seed=0)
    assert claim.win, claim.message
    # replicated on other inputs; a loaded machine may have made the first straddle and be timed further once
    assert len(timings) in (2, 3) and all(len(t["a"]) == len(t["b"]) == obj.rounds for t in timings)
    assert claim.measured and claim.low <= claim.ratio <= claim.high < 1 - obj.min_effect
    assert claim.confidence == 0.95 and claim.rounds == 30 * len(timings) and claim.min_effect == 0.02
    assert "95% CI" in claim.message and f"{claim.rounds} interleaved rounds" in claim.message
    assert "replicated" in claim.message
    # Every verdict the objective can give: a win has its interval, and only a proven one is a win.
    rng = np.random.default_rng(5)
    for scale in (0.5, 0.9, 0.97, 1.0, 1.2):
        a = 1e-3 * (1 + 0.03 * rng.standard_normal(12))
        c = obj.claim_from(stats.time_ratio(a, scale * a * (1 + 0.03 * rng.standard_normal(12))))
        assert c.win == (c.high is not None and c.high < 0.98)
        if c.win:
            assert None not in (c.ratio, c.low, c.high, c.confidence, c.rounds)


def test_a_faster_verdict_counts_only_when_a_second_confirmation_replicates_it():
    """The claim rule on given samples: a first confirmation that says faster is repeated on other inputs
    (seed + 1); the win needs both, and the claim is both pooled. One that says no difference is final.
    A second that straddles the bar (a noisy draw, not a contradiction) is decided by a third (seed + 2)."""
    rng = np.random.default_rng(3)

    def samples(scale, noise=0.01):
        a = 1e-3 * (1 + noise * rng.standard_normal(30))
        return {"a": list(a), "b": list(scale * a * (1 + noise * rng.standard_normal(30)))}

    def run(*scales):
        asked = []
        draws = [s if isinstance(s, tuple) else (s,) for s in scales]
        claim = Runtime().measured_claim(lambda seed: asked.append(seed) or samples(*draws[len(asked) - 1]), seed=7)
        return claim, asked

    claim, asked = run(0.9, 0.9)
    assert claim.win and asked == [7, 8] and claim.rounds == 60 and "replicated on other inputs" in claim.message
    claim, asked = run(0.9, 1.0)
    assert not claim.win and asked == [7, 8] and "not replicated" in claim.message
    assert claim.message.startswith("no significant difference: keep XLA's default")
    claim, asked = run(1.0, 0.9)
    assert not claim.win and asked == [7] and claim.rounds == 30
    straddling = (0.97, 0.15)  # a loaded draw: its interval reaches below 0.98 and above 1
    claim, asked = run(0.9, straddling, 0.9)
    assert claim.win and asked == [7, 8, 9] and claim.rounds == 90 and "a third decided" in claim.message
    claim, asked = run(0.9, straddling, 1.0)
    assert not claim.win and asked == [7, 8, 9] and "not replicated" in claim.message
    assert "on other inputs second 0.9" in claim.message and ", third 1.0" in claim.message, claim.message
    one = Runtime(replicate=False).measured_claim(lambda seed: samples(0.9), seed=7)
    assert one.win and one.rounds == 30  # replicate=False: one confirmation decides


def test_a_promising_first_confirmation_is_timed_further_and_a_tie_is_not():
    """A first confirmation whose ratio reads below 0.98 but whose interval holds it (a real 5% win on a
    noisy draw) is timed again on the same inputs (``timed(seed)`` again) and decided on the rounds joined,
    at most ``extensions`` times; the replication on other inputs still decides a win. A tie (its ratio at
    or above the bar, its interval reaching below it) and a first wholly above the bar are final."""

    def samples(scale, noise, k):
        rng = np.random.default_rng(11 + k)  # the k-th draw of a run: the same numbers whenever re-made
        a = 1e-3 * (1 + noise * rng.standard_normal(30))
        return {"a": list(a), "b": list(scale * a * (1 + noise * rng.standard_normal(30)))}

    def run(*draws, **kw):
        asked = []
        claim = Runtime(**kw).measured_claim(
            lambda seed: asked.append(seed) or samples(*draws[len(asked) - 1], len(asked) - 1), seed=7)
        return claim, asked

    def first(scale, noise):
        return stats.time_ratio(*samples(scale, noise, 0).values(), seed=7)

    noisy, steady = (0.95, 0.12), (0.95, 0.01)
    assert not first(*noisy).faster and first(*noisy).ratio < 0.98  # promising: below the bar, not shown
    claim, asked = run(noisy, steady, steady)
    assert claim.win and asked == [7, 7, 8] and claim.rounds == 90, claim.message
    assert "timed 30 rounds further" in claim.message and "replicated on other inputs" in claim.message
    claim, asked = run(noisy, noisy)  # still not shown after its extension: one extension, no third draw
    assert not claim.win and asked == [7, 7] and claim.rounds == 60 and "straddled 0.98" in claim.message
    claim, asked = run(noisy, extensions=0)
    assert not claim.win and asked == [7] and claim.rounds == 30 and "further" not in claim.message
    tie = (1.02, 0.12)  # no difference on a noisy machine: its interval reaches below the bar, its ratio not
    assert first(*tie).low < 0.98 <= first(*tie).ratio
    claim, asked = run(tie, tie)
    assert not claim.win and asked == [7] and claim.rounds == 30 and "further" not in claim.message
    claim, asked = run((1.0, 0.01))  # wholly above the bar: nothing to extend
    assert not claim.win and asked == [7] and claim.rounds == 30
    with pytest.raises(BadInput, match="extensions"):
        Runtime(extensions=-1)


# ---- records ---------------------------------------------------------------------------------------------
def test_check_judges_a_runtime_record_on_the_interval(engine, mlp):
    root, default, _, _ = mlp
    base = TuningRecord(module="mlp", fingerprint=root.fingerprint, sequence=("algsimp",), objective="runtime",
                        pipeline_version=engine.version, xla_version="", autotune_version="",
                        metrics={"cost": 1.0, "default_cost": 4.0, "ratio": 0.25}, valid=True)
    # The rule is the subject, not the power of 30 rounds (run's claim has them): 12 rounds re-time it.
    claimed_quarter = check(engine, load(MLP), base, validate=False, confirm_rounds=12)
    assert not claimed_quarter.ok and "regressed" in claimed_quarter.reasons[0]
    # a timed failure shows twice to stand (a 4x claim: even the widest interval of this as-fast-as-XLA
    # executable on the loaded 2-core machine, [0.548, 1.468], lies above it)
    assert "replicated: the first re-timing" in claimed_quarter.reasons[0]
    assert claimed_quarter.claim["measured"] and claimed_quarter.claim["low"] > 0.25
    assert claimed_quarter.regression > 0.25
    no_gain = TuningRecord(**{**base.__dict__, "metrics": {"cost": 1.0, "default_cost": 1.0, "ratio": 1.0}})
    held = check(engine, load(MLP), no_gain, max_regression=25, validate=False, confirm_rounds=12)
    assert held.ok, held.reasons
    assert held.claim["rounds"] == 12 and held.claim["low"] <= held.claim["ratio"] <= held.claim["high"]


@pytest.mark.slow
def test_a_runtime_record_of_another_xla_is_re_timed_and_held_to_the_same_saving(engine, mlp):
    """Made by another XLA, a measured record is held to the ratio that saves the lesser of the same time
    and the same share of today's default, and judged by today's interval. ``algsimp`` is as fast as XLA's
    default here (about 90 us): a record that saved half of a 2000 us default (the same share today: ratio
    0.5) fails; one that saved 1 us of a 2 us default (the same microsecond today: a ratio near 1) holds
    with the tolerance that fails it on the XLA that made it."""
    root, _, _, _ = mlp
    base = TuningRecord(module="mlp", fingerprint=root.fingerprint, sequence=("algsimp",), objective="runtime",
                        pipeline_version="old", xla_version="jaxlib-0.9.0-cpu-x86_64", autotune_version="",
                        metrics={"cost": 1000.0, "default_cost": 2000.0, "ratio": 0.5}, valid=True)
    half = check(engine, load(MLP), base, validate=False, confirm_rounds=12)
    assert not half.ok and "held to 0.500" in half.reasons[0], half.reasons
    assert half.judged == "saving" and "re-timed against this XLA's default" in half.judged_note
    microsecond = TuningRecord(**{**base.__dict__, "metrics": {"cost": 1.0, "default_cost": 2.0, "ratio": 0.5}})
    held = check(engine, load(MLP), microsecond, max_regression=25, validate=False, confirm_rounds=12)
    assert held.ok, held.reasons
    assert held.judged == "saving" and held.claim["measured"]
    here = TuningRecord(**{**microsecond.__dict__, "xla_version": engine.pipeline.compiler_version})
    assert not check(engine, load(MLP), here, max_regression=25, validate=False, confirm_rounds=12).ok  # its own 0.5


# ---- the command line --------------------------------------------------------------------------------------
def test_run_prints_the_claim_and_its_interval(engine, db_path, mlp):
    # algsimp's search sample poisoned (as in the test above), so that the run has a claim to confirm.
    engine.cache.put_report("runtime", runtime_key(engine, mlp[3], 104), {"median_us": 1e-3, "poisoned": True})
    # The claim's wording is the subject: no screen and no sites (test_screen.py and test_sites.py have them).
    args = ("run", str(MLP), "--strategy", "greedy", "--budget", "57", "--max-length", "1", "--objective",
            "runtime", "--min-effect", "25", "--no-validate", "--seed", "104", "--no-screen", "--sites", "0",
            "--confirm-rounds", "10")  # the wording is the subject, not the power of 30 rounds
    text = run_cli(*args, db=db_path)
    assert text.returncode == 0, text.stderr
    out = " ".join(text.stdout.split())  # rich wraps long lines
    assert "confirmation (10 interleaved rounds" in out and "at 95% confidence" in out
    assert "no significant difference: keep XLA's default" in out
    data = json.loads(run_cli(*args, "--json", db=db_path).stdout)
    assert data["claim"]["measured"] and data["claim"]["min_effect"] == 0.25 and not data["beats_default"]
    bad = run_cli(*args[:8], "--objective", "final-ops", "--min-effect", "5", db=db_path)
    assert bad.returncode == 2 and "measured objectives" in bad.stderr


# ---- reports -----------------------------------------------------------------------------------------------
def test_a_measured_run_is_a_win_in_compare_only_when_its_claim_is():
    from autotune.reporting.comparison import RunRow

    claim = {"win": False, "measured": True, "ratio": 0.93, "low": 0.85, "high": 1.01, "confidence": 0.95,
             "min_effect": 0.02, "rounds": 30, "cost": 93.0, "default_cost": 100.0, "message": "no significant"}
    row = RunRow("random", "random", "gpt2_x", "gpt2", 0, 30, default_cost=100.0, best_cost=70.0, claim=claim)
    assert row.outcome == "tie"  # the search's sample (70 vs 100) is not the verdict
    assert RunRow.from_dict(row.to_dict()).claim == claim
    assert RunRow(**{**row.__dict__, "claim": {**claim, "win": True, "high": 0.95}}).outcome == "win"
    assert RunRow(**{**row.__dict__, "claim": {**claim, "low": 1.05, "high": 1.2}}).outcome == "loss"
    assert RunRow(**{**row.__dict__, "claim": None}).outcome == "win"  # deterministic objectives: the costs
