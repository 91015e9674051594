"""``runtime``: measured wall time of the fully compiled module, and a claim only after confirmation.

Two measurements with two purposes (see ``docs/runtime.md``):

* **Search** (``cost``): a cheap, noisy sample: ``REPEATS`` calibrated samples (each an inner loop
  of at least ``SEARCH_MIN_SECONDS``) after a warm-up, their median in microseconds. Good enough
  to rank candidates, never enough to claim anything: the search keeps its luckiest sample.
* **Claim** (``confirm``): the best candidate and XLA's default re-measured interleaved in one
  worker (``Backend.time_ab``: both compiled once, then ``rounds`` rounds A B / B A ...), and the
  ratio of medians with a bootstrap confidence interval (``autotune.core.stats``). A win needs the
  whole interval below ``1 - min_effect``; otherwise: "no significant difference: keep XLA's default".

Runtime is keyed by the fully compiled module. What a backend executes after a tuned sequence is
XLA's default pipeline applied to the sequence's output, so the module after that pipeline
(``ctx.final(state).state``) identifies the executable: candidates with the same final module share
one measurement (cached per pipeline version, final module, seed and protocol), and a candidate
whose final module is XLA's default's own *is* the default executable: it gets the default's time
and is never a win, without any timing. Only genuinely different modules are timed.

The default's executable is the root module compiled by XLA as it is (what a user gets without
autotune); its final module is ``ctx.default.state``.
"""

from __future__ import annotations

import math
from dataclasses import replace

from autotune.core.backend import supports
from autotune.core import stats
from autotune.core.objectives import Claim, Objective, ObjectiveContext
from autotune.errors import BadInput

#: Search-time samples per distinct compiled module (after one warm-up sample).
REPEATS = 5
WARMUP = 1
#: Each search-time sample is an inner loop of at least this long (seconds).
SEARCH_MIN_SECONDS = 0.005
#: Each confirmation sample is an inner loop of at least this long (seconds).
CONFIRM_MIN_SECONDS = 0.01
#: Protocol tag in the cache key: bump when the search-time measurement changes meaning.
PROTOCOL = "search-v2"


def runtime_key(evaluator, final_state: str, seed: int = 0, repeats: int = REPEATS, warmup: int = WARMUP,
                min_seconds: float = SEARCH_MIN_SECONDS) -> str:
    """Cache key of the search-time measurement of the executable whose final module is ``final_state``;
    a GPU target's timings also name the device platform that took them (``on-cuda``, ``on-cpu`` for jax's
    CPU device standing in): a time taken on one is never reused for the other."""
    execution = getattr(evaluator.pipeline, "execution", None)
    where = f"|on-{execution.platform}" if execution is not None else ""
    return f"{evaluator.version}|{final_state}|{seed}|{PROTOCOL}|{repeats}|{warmup}|{min_seconds:g}{where}"


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

    def __init__(self, confidence: float = stats.CONFIDENCE, min_effect: float = stats.MIN_EFFECT,
                 rounds: int = stats.ROUNDS, repeats: int = REPEATS, warmup: int = WARMUP,
                 search_min_seconds: float = SEARCH_MIN_SECONDS, confirm_min_seconds: float = CONFIRM_MIN_SECONDS):
        if not 0.5 <= float(confidence) < 1.0:
            raise BadInput(f"runtime: confidence must be in [0.5, 1), not {confidence}")
        if not 0.0 <= float(min_effect) < 1.0:
            raise BadInput(f"runtime: min_effect is a fraction in [0, 1) (0.02 = 2%), not {min_effect}")
        if int(rounds) < 4:
            raise BadInput(f"runtime: a confirmation needs at least 4 rounds, not {rounds}")
        self.confidence = float(confidence)
        self.min_effect = float(min_effect)
        self.rounds = int(rounds)
        self.repeats = int(repeats)
        self.warmup = int(warmup)
        self.search_min_seconds = float(search_min_seconds)
        self.confirm_min_seconds = float(confirm_min_seconds)
        self._claims: dict[tuple, Claim] = {}  # (version, final module, seed) -> confirmation of this instance

    # ---- search ------------------------------------------------------------------------------------
    def prepare(self, states, ctx: ObjectiveContext) -> None:
        ctx.finals(states)  # the final modules (the runtime keys), compiled in parallel

    def _time(self, ctx: ObjectiveContext, final_state: str, module) -> float:
        return measure_runtime(ctx.evaluator, final_state, module, ctx.seed, self.repeats, self.warmup,
                               self.search_min_seconds)

    def cost(self, state: str, ctx: ObjectiveContext) -> float:
        final = ctx.final(state)
        if not final.ok:
            return math.nan
        if final.state == ctx.default.state:  # XLA's default executable itself
            return self.default_cost(ctx)
        return self._time(ctx, final.state, ctx.module(state))

    def default_cost(self, ctx: ObjectiveContext) -> float:
        if not supports(ctx.backend, "time"):
            raise BadInput(f"objective runtime needs a backend that times modules; {ctx.backend.name} does not")
        if not ctx.backend.runs_on_target:
            raise BadInput(refusal(ctx.backend))
        return self._time(ctx, ctx.default.state, ctx.root)

    # ---- claim ---------------------------------------------------------------------------------------
    def measure_ratio(self, ctx: ObjectiveContext, state: str) -> stats.TimeRatio:
        """Interleaved A/B of XLA's default executable (A) against ``state``'s (B), in one worker."""
        timing = ctx.backend.time_ab(ctx.root, ctx.module(state), seed=ctx.seed, rounds=self.rounds,
                                     min_seconds=self.confirm_min_seconds)
        self._timed_on = timing.get("device")
        return stats.time_ratio(timing["a"], timing["b"], self.confidence, self.min_effect, seed=ctx.seed)

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
                     measured=True)

    def confirm(self, state: str, cost: float, ctx: ObjectiveContext) -> Claim:
        """Re-measure before claiming: interleaved A/B with a confidence interval (see module doc).

        No timing when there is nothing to confirm: a final module identical to the default's is the
        default executable, and a candidate whose search sample was not faster is no candidate.
        """
        default = self.default_cost(ctx)
        final = ctx.final(state)
        common = dict(confidence=self.confidence, min_effect=self.min_effect)
        base = ctx.backend.baseline
        if not final.ok:
            return Claim(False, math.nan, default, self.failure(state, ctx), rounds=0, **common)
        if final.state == ctx.default.state:
            return Claim(False, default, default, f"no difference: the compiled module is {base}'s own; keep "
                         f"{base}", ratio=1.0, low=1.0, high=1.0, rounds=0, **common)
        if not cost < default:
            return Claim(False, cost, default, f"no sequence measured faster than {base} in the search: keep "
                         f"{base}", ratio=cost / default if default else None, rounds=0, **common)
        key = (ctx.version, final.state, ctx.seed)
        if key not in self._claims:
            claim = self.claim_from(self.measure_ratio(ctx, state), base)
            if ctx.backend.target.is_gpu and getattr(self, "_timed_on", None):  # which device timed it, in words
                claim = replace(claim, message=f"{claim.message} (timed on {self._timed_on})")
            self._claims[key] = claim
        return self._claims[key]
