"""What a comparison on a measured objective (``runtime``) measured, per strategy: the headline of
its report and of ``autotune compare``'s summary.

For a measured objective the paper's op-count metric says nothing (an answer of compiler options
alone reads "-91.2%" or "-99.0% (floored)" on raw ops while its time is what counts). Per strategy:

* **time ratio**: the geometric mean over its runs (modules x seeds) of tuned/default time. A run's
  ratio is its best candidate's confirmation (interleaved A/B against XLA's default, ``RunRow.claim``),
  won or not; a run with nothing to confirm (its best is XLA's default executable, or was not faster
  in the search) ships XLA's default: 1.0. The interval: a t interval on the runs' log ratios (the
  spread over modules and seeds) widened by each confirmation's own interval (its width gives the
  run's standard error), at the confirmations' confidence; with one run, that run's interval.
* **wins / ties / losses**: each run's confirmation verdict (``RunRow.outcome``).
* **seconds to the first confirmed win**: over the strategy's winning runs, the fewest seconds into a
  run at which its search first evaluated the answer that was then confirmed (``RunRow.history`` and
  ``history_seconds``); the confirmation itself comes after the search and is not counted.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist

from autotune.core import objectives
from autotune.reporting.rows import RunRow

#: The confirmations' confidence when no run says its own.
CONFIDENCE = 0.95


@dataclass(frozen=True)
class TimeSummary:
    """One strategy's measured result (see the module doc)."""

    strategy: str
    runs: int  # runs in the mean (those that did not error)
    confirmed: int  # of them, runs whose ratio is a confirmation (the others ship XLA's default: 1.0)
    geomean: float | None  # geometric mean of tuned/default time (None: no run)
    low: float | None
    high: float | None
    confidence: float
    wins: int
    ties: int
    losses: int
    first_win_seconds: float | None  # None: no confirmed win

    def to_dict(self) -> dict:
        return asdict(self)


def run_ratio(row: RunRow) -> tuple[float, float] | None:
    """A run's (tuned/default time, standard error of its log); None for an errored run."""
    if not row.ok:
        return None
    c = row.claim or {}
    ratio, low, high = c.get("ratio"), c.get("low"), c.get("high")
    if not c.get("measured") or not isinstance(ratio, (int, float)) or ratio <= 0:
        return 1.0, 0.0  # nothing confirmed: the run ships XLA's default
    if not (isinstance(low, (int, float)) and isinstance(high, (int, float)) and 0 < low <= high):
        return float(ratio), 0.0
    z = NormalDist().inv_cdf((1.0 + float(c.get("confidence") or CONFIDENCE)) / 2.0)
    return float(ratio), (math.log(high) - math.log(low)) / (2.0 * z)


def first_win_seconds(row: RunRow) -> float | None:
    """Seconds into a winning run at which its search first reached its final best (None: not a win, or
    no wall-time axis)."""
    if row.outcome != "win" or not row.history or len(row.history_seconds) < len(row.history):
        return None
    final = row.history[-1]
    if final is None:
        return None
    at = next(i for i, h in enumerate(row.history) if h is not None and h <= final)
    return float(row.history_seconds[at])


def time_summary(strategy: str, rows: Sequence[RunRow]) -> TimeSummary:
    """``rows`` (one strategy's runs) as its measured result."""
    measured = [(r, run_ratio(r)) for r in rows]
    measured = [(r, x) for r, x in measured if x is not None]
    outcomes = [r.outcome for r in rows]
    confidence = next((float(r.claim["confidence"]) for r, _ in measured
                       if r.claim and r.claim.get("measured") and r.claim.get("confidence")), CONFIDENCE)
    wins_at = [s for s in (first_win_seconds(r) for r in rows) if s is not None]
    common = dict(strategy=strategy, runs=len(measured),
                  confirmed=sum(1 for r, _ in measured if (r.claim or {}).get("measured")), confidence=confidence,
                  wins=outcomes.count("win"), ties=outcomes.count("tie"), losses=outcomes.count("loss"),
                  first_win_seconds=min(wins_at) if wins_at else None)
    if not measured:
        return TimeSummary(geomean=None, low=None, high=None, **common)
    logs = [math.log(ratio) for _, (ratio, _) in measured]
    ses = [se for _, (_, se) in measured]
    n = len(logs)
    mean = sum(logs) / n
    own = math.sqrt(sum(se * se for se in ses)) / n  # the confirmations' own noise, in the mean
    spread = statistics.stdev(logs) / math.sqrt(n) if n > 1 else 0.0
    se = math.hypot(spread, own)
    if n > 1:
        from scipy.stats import t as student  # heavy: only when a mean over runs needs it

        crit = float(student.ppf((1.0 + confidence) / 2.0, n - 1))
    else:
        crit = NormalDist().inv_cdf((1.0 + confidence) / 2.0)
    return TimeSummary(geomean=math.exp(mean), low=math.exp(mean - crit * se), high=math.exp(mean + crit * se),
                       **common)


def time_summaries(comp) -> list[TimeSummary]:
    """Every strategy of a ``Comparison``, in its order."""
    return [time_summary(s.strategy, comp.rows(s.strategy)) for s in comp.summaries]


def measured(comp) -> bool:
    """Whether the comparison's objective is measured (its runs carry confirmations): its report leads
    with time, not op counts."""
    return any((r.claim or {}).get("measured") for r in comp.runs) or _objective_measured(comp.objective)


def _objective_measured(name: str) -> bool:
    """Whether the named objective is measured (an objective no longer installed: say it is not)."""
    try:
        return not objectives.get(name).deterministic
    except Exception:  # noqa: BLE001
        return False


def ratio_cell(t: TimeSummary) -> str:
    """``0.940 [0.910, 0.971]`` (or ``-`` with no run)."""
    if t.geomean is None:
        return "-"
    return f"{t.geomean:.3f} [{t.low:.3f}, {t.high:.3f}]"


def seconds_cell(t: TimeSummary) -> str:
    return "no win" if t.first_win_seconds is None else f"{t.first_win_seconds:.1f}"
