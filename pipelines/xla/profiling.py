"""Where a compiled module's time goes: XLA's default compile of the module, a few runs under jax's
profiler, and the measured time of each thunk (fusion, library call, copy, loop) traced back to the
input module's instructions.

Runs inside a worker process (``worker.XlaWorker.profile``). How it works (checked on jaxlib 0.10.2):

- **The link back to the input.** Before compiling, every instruction of the input gets
  ``metadata={op_name="<its own name>"}`` (the module's own metadata is kept aside and reported as
  ``source``). XLA copies an instruction's metadata onto what it becomes (a fused clone, a
  convolution rewritten into a custom fusion, a fusion instruction takes its root's), so the
  optimised module names, for every thunk, the input instructions it computes; instruction names
  themselves do not survive (the StableHLO round trip and XLA's passes renumber them). Metadata
  does not reach the generated code.
- **The trace.** ``jax.profiler``'s session (``jaxlib._profiler.ProfilerSession``) records the CPU
  thunk executor: one event per executed thunk, with the optimised instruction's name (``hlo_op``)
  and its module (``hlo_module``), on the thread that ran it. A ``while`` thunk's event encloses its
  body's events on the same thread: each event keeps only its exclusive time.
- **Wall time, not CPU time.** Thunks of one step run concurrently on the intra-op threads. Each
  instant of the run is split evenly between the thunks running at that instant, so the seconds
  attributed add up to the time the step was busy (never more than its wall time); the rest of the
  step (dispatch, hand-offs between threads, the tracer's gaps) is unattributed.
- **The hand-over**: a module of the same entry signature doing no work (``signature_text``) is
  profiled beside the module; its time outside the executor's run is what handing these arguments
  and results over (with launching the run) costs, so that part of the step gets a name too.
- **The step** is timed untraced, one sample before each traced one (round by round, so that the
  machine's noise hits both alike): the tracer slows a step of many small thunks, and the report
  says by how much (``traced_step_seconds``). Shares are of the untraced step.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict

from autotune.errors import PassFailed
from autotune.pipelines.xla import hlo, runner, timing
from autotune.pipelines.xla.structure import called_computations, parse_computations

#: Opcodes that hold the work of a fusion, most telling first: the principal input instruction of a
#: thunk (its ``site``) is the first of its instructions in this order, else its root.
#: (A broadcast, an iota or a slice in a loop fusion is not its work: such a fusion is named by its root.)
HEAVY = ("convolution", "dot", "custom-call", "fft", "triangular-solve", "cholesky", "reduce-window",
         "select-and-scatter", "scatter", "gather", "sort", "reduce", "dynamic-update-slice", "dynamic-slice",
         "concatenate", "transpose", "pad", "reverse", "rng-bit-generator")

#: At most this many runs in one untraced sample (a module of a few microseconds).
MAX_INNER = 200
#: At most this many runs in one traced sample: a trace holds every thunk of every run, and reading a
#: long one back (ViT: ~10^3 thunks a run) costs far more than the runs.
MAX_TRACED_INNER = 8

_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')
_INST_LINE = re.compile(r"^(\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*)(.*)$")


#: Tagging each input instruction with its own name: ``hlo.tagged_text`` (per-site decisions use it too).
tagged_text = hlo.tagged_text


def input_table(text: str) -> dict[str, dict]:
    """Every instruction of the (tagged) input text: name -> ``{opcode, shape, computation}``."""
    table = {}
    for comp, insts in parse_computations(text).items():
        for name, shape, opcode, _operands, _attrs, _root in insts:
            table[name] = {"opcode": opcode, "shape": shape, "computation": comp}
    return table


def optimized_table(text: str) -> tuple[dict[str, dict], dict]:
    """The optimised module's instructions: name -> ``{opcode, shape, op_names, calls, kind}``, where
    ``op_names`` are the input names its metadata carries, ``calls`` the computations it calls."""
    comps = parse_computations(text)
    meta: dict[str, str] = {}
    for line in text.splitlines():
        m = _INST_LINE.match(line)
        if m and "op_name=" in line:
            mm = _OP_NAME.search(line[line.find("metadata={"):]) if "metadata={" in line else None
            if mm:
                meta[m.group(2)] = mm.group(1)
    table = {}
    for comp, insts in comps.items():
        for name, shape, opcode, _operands, attrs, _root in insts:
            kind = re.search(r'"kind":"(\w+)"', attrs) or re.search(r"kind=(k\w+)", attrs)
            target = re.search(r'custom_call_target="([^"]+)"', attrs)
            table[name] = {"opcode": opcode, "shape": shape, "computation": comp, "op_name": meta.get(name),
                           "calls": called_computations(attrs),
                           "kind": target.group(1) if target else (kind.group(1) if kind else opcode)}
    return table, comps


def input_name(op_name: str | None, inputs: dict) -> str | None:
    """The input instruction an optimised instruction's ``op_name`` names. XLA prefixes the op_name
    of what it moves into a loop or call with the caller's (``loop/sn``): the last part then names it."""
    if not op_name:
        return None
    if op_name in inputs:
        return op_name
    last = op_name.rsplit("/", 1)[-1]
    return last if last in inputs else None


def covered_inputs(op: str, table: dict, comps: dict, inputs: dict) -> list[str]:
    """Input instruction names a thunk ``op`` of the optimised module computes: its own metadata's and
    that of every instruction of the computations it calls (a fusion body, a call, a loop's condition;
    the body of a loop that is itself a thunk is traced as thunks of its own, so is not counted here)."""
    seen, names = set(), []
    stack = [(op, True)]
    while stack:
        name, top = stack.pop()
        entry = table.get(name)
        if entry is None:
            continue
        found = input_name(entry["op_name"], inputs)
        if found and found not in seen:
            seen.add(found)
            names.append(found)
        for role, comp in entry["calls"]:
            if top and role == "body":
                continue
            stack.extend((inst[0], False) for inst in comps.get(comp, ()))
    return names


def same_shape(entry: dict, inputs: dict) -> list[str]:
    """An optimised instruction whose metadata was dropped (XLA made it anew: a dot rewritten, a
    broadcast wrapped): the one input instruction of the same opcode and dimensions, if unique."""
    dims = hlo.LAYOUT_PATTERN.sub("]", entry["shape"])
    opcode = entry["opcode"]
    if opcode == "fusion":
        return []
    found = [n for n, v in inputs.items() if v["opcode"] == opcode and hlo.LAYOUT_PATTERN.sub("]", v["shape"]) == dims]
    return found if len(found) == 1 else []


def principal(names: list[str], inputs: dict, own: str | None) -> str | None:
    """The input instruction a thunk stands for: the first of ``HEAVY``'s opcodes among ``names``
    (larger results first), else the one the thunk's own metadata names (a fusion's root)."""
    if not names:
        return None
    rank = {op: i for i, op in enumerate(HEAVY)}

    def key(n):
        shape = inputs[n]["shape"]
        size = 1
        for d in re.findall(r"\[([\d,]*)\]", shape)[:1]:
            for x in d.split(","):
                size *= int(x) if x else 1
        return (rank.get(inputs[n]["opcode"], len(HEAVY)), -size)

    best = min(names, key=key)
    if inputs[best]["opcode"] not in rank and own in names:
        return own
    return best


def _text_with_metadata(proto: bytes) -> str:
    """Parseable text of the module, constants and metadata included (``hlo.to_text`` drops metadata)."""
    from jaxlib import _hlo

    opts = _hlo.HloPrintOptions()
    opts.print_large_constants = True
    opts.print_metadata = True
    return hlo.parse_proto(proto).to_string(opts)


# ---- the trace ------------------------------------------------------------------------------------------
def _profile_data(session):
    """The session's ``ProfileData`` (the jaxlib API moved between versions: try the ones known)."""
    if hasattr(session, "stop_and_get_profile_data"):
        return session.stop_and_get_profile_data()
    data = session.stop()
    from jax._src.lib import _profile_data

    return _profile_data.ProfileData.from_serialized_xspace(data)


def _stats(event) -> dict:
    try:
        return dict(event.stats)
    except Exception:
        return {}


def thunk_events(profile, module_name: str) -> list[tuple[str, float, float, str, int]]:
    """``(thread, start_ns, end_ns, hlo_op, run_id)`` of every thunk the executable ran."""
    events = []
    for plane in profile.planes:
        for line in plane.lines:
            for ev in line.events:
                stats = _stats(ev)
                op = stats.get("hlo_op")
                if not op:
                    continue
                mod = stats.get("hlo_module")
                if mod and module_name and str(mod) != module_name:
                    continue
                start = float(ev.start_ns)
                events.append((f"{plane.name}/{line.name}", start, start + float(ev.duration_ns), str(op),
                               int(stats.get("run_id", 0) or 0)))
    return events


def exclusive_segments(events) -> list[tuple[float, float, str]]:
    """Per thread, each event's time not covered by an event nested in it: ``(start, end, op)``."""
    by_thread = defaultdict(list)
    for thread, start, end, op, _run in events:
        by_thread[thread].append((start, -end, op))
    segments = []
    for items in by_thread.values():
        items.sort()
        stack: list[list] = []  # [end, op, cursor]

        def close_until(t):
            while stack and stack[-1][0] <= t:
                end, op, cursor = stack.pop()
                if end > cursor:
                    segments.append((cursor, end, op))
                if stack:
                    stack[-1][2] = max(stack[-1][2], end)

        for start, neg_end, op in items:
            close_until(start)
            if stack and start > stack[-1][2]:
                segments.append((stack[-1][2], start, stack[-1][1]))
            if stack:
                stack[-1][2] = max(stack[-1][2], -neg_end)
            stack.append([-neg_end, op, start])
        close_until(float("inf"))
    return segments


def wall_seconds(segments) -> dict[str, float]:
    """Seconds per op with every instant split evenly among the segments active then."""
    points = []
    for start, end, op in segments:
        if end > start:
            points.append((start, 1, op))
            points.append((end, -1, op))
    points.sort(key=lambda p: (p[0], p[1]))
    active: dict[str, int] = defaultdict(int)
    out: dict[str, float] = defaultdict(float)
    last = None
    for t, delta, op in points:
        n = sum(active.values())
        if last is not None and n and t > last:
            share = (t - last) / n
            for name, k in active.items():
                if k:
                    out[name] += share * k
        active[op] += delta
        if active[op] == 0:
            del active[op]
        last = t
    return {k: v * 1e-9 for k, v in out.items()}


def run_spans(events) -> list[float]:
    """Seconds from a run's first thunk start to its last thunk end, per run (``run_id``) of a trace."""
    spans: dict[int, list[float]] = {}
    for _thread, start, end, _op, run in events:
        lo, hi = spans.get(run, (start, end))
        spans[run] = [min(lo, start), max(hi, end)]
    return [(hi - lo) * 1e-9 for lo, hi in spans.values()]


def traced_runs(worker, proto: bytes, rounds: int, seed: int, floats: str, int_high: int, overrides):
    """``rounds`` rounds, each an untraced sample and a sample under jax's profiler (its own session,
    started and stopped outside the timed runs), in alternating order, so that machine noise hits both alike. A sample is
    ``inner`` runs back to back, calibrated as ``timing.py``'s are (>= ``timing.MIN_SAMPLE_SECONDS``;
    one run when the module donates its inputs: each run then needs fresh ones; a traced sample at
    most ``MAX_TRACED_INNER`` runs). Returns (untraced and traced seconds per run, each traced sample's
    thunk events, the runs in a traced sample, the compiled ``HloModule``)."""
    import time

    from jax._src.lib import _profiler

    exe, _ = runner.cached_compile(worker, proto, 1, overrides)
    inputs = runner.timing_inputs(worker, proto, seed, floats, int_high)
    args = runner.device_put(worker, inputs)
    runner.run(exe, args)
    donates = any(a.is_deleted() for a in args)

    def sample(inner: int, trace: bool):
        nonlocal args
        if donates:
            args = runner.device_put(worker, inputs)
        session = _start(_profiler) if trace else None
        try:
            t0 = time.perf_counter()
            for _ in range(inner):
                runner.run(exe, args)
            seconds = (time.perf_counter() - t0) / inner
        finally:
            data = _profile_data(session) if session is not None else None
        return seconds, data

    inner = 1
    while not donates and inner < MAX_INNER:
        seconds, _ = sample(inner, False)
        if seconds * inner >= timing.MIN_SAMPLE_SECONDS:
            break
        inner = min(MAX_INNER, max(2 * inner, int(1.2 * timing.MIN_SAMPLE_SECONDS / max(seconds, 1e-9))))
    module = exe.hlo_modules()[0]
    plain, traced, events = [], [], []
    traced_inner = min(inner, MAX_TRACED_INNER)
    for r in range(1 + rounds):  # a warm-up round, not kept; the order alternates (AB, BA), as time_ab's
        if r % 2:
            traced_seconds, data = sample(traced_inner, True)
            seconds, _ = sample(inner, False)
        else:
            seconds, _ = sample(inner, False)
            traced_seconds, data = sample(traced_inner, True)
        if r:
            plain.append(seconds)
            traced.append(traced_seconds)
            events.append(thunk_events(data, module.name))
    return plain, traced, events, traced_inner, module


_ZERO = {"pred": "false"}


def signature_text(program_shape) -> str | None:
    """A module with ``program_shape``'s entry signature (its parameters and its result, layouts
    included: XLA's own ``ProgramShape`` of the compiled module, as ``runner.parameter_specs`` reads it)
    that does no work: each result a broadcast zero. Its run is what handing these arguments and results
    over costs, with launching the run; ``profile`` times it beside the module. None where the result is
    not arrays or a tuple of arrays of a plain type (a token, a nested tuple, a dynamic or complex shape)."""
    result = program_shape.result_shape()
    elements = result.tuple_shapes() if result.is_tuple() else [result]
    lines = ["HloModule signature", "", "ENTRY main {"]
    lines += [f"  p{k} = {shape} parameter({k})" for k, shape in enumerate(program_shape.parameter_shapes())]
    for k, shape in enumerate(elements):
        if not shape.is_array() or shape.is_dynamic() or str(shape.element_type()).startswith("complex"):
            return None
        kind = str(shape).split("[", 1)[0]
        lines.append(f"  z{k} = {kind}[] constant({_ZERO.get(kind, '0')})")
        lines.append(f"  o{k} = {shape} broadcast(z{k}), dimensions={{}}")
    outs = ", ".join(f"o{k}" for k in range(len(elements)))
    lines.append(f"  ROOT r = {result} tuple({outs})" if result.is_tuple() else f"  ROOT r = {result} copy(o0)")
    return "\n".join(lines + ["}", ""])


def handover_runs(worker, module, rounds: int, seed: int, floats: str, int_high: int) -> tuple[list, str]:
    """Seconds per run outside the executor's run of the compiled ``module``'s ``signature_text``
    (launching a run, handing its arguments and results over), one per traced round, as ``profile``
    measures the module's own; ``([], why)`` where that module cannot be made or run."""
    from jaxlib import _hlo

    text = signature_text(_hlo.XlaComputation(module.as_serialized_hlo_module_proto()).program_shape())
    if text is None:
        return [], "the module's result is not arrays of a plain type"
    try:
        proto = hlo.parse_text(text).as_serialized_hlo_module_proto()
        _plain, traced, events, inner, _ = traced_runs(worker, proto, rounds, seed, floats, int_high, None)
    except Exception as exc:  # noqa: BLE001 - the profile stands without it; the reply says why
        return [], runner.compiler_message(exc)
    return [max(0.0, t - sum(run_spans(ev)) / inner) for t, ev in zip(traced, events)], ""


def _start(profiler):
    try:
        return profiler.ProfilerSession(profiler.ProfileOptions())
    except Exception as exc:
        raise PassFailed(f"jax's profiler cannot start here: {runner.compiler_message(exc)}", "error") from None


def profile(worker, proto: bytes, rounds: int = 5, seed: int = 0, floats: str = "normal",
            int_high: int = runner.INT_HIGH, overrides=None, handover: bool = True) -> dict:
    """The profile of ``proto`` compiled with XLA's default (and compiler ``overrides``): the untimed
    step, and per optimised thunk its seconds per step, kind, shape and the input instructions it
    computes. Plain data (it crosses a process boundary); ``autotune.core.profile`` reads it.
    ``handover`` False skips the probe of the time outside XLA's run (``handover_runs``: a second compile
    and its traced runs, about a second): the search ranks its sites by the ops' shares and never reads it."""
    text, source = tagged_text(_text_with_metadata(proto))
    inputs = input_table(text)
    tagged = hlo.parse_text(text).as_serialized_hlo_module_proto()
    plain, traced, events, inner, compiled = traced_runs(worker, tagged, max(1, int(rounds)), seed, floats, int_high,
                                                   overrides)
    if not any(events):
        raise PassFailed("the profiler recorded no thunk of the module (this jaxlib's CPU tracer has no hlo_op)",
                         "error")
    n_runs = len(traced)
    seconds: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    busy, spans = [], []
    for run in events:  # one session per run: each has its own clock origin
        per_op = {op: sec / inner for op, sec in wall_seconds(exclusive_segments(run)).items()}
        busy.append(sum(per_op.values()))
        spans.append(sum(run_spans(run)) / inner)
        for op, sec in per_op.items():
            seconds[op] += sec
        for *_rest, op, _run in run:
            counts[op] += 1
    counts = {op: n / inner for op, n in counts.items()}
    step = statistics.median(plain)
    table, comps = optimized_table(compiled.to_string())
    ops = []
    for op, total in sorted(seconds.items(), key=lambda kv: -kv[1]):
        entry = table.get(op, {})
        covered = covered_inputs(op, table, comps, inputs)
        matched = "metadata" if covered else None
        if not covered and entry:
            covered = same_shape(entry, inputs)
            matched = "shape" if covered else None
        site = principal(covered, inputs, input_name(entry.get("op_name"), inputs))
        ops.append({
            "op": op, "share": total / sum(traced), "seconds": step * total / sum(traced),
            "traced_seconds": total / n_runs, "calls": counts[op] / n_runs,
            "opcode": entry.get("opcode", "?"), "kind": entry.get("kind", "?"), "shape": entry.get("shape", ""),
            "inputs": covered, "site": site, "matched": matched,
        })
    handover, why = (handover_runs(worker, compiled, max(1, int(rounds)), seed, floats, int_high) if handover
                     else ([], "not asked for"))
    return {
        "step_seconds": step, "plain_seconds": plain, "traced_seconds": traced, "busy_seconds": busy,
        "span_seconds": spans, "handover_seconds": handover, "handover_missing": why,
        "traced_step_seconds": statistics.median(traced), "runs": n_runs, "inner": inner, "ops": ops,
        "inputs": {n: {**inputs[n], "source": source.get(n)} for n in sorted({i for o in ops for i in o["inputs"]})},
        "device": runner.device_name(worker),
    }
