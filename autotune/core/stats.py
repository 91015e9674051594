"""Statistics of runtime measurements: robust summaries, and whether B is really faster than A.

Wall-clock times of one executable on a shared machine vary by tens of percent from sample to
sample, and a search that keeps its fastest sample keeps its luckiest (the winner's curse). A claim
therefore rests on a separate interleaved A/B measurement (``Backend.time_ab``: A and B alternate
in one process, so drift and neighbours hit both arms alike) and on the statistics below, the way
benchmarking tools do it:

* **summary**: min, median and two robust spreads (MAD, IQR) of per-run times, never the mean alone;
* **ratio**: median(B) / median(A), below 1 when B is faster;
* **confidence interval** of that ratio by the bootstrap (``scipy.stats.bootstrap``, as criterion
  does), resampling *rounds* (``paired=True``): an A sample and the B sample beside it were taken
  under the same conditions and stay together;
* **verdict**: B is faster only if the whole interval lies below ``1 - min_effect`` (default 2%):
  significant *and* large enough to matter; slower only if it lies above ``1 + min_effect``;
  anything else is "no significant difference";
* the Mann-Whitney U test (``scipy.stats.mannwhitneyu``, Google Benchmark's compare.py) is reported
  beside the interval as a second opinion that assumes nothing about pairing; it does not decide;
* **over independent measurements** (``instance_ratio``, what a runtime claim uses): each measurement's
  median per-round ratio is one figure, the estimate their geometric mean with a t interval over
  measurements, since rounds within one measurement are not independent of each other.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

#: Defaults of a runtime claim (the ``runtime`` objective, ``check`` and the benchmark use these).
CONFIDENCE = 0.95
MIN_EFFECT = 0.02
ROUNDS = 30
#: Bootstrap resamples: enough for a stable 95% percentile interval of a ratio of medians.
RESAMPLES = 4000


@dataclass(frozen=True)
class Summary:
    """Robust description of per-run times (seconds)."""

    n: int
    min: float
    median: float
    mad: float  # median absolute deviation from the median
    iqr: float  # interquartile range

    @classmethod
    def of(cls, seconds: Sequence[float]) -> "Summary":
        arr = np.asarray(seconds, dtype=float)
        if arr.size == 0:
            raise ValueError("no samples")
        q1, med, q3 = np.percentile(arr, [25, 50, 75])
        return cls(int(arr.size), float(arr.min()), float(med), float(np.median(np.abs(arr - med))), float(q3 - q1))

    @property
    def relative_spread(self) -> float:
        """MAD / median: the noise of one sample, as a fraction."""
        return self.mad / self.median if self.median > 0 else math.nan


@dataclass(frozen=True)
class TimeRatio:
    """B against A: ``ratio`` = median(B) / median(A) with its confidence interval, and the verdict."""

    ratio: float
    low: float
    high: float
    confidence: float
    min_effect: float
    rounds: int
    p_value: float  # two-sided: Mann-Whitney U over rounds, or the t test over independent measurements
    a: Summary
    b: Summary
    #: Independent measurements the interval is over (``instance_ratio``); 0: one measurement's rounds.
    instances: int = 0

    @property
    def faster(self) -> bool:
        """B is faster by at least ``min_effect`` at this confidence (the whole interval below 1 - min_effect)."""
        return self.high < 1.0 - self.min_effect

    @property
    def slower(self) -> bool:
        return self.low > 1.0 + self.min_effect

    @property
    def verdict(self) -> str:
        if self.faster:
            return "faster"
        if self.slower:
            return "slower"
        return "no significant difference"

    def describe(self, context: bool = True) -> str:
        """``0.524x [0.51, 0.54] (95% CI, 30 rounds)``: the ratio and its interval, for a person
        (``context=False``: without the parenthesis)."""
        figure = f"{self.ratio:.3f}x [{self.low:.3f}, {self.high:.3f}]"
        if not context:
            return figure
        if self.instances:
            return (f"{figure} ({self.confidence:.0%} CI over {self.instances} independent measurements, "
                    f"{self.rounds} interleaved rounds)")
        return f"{figure} ({self.confidence:.0%} CI, {self.rounds} interleaved rounds)"

    def to_dict(self) -> dict:
        data = asdict(self)
        data["verdict"] = self.verdict
        return data


def summarize(seconds: Sequence[float]) -> dict:
    """What every backend's ``time`` reports beside the samples: min, median, mean, p90 and the
    robust spreads (MAD and IQR) of per-run times in seconds."""
    arr = np.asarray(seconds, dtype=float)
    q1, med, q3 = np.percentile(arr, [25, 50, 75])
    return {
        "median": float(med), "min": float(arr.min()), "mean": float(arr.mean()),
        "p90": float(np.percentile(arr, 90)), "iqr": float(q3 - q1),
        "mad": float(np.median(np.abs(arr - med))),
    }


def median_lower_bound(values: Sequence[float], alpha: float = 0.125) -> float | None:
    """A distribution-free one-sided lower confidence bound for the median of ``values``: the k-th
    smallest, k the largest with P(Binomial(n, 1/2) <= k - 1) <= ``alpha`` (the sign test's order
    statistic; ``scipy.stats.binom``). None when ``n`` is too small for that confidence (3 values
    give the smallest at 87.5%). What racing stops a candidate on: per-round ratios B/A of an
    interleaved measurement, whose median is the candidate's time relative to the baseline."""
    from scipy.stats import binom

    arr = np.sort(np.asarray(values, dtype=float))
    n = int(arr.size)
    if n == 0:
        return None
    k = int(np.searchsorted(binom.cdf(np.arange(n), n, 0.5), alpha, side="right"))  # #{j: cdf(j) <= alpha}
    return float(arr[k - 1]) if k >= 1 else None


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float | None, float | None]:
    """A distribution-free two-sided confidence interval for the median of ``values`` (the sign test's order
    statistics, ``median_lower_bound`` at ``(1 - confidence) / 2`` from each end); a side is None when
    ``values`` are too few for that confidence (5 or fewer at 95%). What the screen decides a single option
    value on (``core/screen.py``): per-round ratios B/A of one raced measurement, no bootstrap needed."""
    alpha = (1.0 - float(confidence)) / 2.0
    low = median_lower_bound(values, alpha)
    high = median_lower_bound([-v for v in values], alpha)
    return low, (None if high is None else -high)


@dataclass(frozen=True)
class RatioEvidence:
    """What one search-time measurement says of a candidate against the baseline: the median per-round
    ratio B/A, its distribution-free interval (``median_interval``; None where too few rounds), the rounds
    timed and whether racing stopped it early."""

    ratio: float
    low: float | None
    high: float | None
    rounds: int
    stopped: bool = False
    #: Rounds of those added by sequential confirmation (``Runtime.extend``).
    extended: int = 0

    def paid(self, bar: float) -> bool:
        """Faster than ``bar`` (``1 - min_effect``) beyond doubt: the whole interval below it."""
        return self.high is not None and self.high < bar

    def straddles(self, bar: float) -> bool:
        """Neither shown below ``bar`` nor shown above it: the interval holds it (or is too short to say)."""
        return not self.paid(bar) and (self.low is None or self.low < bar)


def sequential(found: RatioEvidence, more: Callable[[int], RatioEvidence | None], bar: float, rounds: int,
               extensions: int) -> RatioEvidence:
    """Sequential confirmation, capped: while ``found`` straddles ``bar``, ``more(rounds)`` times that many
    more rounds and returns the joined evidence; at most ``extensions`` times in all, counting the rounds
    ``found`` already had added (``extended``: an earlier run's, read from a cache), so a measurement is
    never extended past ``rounds * extensions``. A candidate is neither dropped nor taken on one draw."""
    while found.straddles(bar) and found.extended + rounds <= rounds * extensions:
        joined = more(rounds)
        if joined is None:
            break
        found = joined
    return found


def _ratio_of_medians(b, a, axis=-1):
    return np.median(b, axis=axis) / np.median(a, axis=axis)


def time_ratio(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE,
            min_effect: float = MIN_EFFECT, seed: int = 0, resamples: int = RESAMPLES) -> TimeRatio:
    """Compare per-run times ``b`` (the candidate) with ``a`` (the baseline), paired by round.

    ``a[i]`` and ``b[i]`` must come from the same round of an interleaved measurement. The interval
    is a paired percentile bootstrap of median(b) / median(a) (``scipy.stats.bootstrap``), seeded,
    so the same samples always give the same verdict.
    """
    from scipy import stats as sps

    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"confidence must be in [0.5, 1), not {confidence}")
    if not 0.0 <= min_effect < 1.0:
        raise ValueError(f"min_effect must be in [0, 1), not {min_effect}")
    a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a_arr.shape != b_arr.shape or a_arr.ndim != 1 or a_arr.size < 2:
        raise ValueError("time_ratio needs two equally long lists of at least 2 paired samples")
    ratio = float(_ratio_of_medians(b_arr, a_arr))
    if np.all(a_arr == a_arr[0]) and np.all(b_arr == b_arr[0]):  # no spread at all: nothing to resample
        low = high = ratio
    else:
        res = sps.bootstrap((b_arr, a_arr), _ratio_of_medians, paired=True, vectorized=True,
                            confidence_level=confidence, n_resamples=int(resamples), method="percentile",
                            rng=np.random.default_rng(seed))
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    p_value = float(sps.mannwhitneyu(b_arr, a_arr, alternative="two-sided").pvalue)
    return TimeRatio(ratio, low, high, float(confidence), float(min_effect), int(a_arr.size), p_value,
                      Summary.of(a_arr), Summary.of(b_arr))


def log_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """One interleaved measurement's figure: the log of its median per-round ratio B/A."""
    return float(np.log(np.median(np.asarray(b, dtype=float) / np.asarray(a, dtype=float))))


def instance_interval(log_ratios: Sequence[float], confidence: float = CONFIDENCE) -> dict:
    """The geometric mean of independent measurements' ratios (``log_ratios``, one per measurement) with its
    t interval over them (``scipy.stats.ttest_1samp``), the two-sided p value against no difference and the
    spread between measurements: ``ratio``, ``low``, ``high``, ``instances``, ``p_value``, ``sd``.

    Why over measurements and not rounds: rounds within one measurement share one compiled executable, one
    set of buffers and one stretch of the machine's state, so they are not independent; a bootstrap over
    them gives an interval too narrow for the next measurement of the same two modules (on this 2-core machine
    two claims of 30 rounds each of the same answer disagreed beyond their intervals: DLRM claimed 0.945, 20
    independent measurements read 0.975 [0.960, 0.991]; ViT's 0.93 straddled at 30 rounds twice and held at
    0.932 [0.912, 0.953] over 20; ``bench/options.py --stage effect``)."""
    from scipy import stats as sps

    arr = np.asarray(log_ratios, dtype=float)
    if arr.ndim != 1 or arr.size < 2:
        raise ValueError("instance_interval needs at least 2 independent measurements")
    mean, sd = float(arr.mean()), float(arr.std(ddof=1))
    if sd == 0.0:  # identical measurements: nothing varies, the interval is the point
        low = high = mean
        p_value = 1.0 if mean == 0.0 else 0.0
    else:
        test = sps.ttest_1samp(arr, 0.0)
        ci = test.confidence_interval(confidence)
        low, high, p_value = float(ci.low), float(ci.high), float(test.pvalue)
    return {"ratio": math.exp(mean), "low": math.exp(low), "high": math.exp(high), "instances": int(arr.size),
            "p_value": p_value, "sd": sd}


def instance_ratio(draws: Sequence[tuple[Sequence[float], Sequence[float]]], confidence: float = CONFIDENCE,
                   min_effect: float = MIN_EFFECT) -> TimeRatio:
    """B against A over independent interleaved measurements ``draws`` (``(a, b)`` per-round times of each,
    every one its own inputs in fresh buffers): the geometric mean of their median per-round ratios with a
    t interval over measurements (``instance_interval``), as a ``TimeRatio`` whose verdict follows the same
    rule (faster only with the whole interval below ``1 - min_effect``). ``a`` and ``b`` summarise all rounds."""
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"confidence must be in [0.5, 1), not {confidence}")
    if not 0.0 <= min_effect < 1.0:
        raise ValueError(f"min_effect must be in [0, 1), not {min_effect}")
    est = instance_interval([log_ratio(a, b) for a, b in draws], confidence)
    all_a = [x for a, _ in draws for x in a]
    all_b = [x for _, b in draws for x in b]
    return TimeRatio(est["ratio"], est["low"], est["high"], float(confidence), float(min_effect), len(all_a),
                     est["p_value"], Summary.of(all_a), Summary.of(all_b), est["instances"])
