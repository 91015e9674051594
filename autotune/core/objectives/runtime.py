"""``runtime``: measured wall time of the fully compiled module, and a claim only after confirmation.

Two measurements with two purposes (see ``docs/runtime.md``):

* **Search** (``cost``): a raced, interleaved A/B of the candidate against XLA's default executable in
  one worker (``Backend.time_ab`` with ``stop_above``): up to ``SEARCH_ROUNDS`` rounds, each a
  calibrated sample of both, the order alternating. The cost is XLA's default's time (``default_cost``:
  ``REPEATS`` calibrated samples after a warm-up, their median in microseconds) times the median
  per-round ratio candidate/default. Racing: from ``MIN_ROUNDS`` on, a candidate whose ratio provably
  (a one-sided sign-test bound, ``stats.median_lower_bound``) lies above the best ratio found so far,
  or above ``1 - min_effect`` (no win is possible), stops being timed: it cannot be the answer, and the
  rounds left are saved (``search_notes`` says how many, and how much time). Good enough to rank candidates, never enough to claim anything: the search
  keeps its luckiest sample.
* **Claim** (``confirm``): the best candidate and XLA's default re-measured in **independent
  measurements**: each its own ``Backend.time_ab`` (the worker's executables of both, inputs drawn with another seed
  and placed in fresh buffers, then ``rounds`` rounds A B / B A ... interleaved in one worker). Each measurement gives its median
  per-round ratio; the claim is their geometric mean with a t interval over measurements
  (``stats.instance_ratio``). A win needs the whole interval below ``1 - min_effect``; otherwise: "no
  significant difference: keep XLA's default". ``MIN_INSTANCES`` measurements first; while the estimate
  reads below that bar but its interval does not lie wholly below it, ``INSTANCE_STEP`` more, up to
  ``MAX_INSTANCES`` (sequential, capped): a real small win is neither dropped nor claimed on one draw.

  Why over measurements and not rounds: rounds of one measurement share one executable, one set of buffers
  and one stretch of the machine's state, and a bootstrap over them gives an interval too narrow for the
  next measurement of the same pair. The former claim (30 rounds, a "faster" verdict replicated once on other
  inputs, the rounds pooled) oversized DLRM's answer (claimed 0.945; 20 independent measurements read 0.975
  [0.960, 0.991]) and dropped ViT's and the diffusion step's (0.932 [0.912, 0.953] over 20), and its
  replication was what kept A/A false wins at 0 in 88 (``bench/options.py --stage effect`` and ``aa``,
  2026-12-07). ``replicate=False``: one measurement of ``rounds`` rounds decides, with a bootstrap interval
  over its rounds (tests and quick looks; never what a run claims by default).

Runtime is keyed by the fully compiled module and the compiler options it is compiled with
(``ctx.options``, ``core/options.py``). What a backend executes after a tuned sequence is XLA's default
pipeline applied to the sequence's output, so the module after that pipeline (``ctx.final(state).state``)
and the options identify the executable: candidates with the same both share one measurement (cached
per pipeline version, final module, options, seed and protocol), and a candidate whose final module is
XLA's default's own, compiled without options, *is* the default executable: it gets the default's time
and is never a win, without any timing. Only genuinely different executables are timed.

The default's executable is the root module compiled by XLA as it is, without options (what a user
gets without autotune); its final module is ``ctx.default.state``.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import replace

import numpy as np

from autotune.core.backend import supports
from autotune.core import stats
from autotune.core.objectives import Claim, Objective, ObjectiveContext
from autotune.errors import BadInput, PassFailed

#: The default's search-time samples (after one warm-up sample): the unit every candidate's ratio scales.
REPEATS = 5
WARMUP = 1
#: Each search-time sample is an inner loop of at least this long (seconds): a millisecond step timed 20
#: times in a row, so that timer and scheduling jitter average out of the ranking.
SEARCH_MIN_SECONDS = 0.02
#: Rounds of a candidate's search-time A/B against XLA's default, when racing does not stop it earlier:
#: the contenders' ranking is what the answer rests on (a best found at 0.97 in 10 rounds confirmed at 1.00
#: on DLRM), and racing spends them only on candidates not yet proven out of the running.
SEARCH_ROUNDS = 16
#: Rounds before racing may stop a candidate (three ratios all above the best: 87.5% one-sided).
MIN_ROUNDS = 3
#: Rounds before racing may stop a candidate of the screen (``core/screen.py``): a single option value is
#: dropped on evidence, not on three draws. On ResNet-50 with the machine loaded, YNNPACK reduce fusions
#: (0.82-0.94 measured alone) drew 1.12, 0.99, 1.11 and were stopped at three rounds; at eight, the second
#: smallest ratio must lie above the bar (87.5% one-sided), and the screen's own interval decides the rest.
SCREEN_MIN_ROUNDS = 8
#: Each confirmation sample is an inner loop of at least this long (seconds). 50 ms, not 10: on the GPT-2
#: example (1.3 ms a step) the same 30 rounds gave an interval 0.14-0.16 wide at 10 ms samples and 0.05 at
#: 50 ms, side by side on this 2-core machine; a real 8% effect was not confirmed at 10 ms.
CONFIRM_MIN_SECONDS = 0.05
#: Protocol tag in the cache key: bump when the search-time measurement changes meaning. v4: timed in a
#: worker started as a user's jax process (one CPU device), not in a step worker. v5: the per-round ratios
#: are kept (the screen's interval and its sequential confirmation join more rounds to them).
PROTOCOL = "search-v5"
#: The claim (``Runtime.measured_claim``): independent measurements of ``CLAIM_ROUNDS`` interleaved rounds each,
#: ``MIN_INSTANCES`` first, ``INSTANCE_STEP`` more at a time while promising, at most ``MAX_INSTANCES``. Replayed
#: on the 20 + 20 recorded measurements per module of ``results/effect`` (11 modules, every order of them): a
#: true 7% effect (ViT, diffusion) is claimed in 99-100% of replays with 6.5-7 measurements on average, an
#: answer at 0.98-1.0 in 0-3%, XLA's default against itself in 0.06% (4.0-5.7 measurements); starting from 3
#: measurements made that 0.25%. 10 rounds at the claim's 50 ms samples: a measurement's median is the unit,
#: and 10 rounds make it steady enough that the spread between measurements dominates.
CLAIM_ROUNDS = 10
MIN_INSTANCES = 4
INSTANCE_STEP = 2
MAX_INSTANCES = 12
#: ``replicate=False`` only (one measurement decides): times that measurement is timed further (``rounds`` more,
#: same inputs) while it is promising (``Runtime._promising``).
CONFIRM_EXTENSIONS = 1


def runtime_key(evaluator, final_state: str, seed: int = 0, repeats: int = REPEATS, warmup: int = WARMUP,
                min_seconds: float = SEARCH_MIN_SECONDS, options=None) -> str:
    """Cache key of the search-time measurement of the executable whose final module is ``final_state``,
    compiled with the compiler ``options`` (a ``CompilerOptions``; none: XLA's default); a GPU target's
    timings also name the device platform that took them (``on-cuda``, ``on-cpu`` for jax's CPU device
    standing in): a time taken on one is never reused for the other."""
    execution = getattr(evaluator.pipeline, "execution", None)
    where = f"|on-{execution.platform}" if execution is not None else ""
    opts = f"|opts:{options.key}" if options else ""
    return f"{evaluator.version}|{final_state}|{seed}|{PROTOCOL}|{repeats}|{warmup}|{min_seconds:g}{where}{opts}"


def measure_runtime(evaluator, final_state: str, module, seed: int = 0, repeats: int = REPEATS,
                    warmup: int = WARMUP, min_seconds: float = SEARCH_MIN_SECONDS) -> float:
    """Median runtime in microseconds of ``module`` (whose final module is ``final_state``), cached
    per final module: a second module with the same final module is not timed again."""
    key = runtime_key(evaluator, final_state, seed, repeats, warmup, min_seconds)
    report = evaluator.cache.get_report("runtime", key)
    if report is None:
        timing = evaluator.pipeline.time(module, seed=seed, repeats=repeats, warmup=warmup, min_seconds=min_seconds)
        report = {**timing, "median_us": 1e6 * float(timing["median"]), "timed": module.fingerprint}
        evaluator.cache.put_report("runtime", key, report)
    return float(report["median_us"])


def arm_order(backend, seed: int) -> dict:
    """``time_ab``'s keyword for a claim's measurement drawn with ``seed``: B's executable and inputs set up
    first on odd seeds (``b_first``), so the consecutive measurements of a claim alternate which arm is set up
    first, where the backend can (a plugin's ``time_ab`` without the keyword keeps its own order).

    Why: a claim's measurements follow one another in one worker, and each frees its buffers just before the
    next allocates the same sizes again, so the arm set up first may get the same addresses (the same
    alignment, the same pages) every time; an advantage that placement gives one arm would then repeat in
    every measurement and read as an effect. XLA's default against itself on the ViT training step read
    0.933 [0.898, 0.970] over four consecutive measurements (1 false win in 88 A/A claims, 2026-12-07,
    ``bench/options.py --stage aa``); alternating cancels such an advantage in the geometric mean and shows
    it as spread. The order itself costs neither arm anything (``bench/arm_order.py``: 240 A/A, p 0.36)."""
    if seed % 2 and "b_first" in inspect.signature(backend.time_ab).parameters:
        return {"b_first": True}
    return {}


def refusal(backend) -> str:
    """The one line ``runtime`` is refused with where ``backend`` cannot run its target's programs: what
    is missing (a backend that knows says, ``missing_device``), and the ways on."""
    target = backend.target.name
    missing = getattr(backend, "missing_device", None)
    why = missing() if missing is not None else f"this machine cannot run a {target} program"
    return (f"objective runtime times the module on the {target} it is tuned for, and {why}; tune with a "
            f"compile-only objective (final-ops, kernels, roofline) and time on a machine with the GPU, or set "
            f"AUTOTUNE_EXECUTION_PLATFORM=cpu to time on this CPU (not the {target})")


class Runtime(Objective):
    name = "runtime"
    description = ("measured runtime (us, median) of the fully compiled module; a win is claimed only after an "
                   "interleaved A/B re-measurement against XLA's default with a confidence interval")
    unit = "us (measured)"
    deterministic = False
    #: Judges compiler options (``core/options.py``): a count cannot see a library call, a clock can.
    judges_options = True

    def __init__(self, confidence: float = stats.CONFIDENCE, min_effect: float = stats.MIN_EFFECT,
                 rounds: int = CLAIM_ROUNDS, repeats: int = REPEATS, warmup: int = WARMUP,
                 search_min_seconds: float = SEARCH_MIN_SECONDS, confirm_min_seconds: float = CONFIRM_MIN_SECONDS,
                 race: bool = True, search_rounds: int = SEARCH_ROUNDS, replicate: bool = True,
                 extensions: int = CONFIRM_EXTENSIONS, min_instances: int = MIN_INSTANCES,
                 max_instances: int = MAX_INSTANCES):
        if not 0.5 <= float(confidence) < 1.0:
            raise BadInput(f"runtime: confidence must be in [0.5, 1), not {confidence}")
        if not 0.0 <= float(min_effect) < 1.0:
            raise BadInput(f"runtime: min_effect is a fraction in [0, 1) (0.02 = 2%), not {min_effect}")
        if int(rounds) < 4:
            raise BadInput(f"runtime: a confirmation needs at least 4 rounds, not {rounds}")
        if int(search_rounds) < MIN_ROUNDS:
            raise BadInput(f"runtime: a search-time measurement needs at least {MIN_ROUNDS} rounds, not {search_rounds}")
        self.confidence = float(confidence)
        self.min_effect = float(min_effect)
        self.rounds = int(rounds)
        self.repeats = int(repeats)
        self.warmup = int(warmup)
        self.search_min_seconds = float(search_min_seconds)
        self.confirm_min_seconds = float(confirm_min_seconds)
        self.race = bool(race)
        self.search_rounds = int(search_rounds)
        self.replicate = bool(replicate)
        if int(extensions) < 0:
            raise BadInput(f"runtime: extensions counts the times a straddling confirmation is timed further, not "
                           f"{extensions}")
        self.extensions = int(extensions)
        if not 2 <= int(min_instances) <= int(max_instances):
            raise BadInput(f"runtime: a claim needs 2 <= min_instances <= max_instances, not {min_instances} and "
                           f"{max_instances}")
        self.min_instances = int(min_instances)
        self.max_instances = int(max_instances)
        self._claims: dict[tuple, Claim] = {}  # (version, final module, options, seed) -> this instance's confirmation

    # ---- search ------------------------------------------------------------------------------------
    def prepare(self, states, ctx: ObjectiveContext) -> None:
        ctx.finals(states)  # the final modules (the runtime keys), compiled in parallel

    def cost(self, state: str, ctx: ObjectiveContext) -> float:
        final = ctx.final(state)
        if not final.ok:
            return math.nan
        if final.state == ctx.default.state and not ctx.options:  # XLA's default executable itself
            return self.default_cost(ctx)
        report = self._raced(ctx, final.state, ctx.candidate(state), state)
        return math.nan if "error" in report else float(report["median_us"])

    def _raced(self, ctx: ObjectiveContext, final_state: str, module, state: str | None = None) -> dict:
        """The candidate's search-time measurement (cached per executable): a raced A/B against XLA's
        default, or ``{"error": why}`` when it does not compile or run with its options."""
        ev = ctx.evaluator
        key = runtime_key(ev, final_state, ctx.seed, self.repeats, self.warmup, self.search_min_seconds, ctx.options)
        report = ev.cache.get_report("runtime", key)
        fresh = report is None
        if fresh:
            # A candidate that provably cannot beat the best so far, nor be a win at all, is not the answer.
            # While the screen runs (``core/screen.py``), the bar is the win's alone: a single option value
            # that pays less than the best one so far may still pay in a combination.
            best = 1.0 if ctx.shared.get("screening") else ctx.shared.get("best_ratio", 1.0)
            bar = min(best, 1.0 - self.min_effect) if self.race else None
            report = self._measure(ctx, module, bar, state)
            policy = ctx.shared.get("screening")
            # the screen: a straddling candidate is timed further first (not one found to compute otherwise)
            if policy and report.get("ratios") and not report.get("wrong"):
                report = self._sequential(ctx, module, report, policy)
            ev.cache.put_report("runtime", key, report)
        if "error" in report:
            ctx.shared.setdefault("failures", {})[(final_state, ctx.options.key)] = report["error"]
            return report
        if report.get("ratio") is not None:
            ctx.shared.setdefault("ratios", {})[(final_state, ctx.options.key)] = float(report["ratio"])
            _best_so_far(ctx.shared)
        if fresh:
            _tally(ctx.shared.setdefault("race", {}), report)
        return report

    def screened(self, ctx: ObjectiveContext, module, bar: float) -> stats.RatioEvidence:
        """One candidate measured as the screen measures it (raced against ``bar``, a straddler timed further
        under ``ctx.shared["screening"]``), uncached: the protocol ``bench/screen_aa.py`` puts to an A/A."""
        report = self._measure(ctx, module, bar, None)
        if ctx.shared.get("screening") and report.get("ratios") and not report.get("wrong"):
            report = self._sequential(ctx, module, report, ctx.shared["screening"])
        return self._evidence(report)

    def _measure(self, ctx: ObjectiveContext, module, stop_above: float | None, state: str | None = None) -> dict:
        """The raced A/B. With a ``wrong`` check from the search (``ctx.shared["wrong"]``: correct before fast),
        a candidate with options that is still ahead of ``stop_above`` after the first rounds is checked
        before the rest are timed: one that computes other numbers stops there (its search-time figure is
        those rounds'), since it can never be the answer; the rest is timed in a second request, on the same
        executables and inputs (the worker keeps both)."""
        wrong = ctx.shared.get("wrong") if module.options and stop_above is not None and state is not None else None
        first_rounds = MIN_ROUNDS + 1 if wrong is not None else self.search_rounds
        otherwise = False
        try:
            timing = self._time_ab(ctx, module, first_rounds, stop_above)
            ratios = np.asarray(timing["b"]) / np.asarray(timing["a"])
            ahead = wrong is not None and not timing["stopped"] and float(np.median(ratios)) < stop_above
            otherwise = ahead and wrong(state, module.options)  # computes other numbers: never the answer
            if ahead and not otherwise:
                timing = _joined(timing, self._time_ab(ctx, module, self.search_rounds - first_rounds, stop_above))
            elif wrong is not None:  # stopped by racing in its first rounds, or found wrong: the full plan was 16
                timing = {**timing, "planned": self.search_rounds, "stopped": timing["rounds"] < self.search_rounds}
        except PassFailed as exc:  # an option the compiler refuses here, or one that kills its worker
            return {"error": f"{exc.status}: {str(exc).splitlines()[0][:300]}" if str(exc) else exc.status}
        ratios = np.asarray(timing["b"]) / np.asarray(timing["a"])
        ratio = float(np.median(ratios))
        return {"ratio": ratio, "median_us": self.default_cost(ctx) * ratio, "rounds": timing["rounds"],
                "ratios": [float(r) for r in ratios], **({"wrong": True} if otherwise else {}),
                "planned": timing.get("planned", timing["rounds"]), "stopped": bool(timing.get("stopped")),
                "timing_seconds": timing.get("timing_seconds"), "compile_seconds": timing.get("compile_seconds"),
                "timed": module.fingerprint, "options": module.options.key}

    def _time_ab(self, ctx: ObjectiveContext, module, rounds: int, stop_above: float | None) -> dict:
        least = SCREEN_MIN_ROUNDS if ctx.shared.get("screening") else MIN_ROUNDS
        return ctx.backend.time_ab(ctx.root, module, seed=ctx.seed, rounds=rounds, warmup=1,
                                   min_seconds=self.search_min_seconds, stop_above=stop_above, min_rounds=least)

    def evidence(self, state: str, ctx: ObjectiveContext) -> stats.RatioEvidence | None:
        """What ``state``'s search-time measurement under ``ctx.options`` says against XLA's default (its
        per-round ratios' median and distribution-free interval, ``stats.median_interval``); None when it
        was not measured (or failed). Read from the cache: the screen asks after ``cost``."""
        report = self._report(state, ctx)
        return None if report is None else self._evidence(report)

    def _sequential(self, ctx: ObjectiveContext, module, report: dict, policy: dict) -> dict:
        """Sequential confirmation during the screen (``stats.sequential``, ``core/screen.py``): while the
        candidate's interval straddles the screen's bar, ``extend`` it, within the screen's cap. Done before
        the measurement is cached, so its cost (and a resumed run's) is the joined figure."""
        box = {"report": report}

        def more(rounds: int) -> stats.RatioEvidence | None:
            try:
                box["report"] = self.extend(ctx, module, box["report"], rounds)
            except PassFailed:
                return None
            return self._evidence(box["report"])

        stats.sequential(self._evidence(report), more, float(policy["bar"]), int(policy["rounds"]),
                         int(policy["extensions"]))
        return box["report"]

    def extend(self, ctx: ObjectiveContext, module, report: dict, rounds: int) -> dict:
        """``report`` (a search-time measurement of ``module`` under ``ctx.options``) with ``rounds`` more
        interleaved rounds against XLA's default, not raced, joined: the per-round ratios, their median as
        the ratio and the cost, and the rounds added (``extended``)."""
        more = self._time_ab(ctx, module, int(rounds), None)
        ratios = list(report.get("ratios") or []) + [float(b / a) for a, b in zip(more["a"], more["b"])]
        ratio = float(np.median(ratios))
        tally = ctx.shared.setdefault("race", {})
        tally["extended"] = tally.get("extended", 0) + int(more["rounds"])
        tally["seconds"] = tally.get("seconds", 0.0) + float(more.get("timing_seconds") or 0.0)
        return {**report, "ratios": ratios, "ratio": ratio, "median_us": self.default_cost(ctx) * ratio,
                "extended": int(report.get("extended") or 0) + int(more["rounds"]),
                "timing_seconds": float(report.get("timing_seconds") or 0.0) + float(more.get("timing_seconds") or 0.0)}

    def _key(self, ctx: ObjectiveContext, final_state: str) -> str:
        return runtime_key(ctx.evaluator, final_state, ctx.seed, self.repeats, self.warmup, self.search_min_seconds,
                           ctx.options)

    def _report(self, state: str, ctx: ObjectiveContext) -> dict | None:
        final = ctx.final(state)
        if not final.ok:
            return None
        report = ctx.evaluator.cache.get_report("runtime", self._key(ctx, final.state))
        return None if report is None or "error" in report or report.get("ratio") is None else report

    def _evidence(self, report: dict) -> stats.RatioEvidence:
        ratios = report.get("ratios") or []
        low, high = stats.median_interval(ratios, self.confidence) if ratios else (None, None)
        return stats.RatioEvidence(float(report["ratio"]), low, high, len(ratios) or int(report.get("rounds") or 0),
                                   bool(report.get("stopped")), int(report.get("extended") or 0))

    def retract(self, state: str, ctx: ObjectiveContext) -> None:
        """A candidate the search set aside (its outputs differ): racing no longer measures others against it."""
        final = ctx.final(state)
        if final.ok:
            ctx.shared.setdefault("retracted", set()).add((final.state, ctx.options.key))
            _best_so_far(ctx.shared)

    def failure(self, state: str, ctx: ObjectiveContext) -> str:
        final = ctx.final(state)
        why = ctx.shared.get("failures", {}).get((final.state, ctx.options.key)) if final.ok else None
        if why is not None:
            return f"does not compile or run with {ctx.options.describe()}: {why}"
        return super().failure(state, ctx)

    def search_notes(self, ctx: ObjectiveContext) -> dict | None:
        """What racing did in this run: candidates timed and stopped early, rounds timed of those planned,
        the seconds of timing and an estimate of those saved (each stopped candidate's rounds not timed at
        its own seconds per round)."""
        tally = ctx.shared.get("race")
        if not tally:
            return None
        spent, saved = tally["seconds"], tally["saved_seconds"]
        return {**tally, "raced": self.race, "saved_fraction": saved / (spent + saved) if spent + saved > 0 else 0.0}

    def default_cost(self, ctx: ObjectiveContext) -> float:
        if not supports(ctx.backend, "time"):
            raise BadInput(f"objective runtime needs a backend that times modules; {ctx.backend.name} does not")
        if not ctx.backend.runs_on_target:
            raise BadInput(refusal(ctx.backend))
        return measure_runtime(ctx.evaluator, ctx.default.state, ctx.root, ctx.seed, self.repeats, self.warmup,
                               self.search_min_seconds)

    # ---- claim ---------------------------------------------------------------------------------------
    def measured_claim(self, timed, seed: int = 0, base: str = "XLA's default") -> Claim:
        """The confirmation protocol, given ``timed(seed)``: one interleaved A/B (``Backend.time_ab``'s dict:
        per-round ``a`` and ``b``) of XLA's default (A) against the candidate (B) at ``self.rounds`` rounds,
        with inputs drawn from ``seed``. ``min_instances`` independent measurements (seeds ``seed``,
        ``seed + 1``, ...), then ``INSTANCE_STEP`` more at a time while the estimate is promising (below the
        bar, its interval not wholly below it), at most ``max_instances``; the claim is their geometric mean
        ratio with a t interval over measurements (module doc). ``replicate=False``: the first measurement
        alone decides (``_first_confirmation``)."""
        if not self.replicate:
            _, cmp, extended = self._first_confirmation(timed, seed)
            return self._said_extended(self.claim_from(cmp, base), extended)
        cmp, first = self.compare(timed, seed)
        claim = self.claim_from(cmp, base)
        if cmp.instances > first.instances:
            claim = replace(claim, message=(
                f"{claim.message} (the first {first.instances} measurements read {first.describe(False)}, "
                f"straddling {1.0 - self.min_effect:.2f}: measured {cmp.instances - first.instances} more times)"))
        return claim

    def compare(self, timed, seed: int = 0) -> tuple[stats.TimeRatio, stats.TimeRatio]:
        """The claim's comparison over independent measurements, sequential and capped (``measured_claim``):
        the final one, and the first ``min_instances``' (the same where none were added)."""
        draws = [timed(seed + k) for k in range(self.min_instances)]
        first = cmp = self._over(draws)
        while self._promising(cmp) and len(draws) < self.max_instances:
            for _ in range(min(INSTANCE_STEP, self.max_instances - len(draws))):
                draws.append(timed(seed + len(draws)))
            cmp = self._over(draws)
        return cmp, first

    def _over(self, draws: list[dict]) -> stats.TimeRatio:
        """The claim's comparison over independent measurements ``draws`` (``time_ab`` dicts)."""
        return stats.instance_ratio([(d["a"], d["b"]) for d in draws], self.confidence, self.min_effect)

    def _first_confirmation(self, timed, seed: int) -> tuple[dict, stats.TimeRatio, int]:
        """The first A/B, timed further on the same inputs (``timed(seed)`` again, its rounds joined) while
        it is promising (``_promising``: its ratio below the bar, its interval not wholly below it), at most
        ``extensions`` times: the samples, their comparison and the times it was extended."""
        draw = timed(seed)
        cmp = stats.time_ratio(draw["a"], draw["b"], self.confidence, self.min_effect, seed=seed)
        extended = 0
        while self._promising(cmp) and extended < self.extensions:
            more = timed(seed)
            draw = {**draw, "a": list(draw["a"]) + list(more["a"]), "b": list(draw["b"]) + list(more["b"])}
            cmp = stats.time_ratio(draw["a"], draw["b"], self.confidence, self.min_effect, seed=seed)
            extended += 1
        return draw, cmp, extended

    def _promising(self, cmp: stats.TimeRatio) -> bool:
        """A first confirmation worth more rounds: not shown faster, yet its ratio lies below the bar (so its
        interval straddles it). One whose ratio reads at or above the bar is not extended even where its
        interval reaches below: a tie on a noisy draw (of 20 A/A first confirmations of 30 rounds on five
        small steps, 2026-12-07, 16 straddled, 9 of them from a ratio at or above the bar); extending it
        cost every run without a win 30 more rounds for a verdict it almost never changes. The screen's
        rule (``stats.RatioEvidence.straddles``) differs on purpose: a single option value that pays must
        not be missed there, so it extends every straddler."""
        return not cmp.faster and cmp.ratio < 1.0 - self.min_effect

    def _said_extended(self, claim: Claim, extended: int) -> Claim:
        """``claim`` with a word on the first confirmation's extension, where it had one."""
        if not extended:
            return claim
        return replace(claim, message=f"{claim.message} (the first {self.rounds} rounds straddled "
                       f"{1.0 - self.min_effect:.2f} and were timed {extended * self.rounds} rounds further)")

    def measure_ratio(self, ctx: ObjectiveContext, state: str, seed: int | None = None) -> dict:
        """Interleaved A/B of XLA's default executable (A) against ``state``'s (B, with ``ctx.options``), in
        one worker: ``time_ab``'s dict."""
        seed = ctx.seed if seed is None else seed
        timing = ctx.backend.time_ab(ctx.root, ctx.candidate(state), seed=seed, rounds=self.rounds,
                                     min_seconds=self.confirm_min_seconds, **arm_order(ctx.backend, seed))
        self._timed_on = timing.get("device")
        self._compile_seconds = timing.get("compile_seconds")
        return timing

    def claim_from(self, cmp: stats.TimeRatio, base: str = "XLA's default") -> Claim:
        """The claim a comparison supports (A: the baseline ``base``, B: the candidate)."""
        threshold = 1.0 - self.min_effect
        evidence = f"runtime ratio {cmp.describe()}"
        if cmp.faster:
            message = (f"faster than {base}: {evidence}; the whole interval lies below {threshold:.2f} "
                       f"(minimum effect {self.min_effect:.0%})")
        elif cmp.slower:
            message = f"slower than {base}: {evidence}: keep {base}"
        else:
            message = (f"no significant difference: keep {base} ({evidence} does not lie below "
                       f"{threshold:.2f}, minimum effect {self.min_effect:.0%})")
        return Claim(cmp.faster, 1e6 * cmp.b.median, 1e6 * cmp.a.median, message, ratio=cmp.ratio, low=cmp.low,
                     high=cmp.high, confidence=cmp.confidence, min_effect=cmp.min_effect, rounds=cmp.rounds,
                     measured=True, instances=cmp.instances or None)

    def confirm(self, state: str, cost: float, ctx: ObjectiveContext) -> Claim:
        """Re-measure before claiming: interleaved A/B with a confidence interval (see module doc).

        No timing when there is nothing to confirm: a final module identical to the default's, compiled
        without options, is the default executable, and a candidate whose search sample was not faster
        is no candidate.
        """
        default = self.default_cost(ctx)
        final = ctx.final(state)
        common = dict(confidence=self.confidence, min_effect=self.min_effect)
        base = ctx.backend.baseline
        if not final.ok:
            return Claim(False, math.nan, default, self.failure(state, ctx), rounds=0, **common)
        if final.state == ctx.default.state and not ctx.options:
            return Claim(False, default, default, f"no difference: the compiled module is {base}'s own; keep "
                         f"{base}", ratio=1.0, low=1.0, high=1.0, rounds=0, **common)
        if not cost < default:
            return Claim(False, cost, default, "no candidate (pass order, options or site decisions) measured "
                         f"faster than {base} in the search: keep {base}", ratio=cost / default if default else None,
                         rounds=0, **common)
        key = (ctx.version, final.state, ctx.options.key, ctx.seed)
        if key not in self._claims:
            claim = self.measured_claim(lambda seed: self.measure_ratio(ctx, state, seed), ctx.seed, base)
            if ctx.backend.target.is_gpu and getattr(self, "_timed_on", None):  # which device timed it, in words
                claim = replace(claim, message=f"{claim.message} (timed on {self._timed_on})")
            compiled = getattr(self, "_compile_seconds", None)
            if compiled:
                claim = replace(claim, default_compile_seconds=compiled[0], compile_seconds=compiled[1])
            self._claims[key] = claim
        return self._claims[key]


def _joined(first: dict, rest: dict) -> dict:
    """Two consecutive raced measurements of the same pair as one: samples, rounds and timing added."""
    rounds = first["rounds"] + rest["rounds"]
    return {**rest, "a": first["a"] + rest["a"], "b": first["b"] + rest["b"], "rounds": rounds,
            "planned": first["rounds"] + rest.get("planned", rest["rounds"]), "stopped": bool(rest.get("stopped")),
            "timing_seconds": first.get("timing_seconds", 0.0) + rest.get("timing_seconds", 0.0),
            "compile_seconds": first.get("compile_seconds")}


def _best_so_far(shared: dict) -> None:
    """Racing's bound: the best ratio among the candidates measured and not retracted (1.0: the default)."""
    retracted = shared.get("retracted", set())
    shared["best_ratio"] = min([1.0, *(r for k, r in shared.get("ratios", {}).items() if k not in retracted)])


def _tally(tally: dict, report: dict) -> None:
    """Add one fresh raced measurement to the run's racing tally (``search_notes``)."""
    rounds, planned = int(report.get("rounds") or 0), int(report.get("planned") or 0)
    seconds = float(report.get("timing_seconds") or 0.0)
    for k in ("timed", "stopped", "rounds", "planned", "seconds", "saved_seconds"):
        tally.setdefault(k, 0)
    tally["timed"] += 1
    tally["stopped"] += bool(report.get("stopped"))
    tally["rounds"] += rounds
    tally["planned"] += planned
    tally["seconds"] += seconds
    tally["saved_seconds"] += (planned - rounds) * seconds / rounds if rounds else 0.0
