"""How ``autotune check`` judges a tuning record's figure against today's compile: the rules, on numbers.

A record made by the installed XLA is held to its own figure (``absolute``). A record made by another
XLA cannot be: XLA's default moves between versions (the DLRM step's default went 929 -> 961 final-ops
from jaxlib 0.10.2 to 0.12.0.1 while the recorded sequence kept saving the same 16 instructions), so
it is judged by what its sequence **saves over each version's own default** (``saving``). The stated
tolerance: today it must save at least the lesser of the same count and the same share of the default
(16 of 929 is 1.72%; on a default of 961 the same count, 16, is the lesser, so 945 holds and 946 does
not; on a default that shrank the same share is the lesser). ``--max-regression`` allows that much more
cost on top. A sequence that saves nothing over today's default fails whatever the tolerance. A
measured record (``runtime``) is re-timed against today's default and judged by the interval: it fails
only when the favourable end of the interval is worse than the allowed tuned/default ratio; across XLA
versions the allowed ratio comes from the same rule (the same seconds saved or the same share).

Pure functions: ``core/record.py`` measures, these decide, and the tests can check each rule on its
numbers as well as on a real compile.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Float slack on every comparison (costs are counts or seconds; ratios of them).
EPS = 1e-12


@dataclass(frozen=True)
class Judgement:
    """One verdict on a record's cost: ``reason`` is None when it holds."""

    judged: str  # "absolute" (the record's own figure) or "saving" (what it saves over each XLA's default)
    regression: float | None
    reason: str | None = None
    note: str | None = None  # how it was judged, in words, for a record made by another XLA


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


def interval(objective: str, claim, metrics: dict, default: float | None, max_regression: float,
             made_by: str | None = None, now: str | None = None) -> Judgement:
    """A measured record, judged on today's re-confirmation (``claim``): it fails only when even the
    favourable end of the interval (``low``) is worse than the allowed ratio by more than
    ``max_regression`` percent, i.e. when the regression is significant, not when noise says so.
    ``made_by``/``now``: the record's XLA and this one, when they differ."""
    held_to = allowed_ratio(metrics, default, made_by is not None)
    note = None
    if made_by is not None:
        note = (f"the record was made by {made_by}, this is {now}: re-timed against this XLA's default and held "
                f"to a tuned/default ratio of {held_to:.3f} (the lesser of the same time and the same share saved "
                f"over each one's own default; {max_regression:g}% more allowed), judged by the interval")
    judged = "saving" if note else "absolute"
    if claim.ratio is None or claim.low is None:
        return Judgement(judged, None, None, note)
    regression = claim.ratio / held_to - 1.0
    allowed = held_to * (1.0 + max_regression / 100.0)
    reason = None
    if claim.low > allowed + EPS:
        reason = (f"{objective} regressed: tuned/default ratio now {claim.ratio:.3f} [{claim.low:.3f}, "
                  f"{claim.high:.3f}] ({claim.confidence:.0%} CI, {claim.rounds} rounds), held to "
                  f"{held_to:.3f}; allowed up to {allowed:.3f} ({max_regression:g}%)")
    return Judgement(judged, regression, reason, note)
