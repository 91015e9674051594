"""``tune``: the entry point of every run, one module or a fleet, through the one run loop (``core.loop``).

``tune`` turns its settings (one ``RunSpec``) into a ``Search`` (``ModuleSearch`` here, or a
``fleet.FleetSearch``) and hands it to the loop, which owns everything a strategy must not: budget
accounting (one sequence evaluation = one unit, cache hits included), the time limit, seeding,
trial records (through the ``RunStore``), progress (through one ``Observer``), resumption of an
interrupted run, and choosing what may be reported: the best candidate that passes the validity
check and whose win the objective confirms. A strategy
only sees ``Evaluate`` (sequence -> cost) and the ``SearchSpace``; the objective only sees states
(``Objective.cost(state, ctx)``); neither is special-cased here by name.

Resumption: strategies are deterministic under their seed, so ``resume`` re-runs the strategy
from the start while the recorded trials answer its first asks without compiling or spending
budget again; a run continues exactly where it stopped, with the same accounting.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import replace

from autotune import strategy as strategy_mod
from autotune.core import footprint, gpu_guard, stats
from autotune.core import screen as screen_mod
from autotune.core import objectives as objectives_mod
from autotune.core.backend import supports
from autotune.core.evaluator import Evaluator, Result
from autotune.core.loop import (GUARDED, PRUNE_SECONDS, Choice, Interrupted, PhaseClock, RunEvaluate, Search, drive,
                                finish, seed_everything, prune, validity_of)
from autotune.core.metrics import Metrics
from autotune.core.module import Module
from autotune.core.profile import Profile
from autotune.core.objectives import Claim, Objective, ObjectiveContext
from autotune.core.observer import Observer
from autotune.core.results import Candidate, FleetResult, TuneResult
from autotune.core.runs import RunStore, TrialRecord, new_run_id
from autotune.core.checks.budget import MEMORY_CHECK, PhaseBudget
from autotune.core.levels import EXECUTED, EXECUTED_WITH_STAND_INS, INVALID, Validation, not_checked, rank
from autotune.core.options import EMPTY, CompilerOptions
from autotune.core.limits import validate_seconds as seconds_of_bound
from autotune.core.spec import DEFAULT_MAX_LENGTH, RunSpec
from autotune.errors import AutotuneError, BadInput, PassFailed
from autotune.strategy import SearchSpace
from autotune.core.fleet import FLEET_KEYS, FleetSearch, fleet_fields, fleet_roots, prepare_fleet

__all__ = ["tune", "tune_fleet", "TuneResult", "Candidate", "Interrupted", "evaluation_session", "validity_of", "TrialRecord",
           "DEFAULT_MAX_LENGTH", "ModuleSearch", "PhaseClock", "RunEvaluate", "seed_everything"]

#: A failed sequence costs this much more than the XLA default (finite, so optimisers can learn).
FAILURE_FACTOR = 1.25
#: Candidates a measured objective may try to confirm (the best, then runners-up) before it says
#: "no significant difference". Each costs one confirmation (see the objective's ``confirm``).
MAX_CONFIRMATIONS = 2
#: Weights at the price of parameters: a module whose entry constants hold at least this many bytes
#: is searched on its surrogate (those constants lifted to parameters, ``Backend.lift_constants``).
SURROGATE_MIN_BYTES = 1 << 20
#: Distinct surrogate candidates (the best and its runners-up) re-established on the real module.
SURROGATE_RECHECK = 3


class ModuleSearch(Search):
    """One module's search (the run loop's ``Search``): its objective, default, replayed trials, and
    the surrogate it may search on until ``recheck`` moves to the real module."""

    def __init__(self, evaluator: Evaluator, root: Module, objective: Objective, spec: RunSpec, run_id: str,
                 replay: list[TrialRecord], observer: Observer, clock: PhaseClock | None = None):
        super().__init__(evaluator, spec, run_id, replay, observer, clock)
        self.root = root
        self.objective = objective
        #: ``(real root, description)`` while the search runs on a surrogate; ``recheck`` moves to it.
        self.real: tuple[Module, dict] | None = None
        self.real_info: dict | None = None  # what ``recheck`` compared (``TuneResult.surrogate``)
        self.input_metrics = evaluator.metrics(root.fingerprint)
        base = evaluator.pipeline.baseline
        self.phases.enter("default", f"{base} pipeline on the module")
        default = evaluator.default(root)
        if not default.ok:
            raise AutotuneError(f"{base} pipeline fails on this module: {default.message}")
        self.default_result = default
        self.ctx = ObjectiveContext(evaluator, root, default, self.seed)
        self.default_cost = objective.default_cost(self.ctx)
        self.failure_cost = FAILURE_FACTOR * self.default_cost + 1.0
        self._state_of: dict[tuple[str, ...], str | None] = {(): root.fingerprint}
        self._empty_cost: float | None = None
        #: Compiler options every candidate is compiled with (``--compiler-option``), checked by the backend.
        self.fixed = CompilerOptions.of(spec.compiler_options)
        #: The space searched (``--space``) and how the strategy searched its options (``Strategy.options_by``).
        self.space_name, self.options_by = "passes", None
        #: Candidates measured faster than the default whose outputs differ: never offered, always reported.
        self.wrong: dict[tuple, dict] = {}
        #: The cost a candidate with options must beat to be checked during the search (``_gate``), and the
        #: seed of the validation's first draw (``tune`` sets it).
        self._bar, self.validation_seed = self.default_cost, 0
        if spec.validate:  # a measured objective may ask before it times a fast candidate in full
            self.ctx.shared["wrong"] = self._computes_otherwise

    # ---- the screen (``core/screen.py``) --------------------------------------------------------
    def screens(self, space: SearchSpace) -> bool:
        """Whether this run screens single option values first: a measured objective that judges options,
        options in the space, and not ``--no-screen``."""
        obj = self.objective
        return bool(self.spec.screen and space.options and not obj.deterministic and obj.judges_options)

    def screen(self, evaluate, space: SearchSpace):
        """Run the screen on the run's ``evaluate``; its notes go to ``search_notes["screen"]``; returns the
        point that warm-starts the strategy (None: nothing paid)."""
        bar = 1.0 - float(getattr(self.objective, "min_effect", stats.MIN_EFFECT))
        self.ctx.shared["screening"] = screen_mod.policy(bar)
        try:
            done = screen_mod.screen(evaluate, space, _ScreenJudge(self), bar,
                                     progress=lambda line: self.phases.enter("screen", line))
        finally:
            self.ctx.shared.pop("screening", None)
        self.screen_notes = done.to_dict()
        self.screen_best = done.best
        return done.best

    def empty_cost(self) -> float:
        if self._empty_cost is None:
            self._empty_cost = self.objective.cost(self.root.fingerprint, self.judged(EMPTY))
        return self._empty_cost

    def metrics_after(self, sequence: tuple[str, ...]) -> Metrics | None:
        state = self._state_of.get(sequence)
        return self.ev.metrics(state) if state else None

    # ---- evaluation ----------------------------------------------------------------------------
    def fresh(self, seqs: list[tuple[str, ...]], options: list[CompilerOptions]) -> list[TrialRecord]:
        results = self.ev.evaluate_many(self.root, seqs)
        self.objective.prepare([r.state for r in results if r.ok], self.ctx)
        return [self._trial(seq, result, opts) for seq, result, opts in zip(seqs, results, options)]

    def remember(self, seq: tuple[str, ...], rec: TrialRecord) -> None:
        self._state_of[seq] = rec.state

    def judged(self, options: CompilerOptions) -> ObjectiveContext:
        """The objective's context for a candidate with ``options``: the run's fixed options
        (``--compiler-option``) with the candidate's on top."""
        return self.ctx.with_options(self.fixed.merged(options))

    def _trial(self, seq: tuple[str, ...], result: Result, options: CompilerOptions = EMPTY) -> TrialRecord:
        n = len(self.records)
        cached = result.compiled == 0
        if not result.ok:
            msg = f"step {result.failed_at + 1} ({seq[result.failed_at]}) {result.status}: {result.message}"
            return TrialRecord(n, seq, self.failure_cost, "failed", None, cached, msg, options)
        ctx = self.judged(options)
        cost = self.objective.cost(result.state, ctx)
        if math.isnan(cost):
            msg = self.objective.failure(result.state, ctx)
            return TrialRecord(n, seq, self.failure_cost, "failed", result.state, cached, msg, options)
        guarded = self._guard_state(result.state)
        if guarded is not None:  # the search is steered away from it (``loop.GUARDED``)
            return TrialRecord(n, seq, self.failure_cost, GUARDED, result.state, cached, guarded, options)
        wrong = self._gate(seq, result.state, cost, options)
        if wrong is not None:  # measured faster, computes something else: the search steers away from it
            return TrialRecord(n, seq, self.failure_cost, "invalid", result.state, cached, wrong, options)
        return TrialRecord(n, seq, cost, "ok", result.state, cached, None, options)

    def _gate(self, seq: tuple[str, ...], state: str, cost: float, options: CompilerOptions) -> str | None:
        """Correct before fast, during the search: a candidate with compiler options that is measured faster
        than every candidate so far is executed and compared with XLA's default (the first draw of the
        validation that would follow; its verdict is cached for it) before a strategy may build on it. An
        experimental option can be fast because it computes NaN, and coordinate descent would otherwise
        descend from it. Returns why it is set aside, or None (kept; it becomes the bar)."""
        options = self.fixed.merged(options)
        if not options or self.objective.deterministic or not self.spec.validate or not cost < self._bar:
            return None
        report = self._first_draw(state, options)
        if report.ok or report.level != INVALID:
            self._bar = cost
            return None
        self.objective.retract(state, self.judged(options))
        self._wrong(seq, state, cost, options, report.reason)
        return f"validation failed: with {options.describe()}: {report.reason or 'outputs differ'}"

    def _first_draw(self, state: str, options: CompilerOptions) -> Validation:
        """``state`` compiled with ``options`` against XLA's default on the first draw of inputs of the
        validation that would follow (cached for it)."""
        return validity_of(self.ev, self.root, state, self.validation_seed, self.validate_seconds, options=options)

    def _computes_otherwise(self, state: str, options: CompilerOptions) -> bool:
        """Whether ``state`` compiled with ``options`` computes other outputs than XLA's default."""
        return self._first_draw(state, options).level == INVALID

    def _wrong(self, seq: tuple[str, ...], state: str, cost: float, options: CompilerOptions, reason) -> None:
        """Remember a candidate measured faster than the default whose outputs differ (once per executable)."""
        self.wrong.setdefault((state, options.key), {
            "sequence": list(seq), "compiler_options": options.as_dict(),
            "ratio": cost / self.default_cost if self.default_cost else None, "reason": reason or "outputs differ"})

    def recheck(self) -> list[TrialRecord]:
        """Leave the surrogate: re-establish its best candidates on the real module and rank them there.

        The ``SURROGATE_RECHECK`` best distinct surrogate states that beat XLA's default there (the
        best and the runners-up that could overtake it; the best alone when none does) are evaluated
        on the real module, with XLA's default and the objective measured there too; from then on the
        search's root, context and default are the real ones, so pruning, validation and confirmation
        all happen on the real module. ``real_info`` records what was compared and whether surrogate
        and real module agree (same costs, same best).
        """
        real, info = self.real
        picks, seen = [], set()
        for rec in sorted((r for r in self.records if r.status == "ok" and r.state), key=lambda r: (r.cost, r.n)):
            if picks and rec.cost >= self.default_cost:
                break  # only contenders: candidates that beat XLA's default on the surrogate (or the best one)
            if rec.state not in seen:
                seen.add(rec.state)
                picks.append(rec)
            if len(picks) == SURROGATE_RECHECK:
                break
        surrogate_default = self.default_cost
        self.root, self.input_metrics = real, self.ev.metrics(real.fingerprint)
        default = self.ev.default(real)
        if not default.ok:
            raise AutotuneError(f"{self.ev.pipeline.baseline} pipeline fails on this module: {default.message}")
        self.default_result = default
        self.ctx = ObjectiveContext(self.ev, real, default, self.seed)
        self.default_cost = self.objective.default_cost(self.ctx)
        self.failure_cost = FAILURE_FACTOR * self.default_cost + 1.0
        results = self.ev.evaluate_many(real, [r.sequence for r in picks]) if picks else []
        self.objective.prepare([r.state for r in results if r.ok], self.ctx)
        ranked, checks = [], []
        for rec, result in zip(picks, results):
            cost = self.objective.cost(result.state, self.judged(rec.options)) if result.ok else math.nan
            checks.append({"sequence": list(rec.sequence), "surrogate_cost": rec.cost,
                           "real_cost": None if math.isnan(cost) else cost})
            if not math.isnan(cost):
                ranked.append(replace(rec, cost=cost, state=result.state))
        ranked.sort(key=lambda r: (r.cost, r.n))
        same_costs = all(c["real_cost"] == c["surrogate_cost"] for c in checks) and surrogate_default == self.default_cost
        same_best = not ranked or not picks or ranked[0].sequence == picks[0].sequence
        self.real_info = {**info, "rechecked": checks, "agree": same_costs and same_best,
                          "message": _recheck_message(info, checks, same_costs and same_best, same_best,
                                                      surrogate_default, self.default_cost)}
        self.real = None  # only now: a Ctrl-C above leaves the surrogate's partial answer unreported
        return ranked

    # ---- choosing the answer (``loop.choose``) -------------------------------------------------
    def ranked(self, recheck: bool) -> list[TrialRecord]:
        if self.real is not None and not recheck:  # an interrupted run's partial answer: not re-checked,
            # so nothing is reported as a best (the surrogate's modules hold parameters, not the weights)
            self.real_info = {**self.real[1], "rechecked": [], "agree": None,
                              "message": "searched on a surrogate with large constants lifted to parameters; "
                                         "interrupted before its best was re-checked on the real module"}
            return []
        if self.real is not None:
            self.phases.enter("recheck", "re-establishing the surrogate's best candidates on the real module")
            return self.recheck()
        ranked = sorted((r for r in self.records if r.status == "ok"), key=lambda r: (r.cost, r.n))
        return _screened_first(ranked, getattr(self, "screen_best", None))

    def key(self, rec: TrialRecord):
        if rec.state is None:
            return None
        # A measured objective's cost belongs to the compiled module and its options: states with the same
        # final module and options are one candidate (the runner-up must be a different executable).
        if self.objective.deterministic:
            return rec.state
        return self.ctx.final(rec.state).state, rec.options.key

    def prune_candidate(self, rec: TrialRecord) -> TrialRecord:
        """``loop.prune`` on this module (at most ``len(sequence)`` evaluations, outside the budget,
        not recorded as trials). Bounded: no evaluation starts once the run's ``prune`` phase total
        reaches ``loop.PRUNE_SECONDS`` (pruning had no bound: 65 s of a 19k-instruction step's first
        run); the passes not yet tried are kept."""
        def evaluate(candidate):
            result = self.ev.evaluate_many(self.root, [candidate])[0]
            return (result.state, self.objective.cost(result.state, self.ctx)) if result.ok else None

        seq, state, cost = prune(rec.sequence, rec.cost, evaluate,
                                 lambda: dict(self.phases.result()).get("prune", 0.0) >= PRUNE_SECONDS)
        return replace(rec, sequence=seq, state=state if state is not None else rec.state, cost=cost)

    @property
    def validation_budget(self) -> PhaseBudget:
        """The validation phase's time budget (``--validate-seconds`` for the phase as a whole), one per
        run: every candidate's checks and the memory comparison draw on it. Its clock is the run's own
        ``validation`` phase total, so the budget and the total reported beside it are one figure."""
        if getattr(self, "_validation_budget", None) is None:
            self._validation_budget = PhaseBudget(seconds_of_bound(self.validate_seconds), started=0.0,
                                                  clock=lambda: dict(self.phases.result()).get("validation", 0.0))
        return self._validation_budget

    def check(self, rec: TrialRecord, n: int, seed: int) -> tuple[Validation, str | None]:
        options = self.fixed.merged(rec.options)
        report = validity_of(self.ev, self.root, rec.state, seed, self.validate_seconds,
                             progress=lambda line: self.phases.enter("validation", f"candidate {n}: {line}"),
                             budget=self.validation_budget, options=options)
        if report.ok and options:
            report = self._second_draw(rec, report, n, seed + 1, options)
        if report.ok and options and report.level not in (EXECUTED, EXECUTED_WITH_STAND_INS):
            return report, (f"with {options.describe()}: compiler options are offered only when both modules ran "
                            f"and computed the same outputs; this machine reached {report.describe()}")
        if report.ok:
            return report, None
        self.runs.mark_invalid(self.run_id, rec.state, report.reason, rec.options)
        reason = report.reason or "outputs differ"
        if options:
            reason = f"with {options.describe()}: {reason}"
            if rec.cost < self.default_cost:  # what a compiler engineer most wants to hear about
                self._wrong(rec.sequence, rec.state, rec.cost, options, report.reason)
        return report, reason

    def _second_draw(self, rec: TrialRecord, first: Validation, n: int, seed: int, options) -> Validation:
        """A candidate with compiler options is also compared on a second draw of inputs (``seed``): an
        option may be wrong only for some values. The first verdict stands when both agree."""
        second = validity_of(self.ev, self.root, rec.state, seed, self.validate_seconds,
                             progress=lambda line: self.phases.enter("validation", f"candidate {n}, second draw: {line}"),
                             budget=self.validation_budget, options=options)
        if not second.ok or rank(second.level) < rank(first.level):
            return replace(second, reason=f"on a second draw of inputs (seed {seed}): {second.reason or second.level}")
        return replace(first, reason="; ".join(filter(None, [first.reason, f"outputs also compared on a second draw "
                                                             f"of inputs (seed {seed})"])))

    def unchecked(self) -> Validation:
        return not_checked()

    def _guard_state(self, state: str | None) -> str | None:
        """The GPU guard on a state of this module (``core.gpu_guard``): the figures come with the
        final module the objective has already read, so this compiles nothing."""
        if self.spec.allow_regressions or state is None or not self.ev.pipeline.target.is_gpu:
            return None
        final = self.ctx.final(state)
        if not final.ok:
            return None
        return gpu_guard.breach(final.metrics, self.default_result.metrics, self.ev.pipeline.target.name)

    def guard(self, rec: TrialRecord) -> str | None:
        return self._guard_state(rec.state)

    def guarded_cost(self, rec: TrialRecord) -> float:
        return self.objective.cost(rec.state, self.ctx) if rec.state else rec.cost

    def confirm(self, rec: TrialRecord, rest: list[TrialRecord], seen: set, tally: dict) -> tuple[Claim, bool]:
        obj = self.objective
        if not obj.deterministic:
            self.phases.enter("confirmation", f"interleaved re-measurement of the best and {self.ev.pipeline.baseline}")
        verdict = obj.confirm(rec.state, rec.cost, self.judged(rec.options))
        if not verdict.win and not obj.deterministic and rec.cost < self.default_cost:
            tally["confirmations"] += 1  # a measured win that did not hold up: try the runner-up, within limits
            # ... but only a runner-up that is itself a contender (measured faster, another executable);
            # otherwise this candidate's failed confirmation, with its interval, is the run's answer.
            contender = any(r.state and r.cost < self.default_cost and self.key(r) not in seen for r in rest)
            return verdict, tally["confirmations"] < MAX_CONFIRMATIONS and contender
        return verdict, False

    def result(self, status: str, choice: Choice | None, invalid: tuple) -> TuneResult:
        best = validity = claim = None
        if choice is not None:
            rec, validity, claim = choice.rec, choice.report, choice.verdict
            final = self.ctx.final(rec.state)
            options = self.fixed.merged(rec.options)
            best = Candidate(rec.sequence, rec.state, self.ev.metrics(rec.state),
                             final.metrics if final.ok else None, rec.cost, choice.found, choice.found_cost,
                             options, options)
            if not (claim.win if claim is not None else best.cost < self.default_cost):
                # nothing beats the default: apply nothing (``found`` and ``found_options`` keep it)
                best = replace(best, sequence=(), options=EMPTY)
        memory = None
        if best is not None and best.sequence and self.spec.validate and status != "interrupted":
            budget = self.validation_budget  # compiles both (the tuned one usually cached): within budget only
            skip = budget.refuse(MEMORY_CHECK, budget.compile_seconds, "comparing memory (a full compile of the "
                                 "original)", late=True)
            if skip is None:
                self.phases.enter("validation", "memory: both modules' buffer assignments")
                memory = footprint.compare(self.ev.pipeline, self.root,
                                           self.ev.module(best.state, self.root.name).with_options(best.options))
            elif validity is not None:
                validity = replace(validity, skipped=validity.skipped + (skip,))
        compiled, cached = self.steps()
        return TuneResult(
            run_id=self.run_id, module=self.root.name, fingerprint=self.root.fingerprint,
            strategy=self.strategy_name, objective=self.objective.name, seed=self.seed, budget=self.budget,
            evaluations=len(self.records), status=status, input=self.input_metrics,
            default=self.default_result.metrics, default_cost=self.default_cost, best=best, validation=validity,
            invalid=invalid, seconds=time.perf_counter() - self.t0, steps_compiled=compiled,
            steps_cached=cached, history=tuple(self.best_history), claim=claim,
            executor=self.ev.pipeline.executor.describe(), phases=self.phases.result(), surrogate=self.real_info,
            target=self.ev.pipeline.target, memory=memory, space=self.space_name,
            options_by=self.options_by, search_notes=self._notes(),
            faster_but_wrong=tuple(self.wrong.values()),
        )


    def _notes(self) -> dict | None:
        """The objective's notes on the search, with the screen's (``screen``) when it ran."""
        notes = self.objective.search_notes(self.ctx)
        screened = getattr(self, "screen_notes", None)
        return notes if screened is None else {**(notes or {}), "screen": screened}


def _screened_first(ranked: list[TrialRecord], best) -> list[TrialRecord]:
    """The screen's best (an option set whose interval lies wholly below the bar after sequential
    confirmation) is confirmed first: a strategy's candidate ranked above it on one raced median is often
    the luckier draw (on ResNet-50, seed 2: greedy confirmed oneDNN reduce fusions, 1.01 [0.98, 1.06], and
    never the screen's YNNPACK reduce, 0.90 [0.83, 0.93]). It is still validated and confirmed like any."""
    if best is None:
        return ranked
    pick = next((r for r in ranked if r.sequence == best.sequence and r.options == best.options), None)
    return ranked if pick is None else [pick] + [r for r in ranked if r is not pick]


class _ScreenJudge:
    """The screen's view of a run (``screen.Judge``): the objective's evidence on the empty sequence's
    state compiled with an option set."""

    def __init__(self, search: ModuleSearch):
        self.search = search

    def evidence(self, options: CompilerOptions):
        s = self.search
        state = s._state_of.get(())
        return None if state is None else s.objective.evidence(state, s.judged(options))



def _recheck_message(info: dict, checks: list[dict], agree: bool, same_best: bool, surrogate_default: float,
                     real_default: float) -> str:
    """What ``ModuleSearch.recheck`` found, in one sentence."""
    lifted = f"{info['constants']} constant(s) of {info['bytes'] / (1 << 20):.1f} MiB lifted to parameters"
    if agree:
        return (f"searched on a surrogate ({lifted}); its {len(checks)} best candidate(s) re-checked on the "
                "real module: same costs")
    diffs = "; ".join(f"{','.join(c['sequence']) or '(empty)'}: {c['surrogate_cost']:g} on the surrogate, "
                      f"{'fails' if c['real_cost'] is None else format(c['real_cost'], 'g')} on the real module"
                      for c in checks if c["real_cost"] != c["surrogate_cost"])
    if surrogate_default != real_default:
        diffs = (diffs + "; " if diffs else "") + (f"XLA's default {surrogate_default:g} on the surrogate, "
                                                   f"{real_default:g} on the real module")
    return (f"surrogate and real module disagree ({diffs}): searched on a surrogate ({lifted}), the "
            f"{len(checks)} best candidate(s) re-checked on the real module and ranked by their real "
            "cost; the best there is reported" + ("" if same_best else " (not the surrogate's best)"))


def evaluation_session(evaluator: Evaluator, module: Module, objective: str | Objective = RunSpec.objective,
                       budget: int = 10**9, run_id: str | None = None,
                       time_limit: float | None = None) -> RunEvaluate:
    """An ``Evaluate`` for ``module`` outside a strategy run (e.g. to train a policy on many modules).

    Trials are recorded under ``run_id`` (a fresh id by default) like any run's.
    """
    obj = objectives_mod.get(objective)
    root = evaluator.prepare(module)
    run_id = run_id or new_run_id()
    RunStore(evaluator.cache).save(
        run_id, created=time.time(), updated=time.time(), status="session", module=root.fingerprint,
        module_name=root.name, strategy="session", objective=obj.name, budget=budget, seed=0, max_length=0,
        options={}, version=evaluator.version)
    spec = RunSpec(strategy="session", budget=budget, objective=obj.name, time_limit=time_limit)
    return RunEvaluate(ModuleSearch(evaluator, root, obj, spec, run_id, [], Observer()))


# ---- the entry point -------------------------------------------------------------------------------------
def tune(
    evaluator: Evaluator,
    module: Module | Sequence[Module] | None,
    strategy: str = RunSpec.strategy,
    budget: int = RunSpec.budget,
    objective: str | Objective = RunSpec.objective,
    seed: int = 0,
    max_length: int = DEFAULT_MAX_LENGTH,
    time_limit: float | None = None,
    options: dict | None = None,
    observer: Observer | None = None,
    resume: str | None = None,
    validate: bool = True,
    validation_seed: int = 0,
    prune: bool = True,
    spec: RunSpec | None = None,
    validate_seconds: float | None = None,
    surrogate: bool = True,
    screen: bool = True,
):
    """Search for the best pass sequence for ``module`` (a list of modules: ONE sequence for the
    fleet, ``core.fleet``) with ``strategy``, through the one run loop (``core.loop``).

    The settings may come as keywords or as one ``RunSpec`` (``spec`` wins). ``budget`` counts
    sequence evaluations, cache hits included. ``prune`` shortens the best sequence afterwards
    (``loop.prune``: passes whose removal does not worsen a deterministic objective are dropped; at
    most its length in extra evaluations, outside the budget). With ``resume=RUN_ID`` (a single run
    or a fleet) the search settings are taken from the recorded run and its completed trials are
    replayed; ``spec``'s time limit, validation and pruning still apply. ``validate_seconds`` bounds
    each execution of validation. ``surrogate``: a module whose entry constants hold at least
    ``SURROGATE_MIN_BYTES`` is searched on a surrogate with those constants lifted to parameters,
    then its best candidates are re-established on the real module (``ModuleSearch.recheck``;
    ``TuneResult.surrogate`` says what was done). ``screen``: options searched by a measured objective are
    screened first (``core/screen.py``). Ctrl-C at any point raises ``Interrupted`` with the run saved and
    resumable. Returns a ``TuneResult`` (a ``FleetResult`` for a fleet).
    """
    if spec is None:
        name = objective.name if isinstance(objective, Objective) else objective
        spec = RunSpec(strategy=strategy, budget=budget, objective=name, seed=seed, max_length=max_length,
                       time_limit=time_limit, options=options or {}, validate=validate, prune=prune,
                       validate_seconds=validate_seconds, surrogate=surrogate, screen=screen)
    observer = observer or Observer()
    clock = PhaseClock(observer)
    if module is not None and not isinstance(module, Module) and spec.objective_options:
        raise BadInput(f"{', '.join(sorted(spec.objective_options))}: a fleet makes no confirmed runtime claim (each "
                       "member's cost is reported as measured); tune the modules one by one to confirm a speed-up")
    if resume:
        subject, spec, replay, run_id = _resumed(evaluator, resume, spec)
    else:
        subject, replay, run_id = _prepared(evaluator, module, clock, observer), [], new_run_id()
    obj = objective if isinstance(objective, Objective) and objective.name == spec.objective \
        else spec.make_objective()
    strat = strategy_mod.create(spec.strategy, **spec.options)
    space_name, space = _space(evaluator, subject, spec)
    search = _open(evaluator, subject, obj, spec, run_id, replay, observer, clock, created=not resume)
    search.space_name, search.options_by = space_name, strat.options_by if space.options else None
    search.validation_seed = validation_seed
    screen = search.screen if isinstance(search, ModuleSearch) and search.screens(space) else None
    status, reason = drive(search, strat, space, spec.seed, f"{spec.strategy} on {_label(subject)}", screen)
    return finish(search, status, reason, spec.validate, validation_seed, spec.prune)


def tune_fleet(evaluator: Evaluator, modules: Sequence[Module], strategy: str = RunSpec.strategy,
               budget: int = RunSpec.budget, objective: str = RunSpec.objective, seed: int = 0,
               max_length: int = RunSpec.max_length, time_limit: float | None = None, options: dict | None = None,
               observer: Observer | None = None, validate: bool = True, validation_seed: int = 0,
               prune: bool = True, allow_regressions: bool = False) -> FleetResult:
    """``tune`` on a list of modules (a shorthand kept for the benchmarks); ``prune`` as for one module
    (``loop.prune``). Here, where the entry point lives, so that ``core/fleet.py`` (the fleet's search)
    never imports the tuner back."""
    spec = RunSpec(strategy=strategy, budget=budget, objective=objective, seed=seed, max_length=max_length,
                   time_limit=time_limit, options=options or {}, validate=validate, prune=prune,
                   allow_regressions=allow_regressions)
    return tune(evaluator, list(modules), spec=spec, observer=observer, validation_seed=validation_seed)


#: Run options that carry what was searched (``RunSpec.space``, fixed compiler options, numerics): stored with
#: the run so that ``--resume`` searches the same space; ``_resumed`` takes them back out.
SPACE_KEYS = ("space", "compiler_options", "numerics_options", "sites", "no_screen")
#: Sites searched per module when a run does not say (``RunSpec.sites``): the hottest few, so that a small
#: budget can still try each once beside the options.
DEFAULT_SITES = 8


def _space_fields(spec: RunSpec) -> dict:
    return {k: v for k, v in (("space", spec.space), ("compiler_options", spec.compiler_options),
                              ("numerics_options", spec.numerics_options), ("sites", spec.sites),
                              ("no_screen", not spec.screen)) if v is not None and v != {} and v is not False}


def _space(evaluator: Evaluator, subject, spec: RunSpec) -> tuple[str, SearchSpace]:
    """What the run searches (``--space``) and its ``SearchSpace``: the pass vocabulary, and the compiler
    options of ``_option_dims`` unless only the order is searched."""
    space_name = spec.searched()
    dims = _option_dims(evaluator, subject, spec, space_name)
    return space_name, SearchSpace(evaluator.pipeline.passes(), spec.max_length, target=evaluator.pipeline.target.key,
                                   options=dims, passes=space_name != "options")


def _option_dims(evaluator: Evaluator, subject, spec: RunSpec, space_name: str) -> tuple:
    """The compiler options a run searches (``SearchSpace.options``): the backend's space for this module
    (numerics-changing ones only when asked; collective thresholds for a partitioned step), less those the
    run fixes. ``BadInput`` in one line for fixed options the compiler does not take, for options asked of a
    backend without them, and for a target whose programs nothing here runs (no time to judge them by)."""
    backend, fixed = evaluator.pipeline, CompilerOptions.of(spec.compiler_options)
    wants = space_name != "passes"
    if not supports(backend, "options"):
        if fixed or (wants and spec.space is not None):
            raise BadInput(f"the {backend.name} backend has no compiler options to search or fix")
        return ()
    if (wants or fixed) and not backend.runs_on_target:
        if not fixed and spec.space is None:  # the default space of runtime: the objective refuses in its words
            return ()
        why = backend.missing_device() if hasattr(backend, "missing_device") else "nothing here runs its programs"
        raise BadInput(f"compiler options are judged by measured time on the {backend.target.name}, and {why}; "
                       "tune the pass order alone with a compile-only objective (--space passes)")
    if fixed:
        backend.check_options(fixed)
    if not wants:
        return ()
    roots = subject if isinstance(subject, list) else [subject]
    partitioned = any(evaluator.metrics(r.fingerprint).collectives for r in roots)
    dims = tuple(d for d in backend.option_space(spec.numerics_options, partitioned) if d.name not in fixed.names)
    return dims + _site_dims(backend, subject, spec, fixed, partitioned)


def _site_dims(backend, subject, spec: RunSpec, fixed: CompilerOptions, partitioned: bool) -> tuple:
    """Per-site decisions as option dimensions (``DecidesPerSite``): the module's hottest sites (a
    profile's order where the backend profiles, else the largest results first), at most ``spec.sites``.
    None for a fleet (a site is one module's instruction) and for a partitioned step."""
    limit = DEFAULT_SITES if spec.sites is None else spec.sites
    if not limit or isinstance(subject, list) or partitioned or not supports(backend, "sites"):
        return ()
    try:
        dims = backend.site_space(subject, only=hot_sites(backend, subject), limit=limit)
    except PassFailed:
        return ()  # the module's optimised form cannot be read (it will fail to compile anyway)
    return tuple(d for d in dims if d.name not in fixed.names)


#: A site enters the search when its op holds at least this share of the profiled step.
SITE_MIN_SHARE = 0.01


def hot_sites(backend, module):
    """The module's input instructions by measured share of its step, hottest first, where the backend
    profiles (``autotune profile``, 3 rounds); None (no order: the largest results first) where it does not
    or the profile fails. Both ``name:opcode:shape`` and the bare name are given (a library fusion's op is
    traced to its instruction by name)."""
    if not supports(backend, "profile"):
        return None
    try:
        profile = Profile.from_backend(module.name, backend.profile(module, rounds=3, handover=False))
    except (PassFailed, BadInput, KeyError, ValueError):
        return None
    order: list[str] = []
    for site, _share in profile.hot_sites(SITE_MIN_SHARE):
        order += [site, site.split(":", 1)[0]]
    return order


def _label(subject) -> str:
    return f"a fleet of {len(subject)}" if isinstance(subject, list) else subject.name


def _prepared(evaluator: Evaluator, module, clock: PhaseClock, observer: Observer):
    """The normalised module (a list of them for a fleet) a new run searches."""
    if module is None:
        raise BadInput("no module to tune")
    if not isinstance(module, Module):
        return prepare_fleet(evaluator, list(module))
    clock.enter("normalise", "XLA's import round trip until the module is stable")
    try:
        return evaluator.prepare(module)
    except BaseException:
        observer.on_run_end()
        raise


def _resumed(evaluator: Evaluator, run_id: str, spec: RunSpec):
    """``(module or fleet, spec, recorded trials, run_id)`` of a recorded run to resume."""
    store = RunStore(evaluator.cache)
    run = store.get(run_id)
    if run.version != evaluator.version:
        raise BadInput(f"run '{run_id}' was made with {run.version}, not {evaluator.version} (another XLA or another "
                       f"--target: resume it with the target it was made for)")
    if "fleet" in run.options:
        subject = fleet_roots(evaluator, run)
    else:
        proto = evaluator.cache.state_proto(evaluator.version, run.module)
        if proto is None:
            raise BadInput(f"run '{run_id}': its module is no longer in the cache")
        subject = Module(run.module_name, proto, run.module)
    spec = RunSpec(strategy=run.strategy, budget=run.budget, objective=run.objective, seed=run.seed,
                   max_length=run.max_length,
                   options={k: v for k, v in run.options.items() if k not in FLEET_KEYS + SPACE_KEYS},
                   space=run.options.get("space"), compiler_options=run.options.get("compiler_options") or {},
                   numerics_options=bool(run.options.get("numerics_options", False)), sites=run.options.get("sites"),
                   screen=not run.options.get("no_screen", False),
                   validate=spec.validate and run.validate,
                   time_limit=spec.time_limit if spec.time_limit is not None else run.time_limit,
                   prune=spec.prune, validate_seconds=spec.validate_seconds, surrogate=spec.surrogate,
                   objective_options=spec.objective_options,
                   allow_regressions=bool(run.options.get("allow_regressions", False)))
    return subject, spec, store.trials(run_id), run_id


def _open(evaluator: Evaluator, subject, obj: Objective, spec: RunSpec, run_id: str, replay: list[TrialRecord],
          observer: Observer, clock: PhaseClock, created: bool) -> Search:
    """Record the run (``running``) and build its ``Search``: a ``FleetSearch`` for a list of modules,
    else a ``ModuleSearch`` (on a surrogate when ``spec.surrogate`` finds large constants)."""
    fields = fleet_fields(subject, spec) if isinstance(subject, list) else {
        "module": subject.fingerprint, "module_name": subject.name,
        # a resumed run keeps ``allow_regressions`` (the GPU guard off); ``_resumed`` takes it back out
        "options": {**spec.options, **({"allow_regressions": True} if spec.allow_regressions else {})}}
    fields["options"] = {**fields.get("options", {}), **_space_fields(spec)}
    RunStore(evaluator.cache).save(
        run_id, **({"created": time.time()} if created else {}), updated=time.time(), status="running",
        strategy=spec.strategy, objective=spec.objective, budget=spec.budget, seed=spec.seed,
        max_length=spec.max_length, version=evaluator.version, validate=spec.validate, time_limit=spec.time_limit,
        **fields)
    try:
        if isinstance(subject, list):
            return FleetSearch(evaluator, subject, obj, spec, run_id, replay, observer, clock)
        search_root, lifted = (_surrogate_of(evaluator, subject, clock) if spec.surrogate else (subject, None))
        search = ModuleSearch(evaluator, search_root, obj, spec, run_id, replay, observer, clock)
        if lifted is not None:
            search.real = (subject, lifted)
        return search
    except BaseException:
        observer.on_run_end()
        raise


def _surrogate_of(evaluator: Evaluator, root: Module, clock: PhaseClock) -> tuple[Module, dict | None]:
    """``(module to search, description)``: the normalised surrogate of ``root`` with its large
    constants lifted to parameters, or ``(root, None)`` when it has too few constant bytes (or the
    backend cannot lift them)."""
    if not supports(evaluator.pipeline, "surrogate"):
        return root, None
    lift = evaluator.pipeline.lift_constants
    clock.enter("normalise", "looking for large constants to lift to parameters (a surrogate to search on)")
    try:
        lifted = lift(root)
    except AutotuneError:
        return root, None
    if lifted is None or lifted[2] < SURROGATE_MIN_BYTES:
        return root, None
    module, n, nbytes = lifted
    try:
        search_root = evaluator.prepare(module)
    except AutotuneError:  # the surrogate does not import: search the real module
        return root, None
    return search_root, {"constants": n, "bytes": nbytes, "fingerprint": search_root.fingerprint}
