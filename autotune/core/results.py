"""What a run returns, as frozen values low in the import graph: ``TuneResult`` (one module, with its
``Candidate``), ``FleetResult`` (one sequence for many, with a ``MemberResult`` each).

Here, not beside the searches that make them, because the run store reads them back
(``RunInfo.result``) and reports, records and the CLI read them: none of those may depend on the
searches (``core/tuner.py``, ``core/fleet.py``), which depend on the run store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from autotune.core.levels import Validation, rank
from autotune.core.footprint import MemoryChange
from autotune.core.metrics import Metrics
from autotune.core.objectives import Claim
from autotune.core.options import EMPTY, CompilerOptions
from autotune.core.target import CPU, Target


@dataclass(frozen=True)
class Candidate:
    """A module the tuner reports: raw metrics, metrics after XLA's default pipeline, cost."""

    sequence: tuple[str, ...]  # what to apply: empty when the candidate does not beat the default
    state: str  # the module ``found`` reached
    raw: Metrics
    final: Metrics | None
    cost: float
    found: tuple[str, ...] = ()  # the sequence as the strategy found it, before pruning
    found_cost: float | None = None  # its cost: above ``cost`` when pruning dropped a pass that hurt
    #: The compiler options to compile with (``core/options.py``): empty when the candidate does not beat
    #: the default (as ``sequence``), or when none were searched; ``found_options``: as the search found them.
    options: CompilerOptions = EMPTY
    found_options: CompilerOptions = EMPTY


@dataclass(frozen=True)
class TuneResult:
    run_id: str
    module: str
    fingerprint: str
    strategy: str
    objective: str
    seed: int
    budget: int
    evaluations: int
    status: str  # finished | interrupted | time-limit
    input: Metrics
    default: Metrics  # XLA's default ordering
    default_cost: float
    best: Candidate | None  # None: no valid sequence beat doing nothing
    #: How far ``best`` was checked: level, reason, stand-ins, output comparison (``validity`` in JSON).
    validation: Validation | None
    invalid: tuple[tuple[tuple[str, ...], str], ...]  # candidates rejected by the check, with reasons
    seconds: float
    steps_compiled: int
    steps_cached: int
    history: tuple[float, ...]  # best-so-far cost after each evaluation
    claim: Claim | None = None  # the objective's verdict on ``best`` against XLA's default
    executor: dict | None = None  # what ran the steps (autotune.core.executors: local or ray, and where)
    #: Seconds per phase (``observer.PHASES``: load, normalise, default, search, recheck, prune,
    #: validation, confirmation), in the order they ran; ``load`` is added by the caller that loaded the file.
    phases: tuple[tuple[str, float], ...] = ()
    #: Set when the search ran on a surrogate with the large constants lifted to parameters: how many,
    #: their bytes, each re-checked candidate's cost on the surrogate and on the real module,
    #: ``agree`` and a ``message`` saying what was done (``ModuleSearch.recheck``).
    surrogate: dict | None = None
    #: The machine the run judged for: its pipeline applied and judged every sequence (``core/target.py``).
    target: Target = CPU
    #: Memory per device of the default and of ``best`` (``core/footprint.py``), when validated and measurable.
    memory: MemoryChange | None = None
    #: What was searched (``--space``: passes, options or both) and how the strategy searched the options.
    space: str = "passes"
    options_by: str | None = None
    #: What a measured objective did across the search (runtime: racing's candidates stopped and time saved).
    search_notes: dict | None = None
    #: Candidates measured faster than the default whose outputs differ (``sequence``, ``compiler_options``,
    #: ``ratio``, ``reason``): never offered, always reported.
    faster_but_wrong: tuple[dict, ...] = ()

    @property
    def validation_level(self) -> str | None:
        return self.validation.level if self.validation else None

    @property
    def best_sequence(self) -> tuple[str, ...]:
        return self.best.sequence if self.best else ()

    @property
    def best_options(self) -> CompilerOptions:
        """The compiler options to compile with (empty: XLA's default), as ``best_sequence`` the passes."""
        return self.best.options if self.best else EMPTY

    @property
    def beats_default(self) -> bool:
        """True when the best valid sequence beats XLA's default ordering, as its objective judges
        it (for a measured objective: confirmed by interleaved re-measurement, not the search's sample)."""
        if self.best is None:
            return False
        if self.claim is not None:
            return self.claim.win
        return self.best.cost < self.default_cost

    @property
    def best_cost(self) -> float:
        return self.best.cost if self.best else self.default_cost

    @property
    def cache_hit_rate(self) -> float:
        total = self.steps_compiled + self.steps_cached
        return self.steps_cached / total if total else 0.0

    def improvement(self, final: bool = True) -> float | None:
        """The 2023 paper's ratio: the tuned sequence's instruction reduction / the default's, minus 1."""
        if self.best is None:
            return None
        tuned = self.best.final if final else self.best.raw
        if tuned is None:
            return None
        default_red = self.input.instructions - self.default.instructions
        tuned_red = self.input.instructions - tuned.instructions
        if default_red <= 0:
            return None
        return tuned_red / default_red - 1.0

    def to_dict(self) -> dict:
        best = None
        if self.best:
            best = {
                "sequence": list(self.best.sequence),
                "found_sequence": list(self.best.found or self.best.sequence),
                "found_cost": self.best.found_cost,
                "cost": self.best.cost,
                "state": self.best.state,
                "raw": self.best.raw.to_dict(),
                "final": self.best.final.to_dict() if self.best.final else None,
                "compiler_options": self.best.options.as_dict(),
                "found_compiler_options": self.best.found_options.as_dict(),
            }
        return {
            "run_id": self.run_id, "module": self.module, "fingerprint": self.fingerprint,
            "strategy": self.strategy, "objective": self.objective, "seed": self.seed, "budget": self.budget,
            "evaluations": self.evaluations, "status": self.status,
            "input": self.input.to_dict(), "default": self.default.to_dict(), "default_cost": self.default_cost,
            "best": best, "beats_default": self.beats_default,
            "validity": self.validation.to_dict() if self.validation else None,
            "validation_level": self.validation_level,
            "claim": self.claim.to_dict() if self.claim else None,
            "invalid": [{"sequence": list(s), "reason": r} for s, r in self.invalid],
            "improvement_final_ops": self.improvement(True), "improvement_raw_ops": self.improvement(False),
            "seconds": self.seconds, "steps_compiled": self.steps_compiled, "steps_cached": self.steps_cached,
            "cache_hit_rate": self.cache_hit_rate, "executor": self.executor, "history": list(self.history),
            "phases": dict(self.phases),
            "surrogate": self.surrogate,
            "target": self.target.to_dict(), "judged_by": self.target.judged_by(),
            "memory": self.memory.to_dict() if self.memory else None,
            "space": self.space, "options_by": self.options_by, "search_notes": self.search_notes,
            "faster_but_wrong": [dict(w) for w in self.faster_but_wrong],
        }

    @classmethod
    def from_dict(cls, data: dict) -> "TuneResult":
        """The inverse of ``to_dict`` (derived keys such as ``beats_default`` are recomputed, not read)."""
        best = data.get("best")
        if best is not None:
            best = Candidate(tuple(best["sequence"]), best["state"], Metrics.from_dict(best["raw"]),
                             Metrics.from_dict(best["final"]) if best.get("final") else None, float(best["cost"]),
                             tuple(best.get("found_sequence") or ()),
                             None if best.get("found_cost") is None else float(best["found_cost"]),
                             CompilerOptions.of(best.get("compiler_options")),
                             CompilerOptions.of(best.get("found_compiler_options")))
        return cls(
            run_id=data["run_id"], module=data["module"], fingerprint=data["fingerprint"], strategy=data["strategy"],
            objective=data["objective"], seed=int(data["seed"]), budget=int(data["budget"]),
            evaluations=int(data["evaluations"]), status=data["status"], input=Metrics.from_dict(data["input"]),
            default=Metrics.from_dict(data["default"]), default_cost=float(data["default_cost"]), best=best,
            validation=Validation.from_dict(data.get("validity")),
            invalid=tuple((tuple(i["sequence"]), i["reason"]) for i in data.get("invalid") or ()),
            seconds=float(data["seconds"]), steps_compiled=int(data["steps_compiled"]),
            steps_cached=int(data["steps_cached"]), history=tuple(float(h) for h in data.get("history") or ()),
            claim=Claim.from_dict(data.get("claim")), executor=data.get("executor"),
            phases=tuple((str(k), float(v)) for k, v in (data.get("phases") or {}).items()),
            surrogate=data.get("surrogate"), target=Target.from_dict(data.get("target")),
            memory=MemoryChange.from_dict(data.get("memory")), space=data.get("space") or "passes",
            options_by=data.get("options_by"), search_notes=data.get("search_notes"),
            faster_but_wrong=tuple(data.get("faster_but_wrong") or ()),
        )


@dataclass(frozen=True)
class MemberResult:
    """The fleet's sequence on one module."""

    name: str
    fingerprint: str
    input: Metrics
    default: Metrics
    default_cost: float
    state: str | None
    tuned: Metrics | None  # after the sequence and XLA's default pipeline (final-ops objectives)
    tuned_raw: Metrics | None
    cost: float | None
    ratio: float | None
    regressed: bool
    validation: Validation | None = None  # ``validity`` in JSON

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("validation")
        data["validity"] = self.validation.to_dict() if self.validation else None
        for k in ("input", "default", "tuned", "tuned_raw"):
            m = getattr(self, k)
            data[k] = m.to_dict() if m is not None else None
        data["relative_change"] = None if self.ratio is None else self.ratio - 1.0
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "MemberResult":
        """The inverse of ``to_dict`` (``relative_change`` is derived, not read)."""
        def metrics(key):
            return Metrics.from_dict(data[key]) if data.get(key) else None

        return cls(
            name=data["name"], fingerprint=data["fingerprint"], input=metrics("input"), default=metrics("default"),
            default_cost=float(data["default_cost"]), state=data.get("state"), tuned=metrics("tuned"),
            tuned_raw=metrics("tuned_raw"), cost=None if data.get("cost") is None else float(data["cost"]),
            ratio=None if data.get("ratio") is None else float(data["ratio"]), regressed=bool(data.get("regressed")),
            validation=Validation.from_dict(data.get("validity")))


@dataclass(frozen=True)
class FleetResult:
    run_id: str
    modules: tuple[str, ...]
    fingerprint: str  # of the fleet (its members' fingerprints)
    strategy: str
    objective: str
    seed: int
    budget: int
    evaluations: int
    status: str
    best_sequence: tuple[str, ...]
    found_sequence: tuple[str, ...]
    best_cost: float  # mean ratio to the default; 1.0 = XLA's default everywhere
    members: tuple[MemberResult, ...]  # the best sequence on every module
    allow_regressions: bool
    invalid: tuple[tuple[tuple[str, ...], str], ...]
    seconds: float
    steps_compiled: int
    steps_cached: int
    history: tuple[float, ...]
    default_cost: float = 1.0
    disqualified: int = 0  # evaluations rejected because some module got worse than its default
    failed: int = 0  # evaluations where a pass (or the default pipeline after it) failed on some module
    target: Target = CPU  # the machine the fleet was judged for (``core/target.py``)
    #: The one compiler option set for every member (``core/options.py``; empty: XLA's default).
    best_options: CompilerOptions = EMPTY

    @property
    def beats_default(self) -> bool:
        return (bool(self.best_sequence) or bool(self.best_options)) and self.best_cost < self.default_cost

    @property
    def validation_level(self) -> str | None:
        """The weakest validation level among the members (None: not validated)."""
        levels = [m.validation.level for m in self.members if m.validation is not None]
        if not levels or len(levels) != len(self.members):
            return None
        return min(levels, key=lambda lv: rank(lv) if lv else -1)

    @property
    def regressions(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.members if m.regressed)

    def to_dict(self) -> dict:
        """The fleet's figures, per member and, under the keys a single run's summary has (``module``,
        ``input``, ``default``, ``best.raw``/``best.final``, ``validation_level``), summed over the
        members, so a fleet run is reported (``autotune report``) like any run."""
        valid = [m.validation.ok for m in self.members if m.validation is not None]
        whole = {k: summed([getattr(m, k) for m in self.members]) for k in ("input", "default", "tuned", "tuned_raw")}
        return {
            "run_id": self.run_id, "fleet": True, "modules": list(self.modules), "fingerprint": self.fingerprint,
            "module": f"fleet of {len(self.members)}",
            "strategy": self.strategy, "objective": self.objective, "seed": self.seed, "budget": self.budget,
            "evaluations": self.evaluations, "status": self.status, "allow_regressions": self.allow_regressions,
            "input": whole["input"].to_dict(), "default": whole["default"].to_dict(),
            "best": {"sequence": list(self.best_sequence), "found_sequence": list(self.found_sequence),
                     "cost": self.best_cost, "raw": whole["tuned_raw"] and whole["tuned_raw"].to_dict(),
                     "final": whole["tuned"] and whole["tuned"].to_dict(),
                     "compiler_options": self.best_options.as_dict()}
            if self.best_sequence or self.best_options else None,
            "best_cost": self.best_cost, "default_cost": self.default_cost,
            "mean_relative_change": self.best_cost - 1.0, "beats_default": self.beats_default,
            "regressions": list(self.regressions),
            "validity": {"ok": all(valid), "level": self.validation_level}
            if valid and len(valid) == len(self.members) else None,
            "validation_level": self.validation_level, "claim": None,
            "members": [m.to_dict() for m in self.members],
            "invalid": [{"sequence": list(s), "reason": r} for s, r in self.invalid],
            "seconds": self.seconds, "steps_compiled": self.steps_compiled, "steps_cached": self.steps_cached,
            "disqualified_evaluations": self.disqualified, "failed_evaluations": self.failed,
            "target": self.target.to_dict(), "judged_by": self.target.judged_by(),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "FleetResult":
        """The inverse of ``to_dict`` (the summed and derived keys are recomputed, not read; the
        best-so-far history is not stored with the summary: the runs table's trials hold it)."""
        best = data.get("best") or {}
        return cls(
            run_id=data["run_id"], modules=tuple(data["modules"]), fingerprint=data["fingerprint"],
            strategy=data["strategy"], objective=data["objective"], seed=int(data["seed"]),
            budget=int(data["budget"]), evaluations=int(data["evaluations"]), status=data["status"],
            best_sequence=tuple(best.get("sequence") or ()), found_sequence=tuple(best.get("found_sequence") or ()),
            best_cost=float(data["best_cost"]), members=tuple(MemberResult.from_dict(m) for m in data["members"]),
            allow_regressions=bool(data.get("allow_regressions")),
            invalid=tuple((tuple(i["sequence"]), i["reason"]) for i in data.get("invalid") or ()),
            seconds=float(data["seconds"]), steps_compiled=int(data["steps_compiled"]),
            steps_cached=int(data["steps_cached"]), history=(), default_cost=float(data.get("default_cost", 1.0)),
            disqualified=int(data.get("disqualified_evaluations") or 0),
            failed=int(data.get("failed_evaluations") or 0), target=Target.from_dict(data.get("target")),
            best_options=CompilerOptions.of(best.get("compiler_options")))


def summed(metrics: Sequence[Metrics | None]) -> Metrics | None:
    """The fleet as one module (counts summed; None when a member has none): what a learning strategy
    observes and what a report of the fleet shows."""
    if any(m is None for m in metrics):
        return None
    ops: dict[str, int] = {}
    for m in metrics:
        for op, c in m.opcodes:
            ops[op] = ops.get(op, 0) + c
    return Metrics(sum(m.instructions for m in metrics), sum(m.flops for m in metrics),
                   sum(m.transcendentals for m in metrics), sum(m.bytes_accessed for m in metrics),
                   tuple(sorted(ops.items())))
