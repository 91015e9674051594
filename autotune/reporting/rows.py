"""One (strategy, module, seed) run as a report sees it: ``RunRow``, and the constants its derived
figures need.

Its own module because both the metric (``autotune.reporting.metric``, which aggregates rows) and
the comparison model (``autotune.reporting.comparison``, which holds them and uses the metric) need
it: with the row in ``comparison`` the two imported each other. Now the arrows go one way:
``rows`` <- ``metric`` <- ``comparison``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from autotune.core.gpu_guard import is_guard_reason

#: Ratios below this are floored (the paper's metric is a geometric mean: a ratio <= 0 has no log).
RATIO_FLOOR = 0.01
#: Relative tolerance under which a deterministic cost counts as a tie with XLA's default.
TIE_RTOL = 1e-9

#: The zoo's families by module-name prefix (``llm_spmd`` modules are named ``llm_...`` too).
FAMILIES = ("gpt2", "bert", "resnet", "llm", "t5", "vit", "diffusion")


def family_of(name: str) -> str:
    """Model family from a module name prefix: gpt2_/bert_/resnet_/llm_/t5_/vit_/diffusion_, else "other"."""
    low = name.lower()
    for fam in FAMILIES:
        if low.startswith(fam + "_"):
            return fam
    return "other"


@dataclass(frozen=True)
class RunRow:
    """One (strategy, module, seed) run, flattened to JSON-friendly fields."""

    strategy: str  # the label (a strategy name, or a configured variant such as "ppo-zero-shot")
    base_strategy: str  # the strategy plugin that ran
    module: str
    family: str
    seed: int
    budget: int
    run_id: str | None = None
    status: str = "finished"  # finished | time-limit | interrupted | error
    error: str | None = None
    evaluations: int = 0
    input_ops: int | None = None
    default_ops: int | None = None
    default_cost: float | None = None
    best_cost: float | None = None  # objective of the reported best (default_cost when none)
    best_raw_ops: int | None = None
    best_final_ops: int | None = None
    best_sequence: tuple[str, ...] = ()
    valid: bool | None = None  # validity of the reported best (None: not validated / no best)
    rejected: tuple[tuple[tuple[str, ...], str], ...] = ()  # candidates rejected by validation or the GPU guard
    validation: str | None = None  # validation level of the reported best (``autotune.core.validation``)
    seconds: float = 0.0
    steps_compiled: int = 0
    steps_cached: int = 0
    history: tuple[float | None, ...] = ()  # best-so-far objective after each evaluation (None: nothing ok yet)
    claim: dict | None = None  # the objective's verdict on the best (``Claim.to_dict``; measured: ratio + interval)
    best_options: dict = field(default_factory=dict)  # the best's compiler options (``core/options.py``)
    #: Seconds from the run's start at the end of each evaluation (``history``'s wall-time axis; empty:
    #: not known, e.g. a comparison written before it was kept).
    history_seconds: tuple[float, ...] = ()

    # -- derived ----------------------------------------------------------------------------------------
    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def default_reduction(self) -> int | None:
        if self.input_ops is None or self.default_ops is None:
            return None
        return self.input_ops - self.default_ops

    def ratio(self, final: bool = True) -> float | None:
        """Tuned reduction / default reduction, unfloored; None when undefined (see module doc)."""
        red = self.default_reduction
        if not self.ok or red is None or red <= 0:
            return None
        if self.best_raw_ops is None:  # no valid best: the untuned module (+ XLA's default for final)
            return 1.0 if final else 0.0
        tuned = self.best_final_ops if final else self.best_raw_ops
        if tuned is None:  # XLA's pipeline fails after the sequence: counts as nothing gained
            return -math.inf
        return (self.input_ops - tuned) / red

    def floored_ratio(self, final: bool = True) -> float | None:
        r = self.ratio(final)
        return None if r is None else max(r, RATIO_FLOOR)

    def improvement(self, final: bool = True) -> float | None:
        r = self.ratio(final)
        return None if r is None or math.isinf(r) else r - 1.0

    @property
    def outcome(self) -> str | None:
        """win / tie / loss against XLA's default on the objective (None for an errored run)."""
        if not self.ok or self.default_cost is None or self.best_cost is None:
            return None
        # A measured objective (its claims carry a minimum effect): the confirmation decides, and a run
        # with nothing to confirm (its best not faster in the search's noisy samples, or XLA's own
        # executable) ships XLA's default: a tie, not a loss read off one sample.
        if self.claim and (self.claim.get("measured") or self.claim.get("min_effect") is not None):
            if self.claim.get("win"):
                return "win"
            low, effect = self.claim.get("low"), self.claim.get("min_effect") or 0.0
            return "loss" if low is not None and low > 1.0 + effect else "tie"
        tol = TIE_RTOL * max(1.0, abs(self.default_cost))
        if self.best_cost < self.default_cost - tol:
            return "win"
        if self.best_cost > self.default_cost + tol:
            return "loss"
        return "tie"

    @property
    def validity_failure(self) -> bool:
        """The run's best (at least one top candidate) was rejected by the validity check (a candidate
        the GPU guard set aside is not invalid)."""
        return any(not is_guard_reason(reason) for _, reason in self.rejected)

    @property
    def cache_hit_rate(self) -> float:
        total = self.steps_compiled + self.steps_cached
        return self.steps_cached / total if total else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["best_sequence"] = list(self.best_sequence)
        d["rejected"] = [{"sequence": list(s), "reason": r} for s, r in self.rejected]
        d["history"] = [None if h is None else float(h) for h in self.history]
        d["history_seconds"] = [float(x) for x in self.history_seconds]
        d.update(
            default_reduction=self.default_reduction,
            ratio_raw=_json_num(self.ratio(False)), ratio_final=_json_num(self.ratio(True)),
            improvement_raw=self.improvement(False), improvement_final=self.improvement(True),
            outcome=self.outcome, validity_failure=self.validity_failure, cache_hit_rate=self.cache_hit_rate,
        )
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RunRow":
        names = set(cls.__dataclass_fields__)
        kw = {k: v for k, v in d.items() if k in names}
        kw["best_sequence"] = tuple(kw.get("best_sequence") or ())
        kw["rejected"] = tuple((tuple(x["sequence"]), x["reason"]) for x in kw.get("rejected") or ())
        kw["history"] = tuple(kw.get("history") or ())
        kw["history_seconds"] = tuple(kw.get("history_seconds") or ())
        return cls(**kw)


def _json_num(x: float | None):
    if x is None:
        return None
    if math.isinf(x):
        return "-inf" if x < 0 else "inf"
    return x
