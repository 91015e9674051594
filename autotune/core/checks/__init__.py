"""Validation as a chain of small checkers, one per level, each in its own file.

``core/validation.establish`` builds a ``Case`` (the two modules and what the run allows) and hands
it down the chain; each checker either answers (a ``Validation``: the level reached, or
``invalid``/``unverified``) or passes the case on, having recorded what it found for the next:

1. ``identical.Identical``: both end as the same module after the default pipeline (nothing runs);
2. ``target.TargetCompile``: a target whose modules this host does not run (a GPU compiled
   deviceless): the tuned module must pass that target's whole pipeline first; where a CUDA device
   runs them, ``target.OnDevice`` instead (the device's own compile is the target's; it says where);
3. ``stand_ins.StandIns``: what the host cannot run (accelerator custom calls) replaced, identically;
4. ``executed.Executed``: both modules run whole on the same inputs and their outputs compared
   (``executed``, ``executed-with-stand-ins``), if memory and the time bound allow;
5. ``compiled.TunedCompiles``: whole execution declined: the tuned module must pass the full compile;
6. ``region.Region``: only the regions that differ run (``executed-region``);
7. ``compiled.Compiled``: what is left: ``compiled``, with every reason a stronger level was not reached.

Time: the phase as a whole has one budget, ``--validate-seconds`` (``budget.PhaseBudget``): the
checkers that execute (4 and 6) ask it before they start and are skipped, with a one-line reason,
when it is spent or their estimate exceeds what is left; the compiles that establish ``compiled``
always run (``budget``'s docstring says why and what bound that gives).

Why a chain: each level is one question with its own failure modes, and a new one (a device's own
execution, say) is one more file and one more place in the list, not another branch in one function.
A checker may also ``finish`` the verdict the chain returns (the GPU target says where the
outputs were compared). There is one result type, ``levels.Validation``; what an output comparison
found travels inside it (``outputs.OutputComparison``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from autotune.core.levels import Validation
from autotune.errors import PassFailed


@dataclass
class Case:
    """The two modules being checked and what the checkers found so far (the chain's working state,
    hence mutable: a checker records for those after it, e.g. the execution plan that declined)."""

    pipeline: object
    original: object
    tuned: object
    seed: int = 0
    bound_seconds: float | None = None
    say: Callable[[str], None] = lambda line: None
    #: ``(the default final module, the tuned final module)`` when the caller has them.
    finals: tuple | None = None
    #: True once the tuned module passed the target's full compile (``TargetCompile``).
    compiled: bool = False
    #: The modules as executed (``stand_ins.Runs``), their parameter specs, the execution plan.
    runs: object = None
    specs: list | None = None
    plan: object = None
    #: Why the changed regions were not executed (``region.Region``), for ``compiled``'s reason.
    region_note: str = ""
    #: The target's whole compile rejects the original as well (``TargetCompile``): said in the verdict.
    target_note: str = ""
    #: The validation phase's time budget (``checks.budget.PhaseBudget``), shared by every candidate of
    #: a run: the checkers that can only raise the level (executions) ask it before they start.
    budget: object = None


class Check(Protocol):
    """One level's checker: ``check`` answers or returns None to pass the case on."""

    def check(self, case: Case) -> Validation | None: ...

    def finish(self, case: Case, verdict: Validation) -> Validation: ...


class Checker:
    """Defaults for a checker: nothing to add to the verdict."""

    def finish(self, case: Case, verdict: Validation) -> Validation:
        return verdict


def compile_errors(pipeline, tuned, original) -> tuple[str, str | None] | None:
    """None when ``tuned`` passes the full compile; else ``(its error, the original's or None)``:
    a tuned module that fails where the original passes is ``invalid``, both failing ``unverified``."""
    try:
        pipeline.compiles(tuned)
        return None
    except PassFailed as exc:
        tuned_error = str(exc)
    try:
        pipeline.compiles(original)
    except PassFailed as exc:
        return tuned_error, str(exc)
    return tuned_error, None


def run_chain(chain: Sequence[Check], case: Case) -> Validation:
    """The first answer down ``chain``, finished by every checker that ran (innermost first)."""
    ran: list[Check] = []
    verdict = None
    for checker in chain:
        ran.append(checker)
        verdict = checker.check(case)
        if verdict is not None:
            break
    if verdict is None:
        raise RuntimeError("the validation chain ended without a verdict (its last checker must answer)")
    for checker in reversed(ran):
        verdict = checker.finish(case, verdict)
    return verdict
