"""``autotune check`` of a measured record: a comparison of two measurements (``core/record_judge.py``).

The rules on numbers (the flax record of issue 65 among them), then on real XLA and ``mlp_train_step``:
a record whose answer is XLA's own executable is re-confirmed without timing (ratio exactly 1), so the
"win gone" and the interval test are checked there cheaply; a real slowdown is one we create (XLA's
fusion pass disabled through the record's compiler options).
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
    # a real slowdown: XLA's fusion pass disabled, recorded as even with XLA's default
    slow = _record(engine, root, even.metrics, options={"xla_disable_hlo_passes": "fusion"})
    slower = check(engine, load(MLP), slow, validate=False)
    assert not slower.ok and slower.claim["low"] > 1.03, slower.claim
    assert "lies wholly above" in slower.reasons[0] and "not proven" not in slower.reasons[0]
    # the command line prints the rule; exit 1 on a failure
    path = tmp_path / "won.json"
    won.save(path)
    proc = run_cli("check", str(MLP), "--record", str(path), "--no-validate", db=db_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "rule: win gone" in " ".join(proc.stdout.split())
    data = json.loads(run_cli("check", str(MLP), "--record", str(path), "--no-validate", "--json", db=db_path).stdout)
    assert data["rule"].startswith("win gone") and data["max_regression"] == 0.0
