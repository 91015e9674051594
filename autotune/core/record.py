"""Tuning records ("lockfiles"): a tuned sequence that a build can commit and check later.

A record says: for the module with this fingerprint, with this XLA, this sequence gave these
metrics and passed the validity check. ``autotune check MODEL --record R`` re-applies it with the
installed XLA and fails (exit 1) if the module changed, the sequence fails, the outputs differ or
the metric regressed: the CI gate. The JAX hook (``autotune.jax.use``) applies records to matching
``jax.jit`` compiles.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autotune.errors import BadInput

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

    def to_dict(self) -> dict:
        data = asdict(self)
        data["sequence"] = list(self.sequence)
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
        return cls(
            module=str(data["module"]), fingerprint=str(data["fingerprint"]), sequence=tuple(seq),
            objective=str(data["objective"]), pipeline_version=str(data["pipeline_version"]),
            xla_version=str(data.get("xla_version", "")), autotune_version=str(data.get("autotune_version", "")),
            metrics=dict(data["metrics"]), valid=bool(data.get("valid", False)), run_id=data.get("run_id"),
            created=float(data.get("created", 0.0)),
            validation=data.get("validation"), validation_reason=data.get("validation_reason"),
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
    import autotune
    from autotune.core.runs import RunStore

    run = RunStore(evaluator.cache).get(run_id)
    if not run.finished:
        raise BadInput(f"run '{run_id}' has not finished (status {run.status}); nothing to export")
    summary = run.summary
    best = summary.get("best")
    if not best:
        raise BadInput(f"run '{run_id}' found no valid sequence; nothing to export")
    if summary.get("beats_default") is False:  # its "best" only ties: a record would pin passes that do nothing
        raise BadInput(f"run '{run_id}' found nothing better than XLA's default ordering; nothing to export "
                       "(keep the default)")
    metrics = {
        "input_ops": summary["input"]["instructions"],
        "default_ops": summary["default"]["instructions"],
        "tuned_ops": best["raw"]["instructions"],
        "tuned_final_ops": best["final"]["instructions"] if best.get("final") else None,
        "cost": best["cost"],
        "default_cost": summary["default_cost"],
    }
    from autotune.core.validation import Validation, verified

    validation = Validation.from_dict(summary.get("validity"))
    level = validation.level if validation else None
    return TuningRecord(
        module=run.module_name, fingerprint=run.module, sequence=tuple(best["sequence"]),
        objective=run.objective, pipeline_version=run.version, xla_version=evaluator.pipeline.compiler_version,
        autotune_version=autotune.__version__, metrics=metrics, valid=verified(level),
        run_id=run_id, validation=level, validation_reason=validation.reason if validation else None,
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

    def to_dict(self) -> dict:
        data = asdict(self)
        data["sequence"] = list(self.sequence)
        data["reasons"] = list(self.reasons)
        return data


def check(evaluator, module, record: TuningRecord, max_regression: float = 0.0, validate: bool = True,
          seed: int = 0) -> CheckResult:
    """Re-apply ``record`` to ``module`` with the installed XLA and say whether it still holds."""
    from autotune.core import objectives
    from autotune.core.tuner import validity_of

    reasons: list[str] = []
    root = evaluator.prepare(module)
    base = dict(module=root.name, fingerprint=root.fingerprint, record_fingerprint=record.fingerprint,
                sequence=record.sequence, recorded_cost=float(record.metrics.get("cost", float("nan"))),
                max_regression=max_regression, pipeline_version=evaluator.version,
                record_pipeline_version=record.pipeline_version, recorded_validation=record.validation)
    if root.fingerprint != record.fingerprint:
        return CheckResult(ok=False, reasons=("module changed: its fingerprint no longer matches the record",),
                           cost=None, default_cost=None, regression=None, valid=None, **base)
    unknown = [p for p in record.sequence if p not in evaluator.pipeline.passes()]
    if unknown:
        return CheckResult(ok=False, reasons=(f"passes no longer offered by this XLA: {', '.join(unknown)}",),
                           cost=None, default_cost=None, regression=None, valid=None, **base)
    result = evaluator.evaluate(root, record.sequence)
    if not result.ok:
        step = record.sequence[result.failed_at]
        return CheckResult(ok=False, reasons=(f"sequence fails at step {result.failed_at + 1} ({step}): {result.message}",),
                           cost=None, default_cost=None, regression=None, valid=None, **base)
    obj = objectives.get(record.objective)
    default = evaluator.default(root)
    cost = default_cost = None
    if default.ok:
        ctx = objectives.ObjectiveContext(evaluator, root, default, seed)
        default_cost = obj.default_cost(ctx)
        cost = obj.cost(result.state, ctx)
        if math.isnan(cost):
            reasons.append(obj.failure(result.state, ctx))
            cost = None
    else:
        reasons.append(f"XLA's default pipeline fails on the module: {default.message}")
    regression = None
    if cost is not None and base["recorded_cost"] > 0:
        regression = (cost - base["recorded_cost"]) / base["recorded_cost"]
        if regression > max_regression / 100.0 + 1e-12:
            reasons.append(f"{record.objective} regressed by {regression:+.2%} "
                           f"({base['recorded_cost']:g} -> {cost:g}; allowed {max_regression:g}%)")
    valid = level = level_reason = None
    if validate:
        from autotune.core.validation import meets, verified

        report = validity_of(evaluator, root, result.state, seed)
        level, level_reason = report.get("level"), report.get("reason")
        valid = verified(level)
        if not report.get("ok"):
            reasons.append(f"validity check failed: {report.get('reason') or 'outputs differ'}")
        elif record.validation and not meets(level, record.validation):
            reasons.append(f"validation: the record says {record.validation}, this machine re-established only "
                           f"{level}" + (f" ({level_reason})" if level_reason else ""))
    return CheckResult(ok=not reasons, reasons=tuple(reasons), cost=cost, default_cost=default_cost,
                       regression=regression, valid=valid, validation=level, validation_reason=level_reason, **base)
