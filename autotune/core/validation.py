"""Does the tuned module still compute what the original computes?

A pass sequence is only a result once the tuned module (1) compiles with the compiler's complete
default pipeline, codegen included, and (2) returns the same outputs as the original on the same
inputs. (1) is not a formality: passes applied out of their usual context can leave a module that
later stages reject (``docs/xla-mechanics.md`` section 6 has a real case). (2) catches passes that
change semantics when run out of order or outside their sub-pipeline.

Both modules run in a worker process (``Backend.execute``) on seeded random inputs built from the
entry signature (``parameter_specs``), then the outputs are compared with dtype-aware tolerances.
Random inputs test one point of the input space; that is evidence, not proof. ``seed`` picks
another point. ``establish`` hands the two modules down a chain of checkers, one per level
(``core/checks/``: identical, the target's compile, stand-ins, executed, the full compile, the
changed regions, compiled); running and comparing is ``core/execution.py`` and ``core/outputs.py``,
the levels themselves ``core/levels.py``. This module is the entry point and re-exports what its
callers use.

Inputs that make the original's outputs non-finite make the comparison weak (NaN == NaN passes),
so the original is retried with other input distributions (``execution.INPUT_LADDER``). Both common
causes were seen on real modules: the GPT-2 example is an Adam step whose second moment goes through
rsqrt (negative random moments -> NaN in every updated weight; non-negative floats fix it), and DLRM
looks up a 3-row embedding with ``jnp.take`` whose "fill" mode returns NaN for index 3 (smaller
integers fix it).
"""

from __future__ import annotations

from dataclasses import replace

from autotune.core.backend import supports
from autotune.core.checks import Case, run_chain
from autotune.core.checks.budget import PhaseBudget
from autotune.core.checks.compiled import Compiled, TunedCompiles
from autotune.core.checks.executed import DECLINED, ExecutionPlan, Executed, execution_plan, is_declined  # noqa: F401
from autotune.core.checks.identical import Identical
from autotune.core.checks.region import Region, establish_region  # noqa: F401
from autotune.core.checks.stand_ins import StandIns
from autotune.core.checks.target import TargetCompile, target_checks  # noqa: F401
from autotune.core.execution import (INPUT_LADDER, CannotRun, OriginalFails, Overran, bounded, compare_tuned,  # noqa: F401
                                     original_outputs_or_reason, stand_in, validate)
from autotune.core.levels import (COMPILED, EXECUTED, EXECUTED_REGION, EXECUTED_WITH_STAND_INS, IDENTICAL,  # noqa: F401
                                  INVALID, LEVELS, REQUIREMENTS, UNVERIFIED, Skip, Validation, meets, not_checked,
                                  rank, verified)
from autotune.core.outputs import OutputComparison, OutputDiff, category, compare_outputs, nonfinite, tolerance  # noqa: F401


def establish(pipeline, original, tuned, seed: int = 0, identical: bool = False,
              bound_seconds: float | None = None, progress=None, finals=None,
              budget: PhaseBudget | None = None) -> Validation:
    """The strongest level this machine can establish for ``tuned`` against ``original``.

    ``identical``: the caller already knows both end as the same module after the default
    pipeline (the tuner compares the final fingerprints it has anyway); nothing runs.
    Otherwise: custom calls the host cannot run get stand-ins (identically in both modules); if
    ``execution_plan`` says both fit (memory, and the estimated time against ``bound_seconds``),
    both run, each stopped at the bound, and their outputs are compared (``executed``/
    ``executed-with-stand-ins``, or ``invalid``); if not ("whole execution declined: <why>"), the
    tuned module must pass the full compile (``invalid`` when only it fails), then the changed
    regions run instead (``executed-region``), else ``compiled`` with every reason; when the
    original itself does not compile here the result is ``unverified``. A target whose modules
    the host does not run (a GPU) is compiled for first and its verdicts say where the outputs
    were compared. Never raises for a module that cannot be executed: a lower level is the answer.
    ``progress`` (a callable taking one line) hears what is being done, with the estimate;
    ``finals``: ``(the default final module, the tuned final module)`` when the caller has them.
    ``budget``: the validation phase's time (``checks.budget.PhaseBudget``), shared by a run over all
    its candidates: the checkers that execute are skipped before they start once it is spent or
    cannot cover their estimate; the verdict lists those skips (``Validation.skipped``) and carries
    the budget's seconds. Without one (``autotune validate``, ``Session.validation``: one pair, no
    phase around it) only each execution is bounded, as before.
    """
    case = Case(pipeline, original, tuned, int(seed), bound_seconds, progress or (lambda line: None), finals,
                budget=budget)
    if not identical and not supports(pipeline, "execute"):
        return Validation(UNVERIFIED, f"the {pipeline.name} backend cannot compile and run modules: nothing was "
                                      "executed")
    if budget is None:
        return run_chain(chain(pipeline, identical), case)
    before = len(budget.skipped)
    verdict = run_chain(chain(pipeline, identical), case)
    return replace(verdict, skipped=verdict.skipped + tuple(budget.skipped[before:]), budget_seconds=budget.seconds)


def chain(pipeline, identical: bool = False) -> list:
    """The checkers ``establish`` runs for ``pipeline``, in order (``core/checks``)."""
    return [Identical(identical), *target_checks(pipeline), StandIns(), Executed(), TunedCompiles(), Region(),
            Compiled()]
