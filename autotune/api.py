"""The Python API a build script calls.

Each function accepts a ``Module``, a path, HLO/MLIR text or a lowered JAX function
(``jax.jit(f).lower(...)``). Each opens the cache and a worker pool for the call; to reuse them
across calls (worker start-up is ~1-2 s), open a ``Session`` once::

    with autotune.Session(cache=".autotune/cache.db") as s:
        result = s.tune("model.hlo", strategy="greedy", budget=200)
        tuned = s.apply("model.hlo", result.best_sequence)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from autotune.core.objectives import Objective
from autotune.core.objectives.runtime import Runtime, arm_order
from autotune.core.module import Module, load
from autotune.core.spec import DEFAULT_MAX_LENGTH, RunSpec
from autotune.core.engine import open_engine
from autotune.core.tuner import tune as _tune, validity_of
from autotune.reporting.progress import RichObserver
from autotune.core.explore import explore as _explore
from autotune.reporting.explain import explain as _explain, explain_run
from autotune.errors import PassFailed
from autotune.core import stats
from autotune.core.validation import validate as _validate


class Session:
    """A cache plus a warm worker pool, shared by the calls made through it."""

    def __init__(self, cache: str | Path | None = None, workers: int | None = None,
                 include_target_specific: bool = False, step_timeout: float = 120.0, backend: str | None = None,
                 executor: str | None = None, target: str | None = None, executor_options: dict | None = None):
        """``backend``/``executor``: registered names (default xla, local); ``target``: the machine the
        module runs on (``cpu``, the default, ``h100``, ... or a GpuTargetConfig path; docs/gpu.md);
        ``executor_options``: e.g. ``{"address": "auto"}`` for ray. All values: nothing is read from
        the environment."""
        self._cm = open_engine(cache, workers=workers, include_target_specific=include_target_specific,
                               step_timeout=step_timeout, backend=backend, executor=executor, target=target,
                               executor_options=executor_options)
        self.evaluator = self._cm.__enter__()

    @property
    def target(self):
        """The ``autotune.core.target.Target`` this session tunes for."""
        return self.evaluator.pipeline.target

    def load(self, source) -> Module:
        """A ``Module`` as given, else ``source`` loaded by this session's backend (a path, program
        text, serialized bytes or a lowered JAX function)."""
        return source if isinstance(source, Module) else load(source, backend=self.evaluator.pipeline)

    def close(self) -> None:
        self._cm.__exit__(None, None, None)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def passes(self) -> tuple[str, ...]:
        """The action vocabulary discovered from the installed XLA."""
        return self.evaluator.pipeline.passes()

    def normalize(self, module) -> Module:
        """The module after XLA's import round trip: the form every result is measured on."""
        return self.evaluator.prepare(self.load(module))

    def tune(self, module, strategy: str = RunSpec.strategy, budget: int = RunSpec.budget,
             objective=RunSpec.objective, seed: int = 0, max_length: int = DEFAULT_MAX_LENGTH, time_limit: float | None = None, options: dict | None = None,
             progress: bool = False, validate: bool = True, validate_seconds: float | None = None,
             allow_regressions: bool = False):
        """Search the pass ordering of ``module``; returns ``autotune.core.tuner.TuneResult``.

        ``objective`` is a name or an ``Objective`` (e.g. ``objectives.get("runtime", min_effect=0.05)``);
        a measured objective's verdict, with its interval, is ``result.claim``. ``validate_seconds``
        bounds each execution of validation (``--validate-seconds``; default 30 s or
        ``$AUTOTUNE_VALIDATE_SECONDS``). For a GPU target an answer that adds kernel launches or
        roofline time over XLA's default is set aside (``core/gpu_guard.py``) unless ``allow_regressions``."""
        name = objective.name if isinstance(objective, Objective) else objective
        spec = RunSpec(strategy=strategy, budget=budget, objective=name, seed=seed, max_length=max_length,
                       time_limit=time_limit, options=options or {}, validate=validate,
                       validate_seconds=validate_seconds, allow_regressions=allow_regressions)
        return _tune(self.evaluator, self.load(module), objective=objective, spec=spec,
                     observer=RichObserver() if progress else None)

    def explore(self, module, depth: int = 2, progress: bool = False, validate: bool = True):
        """Every sequence of up to ``depth`` passes, walked over distinct module states; returns
        ``autotune.core.explore.Outcome`` (the best final-ops within reach and a shortest sequence to it)."""
        return _explore(self.evaluator, self.load(module), depth, observer=RichObserver() if progress else None,
                        validate=validate)

    def tune_fleet(self, modules, strategy: str = RunSpec.strategy, budget: int = RunSpec.budget,
                   objective: str = RunSpec.objective, seed: int = 0, max_length: int = DEFAULT_MAX_LENGTH,
                   time_limit: float | None = None, options: dict | None = None, progress: bool = False,
                   validate: bool = True, allow_regressions: bool = False, validate_seconds: float | None = None):
        """ONE sequence for all ``modules`` (a fleet: a run whose cost aggregates over them, through the
        same loop as ``tune``); ``budget`` counts fleet evaluations. Returns
        ``autotune.core.fleet.FleetResult`` (the sequence, the mean ratio to XLA's default, every member)."""
        spec = RunSpec(strategy=strategy, budget=budget, objective=objective, seed=seed, max_length=max_length,
                       time_limit=time_limit, options=options or {}, validate=validate,
                       allow_regressions=allow_regressions, validate_seconds=validate_seconds)
        return _tune(self.evaluator, [self.load(m) for m in modules], spec=spec,
                     observer=RichObserver() if progress else None)

    def explain(self, target, sequence: Sequence[str] | None = None, member: str | None = None,
                minimize: bool = True):
        """Explain a win: ``explain(RUN_ID)`` (a finished run; ``member`` picks a fleet's module) or
        ``explain(module, sequence)``. Returns ``autotune.reporting.explain.Explanation``
        (``.to_markdown()``, ``.to_dict()``, ``.missed_optimization()``)."""
        if sequence is None:
            return explain_run(self.evaluator, str(target), member=member, minimize=minimize)
        return _explain(self.evaluator, self.normalize(target), list(sequence), minimize=minimize,
                        model_path=str(target) if isinstance(target, (str, Path)) and Path(str(target)).is_file()
                        else None)

    def apply(self, module, sequence: Sequence[str]) -> Module:
        """``module`` (normalised) after ``sequence``; raises ``PassFailed`` if a step fails."""
        root = self.normalize(module)
        result = self.evaluator.evaluate(root, list(sequence))
        if not result.ok:
            raise PassFailed(f"step {result.failed_at + 1} ({sequence[result.failed_at]}) failed: {result.message}",
                             result.status, sequence[result.failed_at])
        return self.evaluator.module(result.state, root.name)

    def default(self, module) -> Module:
        """``module`` after XLA's own ordering of the same passes (the baseline)."""
        root = self.normalize(module)
        return self.evaluator.module(self.evaluator.default(root).state, root.name)

    def metrics(self, module):
        """``Metrics`` of a module (instructions, per-opcode counts, flops, ...)."""
        return self.evaluator.pipeline.measure(self.load(module))

    def compare_runtime(self, baseline, candidate, rounds: int | None = None, confidence: float | None = None,
                        min_effect: float | None = None, seed: int = 0):
        """Is ``candidate`` faster than ``baseline``? Both fully compiled and timed interleaved in one worker,
        in independent measurements (each its own inputs in fresh buffers, ``rounds`` rounds), then the geometric
        mean of their ratios candidate/baseline with a t interval over measurements, sequential as a claim is:
        ``autotune.core.stats.TimeRatio`` (``.faster`` only when the whole interval lies below
        ``1 - min_effect``). The protocol of the ``runtime`` objective's claims (docs/runtime.md)."""
        obj = Runtime(confidence=confidence or stats.CONFIDENCE,
                      min_effect=stats.MIN_EFFECT if min_effect is None else min_effect,
                      **({"rounds": rounds} if rounds else {}))
        a, b = self.load(baseline), self.load(candidate)
        pipeline = self.evaluator.pipeline
        cmp, _ = obj.compare(lambda s: pipeline.time_ab(a, b, seed=s, rounds=obj.rounds,
                                                        min_seconds=obj.confirm_min_seconds, **arm_order(pipeline, s)),
                             seed)
        return cmp

    def validate(self, original, tuned, seed: int = 0):
        """Compile both fully, run both on the same seeded inputs, compare every output."""
        return _validate(self.evaluator.pipeline, self.normalize(original), self.load(tuned), seed=seed)

    def validation(self, original, tuned, seed: int = 0, validate_seconds: float | None = None):
        """The strongest validation level this machine can establish for ``tuned`` against ``original``
        (``autotune.core.validation.Validation``: identical, executed, executed-with-stand-ins, executed-region, compiled,
        unverified, or invalid, with its reason). Never raises because a module cannot be executed here;
        each execution is bounded by ``validate_seconds`` (default 30 s or ``$AUTOTUNE_VALIDATE_SECONDS``)."""
        root, tuned = self.normalize(original), self.normalize(tuned)
        return validity_of(self.evaluator, root, tuned.fingerprint, seed, validate_seconds)


def tune(module, strategy: str = RunSpec.strategy, budget: int = RunSpec.budget, objective: str = RunSpec.objective, seed: int = 0,
         cache: str | Path | None = None, workers: int | None = None, target: str | None = None, **kwargs):
    """One-shot ``Session(...).tune(...)``."""
    with Session(cache, workers, target=target) as s:
        return s.tune(module, strategy=strategy, budget=budget, objective=objective, seed=seed, **kwargs)


def explain(run_or_module, sequence: Sequence[str] | None = None, cache: str | Path | None = None,
            workers: int | None = None, target: str | None = None, **kwargs):
    """One-shot ``Session(...).explain(...)``."""
    with Session(cache, workers, target=target) as s:
        return s.explain(run_or_module, sequence, **kwargs)


def tune_fleet(modules, strategy: str = RunSpec.strategy, budget: int = RunSpec.budget, cache: str | Path | None = None,
               workers: int | None = None, target: str | None = None, **kwargs):
    """One-shot ``Session(...).tune_fleet(...)``."""
    with Session(cache, workers, target=target) as s:
        return s.tune_fleet(modules, strategy=strategy, budget=budget, **kwargs)


def apply(module, sequence: Sequence[str], cache: str | Path | None = None, workers: int | None = 1,
          target: str | None = None) -> Module:
    """One-shot ``Session(...).apply(...)``."""
    with Session(cache, workers, target=target) as s:
        return s.apply(module, sequence)


def validate(original, tuned, seed: int = 0, cache: str | Path | None = None, target: str | None = None):
    """One-shot ``Session(...).validate(...)``; returns ``autotune.core.validation.OutputComparison``."""
    with Session(cache, 1, target=target) as s:
        return s.validate(original, tuned, seed=seed)
