"""How ``autotune check`` judges a tuning record's figure against today's compile: the rules, on numbers.

A record made by the installed XLA is held to its own figure (``absolute``). A record made by another
XLA cannot be: XLA's default moves between versions (the DLRM step's default went 929 -> 961 final-ops
from jaxlib 0.10.2 to 0.12.0.1 while the recorded sequence kept saving the same 16 instructions), so
it is judged by what its sequence **saves over each version's own default** (``saving``). The stated
tolerance: today it must save at least the lesser of the same count and the same share of the default
(16 of 929 is 1.72%; on a default of 961 the same count, 16, is the lesser, so 945 holds and 946 does
not; on a default that shrank the same share is the lesser). ``--max-regression`` allows that much more
cost on top. A sequence that saves nothing over today's default fails whatever the tolerance. A
measured record (``runtime``) is re-timed against today's default and judged as a comparison of two
measurements (``interval``): it passes while it is still a confirmed win (unless a bound is given), and
fails only when the win is gone or today's interval lies wholly above the recorded one beyond the
allowance; a new interval is never held to the old point estimate (that went red on noise:
a record of 0.813 [0.790, 0.832] re-timed at 0.828 [0.823, 0.835], a 17% win still). Across XLA
versions the allowed ratio comes from the same rule (the same seconds saved or the same share).

Pure functions: ``core/record.py`` measures, these decide, and the tests can check each rule on its
numbers as well as on a real compile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from autotune.core.stats import MIN_EFFECT

#: Float slack on every comparison (costs are counts or seconds; ratios of them).
EPS = 1e-12
#: The runtime objective's default smallest win, for a record that does not say its own.
DEFAULT_MIN_EFFECT = MIN_EFFECT


@dataclass(frozen=True)
class Judgement:
    """One verdict on a record's cost: ``reason`` is None when it holds."""

    judged: str  # "absolute" (the record's own figure) or "saving" (what it saves over each XLA's default)
    regression: float | None
    reason: str | None = None
    note: str | None = None  # how it was judged, in words, for a record made by another XLA
    rule: str | None = None  # which rule decided a measured record, in words (``interval``)


def absolute(objective: str, recorded: float, cost: float, max_regression: float) -> Judgement:
    """Same XLA: today's cost against the recorded one, ``max_regression`` percent allowed."""
    regression = (cost - recorded) / recorded
    reason = None
    if regression > max_regression / 100.0 + EPS:
        reason = (f"{objective} regressed by {regression:+.2%} ({recorded:g} -> {cost:g}; "
                  f"allowed {max_regression:g}%)")
    return Judgement("absolute", regression, reason)


def required_saving(recorded: float, recorded_default: float, default: float) -> float:
    """What a record must save over today's default: the lesser of the recorded count and the recorded
    share of the default applied to today's default."""
    saved = recorded_default - recorded
    return min(saved, saved / recorded_default * default)


def saving(objective: str, recorded: float, recorded_default: float, cost: float, default: float,
           max_regression: float, made_by: str, now: str) -> Judgement:
    """Another XLA: what the sequence saves over today's default against what it saved over its own."""
    saved_then, saved_now = recorded_default - recorded, default - cost
    need = required_saving(recorded, recorded_default, default)
    bound = default - need  # the cost that saves exactly what is required
    regression = (cost - bound) / bound if bound > 0 else None
    note = (f"the record was made by {made_by}, this is {now}: judged by what it saves over each one's own "
            f"XLA default ({saved_then:g} of {recorded_default:g} {objective} then, {saved_now:g} of {default:g} now); "
            f"it holds while it saves at least {need:.4g} (the lesser of the same count and the same share, "
            f"{saved_then / recorded_default:.2%} of the default; {max_regression:g}% more cost allowed)")
    reason = None
    if saved_now <= EPS:
        reason = (f"{objective}: the recorded sequence no longer saves anything over this XLA's default "
                  f"({cost:g} vs {default:g}; it saved {saved_then:g} of {recorded_default:g} on {made_by})")
    elif regression is not None and regression > max_regression / 100.0 + EPS:
        reason = (f"{objective}: the recorded sequence saves {saved_now:g} over this XLA's default ({cost:g} vs "
                  f"{default:g}), less than the {need:.4g} required ({saved_then:g} of {recorded_default:g} on "
                  f"{made_by}; allowed {max_regression:g}% more cost)")
    return Judgement("saving", regression, reason, note)


def allowed_ratio(metrics: dict, default: float | None, other_xla: bool) -> float:
    """The tuned/default time ratio a measured record is held to. Its confirmed ratio (1, "no slower than
    XLA's default", for a record without one); made by another XLA, the ratio that saves the lesser of
    the same seconds and the same share of today's default, when the record has both times."""
    ratio = metrics.get("ratio")
    ratio = float(ratio) if isinstance(ratio, (int, float)) and ratio > 0 else 1.0
    cost, then = metrics.get("cost"), metrics.get("default_cost")
    if other_xla and default and all(isinstance(v, (int, float)) and v > 0 for v in (cost, then)) and cost < then:
        ratio = max(ratio, 1.0 - required_saving(cost, then, default) / default)
    return ratio


def recorded_win(metrics: dict) -> bool:
    """Whether the record's own measurement was a confirmed win: its interval's upper end below its bar
    (a record without an interval: its ratio below the bar)."""
    bar = 1.0 - _num(metrics.get("min_effect"), DEFAULT_MIN_EFFECT)
    high = metrics.get("ratio_high")
    top = high if isinstance(high, (int, float)) and high > 0 else metrics.get("ratio")
    return isinstance(top, (int, float)) and 0 < top < bar - EPS


def _num(value, fallback: float) -> float:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else fallback


def _fmt(ratio, low, high) -> str:
    if isinstance(low, (int, float)) and isinstance(high, (int, float)):
        return f"{ratio:.3f} [{low:.3f}, {high:.3f}]"
    return f"{ratio:.3f}"


def slow_end(metrics: dict, held_to: float, max_regression: float) -> float:
    """The slow end of the recorded measurement, as held and allowed: the recorded interval's upper end
    (its ratio for a record without one), scaled to ``held_to`` (a record of another XLA is held to
    another ratio than its own), times ``1 + max_regression``%."""
    ratio, high = metrics.get("ratio"), metrics.get("ratio_high")
    spread = high / ratio if all(isinstance(v, (int, float)) and v > 0 for v in (ratio, high)) and high >= ratio else 1.0
    return held_to * spread * (1.0 + max_regression / 100.0)


def interval(objective: str, claim, metrics: dict, default: float | None, max_regression: float | None,
             made_by: str | None = None, now: str | None = None) -> Judgement:
    """A measured record, judged as a comparison of two measurements: the record's (its ratio and
    interval) and today's re-confirmation (``claim``). The rules, first that applies decides (``rule``):

    * **confirmed win** (no ``max_regression`` given): today's interval lies wholly below the bar
      (``1 - min_effect``): the answer is still a confirmed win, whatever noise moved it by; pass.
    * **win gone** (no bound given, the record was a confirmed win): today's interval lies wholly at or
      above 1: the answer is no faster than XLA's default; fail.
    * **interval test**: otherwise (or whenever the user set a bound) it fails only when today's
      interval lies wholly above the recorded one (its slow end, ``slow_end``, times ``1 +
      max_regression``%): the two measurements differ in the slower direction. A new interval is
      never held to the old point estimate. A timed failure is judged again on a second re-timing on
      other inputs and stands only if that fails too (``replicated``, called by ``core/record.py``):
      on the 2-core machine loaded ~6x by other jobs, single re-timings of an unchanged 1.7x-slower
      record read up to 4.1x (``bench/check_aa.py``, ``results/check_aa.md``); a normal test on the
      log difference (each interval's width as its spread) failed 4 of 20 such re-runs, disjoint
      intervals without replication 3.

    ``made_by``/``now``: the record's XLA and this one, when they differ (the recorded ratio is then
    replaced by the one that saves the same time or share over today's default, ``allowed_ratio``)."""
    held_to = allowed_ratio(metrics, default, made_by is not None)
    bound = max_regression is not None
    allow = float(max_regression or 0.0)
    note = None
    if made_by is not None:
        note = (f"the record was made by {made_by}, this is {now}: re-timed against this XLA's default and held "
                f"to a tuned/default ratio of {held_to:.3f} (the lesser of the same time and the same share saved "
                f"over each one's own default; {allow:g}% more allowed), judged by the interval")
    judged = "saving" if note else "absolute"
    if claim.ratio is None or claim.low is None:
        return Judgement(judged, None, None, note, rule="not re-timed: nothing to judge")
    regression = claim.ratio / held_to - 1.0
    today = _fmt(claim.ratio, claim.low, claim.high)
    rec_ratio = _num(metrics.get("ratio"), 1.0)
    recorded = _fmt(rec_ratio, metrics.get("ratio_low"), metrics.get("ratio_high"))
    bar = 1.0 - _num(claim.min_effect, _num(metrics.get("min_effect"), DEFAULT_MIN_EFFECT))
    level = f"{_num(claim.confidence, 0.95):.0%}"
    if not bound and claim.high is not None and claim.high < bar - EPS:
        return Judgement(judged, regression, None, note, rule=(
            f"confirmed win: today's tuned/default {today} lies wholly below the {bar:.3f} bar ({level} CI; "
            f"recorded {recorded}); no --max-regression given, so a win that still holds passes"))
    if not bound and recorded_win(metrics) and claim.low >= 1.0 - EPS:
        rule = (f"win gone: today's tuned/default {today} is no faster than XLA's default ({level} CI; the record "
                f"claimed {recorded}, held to {held_to:.3f})")
        return Judgement(judged, regression, f"{objective} regressed: {rule}", note, rule=rule)
    top = slow_end(metrics, held_to, allow)
    slower = claim.low > top + EPS
    place = "lies wholly above" if slower else "reaches into or below"
    rule = (f"interval test: today's tuned/default {today} {place} the recorded {recorded} (held to {held_to:.3f}; "
            f"its slow end {top:.3f}{f' with +{allow:g}%' if allow else ''}): "
            f"{'proven slower' if slower else 'not proven slower'} ({claim.rounds} rounds today, {level} CI)")
    reason = f"{objective} regressed: {rule}" if slower else None
    return Judgement(judged, regression, reason, note, rule=rule)


def replicated(first: Judgement, second: Judgement, first_claim) -> Judgement:
    """A timed failure (``first``) judged again on a second re-timing (``second``, other inputs): it
    stands only when the second fails too; otherwise the second decides, and the rule says both."""
    said = f"the first re-timing, {_fmt(first_claim.ratio, first_claim.low, first_claim.high)}, failed"
    if second.reason is None:
        return replace(second, rule=f"{second.rule}; {said} and did not replicate on other inputs")
    rule = f"{second.rule}; replicated: {said} too"
    return replace(second, rule=rule, reason=f"{second.reason}; replicated: {said} too")
