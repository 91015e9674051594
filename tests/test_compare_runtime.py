"""``autotune compare --objective runtime`` leads with what was measured: the time table (geometric-mean
tuned/default time with its interval, wins/ties/losses, seconds to the first confirmed win) and time
plots; the op counts go lower in the report and out of the summary (``reporting/timing.py``)."""

from __future__ import annotations

import json
import math

from autotune.reporting.comparison import Comparison
from autotune.reporting.rows import RunRow
from autotune.reporting.timing import first_win_seconds, time_summaries, time_summary
from conftest import DATA, run_cli

MLP = DATA / "mlp_train_step.hlo"


def _row(seed, ratio, low, high, win, history=(1.0, 0.9), seconds=(0.5, 2.0)):
    claim = {"win": win, "ratio": ratio, "low": low, "high": high, "confidence": 0.95, "min_effect": 0.02,
             "rounds": 60, "measured": True}
    return RunRow("random", "random", "m", "other", seed, 3, run_id=f"r{seed}", default_cost=1.0,
                  best_cost=history[-1], history=history, history_seconds=seconds, claim=claim)


def test_the_time_summary_on_numbers():
    won = _row(0, 0.81, 0.79, 0.83, True)
    even = _row(1, 1.0, 0.97, 1.03, False)
    untimed = RunRow("random", "random", "m", "other", 2, 3, default_cost=1.0, best_cost=1.2,
                     claim={"win": False, "ratio": 1.2, "rounds": 0, "measured": False, "min_effect": 0.02})
    assert untimed.outcome == "tie"  # nothing confirmed: it ships XLA's default, not a loss read off a sample
    t = time_summary("random", [won, even, untimed])
    assert t.runs == 3 and t.confirmed == 2 and (t.wins, t.ties, t.losses) == (1, 2, 0)
    assert abs(t.geomean - math.exp((math.log(0.81) + 0 + 0) / 3)) < 1e-12  # the untimed run counts as 1.0
    assert t.low < t.geomean < t.high and t.first_win_seconds == 2.0  # the best was first reached at 2.0 s
    assert first_win_seconds(even) is None
    one = time_summary("random", [won])
    assert abs(one.low - 0.79) < 1e-3 and abs(one.high - 0.83) < 1e-3  # one run: its own interval


def test_compare_on_runtime_leads_with_the_time_table(tmp_path):
    out = tmp_path / "rep"
    # the report's shape is the subject, not the screen (test_screen.py): each strategy alone, and it says so
    proc = run_cli("compare", str(MLP), "--strategies", "random", "--budget", "2", "--seeds", "0", "--objective",
                   "runtime", "--no-validate", "--no-screen", "--workers", "1", "--out", str(out),
                   db=tmp_path / "c.db", env={"COLUMNS": "200"})  # one line per row: the headline reads as it is
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = " ".join(proc.stdout.split())
    assert "measured time against XLA's default" in text and "s to first win" in text
    assert "raw ops" not in text and "paper (2023" not in text
    md = (out / "report.md").read_text()
    assert md.index("## Measured time") < md.index("## Op counts") < md.index("## Per strategy")
    assert "geomean [95% CI]" in md and "convergence_wall.png" in md and "families.png" not in md
    assert "skipped the screen (--no-screen)" in md
    assert all((out / name).stat().st_size > 0 for name in ("convergence.png", "convergence_wall.png", "per_module.png"))
    comp = Comparison.from_dict(json.loads((out / "comparison.json").read_text()))
    (t,) = time_summaries(comp)
    assert t.runs == 1 and t.geomean is not None and t.low <= t.geomean <= t.high
    assert comp.runs[0].history_seconds and len(comp.runs[0].history_seconds) == len(comp.runs[0].history)
