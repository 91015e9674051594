"""Compile a module with XLA's full CPU pipeline and run it: the ground truth behind validation
and the ``runtime`` objective (timing it: ``timing.py``).

Everything here that compiles or executes runs INSIDE a worker process (``worker.XlaWorker``
delegates to it): a full compile goes through LLVM codegen, where an XLA fatal error would kill the
process. ``random_inputs`` needs only ``jaxlib._hlo`` and also runs in the main process (tests use
it to show that a seed fixes the inputs).

jaxlib 0.10.2 calls used (checked on this version):

- ``_jax.mlir.hlo_to_stablehlo(proto)`` then ``client.compile_and_load(mlir, DeviceList, CompileOptions())``
  -> ``LoadedExecutable`` (the default pipeline; the worker's capture hook is inactive because
  ``worker._capturing`` is False).
- Inputs: ``_jax.batched_device_put(ShapedArray, SingleDeviceSharding, [ndarray], [device],
  committed=True, force_copy=..., enable_x64=True)``. ``jax.device_put`` would canonicalise f64/s64
  to f32/s32 (x64 is off in the worker) and so feed the executable the wrong types. With
  ``force_copy=False`` the CPU client wraps a 64-byte-aligned host array without copying it
  (checked: same buffer pointer, 0.03 s instead of 0.31 s for 0.5 GiB); an unaligned one is copied.
- Run: ``exe.execute_sharded(list_of_arrays)`` -> ``ExecuteResults``;
  ``.disassemble_into_single_device_arrays()`` -> one list per output (one array per device).
- The HLO -> StableHLO conversion flattens tuples: a tuple-shaped entry parameter becomes its
  leaves as separate arguments (depth-first), and a (nested) tuple result comes back as its leaves.
  ``random_inputs`` therefore produces one array per leaf, in that order.
"""

from __future__ import annotations

import hashlib
import os
import math
import re
import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from autotune.errors import BadInput, PassFailed

#: Execution memory limit (``AUTOTUNE_MAX_EXEC_BYTES`` or a share of MemAvailable): see core/limits.py.
from autotune.core.limits import EXEC_LIMIT_ENV, execution_limit, gib  # noqa: E402
from autotune.pipelines.xla import hlo, loops, partitioned, sites, standins


#: Integer (and unsigned) parameters are drawn from [0, INT_HIGH) by default. Integer entry
#: parameters of real models are overwhelmingly indices: token ids for an embedding lookup, labels
#: for a one-hot, gather/dynamic-slice starts. Values that are valid positions in any dimension of
#: size >= 4 exercise the real data path. Large random integers would mostly be out of range: XLA
#: clamps a raw gather (so the comparison would only see edge rows), and ``jnp.take``'s default
#: "fill" mode turns them into NaN rows (a vacuous NaN == NaN comparison). Small non-negative values
#: also keep integer loop bounds, step counters and shift amounts harmless. Tables smaller than 4
#: exist (DLRM's 3-row gender embedding), so callers may lower the bound (``int_high``).
INT_HIGH = 4

#: How float parameters are drawn. ``normal``: standard normal, both signs (the default: sign
#: matters to relu/abs/max/select paths). ``positive``: |standard normal|, for modules whose
#: parameters must be non-negative to give finite results (Adam's second moment goes through
#: sqrt/rsqrt: a train step fed negative moments returns NaN in every updated weight, and NaN ==
#: NaN would make the comparison vacuous). ``autotune.core.validation`` picks ``positive`` only when the
#: original's outputs under ``normal`` are not finite. ``scaled``: see ``_shaped``.
FLOAT_DISTRIBUTIONS = ("normal", "positive", "scaled")


@dataclass(frozen=True)
class ParamSpec:
    """One leaf of an entry parameter: where it comes from, its shape and numpy dtype."""

    path: str  # "p3" or "p3{1,0}" for a leaf inside a tuple parameter
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def compiler_message(exc: BaseException) -> str:
    """XLA's error status, first meaningful line, without Python traceback noise."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for ln in lines:
        if not ln.startswith(("Traceback", "File ", "---", "For simplicity", "The stack trace")):
            return ln[:500]
    return type(exc).__name__


# ---- inputs ----------------------------------------------------------------------------------------
def parameter_specs(proto: bytes) -> list[ParamSpec]:
    """The entry computation's parameter leaves, in the order the compiled executable takes them.

    Read from the module's program shape (``XlaComputation(proto).program_shape()``), which is the
    entry computation's signature. Tuple parameters are flattened depth-first, matching the
    HLO -> StableHLO conversion. Token and dynamic-shaped parameters cannot be fed random data and
    are refused with ``BadInput``.
    """
    from jaxlib import _hlo

    try:
        program_shape = _hlo.XlaComputation(proto).program_shape()
    except Exception as exc:
        raise BadInput(f"cannot read the module's entry signature: {compiler_message(exc)}") from None
    specs: list[ParamSpec] = []

    def walk(shape, param: int, index: tuple[int, ...]) -> None:
        if shape.is_tuple():
            for i, sub in enumerate(shape.tuple_shapes()):
                walk(sub, param, (*index, i))
            return
        path = f"p{param}" + ("{" + ",".join(map(str, index)) + "}" if index else "")
        if shape.is_token():
            raise BadInput(f"entry parameter {path} is a token; cannot run it on random inputs")
        if not shape.is_array():
            raise BadInput(f"entry parameter {path} has an unsupported shape {shape}")
        if shape.is_dynamic():
            raise BadInput(f"entry parameter {path} has a dynamic shape {shape}; cannot run it on random inputs")
        try:
            dtype = np.dtype(shape.numpy_dtype())
        except Exception:
            raise BadInput(f"entry parameter {path} has an element type numpy cannot hold: {shape}") from None
        specs.append(ParamSpec(path, tuple(int(d) for d in shape.dimensions()), dtype))

    for param, shape in enumerate(program_shape.parameter_shapes()):
        walk(shape, param, ())
    return specs


def _shaped(x, floats: str, shape: tuple[int, ...], lib=np):
    """A standard normal draw ``x`` (any dtype, numpy or jax) as ``floats`` wants it for an array of ``shape``:
    N(0, 1); its absolute value; or ``scaled``, what a trained network's values look like to it: an array of two
    or more dimensions N(0, 1/fan-in) (fan-in: all dimensions but the last, as a weight's), one of fewer (a bias,
    a norm's scale, mean or variance) 0.5 + |N(0, 1)|/2. Random N(0, 1) weights overflow a deep network and a
    variance drawn negative makes a norm's rsqrt NaN; ``scaled`` keeps a batch-norm CNN finite
    (``core/execution.py`` uses it to tell a library's NaN handling from a wrong answer)."""
    if floats == "positive":
        return lib.abs(x)
    if floats == "scaled":
        if len(shape) >= 2:
            return x * (1.0 / math.sqrt(max(1, math.prod(shape[:-1]))))
        return 0.5 + 0.5 * lib.abs(x)
    return x


def _random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype, floats: str,
                  int_high: int) -> np.ndarray:
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu" or dtype.name in ("int4", "uint4", "int2", "uint2"):
        return rng.integers(0, int_high, size=shape, dtype=np.int64).astype(dtype)
    wide = np.float64 if dtype.itemsize == 16 or dtype == np.float64 else np.float32

    def draw():
        return _shaped(rng.standard_normal(shape, dtype=wide), floats, shape)

    if dtype.kind == "c":
        return (draw() + 1j * draw()).astype(dtype)
    if math.prod(shape) >= DRAW_CHUNK:
        return _draw_in_chunks(rng, shape, dtype, wide, floats)
    # f32/f64 directly; the narrow floats (f16, bf16, f8*: ml_dtypes) drawn in f32 and rounded.
    return draw().astype(dtype, copy=False)


#: Float arrays of at least this many elements are drawn in chunks of this size, on ``DRAW_THREADS``
#: threads: LLM weights (GiBs of bf16) are what a region check or a whole execution spends most of its
#: time drawing, one core at a time otherwise (5.0 s vs 2.1 s for 0.5 GiB of bf16 on 2 cores).
DRAW_CHUNK = 1 << 22
DRAW_THREADS = 2


#: The CPU client places a host array without copying it when its data is aligned to this many bytes.
HOST_ALIGNMENT = 64


def aligned_empty(n: int, dtype) -> np.ndarray:
    """An uninitialised 1-D array of ``n`` elements whose data starts on a ``HOST_ALIGNMENT``
    boundary (numpy's own allocations are 16-byte aligned), so ``device_put(..., copy=False)`` can
    hand it to the executable as it is: for GiBs of LLM weights that copy was a fifth of a region run."""
    dtype = np.dtype(dtype)
    raw = np.empty(n * dtype.itemsize + HOST_ALIGNMENT, np.uint8)
    start = (-raw.ctypes.data) % HOST_ALIGNMENT
    return raw[start:start + n * dtype.itemsize].view(dtype)


def _draw_in_chunks(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype, wide, floats: str) -> np.ndarray:
    """A large float array, chunk by chunk: each chunk has its own stream spawned from ``rng``'s seed
    (deterministic under the seed, whatever the thread order), drawn in ``wide`` and rounded to
    ``dtype`` in place, so no full-size wide temporary exists. numpy's generators release the GIL."""
    from concurrent.futures import ThreadPoolExecutor

    out = aligned_empty(math.prod(shape), dtype)
    starts = range(0, out.size, DRAW_CHUNK)
    streams = rng.bit_generator.seed_seq.spawn(len(starts))

    table = _narrow_normal_table(dtype, floats) if dtype.itemsize <= 2 and floats != "scaled" else None

    def fill(k: int) -> None:
        lo = starts[k]
        rng_k = np.random.default_rng(streams[k])
        size = min(DRAW_CHUNK, out.size - lo)
        if table is not None:  # 16 random bits pick a quantile: 3.6x faster than a normal draw + rounding
            out[lo:lo + size] = table[rng_k.integers(0, NARROW_QUANTILES, size=size, dtype=np.uint16)]
            return
        x = rng_k.standard_normal(size, dtype=wide)
        out[lo:lo + x.size] = _shaped(x, floats, shape)

    with ThreadPoolExecutor(DRAW_THREADS) as pool:
        list(pool.map(fill, range(len(starts))))
    return out.reshape(shape)


#: Large arrays of a float type of at most 16 bits (bf16, f16, f8*) are drawn by inverse transform
#: over this many equiprobable standard-normal quantiles, rounded to the type: the type itself has at
#: most this many values, so this is the rounded normal distribution (tails cut at 4.3 sigma).
NARROW_QUANTILES = 1 << 16
_NARROW_TABLES: dict = {}


def _narrow_normal_table(dtype: np.dtype, floats: str) -> np.ndarray:
    key = (dtype.name, floats)
    if key not in _NARROW_TABLES:
        from scipy.special import ndtri

        q = ndtri((np.arange(NARROW_QUANTILES) + 0.5) / NARROW_QUANTILES)
        _NARROW_TABLES[key] = (np.abs(q) if floats == "positive" else q).astype(np.float32).astype(dtype)
    return _NARROW_TABLES[key]


def random_inputs(proto: bytes, seed: int = 0, floats: str = "normal", int_high: int = INT_HIGH) -> list[np.ndarray]:
    """Deterministic random arguments for the entry computation (one array per parameter leaf).

    Each leaf gets its own generator seeded with ``(seed, leaf index)``, so a given seed always
    gives the same arrays and a module's inputs do not shift when another parameter changes size.
    Floats are standard normal (rounded to bf16/f16/f8 via ml_dtypes where needed; its absolute
    value with ``floats="positive"``), complex numbers have such real and imaginary parts, integers
    are uniform in [0, ``int_high``) (default ``INT_HIGH``: see there for why), bools are fair coin
    flips. Inputs above ``execution_limit()`` are refused with ``BadInput`` before any allocation.
    """
    if floats not in FLOAT_DISTRIBUTIONS:
        raise BadInput(f"unknown float distribution '{floats}' (expected one of {', '.join(FLOAT_DISTRIBUTIONS)})")
    int_high = int(int_high)
    if not 1 <= int_high <= 127:
        raise BadInput(f"int_high must be in [1, 127] (got {int_high})")
    specs = parameter_specs(proto)
    total = sum(s.nbytes for s in specs)
    limit, _ = execution_limit()
    if total > limit:
        raise BadInput(f"inputs need {gib(total)}, {gib(limit)} available")
    base = int(seed) % (1 << 63)
    return [_random_array(np.random.default_rng([base, i]), s.shape, s.dtype, floats, int_high)
            for i, s in enumerate(specs)]


#: Host inputs a worker keeps for timing (bytes): a runtime search times one module against XLA's default
#: over and over, every candidate with the same entry signature, and drawing ResNet-50's 103 MB of
#: parameters took longer than timing it.
TIMING_INPUTS_BYTES = 1 << 30


def timing_inputs(worker, proto: bytes, seed: int = 0, floats: str = "normal", int_high: int = INT_HIGH) -> list:
    """``random_inputs`` through a one-entry memo per worker keyed by the entry signature and the draw: the
    same arrays for every module of that signature (timing places copies of them, so a module that donates
    its inputs never writes into the kept ones)."""
    key = (tuple((sp.path, sp.shape, sp.dtype.str) for sp in parameter_specs(proto)), int(seed), floats, int(int_high))
    kept = getattr(worker, "_timing_inputs", None)
    if kept is not None and kept[0] == key:
        return kept[1]
    inputs = random_inputs(proto, seed, floats, int_high)
    worker._timing_inputs = (key, inputs) if sum(x.nbytes for x in inputs) <= TIMING_INPUTS_BYTES else None
    return inputs


def drawn_on_device(worker, proto: bytes, seed: int = 0, floats: str = "normal", int_high: int = INT_HIGH) -> list:
    """Seeded random arguments made on ``worker``'s device itself (jax.random), as ``bench/gpu.py``
    learnt to on the H200: no host copy of gigabytes of weights, no transfer, no host memory. For
    timing only: the values differ from ``random_inputs``' (validation compares outputs on those,
    the same inputs whatever the device), and a run's time does not depend on them. The same
    distributions (floats N(0, 1) or its absolute value, integers in [0, ``int_high``), fair bools);
    a leaf jax cannot make without x64 (64-bit types) or a complex one is drawn on the host and placed.
    Inputs over the device's limit (``device_limit``) are ``BadInput`` before any allocation."""
    import jax
    import jax.numpy as jnp

    specs = parameter_specs(proto)
    total = sum(s.nbytes for s in specs)
    limit, _ = device_limit(worker)
    if total > limit:
        raise BadInput(f"inputs need {gib(total)}, {gib(limit)} available")
    device = worker.devices[0]
    key = jax.random.PRNGKey(int(seed) % (1 << 31))
    out = []
    with jax.default_device(device):
        for i, s in enumerate(specs):
            dtype = np.dtype(s.dtype)
            if dtype.itemsize == 8 or dtype.kind == "c" or dtype.name in ("int4", "uint4", "int2", "uint2"):
                out.extend(device_put(worker, [_random_array(np.random.default_rng([int(seed), i]), s.shape, dtype,
                                                             floats, int_high)]))
                continue
            k = jax.random.fold_in(key, i)
            if dtype == np.bool_:
                x = jax.random.bernoulli(k, 0.5, s.shape)
            elif dtype.kind in "iu":
                x = jax.random.randint(k, s.shape, 0, int_high, dtype=jnp.int32).astype(dtype)
            else:
                x = _shaped(jax.random.normal(k, s.shape, dtype=jnp.float32), floats, tuple(s.shape), jnp).astype(dtype)
            out.append(jax.device_put(x, device))
    for x in out:
        x.block_until_ready()
    return out


# ---- compile and run (worker side) --------------------------------------------------------------------
def compile_full(worker, proto: bytes, partitions: int = 1, overrides=None):
    """Compile ``proto`` with XLA's complete default CPU pipeline (incl. codegen) -> LoadedExecutable.

    Any conversion or compile error becomes ``PassFailed(<XLA's first line>, "error")``: passes
    applied out of their usual context can leave a module that later stages reject, and that is a
    fact about the tuned module, not a bug of the tool. ``partitions`` > 1: one device's program of a
    partitioned step, compiled to run as that many partitions (``partitioned``). ``overrides``: compiler
    options as ``[(name, value)]`` (XLA's debug options, ``env_option_overrides``: a candidate's
    ``CompilerOptions``); an unknown name or value is XLA's ``INVALID_ARGUMENT``, a ``PassFailed``.
    """
    if getattr(worker, "_capturing", False):  # a probe compile in progress would abort this one
        raise PassFailed("internal: full compile requested while a capture is active", "error")
    jax_ = worker._jax
    options, devices = jax_.CompileOptions(), worker.devices
    if partitions > 1:
        proto, options, devices = _partitioned_compile(worker, proto, partitions)
    overrides, decisions, unrolls = sites.split(overrides)
    if unrolls:  # loop decisions rewrite the input module itself (loops.py): XLA's pipeline then specialises it
        proto, worker.loop_report = loops.apply(proto, unrolls)
    if decisions:  # sites are named by the input's instructions: tag them, XLA carries the tags through
        proto = sites.tag(proto)
    if overrides:
        options.env_option_overrides = [(str(k), str(v)) for k, v in overrides]
    if decisions and not hasattr(worker, "site_decisions"):
        raise PassFailed("per-site decisions need the CPU worker's pre-scheduler hook", "error")
    try:
        mlir = jax_.mlir.hlo_to_stablehlo(proto)
    except Exception as exc:
        raise PassFailed(f"XLA cannot convert the module for compilation: {compiler_message(exc)}", "error") from None
    if decisions:
        worker.site_decisions, worker.site_report = dict(decisions), None
    try:
        return worker.backend.compile_and_load(mlir, devices, options)
    except Exception as exc:
        raise PassFailed(compiler_message(exc), "error") from None
    finally:
        if decisions:
            worker.site_decisions = {}


def _partitioned_compile(worker, proto: bytes, n: int):
    """(the manual-marked proto, compile options for ``n`` partitions, ``n`` of the worker's devices)."""
    have = worker.backend.devices()
    partitioned.check_devices(n, len(have))
    try:
        manual = hlo.parse_text(partitioned.manual_text(hlo.to_text(hlo.parse_proto(proto))))
    except Exception as exc:
        raise PassFailed(f"the partitioned program cannot be marked manual: {compiler_message(exc)}", "error") from None
    options = worker._jax.CompileOptions()
    build = options.executable_build_options
    build.num_replicas, build.num_partitions, build.use_spmd_partitioning = 1, n, True
    build.device_assignment = worker._jax.DeviceAssignment.create(np.arange(n, dtype=np.int32).reshape(1, n))
    return manual.as_serialized_hlo_module_proto(), options, worker._jax.DeviceList(tuple(have[:n]))


#: Executables kept per worker. Validation runs the same original once per candidate and may
#: retry it with other input distributions; a request that follows on the same worker (the pool
#: hands sequential requests to the most recently idle worker) then skips codegen.
EXE_CACHE_SIZE = 4


def cached_compile(worker, proto: bytes, partitions: int = 1, overrides=None):
    """``compile_full`` through a small per-worker LRU keyed by the proto's hash, partitions and compiler
    options (one executable per (module, options): a runtime search times a candidate's twice).

    Returns ``(executable, seconds the compile took when it was built)``. Failures are not cached.
    """
    cache = getattr(worker, "_runner_exe_cache", None)
    if cache is None:
        cache = worker._runner_exe_cache = OrderedDict()
    overrides = sorted((str(k), str(v)) for k, v in (overrides or ()))
    key = f"{hashlib.sha256(proto).hexdigest()}:{partitions}" + (f":{overrides!r}" if overrides else "")
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    t0 = time.perf_counter()
    exe = compile_full(worker, proto, partitions, overrides)
    cache[key] = (exe, time.perf_counter() - t0)
    while len(cache) > EXE_CACHE_SIZE:
        cache.popitem(last=False)
    return cache[key]


def device_put(worker, arrays: list[np.ndarray], copy: bool = True) -> list:
    """Host arrays on the worker's device with their exact dtypes (x64 included).

    ``copy=False`` lets the CPU client use an aligned array's memory in place (``aligned_empty``):
    only for a run that uses its inputs once, since a module that donates an input (input/output
    aliasing) then writes its output into that host array (``_Timer`` re-places its inputs and
    keeps copying).
    """
    from jax._src import core
    from jax.sharding import SingleDeviceSharding

    device = worker.devices[0]
    sharding = SingleDeviceSharding(device)
    return [
        worker._jax.batched_device_put(core.ShapedArray(a.shape, a.dtype), sharding, [a], [device],
                                       True, bool(copy), enable_x64=True)
        for a in arrays
    ]


def device_put_partitioned(worker, per_device: list[list[np.ndarray]]) -> list:
    """Each device's own inputs as one array per parameter whose shard on device ``d`` is device
    ``d``'s input (the executable of a manual program reads exactly those shards)."""
    from jax._src import core
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = worker.backend.devices()[: len(per_device)]
    sharding = NamedSharding(Mesh(np.array(devices), ("partition",)), PartitionSpec())
    return [
        worker._jax.batched_device_put(core.ShapedArray(arrays[0].shape, arrays[0].dtype), sharding, list(arrays),
                                       list(devices), True, True, enable_x64=True)
        for arrays in zip(*per_device)
    ]


def device_inputs(proto: bytes, seed: int, floats: str, int_high: int, n: int) -> list[list[np.ndarray]]:
    """Inputs of each of ``n`` devices: device 0 gets ``random_inputs(proto, seed, ...)`` (what a
    single-device run gets), device ``d`` its own draw."""
    return [random_inputs(proto, seed if d == 0 else (int(seed) * 1_000_003 + d) % (1 << 63), floats, int_high)
            for d in range(n)]


def run(exe, args: list, devices: int = 1, block: bool = True) -> list:
    """Run once; the outputs (tuples flattened), for each output every device's in device order.

    ``block=False`` returns as soon as the run is dispatched (a device runs its queue in order, so a
    caller that dispatches several runs back to back waits for the last one only: ``timing.py``)."""
    try:
        results = exe.execute_sharded(args)
        outs = [per_device[d] for per_device in results.disassemble_into_single_device_arrays()
                for d in range(devices)]
        for out in outs if block else ():
            out.block_until_ready()
    except Exception as exc:
        raise PassFailed(f"execution failed: {compiler_message(exc)}", "error") from None
    return outs


def device_name(worker) -> str:
    """``platform:device kind`` of the device ``worker`` runs on (``cpu:cpu``, ``cuda:NVIDIA H200``)."""
    try:
        device = worker.devices[0]
        return f"{device.platform}:{getattr(device, 'device_kind', device.platform)}"
    except Exception:
        return "unknown"


_ALIAS = re.compile(r"\{(\d*)\}:\s*\((\d+),\s*\{([\d,\s]*)\}")


def donated_outputs(proto: bytes) -> dict[int, int] | None:
    """Donated argument leaf -> the output leaf that reuses its buffer (the module's
    ``input_output_alias``), in the flattened order ``random_inputs`` and ``run`` use; ``{}`` when
    nothing is donated, None when an alias cannot be mapped (a tuple parameter, a nested output):
    the caller then gives every run fresh inputs instead of feeding outputs back."""
    from jaxlib import _hlo

    header = hlo.to_text(hlo.parse_proto(proto)).split("\n", 1)[0] + "\n"
    m = re.search(r"input_output_alias=\{(.*?)\}\s*(?:,\s*\w+=|\n)", header)
    if not m:
        return {}
    shape = _hlo.XlaComputation(proto).program_shape()
    params = list(shape.parameter_shapes())
    if any(p.is_tuple() for p in params):
        return None
    result = shape.result_shape()
    outputs = list(result.tuple_shapes()) if result.is_tuple() else [result]
    if any(o.is_tuple() for o in outputs):
        return None
    feed = {}
    for out_index, param, param_index in _ALIAS.findall(m.group(1)):
        if param_index.strip() or (out_index == "") == result.is_tuple():
            return None
        feed[int(param)] = int(out_index or 0)
    return feed


def check_arity(exe, inputs: list) -> None:
    """The executable must take exactly the leaves ``random_inputs`` built (a guard on the flattening)."""
    try:
        expected = len(exe.get_parameter_layouts())
    except Exception:
        return
    if expected != len(inputs):
        raise PassFailed(f"the compiled module takes {expected} arguments but its signature has {len(inputs)} "
                         f"parameter leaves", "error")


def check_memory(exe, devices: int = 1, worker=None) -> None:
    """Refuse (``BadInput``) to run an executable whose buffers exceed the memory it runs in
    (``device_limit(worker)``: the device's own where it reports it, else ``execution_limit()``).

    XLA's buffer assignment knows what a run needs: arguments + outputs + temporaries, less what
    outputs alias from arguments (per device: ``devices`` times that). Checked after the compile,
    before any input is built.
    """
    try:
        need = devices * buffer_bytes(exe)["total"]
    except Exception:  # no statistics from this backend: the input check alone applies
        return
    limit, how = device_limit(worker)
    if need > limit:
        raise BadInput(f"running it needs {gib(need)} (inputs, outputs, temporaries), {gib(limit)} available"
                       + (f" ({how})" if how.startswith("the ") else ""))


#: Share of a device's free memory one run may take: the device worker also holds the original's
#: outputs while the tuned module runs (validation), and XLA's allocator fragments.
DEVICE_MEMORY_SHARE = 0.9


def device_limit(worker=None) -> tuple[int, str]:
    """``(bytes, how)`` one run on ``worker``'s device may use. A device that reports its memory
    (a GPU: ``memory_stats()``, ``bytes_limit`` less ``bytes_in_use``) is its own limit: the host's
    memory says nothing about it. jax's CPU device reports none, so it is the host's
    ``execution_limit()`` (also for ``worker`` None, and ``AUTOTUNE_MAX_EXEC_BYTES`` wins everywhere)."""
    stats = None
    if worker is not None and not os.environ.get(EXEC_LIMIT_ENV):
        try:
            stats = worker.devices[0].memory_stats()
        except Exception:
            stats = None
    if stats and stats.get("bytes_limit"):
        free = int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
        return int(DEVICE_MEMORY_SHARE * max(0, free)), f"the device's free memory ({DEVICE_MEMORY_SHARE:.0%})"
    return execution_limit()


def buffer_bytes(exe) -> dict:
    """Bytes per device XLA's buffer assignment gives a compiled executable: ``arguments``, ``outputs``,
    ``temporaries``, ``aliased`` (outputs living in argument buffers) and ``total`` (what a run holds at
    once: arguments + outputs + temporaries - aliased)."""
    stats = exe.get_compiled_memory_stats()
    out = {"arguments": int(stats.argument_size_in_bytes), "outputs": int(stats.output_size_in_bytes),
           "temporaries": int(stats.temp_size_in_bytes), "aliased": int(stats.alias_size_in_bytes)}
    out["total"] = out["arguments"] + out["outputs"] + out["temporaries"] - out["aliased"]
    return out


def memory(worker, proto: bytes, overrides=None) -> dict:
    """:func:`buffer_bytes` of the fully compiled module (cached); a partitioned program is compiled as
    its N partitions, as validation runs it. ``PassFailed`` when it does not compile."""
    exe, _ = cached_compile(worker, proto, partitioned.partitions(hlo.parse_proto(proto)), overrides)
    return buffer_bytes(exe)


def execute(worker, proto: bytes, seed: int = 0, floats: str = "normal", int_high: int = INT_HIGH,
            overrides=None) -> list[np.ndarray]:
    """Full compile (cached; with compiler options ``overrides``), run once on ``random_inputs(...)``;
    all outputs (tuples flattened) as numpy.

    Too little memory for the inputs or for the compiled executable's buffers is ``BadInput``
    (the module cannot be executed here); a compile or run error is ``PassFailed``.
    """
    n = partitioned.partitions(hlo.parse_proto(proto))
    specs_total = n * sum(s.nbytes for s in parameter_specs(proto))  # an unusable signature fails first
    limit, _ = execution_limit()
    if specs_total > limit:
        raise BadInput(f"inputs need {gib(specs_total)}, {gib(limit)} available")
    exe, _ = cached_compile(worker, proto, n, overrides)
    check_memory(exe, n, worker)
    if n > 1:
        per_device = device_inputs(proto, seed, floats, int_high, n)
        check_arity(exe, per_device[0])
        outs = run(exe, device_put_partitioned(worker, per_device), n)
    else:
        inputs = random_inputs(proto, seed, floats, int_high)
        check_arity(exe, inputs)
        outs = run(exe, device_put(worker, inputs, copy=False))
    return [np.array(o) for o in outs]


def host_custom_call_targets(platform: str = "Host") -> frozenset[str]:
    """Custom-call targets ``platform``'s runtime implements (XLA's registry names: ``Host`` for the
    CPU, ``CUDA`` for a GPU; read in a worker, after its client started)."""
    from jax._src.lib import _jax

    try:
        return frozenset(_jax.custom_call_targets(platform))
    except Exception:
        return frozenset()


def stand_ins(proto: bytes, extra: tuple[str, ...] = (), platform: str = "Host"
              ) -> tuple[bytes, str, int, tuple[str, ...]]:
    """``proto`` with every custom call ``platform`` cannot run replaced by its stand-in (``standins``).

    A target needs a stand-in when the runtime does not implement it and XLA's compiler does
    not handle it itself (``standins.COMPILER_HANDLED``); ``extra`` forces more targets (one that a
    compile rejected although it looked runnable). Returns ``(proto, fingerprint, number replaced,
    targets replaced)``; the input unchanged (and 0) when nothing needs one. A stand-in that cannot
    be built or parsed is ``PassFailed``.
    """
    module = hlo.parse_proto(proto)
    text = hlo.to_text(module)
    if " custom-call(" not in text:
        return proto, hlo.fingerprint(module), 0, ()
    host = host_custom_call_targets(platform)
    forced = set(extra)

    def needs(target: str) -> bool:
        return target in forced or (target not in host and target not in standins.COMPILER_HANDLED)

    try:
        new_text, n, targets = standins.rewrite(text, needs)
    except standins.Unsupported as exc:
        raise PassFailed(f"no host stand-in possible: {exc}", "error") from None
    if n == 0:
        return proto, hlo.fingerprint(module), 0, ()
    try:
        new = hlo.parse_text(new_text)
    except Exception as exc:
        raise PassFailed(f"the module with stand-ins does not parse: {compiler_message(exc)}", "error") from None
    return new.as_serialized_hlo_module_proto(), hlo.fingerprint(new), n, targets


def execute_on(worker, proto: bytes, inputs: list[np.ndarray], overrides=None) -> list[np.ndarray]:
    """``execute`` with given inputs instead of seeded random ones (``reference.py`` feeds a widened
    module the original's bf16-rounded inputs); same compile cache, memory and arity checks."""
    exe, _ = cached_compile(worker, proto, 1, overrides)
    check_memory(exe, worker=worker)
    check_arity(exe, inputs)
    return [np.array(o) for o in run(exe, device_put(worker, inputs, copy=False))]


def execute_on_devices(worker, proto: bytes, per_device: list[list[np.ndarray]]) -> list[np.ndarray]:
    """One device's program of a partitioned step run as ``len(per_device)`` partitions, each device on
    its own inputs (``partitioned``); every output of every device, as ``run`` orders them."""
    n = len(per_device)
    exe, _ = cached_compile(worker, proto, n)
    check_memory(exe, n, worker)
    check_arity(exe, per_device[0])
    return [np.array(o) for o in run(exe, device_put_partitioned(worker, per_device), n)]
