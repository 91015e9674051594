"""A GPU target: where its executions happen, and what a verdict says about it.

Three cases (``target_checks``; the backend's ``execution`` says which, ``pipelines/xla/device.py``):

* no device runs the target's modules here: the target's whole pipeline first (``TargetCompile``), the
  executions after it happen on the host CPU, so they say the tuned module computes the same values,
  not that the target runs it;
* jax's CPU device stands in for the GPU (``AUTOTUNE_EXECUTION_PLATFORM=cpu``, CI): the same, with the
  executions on the device path;
* a CUDA device: the executions compile the modules with the device's own pipeline and run them there,
  which is the target's compile (``OnDevice`` only says where).

Every verdict says where the outputs were compared.
"""

from __future__ import annotations

from dataclasses import replace

from autotune.core.checks import Case, Checker, compile_errors
from autotune.core.levels import EXECUTED, EXECUTED_REGION, EXECUTED_WITH_STAND_INS, INVALID, Validation


class TargetCompile(Checker):
    """``invalid`` when the tuned module fails the target's pipeline and the original passes it;
    otherwise the case goes on, marked as compiled when the tuned module passed.

    When neither passes, the target's compile cannot tell the two apart, and the failure is the
    compiler's, not the ordering's: XLA's GPU codegen compiled without a GPU (no autotuning) rejects
    some modules outright, e.g. "Couldn't find output tile sizes" for a small f32 dot of an LLM
    training step, in the original as much as in any tuned form. The case then goes on to the
    host's checks (the values are still worth comparing) and every verdict says that the target's
    whole compile could not be checked, and why."""

    def check(self, case: Case) -> Validation | None:
        pipeline, target = case.pipeline, case.pipeline.target
        case.say(f"compiling the tuned module with {target.judged_by()}")
        failed = compile_errors(pipeline, case.tuned, case.original)
        if failed is None:
            case.compiled = True
            return None
        tuned_error, original_error = failed
        if original_error is not None:
            case.target_note = (f"{pipeline.compiler}'s GPU pipeline for {target.name} without a GPU rejects the "
                                f"original as well ({original_error}), so neither module's whole compile for "
                                f"{target.name} could be checked")
            return None
        return Validation(INVALID, f"the tuned module fails {pipeline.compiler}'s GPU pipeline for {target.name} "
                                   f"(the original passes it): {tuned_error}")

    def finish(self, case: Case, verdict: Validation) -> Validation:
        if case.target_note:
            where = f"{case.target_note}; outputs compared on {executes_on(case.pipeline)}" if verdict.level in (
                EXECUTED, EXECUTED_WITH_STAND_INS, EXECUTED_REGION, INVALID) else case.target_note
            return replace(verdict, reason=f"{verdict.reason}; {where}" if verdict.reason else where)
        if not case.compiled:
            return verdict
        name = case.pipeline.target.name
        ran = verdict.level in (EXECUTED, EXECUTED_WITH_STAND_INS, EXECUTED_REGION, INVALID)
        where = f"compiled for {name} by {case.pipeline.compiler}'s GPU pipeline without a GPU" + (
            f"; outputs compared on {executes_on(case.pipeline)}, not on the {name}" if ran else
            f"; not run on the {name}")
        return replace(verdict, reason=f"{verdict.reason}; {where}" if verdict.reason else where)


class OnDevice(Checker):
    """Never answers; says in every verdict that ran something that it ran on the target's device."""

    def check(self, case: Case) -> Validation | None:
        return None

    def finish(self, case: Case, verdict: Validation) -> Validation:
        if verdict.level not in (EXECUTED, EXECUTED_WITH_STAND_INS, EXECUTED_REGION, INVALID):
            return verdict
        where = f"compiled and run on {executes_on(case.pipeline)} by {case.pipeline.compiler}'s own pipeline"
        return replace(verdict, reason=f"{verdict.reason}; {where}" if verdict.reason else where)


def executes_on(pipeline) -> str:
    """Where ``pipeline`` runs modules, in words (``the host CPU`` for a backend that does not say)."""
    return getattr(pipeline, "executes_on", "the host CPU")


def target_checks(pipeline) -> list:
    """The checkers for ``pipeline``'s target: none for the host CPU, ``OnDevice`` where a CUDA device
    runs the target's modules, else ``TargetCompile`` (see the module docstring)."""
    if not pipeline.target.is_gpu:
        return []
    execution = getattr(pipeline, "execution", None)
    return [OnDevice()] if execution is not None and execution.on_gpu else [TargetCompile()]
