"""Timing a fully compiled module in a worker: calibrated samples, the interleaved A/B behind every
runtime claim (``time_ab``), and this machine's execution rates (validation's time estimate).

Runs inside a worker process (``worker.XlaWorker`` delegates to it), on ``runner.py``'s compile and
run helpers.
"""

from __future__ import annotations

import math
import time

from autotune.core.stats import median_lower_bound, summarize
from autotune.pipelines.xla import hlo, runner


#: The shortest sample the timing functions aim for (seconds): runs are repeated in an inner loop
#: until one sample lasts at least this long, as pyperf and Google Benchmark calibrate theirs. A
#: 50 us module timed once is mostly timer and launch jitter; 400 of them in a row are a stable figure.
MIN_SAMPLE_SECONDS = 0.01
#: Never loop more than this many runs in one sample (a module of a few microseconds).
MAX_INNER = 10_000


class _Timer:
    """One compiled executable on its device-resident inputs, timed in calibrated samples.

    ``sample(inner)`` runs the executable ``inner`` times and returns seconds per run. Inputs stay
    on the device unless the module donates them (input/output aliasing deletes donated arguments).

    On a device worker (``worker.dispatch_ahead``: ``device_worker.py``, the CUDA device or jax's CPU
    device standing in for it) the protocol ``bench/gpu.py`` settled on an H200 applies: inputs are
    drawn on the device (``runner.drawn_on_device``), the ``inner`` runs of a sample are dispatched back
    to back and waited for once, at the end, as a training loop runs (a wait after every call adds the
    host's round trip and its jitter to millisecond steps), and a donated input is fed the output
    that aliases it (``runner.donated_outputs``), so a run never needs its inputs twice. Elsewhere, and
    where a donation cannot be mapped to an output, every run gets fresh inputs placed before it,
    outside the timer, and the runs are timed one by one and summed.
    """

    def __init__(self, worker, proto: bytes, seed: int, floats: str, int_high: int, overrides=None):
        self.worker = worker
        self.ahead = bool(getattr(worker, "dispatch_ahead", False))
        self.exe, self.compile_seconds = runner.cached_compile(worker, proto, 1, overrides)
        runner.check_memory(self.exe, worker=worker)
        if self.ahead:
            self._fresh = lambda: runner.drawn_on_device(worker, proto, seed, floats, int_high)
        else:
            inputs = runner.timing_inputs(worker, proto, seed, floats, int_high)
            self._fresh = lambda: runner.device_put(worker, inputs)
        self.args = self._fresh()
        runner.check_arity(self.exe, self.args)
        outs = runner.run(self.exe, self.args)  # one untimed run: warms up, and shows whether inputs are donated
        deleted = [i for i, a in enumerate(self.args) if a.is_deleted()]
        self.donates = bool(deleted)
        self.feed = None
        if deleted and self.ahead:
            feed = runner.donated_outputs(proto)
            if feed is not None and set(deleted) <= set(feed) and max(feed.values()) < len(outs):
                self.feed = feed
                self._feed(outs)
        del outs

    def _feed(self, outs) -> None:
        for param, out in self.feed.items():
            self.args[param] = outs[out]

    def sample(self, inner: int = 1) -> float:
        inner = max(1, int(inner))
        if self.donates and self.feed is None:
            total = 0.0
            for _ in range(inner):
                self.args = self._fresh()
                start = time.perf_counter()
                outs = runner.run(self.exe, self.args)
                total += time.perf_counter() - start
                del outs
            return total / inner
        start = time.perf_counter()
        for i in range(inner):
            outs = runner.run(self.exe, self.args, block=not self.ahead or i == inner - 1)
            if self.feed is not None:
                self._feed(outs)
            del outs
        return (time.perf_counter() - start) / inner

    @property
    def protocol(self) -> str:
        """How the samples were taken, for the report: ``ahead`` (dispatched back to back, one wait),
        ``ahead+fed`` (donated inputs fed from their outputs), ``each`` (a wait per run), ``fresh``."""
        if self.donates and self.feed is None:
            return "fresh"
        return ("ahead+fed" if self.feed is not None else "ahead") if self.ahead else "each"


def calibrate(timers: list, min_seconds: float = MIN_SAMPLE_SECONDS) -> int:
    """Inner loop count so that one sample of the fastest of ``timers`` lasts >= ``min_seconds``.

    One run of each first (it also warms caches), then the count is grown geometrically from the
    measured time per run, as pyperf's calibration does.
    """
    if min_seconds <= 0:
        return 1
    inner = 1
    while True:
        fastest = min(t.sample(inner) for t in timers)
        if fastest * inner >= min_seconds or inner >= MAX_INNER:
            return inner
        want = math.ceil(1.2 * min_seconds / max(fastest, 1e-9))
        inner = min(MAX_INNER, max(2 * inner, want))


def time_execution(worker, proto: bytes, seed: int = 0, repeats: int = 5, warmup: int = 1,
                   floats: str = "normal", int_high: int = runner.INT_HIGH, min_seconds: float = 0.0,
                   overrides=None) -> dict:
    """Seconds per run of ``repeats`` samples after ``warmup`` untimed ones (one compile, not timed).

    With ``min_seconds`` > 0 each sample is a calibrated inner loop lasting at least that long
    (``inner`` runs; ``seconds`` are per run); 0 keeps one run per sample. Each timed run covers
    launching the executable and blocking until every output is ready.
    """
    repeats = max(1, int(repeats))
    warmup = max(0, int(warmup))
    timer = _Timer(worker, proto, seed, floats, int_high, overrides)
    inner = calibrate([timer], min_seconds)
    for _ in range(warmup):
        timer.sample(inner)
    seconds = [timer.sample(inner) for _ in range(repeats)]
    return {
        "seconds": seconds, **summarize(seconds), "repeats": repeats, "warmup": warmup, "inner": inner,
        "donates": timer.donates, "dispatch": timer.protocol, "device": runner.device_name(worker),
        "compile_seconds": timer.compile_seconds,  # of the compile that built the executable (maybe earlier)
    }


def time_ab(worker, proto_a: bytes, proto_b: bytes, seed: int = 0, rounds: int = 30, warmup: int = 2,
            floats: str = "normal", int_high: int = runner.INT_HIGH, min_seconds: float = MIN_SAMPLE_SECONDS,
            options_a=None, options_b=None, stop_above: float | None = None, min_rounds: int = 3,
            alpha: float = 0.125, b_first: bool = False) -> dict:
    """Interleaved A/B timing of two modules in this one process: the protocol behind a runtime claim,
    and (with ``stop_above``) the raced measurement a runtime search ranks candidates by.

    Both are compiled once (before any timing), their inputs placed, one inner loop count is
    calibrated on the faster of the two (so both samples of a round cover the same number of runs),
    both are warmed up, then ``rounds`` rounds each time one sample of A and one of B, the order
    alternating (AB, BA, AB, ...) so that neither always runs first after the other. Machine noise
    (another process, frequency changes) then hits both arms alike, and the pairs can be compared
    round by round. Returns per-run seconds per round for each arm, plus each arm's summary.
    ``options_a``/``options_b`` (XLA debug options as ``[(name, value)]``) compile an arm differently.

    Racing (``stop_above``, the best ratio B/A found so far): from ``min_rounds`` on, after every round,
    timing stops once the distribution-free lower bound of the median per-round ratio B/A
    (``stats.median_lower_bound`` at ``alpha``, one-sided) lies above ``stop_above``: B cannot be the
    best, and the rounds left are not spent on it (``stopped``, ``rounds`` done, ``planned``).

    ``b_first``: B compiled and its inputs placed before A's (``bench/arm_order.py`` checks, by A/A, that
    the arm built second reads no slower: 240 measurements, no effect; so claims keep the default first).
    """
    rounds = max(2, int(rounds))
    if b_first:
        b = _Timer(worker, proto_b, seed, floats, int_high, options_b)
        a = _Timer(worker, proto_a, seed, floats, int_high, options_a)
    else:
        a = _Timer(worker, proto_a, seed, floats, int_high, options_a)
        b = _Timer(worker, proto_b, seed, floats, int_high, options_b)
    inner = calibrate([a, b], min_seconds)
    for _ in range(max(0, int(warmup))):
        a.sample(inner)
        b.sample(inner)
    sa: list[float] = []
    sb: list[float] = []
    stopped = False
    t0 = time.perf_counter()
    for r in range(rounds):
        if r % 2 == 0:
            sa.append(a.sample(inner))
            sb.append(b.sample(inner))
        else:
            sb.append(b.sample(inner))
            sa.append(a.sample(inner))
        if stop_above is not None and r + 1 >= min_rounds and r + 1 < rounds:
            low = median_lower_bound([y / x for x, y in zip(sa, sb)], alpha)
            if low is not None and low > stop_above:
                stopped = True
                break
    return {
        "a": sa, "b": sb, "a_summary": summarize(sa), "b_summary": summarize(sb), "rounds": len(sa),
        "planned": rounds, "stopped": stopped, "timing_seconds": time.perf_counter() - t0,
        "inner": inner, "warmup": int(warmup), "min_seconds": float(min_seconds),
        "dispatch": [a.protocol, b.protocol], "device": runner.device_name(worker),
        "compile_seconds": [a.compile_seconds, b.compile_seconds],
    }


# ---- how fast this machine executes (validation's time estimate) ------------------------------------------
#: Two small modules whose run time, divided into XLA's cost analysis of them, gives this machine's
#: rates: a matrix product (flops per second) and an elementwise chain over 4 MiB vectors (bytes
#: accessed per second). Cost analysis is read on the module as given (before XLA's pipeline), as it
#: is for the modules being estimated, so the unfused byte counts are compared like with like.
CALIBRATION_HLO = {
    "flops": """HloModule autotune_calibrate_flops

ENTRY main {
  a = f32[512,512] parameter(0)
  b = f32[512,512] parameter(1)
  ROOT d = f32[512,512] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""",
    "bytes": """HloModule autotune_calibrate_bytes

ENTRY main {
  x = f32[1048576] parameter(0)
  y = f32[1048576] parameter(1)
  m = f32[1048576] multiply(x, y)
  s = f32[1048576] add(m, x)
  ROOT t = f32[1048576] subtract(s, y)
}
""",
}


def cost_of(worker, proto: bytes) -> dict:
    """XLA's cost analysis of a module as given: ``flops``, ``transcendentals``, ``bytes``."""
    cost = worker.jax_lib.hlo_module_cost_analysis(worker.backend, hlo.parse_proto(proto))
    return {"flops": float(cost.get("flops", 0.0)), "transcendentals": float(cost.get("transcendentals", 0.0)),
            "bytes": float(cost.get("bytes accessed", 0.0))}


def calibrate_rates(worker) -> dict:
    """This worker's execution rates: ``flops_per_s`` and ``bytes_per_s`` (XLA cost-analysis units).

    Each calibration module is compiled and timed (median of 3 samples of >= 50 ms); its rate is
    its dominant cost over its time. Takes well under a second; callers cache it per machine.
    """
    rates = {}
    for kind, text in CALIBRATION_HLO.items():
        proto = hlo.parse_text(text).as_serialized_hlo_module_proto()
        cost = cost_of(worker, proto)
        timing = time_execution(worker, proto, repeats=3, warmup=1, min_seconds=0.05)
        rates[f"{kind}_per_s"] = cost[kind] / max(timing["median"], 1e-9)
    return rates
