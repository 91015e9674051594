"""Tuning records ("lockfiles"): a tuned sequence that a build can commit and check later.

A record says: for the module with this fingerprint, with this XLA, this sequence gave these
metrics and passed the validity check. ``autotune check MODEL --record R`` re-applies it with the
installed XLA and fails (exit 1) if the module changed, the sequence fails, the outputs differ or
the metric regressed: the CI gate. A record made by another XLA is judged by what its sequence saves
over each version's own default (``core/record_judge.py`` states the rule and its tolerance), and a pass
that XLA no longer has is left out and said. The JAX hook (``autotune.jax.use``) applies records to matching
``jax.jit`` compiles.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autotune.errors import BadInput
from autotune.version import __version__
from autotune.core.runs import RunStore
from autotune.core.fleet import FleetResult
from autotune.core.validation import meets, verified
from autotune.core.target import check_same
from autotune.core import objectives, record_judge
from autotune.core.backend import supports
from autotune.core.options import EMPTY, CompilerOptions
from autotune.core.tuner import validity_of
from autotune.core.objectives.runtime import MAX_INSTANCES, MIN_INSTANCES

FORMAT = 1


@dataclass(frozen=True)
class TuningRecord:
    module: str  # display name
    fingerprint: str  # normalised module fingerprint: what the record applies to
    sequence: tuple[str, ...]
    objective: str
    pipeline_version: str
    xla_version: str
    autotune_version: str
    metrics: dict  # input_ops, default_ops, tuned_ops, tuned_final_ops, cost, default_cost
    valid: bool
    run_id: str | None = None
    created: float = field(default_factory=time.time)
    format: int = FORMAT
    validation: str | None = None  # the level the run established (``check`` must reach it again)
    validation_reason: str | None = None
    #: A fleet record (one sequence tuned for several modules) applies to each of these; per-module
    #: figures are in ``metrics["modules"][fingerprint]``. Empty for a single-module record.
    fingerprints: tuple[str, ...] = ()
    #: The target the sequence was judged for (``Target.key``); a record is refused on another.
    target: str = "cpu"
    #: XLA compiler options to compile the tuned module with (name -> value; ``core/options.py``): empty for
    #: XLA's default. ``check`` re-times them; the JAX hook compiles the matching module with them.
    compiler_options: dict = field(default_factory=dict)

    @property
    def applies_to(self) -> tuple[str, ...]:
        """Every module fingerprint this record applies to."""
        return self.fingerprints or (self.fingerprint,)

    def metrics_for(self, fingerprint: str) -> dict:
        """The recorded metrics of one module (a fleet member's own, else the record's)."""
        return (self.metrics.get("modules") or {}).get(fingerprint) or self.metrics

    def to_dict(self) -> dict:
        data = asdict(self)
        data["sequence"] = list(self.sequence)
        data["fingerprints"] = list(self.fingerprints)
        if not self.fingerprints:
            del data["fingerprints"]
        if not self.compiler_options:  # a record of the pass order alone reads as it always did
            del data["compiler_options"]
        return data

    def dumps(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def save(self, path: Path) -> None:
        try:
            Path(path).write_text(self.dumps())
        except OSError as exc:
            raise BadInput(f"{path}: cannot write record ({exc.strerror or exc})") from None

    @classmethod
    def from_dict(cls, data: dict, source: str = "record") -> "TuningRecord":
        if not isinstance(data, dict):
            raise BadInput(f"{source}: not a tuning record (expected a JSON object)")
        if data.get("format") != FORMAT:
            raise BadInput(f"{source}: unsupported record format {data.get('format')!r} (expected {FORMAT})")
        required = ("module", "fingerprint", "sequence", "objective", "pipeline_version", "metrics")
        missing = [k for k in required if k not in data]
        if missing:
            raise BadInput(f"{source}: not a tuning record (missing {', '.join(missing)})")
        seq = data["sequence"]
        if not isinstance(seq, list) or not all(isinstance(s, str) and s for s in seq):
            raise BadInput(f"{source}: 'sequence' must be a list of pass names")
        if not isinstance(data["metrics"], dict):
            raise BadInput(f"{source}: 'metrics' must be an object")
        fps = data.get("fingerprints", [])
        if not isinstance(fps, list) or not all(isinstance(f, str) and f for f in fps):
            raise BadInput(f"{source}: 'fingerprints' must be a list of module fingerprints")
        opts = data.get("compiler_options") or {}
        if not isinstance(opts, dict) or not all(isinstance(k, str) and k and isinstance(v, str) for k, v in opts.items()):
            raise BadInput(f"{source}: 'compiler_options' must be an object of option names to string values")
        return cls(
            module=str(data["module"]), fingerprint=str(data["fingerprint"]), sequence=tuple(seq),
            objective=str(data["objective"]), pipeline_version=str(data["pipeline_version"]),
            xla_version=str(data.get("xla_version", "")), autotune_version=str(data.get("autotune_version", "")),
            metrics=dict(data["metrics"]), valid=bool(data.get("valid", False)), run_id=data.get("run_id"),
            created=float(data.get("created", 0.0)), fingerprints=tuple(fps),
            validation=data.get("validation"), validation_reason=data.get("validation_reason"),
            target=str(data.get("target") or "cpu"), compiler_options=dict(opts),
        )

    @classmethod
    def load(cls, path: str | Path) -> "TuningRecord":
        path = Path(path)
        if not path.is_file():
            raise BadInput(f"{path}: no such record file")
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadInput(f"{path}: not a JSON tuning record ({str(exc).splitlines()[0]})") from None
        return cls.from_dict(data, str(path))


def from_run(evaluator, run_id: str) -> TuningRecord:
    """Build a record from a finished run in the cache."""
    run = RunStore(evaluator.cache).get(run_id)
    if not run.finished:
        raise BadInput(f"run '{run_id}' has not finished (status {run.status}); nothing to export")

    result = run.result  # typed: a TuneResult, or a FleetResult for a fleet run
    if isinstance(result, FleetResult):
        return _from_fleet_run(evaluator, run, result, run_id)
    best = result.best
    if best is None:
        raise BadInput(f"run '{run_id}' found no valid sequence; nothing to export")
    if not result.beats_default:  # its "best" only ties: a record would pin passes that do nothing
        raise BadInput(f"run '{run_id}' found nothing better than {result.target.baseline} ordering; nothing to export "
                       "(keep the default)")
    metrics = {
        "input_ops": result.input.instructions,
        "default_ops": result.default.instructions,
        "tuned_ops": best.raw.instructions,
        "tuned_final_ops": best.final.instructions if best.final else None,
        "cost": best.cost,
        "default_cost": result.default_cost,
    }
    claim = result.claim
    if claim is not None and claim.measured:  # a measured objective: the confirmed ratio and its interval
        metrics.update(ratio=claim.ratio, ratio_low=claim.low, ratio_high=claim.high, confidence=claim.confidence,
                       min_effect=claim.min_effect, rounds=claim.rounds, instances=claim.instances)
    validation = result.validation
    level = result.validation_level
    return TuningRecord(
        module=run.module_name, fingerprint=run.module, sequence=best.sequence,
        objective=run.objective, pipeline_version=run.version, xla_version=evaluator.pipeline.compiler_version,
        autotune_version=__version__, metrics=metrics, valid=verified(level),
        run_id=run_id, validation=level, validation_reason=validation.reason if validation else None,
        target=result.target.key, compiler_options=best.options.as_dict(),
    )


def _from_fleet_run(evaluator, run, fleet, run_id: str) -> TuningRecord:
    """A record for every member of a fleet run (its ``FleetResult``): one sequence, per-module figures."""

    if not fleet.beats_default:
        raise BadInput(f"fleet run '{run_id}' found nothing better than {fleet.target.baseline} ordering; nothing to export "
                       "(keep the default)")
    modules = {}
    for m in fleet.members:
        modules[m.fingerprint] = {
            "module": m.name, "input_ops": m.input.instructions, "default_ops": m.default.instructions,
            "tuned_ops": m.tuned_raw.instructions if m.tuned_raw else None,
            "tuned_final_ops": m.tuned.instructions if m.tuned else None,
            "cost": m.cost, "default_cost": m.default_cost,
            "validation": m.validation.level if m.validation else None,
        }
    levels = [m.validation.level if m.validation else None for m in fleet.members]
    fps = tuple(m.fingerprint for m in fleet.members)
    return TuningRecord(
        module=f"fleet of {len(fps)}: " + ", ".join(m.name for m in fleet.members), fingerprint=fps[0],
        sequence=fleet.best_sequence, objective=run.objective, pipeline_version=run.version,
        xla_version=evaluator.pipeline.compiler_version, autotune_version=__version__,
        metrics={"cost": fleet.best_cost, "default_cost": fleet.default_cost, "modules": modules},
        valid=all(verified(lv) for lv in levels), run_id=run_id, fingerprints=fps, validation=fleet.validation_level,
        target=fleet.target.key, compiler_options=fleet.best_options.as_dict(),
    )


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    reasons: tuple[str, ...]
    module: str
    fingerprint: str
    record_fingerprint: str
    sequence: tuple[str, ...]
    recorded_cost: float
    cost: float | None
    default_cost: float | None
    regression: float | None  # (cost - recorded) / recorded
    max_regression: float
    valid: bool | None
    pipeline_version: str
    record_pipeline_version: str
    validation: str | None = None  # the level re-established now (None: not checked)
    validation_reason: str | None = None
    recorded_validation: str | None = None
    claim: dict | None = None  # a measured objective's re-confirmation against XLA's default (Claim.to_dict)
    #: How the cost was judged (``core/record_judge.py``): ``absolute`` (the record's own figure; same
    #: XLA) or ``saving`` (the record was made by another XLA, whose default differs: what its sequence
    #: saves over each version's own default, with the tolerance stated there). ``judged_note`` says it.
    judged: str = "absolute"
    judged_note: str | None = None
    xla_version: str = ""
    record_xla_version: str = ""
    #: Passes of a record made by another XLA that this XLA no longer has: left out, the rest applied
    #: and judged (``judged_note`` says so).
    dropped: tuple[str, ...] = ()
    #: The compiler options the check compiled with (the record's, less any this XLA lacks) and what it
    #: said of those it left out.
    compiler_options: dict = field(default_factory=dict)
    options_note: str | None = None
    #: Which rule decided a measured record (``record_judge.interval``), in words: a confirmed win, the win
    #: gone, or the test on the difference of the two measurements. None for a deterministic objective.
    rule: str | None = None

    def to_dict(self) -> dict:
        data = asdict(self)
        data["sequence"] = list(self.sequence)
        data["reasons"] = list(self.reasons)
        data["dropped"] = list(self.dropped)
        return data


def check(evaluator, module, record: TuningRecord, max_regression: float | None = None, validate: bool = True,
          seed: int = 0, confirm_rounds: int | None = None) -> CheckResult:
    """Re-apply ``record`` to ``module`` with the installed XLA and say whether it still holds.
    A record judged for another target than the evaluator's is refused (``BadInput``). ``max_regression``
    (percent) None: not given (0 for a count; a measured record then passes while it is a confirmed win).
    ``confirm_rounds``: a measured record's re-timing in that many interleaved rounds, not the objective's
    30 (a gate on a long step, where a large margin needs fewer); ``BadInput`` for a counted record."""
    check_same(record.target, evaluator.pipeline.target, "the record")
    obj = _objective(record, confirm_rounds)
    root = evaluator.prepare(module)
    matched = root.fingerprint if root.fingerprint in record.applies_to else record.fingerprint
    base = dict(module=root.name, fingerprint=root.fingerprint, record_fingerprint=matched,
                sequence=record.sequence,
                recorded_cost=float(record.metrics_for(matched).get("cost", float("nan"))),
                max_regression=float(max_regression or 0.0), pipeline_version=evaluator.version,
                record_pipeline_version=record.pipeline_version,
                xla_version=evaluator.pipeline.compiler_version, record_xla_version=record.xla_version,
                recorded_validation=record.metrics_for(matched).get("validation") or record.validation)
    options, options_note = _options_here(evaluator, record)
    base.update(compiler_options=options.as_dict(), options_note=options_note)
    result, refusal, dropped = _replay(evaluator, root, record)
    if refusal:
        return CheckResult(ok=False, reasons=(refusal,), cost=None, default_cost=None, regression=None, valid=None,
                           dropped=dropped, **base)
    reasons: list[str] = []
    cost, default_cost, claim, verdict = _judge_cost(evaluator, root, record, matched, result.state, base,
                                                     max_regression, seed, reasons, options, obj)
    note = verdict.note
    if dropped:
        gone = (f"passes gone in {evaluator.pipeline.compiler_version}: {', '.join(dropped)}; judged on the "
                f"{len(record.sequence) - len(dropped)} of {len(record.sequence)} that remain")
        note = f"{gone}; {note}" if note else gone
    valid = level = level_reason = None
    if validate:
        valid, level, level_reason = _judge_validity(evaluator, root, result.state, base["recorded_validation"],
                                                     seed, reasons, options)
    return CheckResult(ok=not reasons, reasons=tuple(reasons), cost=cost, default_cost=default_cost,
                       regression=verdict.regression, valid=valid, validation=level, validation_reason=level_reason,
                       claim=claim, judged=verdict.judged, judged_note=note, dropped=dropped, rule=verdict.rule,
                       **base)


def _options_here(evaluator, record: TuningRecord) -> tuple[CompilerOptions, str | None]:
    """The record's compiler options this XLA accepts, and a note naming those it does not (the record is
    then judged without them: an XLA upgrade that dropped an option is said, not a traceback)."""
    options = CompilerOptions.of(record.compiler_options)
    if not options:
        return options, None
    backend = evaluator.pipeline
    if not supports(backend, "options"):
        return EMPTY, f"the {backend.name} backend takes no compiler options: judged without {options.describe()}"
    kept, dropped = {}, []
    for name, value in options.items:
        try:
            backend.check_options(CompilerOptions.of({name: value}))
            kept[name] = value
        except BadInput as exc:
            dropped.append(f"{name}={value} ({exc})")
    note = f"this XLA does not take {'; '.join(dropped)}: judged without it" if dropped else None
    return CompilerOptions.of(kept), note


def _replay(evaluator, root, record: TuningRecord):
    """Apply the record's sequence to ``root``: (the result, None, passes left out), or (None, why it
    cannot hold at all, ...) when the module changed, a pass is gone or the sequence now fails; those end
    the check at once. A record made by another XLA whose passes this one no longer has (renamed or
    removed between versions) is applied without them and judged on what remains; on the XLA that made
    it an unknown pass means the record was edited, and it does not hold."""
    if root.fingerprint not in record.applies_to:
        return None, "module changed: its fingerprint no longer matches the record", ()
    offered = set(evaluator.pipeline.passes())
    unknown = tuple(p for p in record.sequence if p not in offered)
    if unknown and not _other_xla(record, evaluator):
        return None, f"passes no longer offered by this XLA: {', '.join(unknown)}", unknown
    sequence = tuple(p for p in record.sequence if p in offered)
    if not sequence and record.sequence:
        return None, (f"none of the record's passes ({', '.join(unknown)}) exist in {evaluator.pipeline.compiler_version} "
                      f"(the record was made by {record.xla_version}): nothing to apply"), unknown
    result = evaluator.evaluate(root, sequence)
    if not result.ok:
        step = sequence[result.failed_at]
        return None, f"sequence fails at step {result.failed_at + 1} ({step}): {result.message}", unknown
    return result, None, unknown


def _objective(record: TuningRecord, confirm_rounds: int | None):
    """The record's objective, re-timed in ``confirm_rounds`` rounds where given (a measured one only). A
    measured record is judged on its own interval (``record_judge``), not on the win's bar: its re-timing is
    not measured further where it straddles that bar (``max_instances``: the first measurements decide)."""
    obj = objectives.get(record.objective)
    if obj.deterministic:
        if confirm_rounds is not None:
            raise BadInput(f"--confirm-rounds applies to a measured record (runtime), not a {record.objective} "
                           "record")
        return obj
    rounds = {} if confirm_rounds is None else {"rounds": int(confirm_rounds)}
    return objectives.get(record.objective, extensions=0, max_instances=MIN_INSTANCES, **rounds)


def _judge_cost(evaluator, root, record: TuningRecord, matched: str, state: str, base: dict,
                max_regression: float | None,
                seed: int, reasons: list[str], options: CompilerOptions, obj):
    """The replayed state's (cost, default cost, confirmation claim, ``record_judge.Judgement``) under the
    record's objective ``obj`` (``_objective``) and compiler ``options``; the reason the record no longer holds on cost, if any, is appended to ``reasons``.
    Which rule judges it (the record's own figure, or what it saves over each XLA's own default) and its
    tolerance: ``core/record_judge.py``."""
    default = evaluator.default(root)
    cost = default_cost = claim = None
    verdict = record_judge.Judgement("absolute", None)
    if default.ok:
        ctx = objectives.ObjectiveContext(evaluator, root, default, seed).with_options(options)
        default_cost = obj.default_cost(ctx)
        cost = obj.cost(state, ctx)
        if math.isnan(cost):
            reasons.append(obj.failure(state, ctx))
            cost = None
    else:
        reasons.append(f"{evaluator.pipeline.baseline} pipeline fails on the module: {default.message}")
    metrics = record.metrics_for(matched)
    made_by, now = (record.xla_version, evaluator.pipeline.compiler_version) if _other_xla(record, evaluator) \
        else (None, None)
    if cost is not None and not obj.deterministic:
        # A measured objective's recorded cost is a time on another day (maybe another machine): it is
        # re-confirmed against XLA's default now, and a regression must be proven by the interval.
        # (-inf: confirm even when today's cheap sample happens not to look faster.)
        claim_obj = obj.confirm(state, -math.inf, ctx)
        verdict = record_judge.interval(record.objective, claim_obj, metrics, default_cost, max_regression,
                                        made_by, now)
        if verdict.reason and claim_obj.rounds:
            # A timed failure must replicate on other inputs (seeds none of the first measurements drew): a
            # load spike on a shared machine moved one re-timing of an unchanged record far out
            # (bench/check_aa.py); a real regression shows twice.
            again_ctx = objectives.ObjectiveContext(evaluator, root, default, seed + MAX_INSTANCES).with_options(options)
            again = obj.confirm(state, -math.inf, again_ctx)
            verdict = record_judge.replicated(
                verdict, record_judge.interval(record.objective, again, metrics, default_cost, max_regression,
                                               made_by, now), claim_obj)
            claim_obj = again
        claim = claim_obj.to_dict()
    elif cost is not None and base["recorded_cost"] > 0:
        recorded_default = metrics.get("default_cost")
        if made_by and isinstance(recorded_default, (int, float)) and recorded_default > 0 and default_cost:
            verdict = record_judge.saving(record.objective, base["recorded_cost"], float(recorded_default), cost,
                                          default_cost, max_regression or 0.0, made_by, now)
        else:
            verdict = record_judge.absolute(record.objective, base["recorded_cost"], cost, max_regression or 0.0)
    if verdict.reason:
        reasons.append(verdict.reason)
    return cost, default_cost, claim, verdict


def _other_xla(record: TuningRecord, evaluator) -> bool:
    """True when the record names the XLA that made it and that is not the installed one."""
    return bool(record.xla_version) and record.xla_version != evaluator.pipeline.compiler_version


def _judge_validity(evaluator, root, state: str, recorded_validation, seed: int, reasons: list[str],
                    options: CompilerOptions = EMPTY):
    """Re-establish the replayed state's validity here (compiled with the record's ``options``): (verified,
    level, level's reason); a failed check or a level below the recorded one is appended to ``reasons``."""
    report = validity_of(evaluator, root, state, seed, options=options)
    level, level_reason = report.level, report.reason
    if not report.ok:
        reasons.append(f"validity check failed: {report.reason or 'outputs differ'}")
    elif recorded_validation and not meets(level, recorded_validation):
        reasons.append(f"validation: the record says {recorded_validation}, this machine re-established only "
                       f"{level}" + (f" ({level_reason})" if level_reason else ""))
    return verified(level), level, level_reason
