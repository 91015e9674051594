"""``autotune.jax.tune``: from a jax function to a measured answer in the tuning store, in one call.

    import autotune.jax
    tuned = autotune.jax.tune(train_step, params, batch, budget=20)
    print(tuned.describe())                  # the claim, its interval, the validation level, the store entry
    with autotune.jax.use():                 # this run, and every later one: the store applied
        ...

It lowers the function for these arguments (``static_argnums``/``static_argnames`` as ``jax.jit`` takes
them) and runs the search of ``autotune run --objective runtime --space both``: the same ``RunSpec``, the
same tuner, the runtime judge's interleaved confirmation and the same validation, in one ``Session``.
The answer goes to the store (``autotune.core.store``) keyed by the module's fingerprint, the target,
this host and this XLA. An answer that is not a confirmed win whose outputs were compared by execution
is stored as "keep XLA's default", so the next call (or the next run under ``use()``) does not tune
again. A later call with the same function and shapes finds the entry and returns it without tuning
(``retune=True`` searches again).

``compile(fn, *args)`` compiles the function with its store entry: options alone through jax's public
``Lowered.compile(compiler_options=...)``, a pass sequence through the hook (the private compile patch,
the only way a different module reaches XLA).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from autotune import strategy as strategy_mod
from autotune.api import Session
from autotune.core.tuner import tune as core_tune
from autotune.reporting.progress import RichObserver

from autotune.core import levels
from autotune.core.objectives import Claim
from autotune.core.record import TuningRecord, from_run
from autotune.core.spec import RunSpec
from autotune.core.store import Entry, Store
from autotune.errors import BadInput
from autotune.pipelines.xla import sites
from autotune.version import __version__

#: Validation levels at which the outputs were compared by execution: a win below them is not stored.
EXECUTED_LEVELS = (levels.IDENTICAL, levels.EXECUTED, levels.EXECUTED_WITH_STAND_INS, levels.EXECUTED_REGION)
#: ``tune``'s defaults: ``autotune run``'s strategy, a budget a user's one call can afford.
DEFAULT_BUDGET = 30


@dataclass(frozen=True)
class Tuned:
    """What ``tune`` found or found again: the stored record and its evidence."""

    record: TuningRecord
    entry: Entry
    from_store: bool  # True: the store already held it (nothing was tuned)
    claim: Claim | None
    validation: str | None
    run_id: str | None
    foreign: tuple[str, ...] = ()  # matching entries of another host/XLA, set aside (why)

    @property
    def keeps_default(self) -> bool:
        return self.entry.keeps_default

    @property
    def compiler_options(self) -> dict:
        return dict(self.record.compiler_options)

    @property
    def sequence(self) -> tuple[str, ...]:
        return tuple(self.record.sequence)

    def describe(self) -> str:
        """Several lines for a person: what is applied from now on, the claim, the validation, where."""
        r = self.record
        lines = [f"{r.module} ({r.fingerprint[:12]}, target {r.target}): "
                 + ("found in the store, not tuned again" if self.from_store else f"tuned (run {self.run_id})")]
        if self.keeps_default:
            lines.append("answer: keep XLA's default" + (f" ({r.metrics['reason']})" if r.metrics.get("reason") else ""))
        else:
            if r.compiler_options:
                lines.append("compiler options: " + ", ".join(f"{k}={v}" for k, v in sorted(r.compiler_options.items())))
            lines.append(f"pass sequence: {','.join(r.sequence)}" if r.sequence else "pass order: XLA's own (no passes)")
            decided = [k for k in r.compiler_options if sites.is_site_option(k)]
            lines.append("applied via: " + ("per-site decisions at XLA's pre-scheduler stage" if decided else
                                            "jax's compiler_options (options alone)" if not r.sequence
                                            else "the compile patch (a pass sequence)"))
        m = r.metrics
        if isinstance(m.get("ratio"), (int, float)):
            lines.append(("the best candidate measured (not a confirmed win), " if self.keeps_default else "")
                         + f"runtime tuned/default: {m['ratio']:.3f} [{m.get('ratio_low', float('nan')):.3f}, "
                         f"{m.get('ratio_high', float('nan')):.3f}] at {m.get('confidence', 0.95):.0%} confidence, "
                         + (f"{m['instances']} independent measurements, " if m.get("instances") else "")
                         + f"{m.get('rounds')} interleaved rounds")
        if self.claim is not None and self.claim.message:
            lines.append(f"claim: {self.claim.message}")
        lines.append(f"validation: {self.validation or r.validation or 'none'}")
        for why in self.foreign:
            lines.append(f"not applied: a store entry {why} (`autotune check` judges it)")
        lines.append(f"store entry: {self.entry.path}")
        return "\n".join(lines)


def objective_options(min_effect: float | None, rounds: int | None) -> dict:
    """The runtime claim's settings that were given (``RunSpec.make_objective`` checks them)."""
    return {k: v for k, v in (("min_effect", min_effect), ("rounds", rounds)) if v is not None}


def lower(fn, args, kwargs, static_argnums=None, static_argnames=None):
    """``jax.jit(fn, ...).lower(*args, **kwargs)``; a function jax cannot lower is one ``BadInput`` line."""
    import jax

    try:
        return jax.jit(fn, static_argnums=static_argnums, static_argnames=static_argnames).lower(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        raise BadInput(f"cannot lower {getattr(fn, '__name__', fn)!r} for these arguments: "
                       f"{str(exc).splitlines()[0]}") from None


def keep_default_record(evaluator, result, reason: str) -> TuningRecord:
    """The record of a tuned module where nothing confirmed won: no passes, no options, and why."""
    claim = result.claim
    metrics = {"cost": result.default_cost, "default_cost": result.default_cost, "decision": "keep-default",
               "reason": reason}
    if claim is not None and claim.measured and claim.ratio is not None:  # what the best candidate measured
        metrics.update(ratio=claim.ratio, ratio_low=claim.low, ratio_high=claim.high, confidence=claim.confidence,
                       rounds=claim.rounds, instances=claim.instances)
    return TuningRecord(
        module=result.module, fingerprint=result.fingerprint, sequence=(), objective=result.objective,
        pipeline_version=evaluator.version, xla_version=evaluator.pipeline.compiler_version,
        autotune_version=__version__, metrics=metrics, valid=False, run_id=result.run_id,
        validation=result.validation_level, target=result.target.key)


def decide(evaluator, result) -> tuple[TuningRecord, str | None]:
    """The record to store for a finished run: its export when it is a confirmed win whose outputs were
    compared by execution, else "keep XLA's default" with the reason (second item)."""
    claim, level = result.claim, result.validation_level
    if not result.beats_default or result.best is None:
        reason = claim.message if claim is not None and claim.message else "nothing beat XLA's default"
    elif claim is None or not claim.measured or not claim.win:
        reason = "the win was not confirmed by measured time"
    elif level not in EXECUTED_LEVELS:
        reason = f"the answer's outputs were not compared by execution (validation {level or 'none'})"
    else:
        return from_run(evaluator, result.run_id), None
    return keep_default_record(evaluator, result, reason), reason


def tune(fn, *args, static_argnums=None, static_argnames=None, budget: int = DEFAULT_BUDGET,
         time_limit: float | None = None, strategy: str = RunSpec.strategy, space: str = "both",
         target: str | None = None, store: Store | str | Path | None = None, cache: str | Path | None = None,
         workers: int | None = None, progress: bool = True, retune: bool = False, seed: int = 0,
         validate_seconds: float | None = None, min_effect: float | None = None, confirm_rounds: int | None = None,
         **kwargs) -> Tuned:
    """Tune ``fn`` for these arguments by measured time, store the answer and return it (``Tuned``).

    The search is ``autotune run --objective runtime --space SPACE --strategy STRATEGY --budget BUDGET``
    on the lowered module; ``target`` as ``--target``; ``store`` moves the tuning store (default
    ``$AUTOTUNE_STORE`` or the user's cache folder); ``cache`` is the evaluation cache db (default
    ``.autotune/cache.db`` or ``$AUTOTUNE_DB``). The store entry found for this module, host and XLA is
    returned as it is unless ``retune``. ``min_effect`` (a fraction, e.g. 0.02) and ``confirm_rounds`` are
    ``--min-effect`` (there in percent) and ``--confirm-rounds``."""
    spec = RunSpec(strategy=strategy, budget=budget, objective="runtime", seed=seed, time_limit=time_limit,
                   space=space, validate=True, validate_seconds=validate_seconds,
                   objective_options=objective_options(min_effect, confirm_rounds))
    strategy_mod.load(strategy)  # an unknown name fails before anything is lowered or compiled
    spec.make_objective()
    spec.searched()
    st = store if isinstance(store, Store) else Store(store)
    lowered = lower(fn, args, kwargs, static_argnums, static_argnames)
    with Session(cache if cache is not None else os.environ.get("AUTOTUNE_DB"), workers, target=target) as s:
        root = s.normalize(lowered)
        ev = s.evaluator
        hit = st.lookup(root.fingerprint, s.target.key, ev.pipeline.compiler_version)
        foreign = tuple(why for _, why in hit.foreign)
        if hit.entry is not None and not retune:
            r = hit.entry.record
            claim = None
            if isinstance(r.metrics.get("ratio"), (int, float)):
                claim = Claim(win=not hit.entry.keeps_default, cost=float(r.metrics.get("cost", 0.0)),
                              default_cost=float(r.metrics.get("default_cost", 0.0)), message="",
                              ratio=r.metrics.get("ratio"), low=r.metrics.get("ratio_low"),
                              high=r.metrics.get("ratio_high"), confidence=r.metrics.get("confidence"),
                              rounds=r.metrics.get("rounds"), measured=True,
                              instances=r.metrics.get("instances"))
            return Tuned(r, hit.entry, True, claim, r.validation, r.run_id, foreign)
        result = core_tune(ev, root, spec=spec, observer=RichObserver() if progress else None)
        record, _ = decide(ev, result)
    entry = st.put(record)
    return Tuned(record, entry, False, result.claim, result.validation_level, result.run_id, foreign)
