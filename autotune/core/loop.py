"""The one run loop: single modules, fleets and exhaustive exploration all close their search here.

A ``Search`` is what the loop drives: it turns sequences into trials (``fresh``), ranks what it
found and knows how to check, prune and report a candidate. ``tuner.ModuleSearch`` searches one
module; ``fleet.FleetSearch`` one sequence for many modules (its cost aggregates over them). The
loop owns everything else, once:

* **budget** (``RunEvaluate``): one sequence evaluation is one unit, cache hits and replayed trials
  included; the time limit is checked at the same place;
* **replay** (``Search.evaluate_sequences``): a resumed run's recorded trials answer the strategy's
  first asks without compiling or spending budget again;
* **the search** (``drive``): seeding, progress, Ctrl-C and a lost executor end it the same way;
* **the answer** (``choose``): candidates best first, each pruned (``prune``: one backward
  sweep, the runs' one way of shortening a sequence), validated and its win confirmed; a rejected one is recorded and the next best is tried;
* **the ending** (``finish``): the result is stored, or on Ctrl-C the run is saved as interrupted
  and ``Interrupted`` is raised with the partial result and the id to resume.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from autotune.core.evaluator import Evaluator
from autotune.core.executors import ExecutorLost
from autotune.core.metrics import Metrics
from autotune.core.module import Module
from autotune.core.observer import Observer
from autotune.core.options import EMPTY, CompilerOptions
from autotune.core.runs import RunStore, TrialRecord
from autotune.core.spec import RunSpec
from autotune.errors import AutotuneError
from autotune.strategy import BudgetExhausted, Evaluate, SearchSpace, Trial
from autotune.core.validation import COMPILED, EXECUTED_REGION, UNVERIFIED, Validation, establish

if TYPE_CHECKING:
    from autotune.core.validation import Validation

#: Distinct candidates the validity check may reject before the run reports nothing.
MAX_REJECTED = 8
#: Candidates set aside by the GPU guard that a result names (the best of them; the rest are alike).
MAX_GUARDED_SHOWN = 3
#: A trial's status when the GPU guard set its state aside (``core.gpu_guard``): the strategy sees the
#: failure cost, so the search steers to answers the guard lets through; never a candidate.
GUARDED = "guarded"


class Interrupted(AutotuneError):
    """Ctrl-C: the run is saved; ``partial`` holds the best so far; resume with its id."""

    exit_code = 130

    def __init__(self, run_id: str, partial, reason: str | None = None):
        super().__init__(f"{reason or 'interrupted'}; resume with: autotune run --resume {run_id}")
        self.run_id, self.partial = run_id, partial


def seed_everything(seed: int) -> None:
    """Seed Python's and numpy's global generators: strategies built on libraries that draw from
    them (and not from the seed they are given) stay deterministic under a run's seed."""
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % (2**32))
    except ImportError:  # pragma: no cover
        pass


class PhaseClock:
    """Seconds per phase of a run (``observer.PHASES``), the observer told as each phase or step starts.

    Phases may alternate (``choose`` prunes, validates and confirms one candidate after another):
    each phase's seconds accumulate. ``result()`` lists them in the order they first ran.
    """

    def __init__(self, observer: Observer):
        self.observer = observer
        self.seconds: dict[str, float] = {}
        self.current: str | None = None
        self.since = time.perf_counter()

    def enter(self, phase: str, detail: str | None = None, estimate: float | None = None) -> None:
        if phase != self.current:
            self.stop()
            self.current, self.since = phase, time.perf_counter()
            self.seconds.setdefault(phase, 0.0)
        self.observer.on_phase(phase, detail, estimate)

    def stop(self) -> None:
        if self.current is not None:
            self.seconds[self.current] += time.perf_counter() - self.since
            self.current = None

    def result(self) -> tuple[tuple[str, float], ...]:
        now = time.perf_counter()
        # to the millisecond: what is shown, stored and read back (``to_dict``/``from_dict``) is the same
        return tuple((name, round(sec + (now - self.since if name == self.current else 0.0), 3))
                     for name, sec in self.seconds.items())


@dataclass(frozen=True)
class Choice:
    """The candidate a run reports: its (pruned) trial, the sequence as found and its cost, its
    validation ``Validation``(s) and the objective's verdict. The found cost is kept because pruning
    can lower the cost as well as shorten the sequence (a pass that hurts in that context dropped)."""

    rec: TrialRecord
    found: tuple[str, ...]
    report: object  # a ``Validation`` (one module) or a tuple of them (a fleet: one per member)
    verdict: object
    found_cost: float | None = None


class Search:
    """What the run loop drives (see the module docstring). Subclasses supply the hooks below."""

    objective = None  # the run's Objective (``deterministic`` decides pruning and confirmation)
    default_cost: float = 0.0
    failure_cost: float = 0.0

    def __init__(self, evaluator: Evaluator, spec: RunSpec, run_id: str, replay: list[TrialRecord],
                 observer: Observer, clock: PhaseClock | None = None):
        """``spec`` whole (checked once, at its construction): budget, time limit, seed, strategy name
        and validation bound are read from it, nothing is taken apart and put back together."""
        self.ev, self.runs, self.spec = evaluator, RunStore(evaluator.cache), spec
        self.budget, self.run_id, self.replay, self.observer = spec.budget, run_id, replay, observer
        self.deadline = time.monotonic() + spec.time_limit if spec.time_limit else None
        self.seed, self.strategy_name, self.validate_seconds = spec.seed, spec.strategy, spec.validate_seconds
        self.records: list[TrialRecord] = []
        self.guarded: set[tuple[str, ...]] = set()  # sequences whose trial the GPU guard set aside
        self.best: TrialRecord | None = None
        self.best_history: list[float] = []
        self.t0 = time.perf_counter()
        self.phases = clock or PhaseClock(observer)
        # The evaluator may outlive this run (compare, an API session): count this run's steps only.
        self.steps0 = (evaluator.stats.steps_compiled, evaluator.stats.steps_cached)

    # ---- hooks --------------------------------------------------------------------------------------
    def fresh(self, seqs: list[tuple[str, ...]], options: list[CompilerOptions]) -> list[TrialRecord]:
        """Evaluate sequences not answered by the replay, each under its compiler options: one trial each
        (``n`` is set on recording)."""
        raise NotImplementedError

    def remember(self, seq: tuple[str, ...], rec: TrialRecord) -> None:
        """Note what ``seq`` reached (for ``metrics_after``)."""

    def trial_ok(self, rec: TrialRecord) -> bool:
        """Whether a strategy sees the trial as a success (``Evaluate.history``)."""
        return rec.status == "ok"

    def metrics_after(self, sequence: tuple[str, ...]) -> Metrics | None:
        raise NotImplementedError

    def empty_cost(self) -> float:
        raise NotImplementedError

    def ranked(self, recheck: bool) -> list[TrialRecord]:
        """Candidates, best first (``recheck``: the answer may still be re-established elsewhere)."""
        raise NotImplementedError

    def key(self, rec: TrialRecord):
        """What makes two candidates the same (None: not a candidate)."""
        raise NotImplementedError

    def prune_candidate(self, rec: TrialRecord) -> TrialRecord:
        """The candidate with the passes that do not help dropped (``prune``)."""
        raise NotImplementedError

    def check(self, rec: TrialRecord, n: int, seed: int) -> tuple[object, str | None]:
        """Validate a candidate: (report, None) when valid, (report, reason) when not."""
        raise NotImplementedError

    def unchecked(self) -> object:
        raise NotImplementedError

    def guard(self, rec: TrialRecord) -> str | None:
        """Why a candidate may not be offered whatever its cost (``core.gpu_guard``), or None."""
        return None

    def guarded_cost(self, rec: TrialRecord) -> float:
        """What the objective says of a trial the guard set aside (its record holds the failure cost)."""
        return rec.cost

    def confirm(self, rec: TrialRecord, rest: list[TrialRecord], seen: set, tally: dict) -> tuple[object, bool]:
        """The objective's verdict on a candidate and whether to try the next one instead."""
        return None, False

    def result(self, status: str, choice: Choice | None, invalid: tuple):
        raise NotImplementedError

    # ---- the loop's side ---------------------------------------------------------------------------
    def time_up(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def steps(self) -> tuple[int, int]:
        """(compiled, cached) steps of this run so far."""
        return self.ev.stats.steps_compiled - self.steps0[0], self.ev.stats.steps_cached - self.steps0[1]

    def evaluate_sequences(self, seqs: list[tuple[str, ...]], options: list[CompilerOptions] | None = None) -> list[float]:
        """Costs of ``seqs`` (each under its compiler ``options``), each one trial: the recorded ones
        replayed, the others evaluated."""
        options = options or [EMPTY] * len(seqs)
        out: list[float | None] = [None] * len(seqs)
        todo: list[int] = []
        for k, seq in enumerate(seqs):
            n = len(self.records) + len(todo)
            if n < len(self.replay) and self.replay[n].sequence == seq and self.replay[n].options == options[k] \
                    and not todo:
                rec = self.replay[n]
                self.remember(seq, rec)
                self.record(rec, persist=False)
                out[k] = rec.cost
            else:
                if n < len(self.replay):  # the strategy diverged from the recorded run: drop the rest
                    self.replay = self.replay[:n]
                    self.runs.truncate(self.run_id, n)
                todo.append(k)
        if todo:
            for k, rec in zip(todo, self.fresh([seqs[k] for k in todo], [options[k] for k in todo])):
                self.remember(seqs[k], rec)
                self.record(rec, persist=True)
                out[k] = rec.cost
        return [float(c) for c in out]

    def record(self, rec: TrialRecord, persist: bool) -> None:
        rec = replace(rec, n=len(self.records))
        self.records.append(rec)
        if persist:
            self.runs.add_trial(self.run_id, rec, time.perf_counter() - self.t0)
        if rec.status == "ok" and (self.best is None or rec.cost < self.best.cost):
            self.best = rec
        if rec.status == GUARDED:
            self.guarded.add(rec.sequence)
        self.best_history.append(self.best.cost if self.best else math.nan)
        elapsed = max(1e-9, time.perf_counter() - self.t0)
        compiled, cached = self.steps()
        self.observer.on_trial(len(self.records), self.best.cost if self.best else None,
                               len(self.records) / elapsed, cached / (compiled + cached) if compiled + cached else 0.0)


class RunEvaluate(Evaluate):
    """The ``Evaluate`` a strategy gets for one run (one module or a fleet): the one budget check."""

    def __init__(self, search: Search):
        self.t = search

    def __call__(self, sequence: Sequence[str], options: CompilerOptions | None = None) -> float:
        return self.many([sequence], None if options is None else [options])[0]

    def many(self, sequences: Sequence[Sequence[str]], options: Sequence[CompilerOptions] | None = None) -> list[float]:
        t = self.t
        if self.remaining <= 0 or t.time_up():
            raise BudgetExhausted()
        take = [tuple(s) for s in sequences[: self.remaining]]
        opts = [EMPTY] * len(take) if options is None else [CompilerOptions.of(o) for o in list(options)[: len(take)]]
        costs = t.evaluate_sequences(take, opts)
        if len(take) < len(sequences) or t.time_up():
            raise BudgetExhausted()
        return costs

    @property
    def remaining(self) -> int:
        return self.t.budget - len(self.t.records)

    @property
    def failure_cost(self) -> float:
        return self.t.failure_cost

    @property
    def empty_cost(self) -> float:
        return self.t.empty_cost()

    @property
    def history(self) -> list[Trial]:
        return [Trial(r.sequence, r.cost, self.t.trial_ok(r), r.options) for r in self.t.records]

    def metrics(self, sequence: Sequence[str]) -> Metrics | None:
        """Metrics of the module after ``sequence`` if it was evaluated (no budget spent)."""
        return self.t.metrics_after(tuple(sequence))

    def guarded(self, sequence: Sequence[str]) -> bool:
        """Whether the GPU guard set ``sequence``'s evaluated state aside (its cost is the failure cost,
        but its pass ran: a step-by-step roll-out may go on from it, ``rl.env``)."""
        return tuple(sequence) in self.t.guarded

    @property
    def input_metrics(self) -> Metrics:
        return self.t.input_metrics


#: The time a run's pruning may take in all (its ``prune`` phase): no evaluation starts after it. Not
#: ``--validate-seconds``: a short validation budget should not cost the answer its pruning; 30 s is
#: 20x what the real LLM steps' pruning takes (1.2-1.8 s) and about six of a 19k-instruction step's.
PRUNE_SECONDS = 30.0


def prune(sequence: tuple[str, ...], cost: float,
           evaluate: Callable[[tuple[str, ...]], tuple[object, float] | None],
           time_up: Callable[[], bool] = lambda: False) -> tuple[tuple[str, ...], object, float]:
    """Drop passes that do not help: ONE backward sweep, keeping a removal when the cost does not get
    worse. Searches return sequences padded with passes that change nothing (most passes are no-ops
    on most modules); a user should ship the short sequence. ``evaluate(candidate)`` is ``(state,
    cost)`` or None when the candidate fails or is disqualified; at most ``len(sequence)`` calls,
    outside the budget. ``time_up()`` True stops the sweep before the next call (each is XLA's whole
    default pipeline on the module: seconds on a 19k-instruction step); what was dropped until then
    was evaluated, so the shorter sequence stands. Returns ``(sequence, state or None when
    unchanged, cost)``."""
    current, state = sequence, None
    for i in reversed(range(len(current))):
        if len(current) <= 1 or time_up():
            break
        candidate = current[:i] + current[i + 1:]
        got = evaluate(candidate)
        if got is not None and not math.isnan(got[1]) and got[1] <= cost:
            current, (state, cost) = candidate, got
    return current, state, cost


def choose(search: Search, ranked: list[TrialRecord], validate: bool, validation_seed: int,
           prune: bool) -> tuple[Choice | None, tuple]:
    """The one "validate the best, then the next best" path: candidates in order, each pruned
    (deterministic objectives), validated and its win confirmed; a rejected one is recorded with
    its reason and the next one is tried. Returns ``(choice or None, rejected (sequence, reason)s)``."""
    clock, invalid, seen, tally = search.phases, [], set(), {"confirmations": 0}
    guards, guarded_keys = [], set()
    unconfirmed: Choice | None = None  # the first measured candidate whose confirmation did not hold
    for i, rec in enumerate(ranked):
        key = search.key(rec)
        if key is None or key in seen or key in guarded_keys:
            continue
        seen.add(key)
        if len(seen) > MAX_REJECTED:
            break
        found, found_cost = rec.sequence, rec.cost
        guarded = search.guard(rec)
        if guarded is not None:  # read off figures the search already has: not counted as a rejection
            seen.discard(key)
            guarded_keys.add(key)
            guards.append((rec.sequence, guarded))
            continue
        if prune and search.objective.deterministic and rec.cost < search.default_cost:
            clock.enter("prune", f"candidate {len(seen)}: dropping passes that change nothing")
            pruned = search.prune_candidate(rec)
            rec = pruned if search.guard(pruned) is None else rec  # pruning must not add launches either
        report = search.unchecked()
        if validate:
            clock.enter("validation", f"candidate {len(seen)}")
            report, reason = search.check(rec, len(seen), validation_seed)
            if reason is not None:
                invalid.append((rec.sequence, reason))
                continue
        verdict, try_next = search.confirm(rec, ranked[i + 1:], seen, tally)
        if try_next:
            # The runner-up may fail too (invalid, or its own confirmation): this claim, with its interval,
            # then stays the run's answer, as it would have been without a runner-up.
            unconfirmed = unconfirmed or Choice(rec, found, report, verdict, found_cost)
            continue
        choice = Choice(rec, found, report, verdict, found_cost)
        if unconfirmed is not None and not getattr(verdict, "win", True) and hasattr(verdict, "ratio"):
            choice = _nearer_win(unconfirmed, choice)
        return choice, tuple((set_aside(search, choice) + guards)[:MAX_GUARDED_SHOWN] + invalid)
    return unconfirmed, tuple((set_aside(search, unconfirmed) + guards)[:MAX_GUARDED_SHOWN] + invalid)


def _nearer_win(first: Choice, second: Choice) -> Choice:
    """Both measured candidates' confirmations failed: the answer is the one measured nearer a win (the
    lower ratio), its message naming the other's figure. The last one tried was the answer before, so a
    run whose screen's best (ResNet-50's YNNPACK reduce, confirmed 0.82 once and then not replicated)
    lost its confirmation to a noisy draw said only that a runner-up at 1.009 kept XLA's default."""
    def ratio(c: Choice) -> float:
        return c.verdict.ratio if getattr(c.verdict, "ratio", None) is not None else math.inf

    keep, other = (first, second) if ratio(first) <= ratio(second) else (second, first)
    v = other.verdict
    said = (f"{v.ratio:.3f}" + (f" [{v.low:.3f}, {v.high:.3f}]" if v.low is not None and v.high is not None else "")
            if v.ratio is not None else "not measured")
    which = "runner-up" if keep is first else "first candidate"
    return replace(keep, verdict=replace(keep.verdict, message=f"{keep.verdict.message}; the {which} was "
                                                               f"confirmed too: {said}, not faster either"))


def set_aside(search: Search, choice: Choice | None) -> list[tuple[tuple[str, ...], str]]:
    """``(sequence, reason)`` of the trials the GPU guard set aside during the search that the objective
    ranks above the answer (above XLA's default when there is none), best (then shortest) first, one per
    candidate."""
    bound = choice.rec.cost if choice is not None else search.default_cost
    found: dict = {}
    for rec in search.records:
        if rec.status != GUARDED:
            continue
        key = search.key(rec)
        if key is None or key in found:
            continue
        cost = search.guarded_cost(rec)
        if cost < bound:
            found[key] = (cost, len(rec.sequence), rec.n, rec.sequence, rec.message or "")
    return [(seq, reason) for *_, seq, reason in sorted(found.values())]


def drive(search: Search, strategy, space: SearchSpace, seed: int, label: str,
          screen: Callable[[Evaluate, SearchSpace], Trial | None] | None = None) -> tuple[str, str | None]:
    """THE search loop: the strategy minimises the run's ``Evaluate`` until it stops, the budget or
    the time runs out, Ctrl-C or the executor is lost. ``screen`` (``core/screen.py``) runs first on the
    same ``Evaluate`` (its candidates are trials of the run, in its budget); the point it returns warm-starts
    the strategy (``Strategy.warm``). Returns ``(status, reason)``."""
    status, reason = "finished", None
    seed_everything(seed)
    search.phases.enter("search" if screen is None else "screen")
    search.observer.on_run_start(search.budget, label)
    try:
        try:
            evaluate = RunEvaluate(search)
            if screen is not None:
                search.phases.enter("screen", "every single option value against the default")
                start = screen(evaluate, space)
                search.phases.enter("search")
                if start is not None:
                    strategy.warm(start)
                seed_everything(seed)  # the strategy draws as it would have without the screen
            strategy.minimize(evaluate, space, seed)
        except BudgetExhausted:
            pass
        if search.time_up():
            status = "time-limit"
    except KeyboardInterrupt:
        status = "interrupted"
    except ExecutorLost as exc:  # the cluster went away: stop as on Ctrl-C, completed trials kept
        status, reason = "interrupted", str(exc)
    return status, reason


def summarise(search: Search, status: str, validate: bool, validation_seed: int, prune: bool = True,
              recheck: bool = True):
    """The run's result: its chosen candidate (``choose``) as the search reports it."""
    choice, invalid = choose(search, search.ranked(recheck), validate, validation_seed, prune)
    return search.result(status, choice, invalid)


def finish(search: Search, status: str, reason: str | None, validate: bool, validation_seed: int, prune: bool):
    """End a run: summarise it and store the result, or (Ctrl-C, during the search or validation)
    save it as interrupted and raise ``Interrupted`` with the partial result."""
    result = None
    try:
        if status != "interrupted":
            try:  # validation and confirmation: a Ctrl-C here stops them and keeps the run resumable
                result = summarise(search, status, validate, validation_seed, prune)
            except KeyboardInterrupt:
                status, reason = "interrupted", "interrupted during validation"
    finally:
        search.phases.stop()
        search.observer.on_run_end()
    if status == "interrupted":
        search.runs.save(search.run_id, status="interrupted", updated=time.time())
        partial = summarise(search, status, validate=False, validation_seed=validation_seed, prune=False,
                            recheck=False)
        raise Interrupted(search.run_id, partial, reason)
    search.runs.save(search.run_id, status=status, updated=time.time(), best_sequence=result.best_sequence,
                     best_cost=result.best_cost, summary=result.to_dict())
    return result


#: Part of a cached verdict's key: raised when validation's judgement changes, so that a verdict
#: an older judgement cached (an ``invalid`` from a region's bf16 rounding before the region check had
#: its f32 second opinion) is established again. 2: regions judged against their f32 reference.
#: Bumped when a verdict's meaning changes, so that verdicts stored by an earlier rule are established again
#: (3: a NaN only a library fusion swallowed is judged on inputs in the working range, ``execution.library_nan``).
VALIDATION_VERSION = "validation-3"


def validity_of(evaluator: Evaluator, root: Module, state: str, seed: int = 0,
                bound_seconds: float | None = None, progress=None, budget=None,
                options: CompilerOptions = EMPTY) -> Validation:
    """The validation (level, reason, output comparison) of ``state`` against ``root``.

    ``identical`` when the state ends, after XLA's default pipeline, as the same module as the
    default does (both final states are cached transitions, nothing runs); otherwise
    ``validation.establish`` compiles and, where this machine can, executes both modules.
    Levels that are facts about the two modules (identical, executed, executed-with-stand-ins,
    invalid) are cached per (root, state, seed); ``executed-region``, ``compiled`` and
    ``unverified`` depend on this machine's memory and time bound and are established again next
    time. ``bound_seconds`` bounds each execution (``validation.execution_plan``); ``budget`` (a
    ``checks.budget.PhaseBudget``) is the validation phase's time, shared by the caller's candidates
    (None: only each execution is bounded); ``progress`` hears each step (one line). ``options``: the
    tuned module is compiled with these compiler options (``core/options.py``) against XLA's default
    compile of ``root``: never ``identical`` (the same module compiled otherwise is another executable),
    and no region check (the options change the whole compile).
    """
    key = f"{evaluator.version}|{VALIDATION_VERSION}|{root.fingerprint}|{state}|{seed}" + (
        f"|opts:{options.key}" if options else "")
    stored = evaluator.cache.get_report("validation", key)
    if stored is not None:  # a fact about the two modules, established by an earlier run: nothing skipped now
        return replace(Validation.from_dict(stored), skipped=(),
                       budget_seconds=budget.seconds if budget is not None else None)
    final, default = evaluator.final(state), evaluator.default(root)
    identical = final.ok and default.ok and final.state == default.state and not options
    finals = (evaluator.module(default.state, root.name), evaluator.module(final.state, root.name)) \
        if final.ok and default.ok and not options else None
    tuned = evaluator.module(state, root.name).with_options(options)
    result = establish(evaluator.pipeline, root, tuned, seed=seed,
                       identical=identical, bound_seconds=bound_seconds, progress=progress, finals=finals,
                       budget=budget)
    if result.level not in (COMPILED, UNVERIFIED, EXECUTED_REGION):
        evaluator.cache.put_report("validation", key, result.to_dict())
    return result
