"""``autotune check`` of a measured record: a comparison of two measurements (``core/record_judge.py``).

The rules on numbers (the flax record of issue 65 among them), then on real XLA and ``mlp_train_step``:
a record whose answer is XLA's own executable is re-confirmed without timing (ratio exactly 1), so the
"win gone" and the interval test are checked there cheaply. A timed failure on real XLA, re-timed
before it stands, is ``test_runtime.py::test_check_judges_a_runtime_record_on_the_interval``.
"""

from __future__ import annotations

import json

from autotune.core import record_judge
from autotune.core.module import load
from autotune.core.objectives import Claim
from autotune.core.record import TuningRecord, check
from conftest import DATA, run_cli

MLP = DATA / "mlp_train_step.hlo"


def _claim(ratio, low, high, rounds=60):
    return Claim(False, ratio, 1.0, "", ratio=ratio, low=low, high=high, confidence=0.95, min_effect=0.02,
                 rounds=rounds, measured=True)


FLAX = {"cost": 0.813, "default_cost": 1.0, "ratio": 0.813, "ratio_low": 0.790, "ratio_high": 0.832,
        "confidence": 0.95, "min_effect": 0.02}


def test_a_timed_failure_stands_only_when_a_second_re_timing_fails_too():
    first = record_judge.interval("runtime", _claim(1.2, 1.1, 1.3), FLAX, 1.0, None)
    assert first.reason and first.rule.startswith("win gone")
    passed = record_judge.replicated(first, record_judge.interval("runtime", _claim(0.83, 0.82, 0.84), FLAX, 1.0,
                                                                  None), _claim(1.2, 1.1, 1.3))
    assert passed.reason is None and passed.rule.startswith("confirmed win")
    assert "the first re-timing, 1.200 [1.100, 1.300], failed and did not replicate" in passed.rule
    stands = record_judge.replicated(first, first, _claim(1.2, 1.1, 1.3))
    assert stands.reason and "replicated: the first re-timing" in stands.reason


def test_the_rules_on_numbers():
    judge = record_judge.interval
    # issue 65: the flax record re-timed twice; held to its point estimate, both failed while the win held
    for now in (_claim(0.828, 0.823, 0.835), _claim(0.834, 0.825, 0.845)):
        verdict = judge("runtime", now, FLAX, 1.0, None)
        assert verdict.reason is None and verdict.rule.startswith("confirmed win")
        # a bound given: the interval test decides alone, and these two measurements do not differ
        bounded = judge("runtime", now, FLAX, 1.0, 0.0)
        assert bounded.reason is None and bounded.rule.startswith("interval test") and "not proven slower" in bounded.rule
    # still a win, but far slower than recorded: passes without a bound, fails with one
    far = _claim(0.90, 0.89, 0.91)
    assert judge("runtime", far, FLAX, 1.0, None).reason is None
    bounded = judge("runtime", far, FLAX, 1.0, 5.0)
    assert bounded.reason and "proven slower" in bounded.rule and "slow end 0.874 with +5%" in bounded.rule
    assert judge("runtime", far, FLAX, 1.0, 15.0).reason is None  # the recorded slow end 0.832 * 1.15 = 0.957 allowed
    # no faster than XLA's default any more: the win is gone, whatever the interval test would say
    gone = judge("runtime", _claim(1.01, 1.0, 1.02), FLAX, 1.0, None)
    assert gone.reason and gone.rule.startswith("win gone") and "held to 0.813" in gone.rule
    # not a win today, not proven slower than recorded: the interval test passes it
    straddles = judge("runtime", _claim(0.97, 0.94, 1.01), {**FLAX, "ratio": 0.95, "ratio_low": 0.92,
                                                              "ratio_high": 0.99}, 1.0, None)
    assert straddles.reason is None and straddles.rule.startswith("interval test")
    # a record that was no win is never "gone": only a proven slowdown fails it
    assert not record_judge.recorded_win({"ratio": 0.99, "ratio_high": 1.01})
    assert record_judge.recorded_win({"ratio": 0.5})  # an old record without an interval
    assert judge("runtime", _claim(1.0, 1.0, 1.0, 0), {"ratio": 1.0, "ratio_low": 0.97, "ratio_high": 1.03},
                 1.0, None).reason is None


def _record(engine, root, metrics, sequence=(), options=None):
    return TuningRecord(module="mlp", fingerprint=root.fingerprint, sequence=sequence, objective="runtime",
                        pipeline_version=engine.version, xla_version=engine.pipeline.compiler_version,
                        autotune_version="", metrics=metrics, valid=True, compiler_options=options or {})


def test_check_on_real_xla_says_which_rule_decided(engine, tmp_path, db_path):
    root = engine.prepare(load(MLP))
    # XLA's own executable (no passes, no options): re-confirmed as exactly 1.0 without timing
    won = _record(engine, root, {"cost": 0.8, "default_cost": 1.0, "ratio": 0.8, "ratio_low": 0.78,
                                 "ratio_high": 0.82, "confidence": 0.95})
    gone = check(engine, load(MLP), won, validate=False)
    assert not gone.ok and gone.rule.startswith("win gone") and gone.claim["ratio"] == 1.0
    even = _record(engine, root, {"cost": 1.0, "default_cost": 1.0, "ratio": 1.0, "ratio_low": 0.97,
                                  "ratio_high": 1.03, "confidence": 0.95})
    held = check(engine, load(MLP), even, validate=False)
    assert held.ok and held.rule.startswith("interval test") and "not proven slower" in held.rule
    assert json.loads(json.dumps(gone.to_dict()))["rule"].startswith("win gone") and gone.max_regression == 0.0
    # the command line prints the rule; exit 1 on a failure
    path = tmp_path / "won.json"
    won.save(path)
    proc = run_cli("check", str(MLP), "--record", str(path), "--no-validate", db=db_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "rule: win gone" in " ".join(proc.stdout.split())
