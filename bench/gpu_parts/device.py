"""The GPU machine's side: plain jax (no autotune), compiling, running and comparing outputs on the device."""

from __future__ import annotations

import math
import os
import re
import time

from gpu_parts.common import INT_HIGH


# =========================================================================================================
# run: on the GPU machine, plain jax + numpy
# =========================================================================================================
class Api:
    """The few jaxlib calls ``run`` needs, found in the installed jax (0.10.x here, 0.11.x on the GPUs)."""

    def __init__(self, platform: str):
        import jax
        from jax._src import xla_bridge
        from jax._src.lib import _jax

        self.jax, self._jax = jax, _jax
        self.backend = xla_bridge.get_backend(platform)
        self.device = self.backend.local_devices()[0]
        self.devices = _jax.DeviceList((self.device,))
        try:
            from jaxlib import _hlo

            self._hlo = _hlo
        except ImportError:  # where the HLO bindings moved
            from jax._src.lib import _hlo  # type: ignore

            self._hlo = _hlo

    def proto(self, text: str) -> bytes:
        return self._hlo.hlo_module_from_text(text).as_serialized_hlo_module_proto()

    def compile(self, proto: bytes, options: dict | None = None):
        """XLA's default pipeline for this backend; ``options``: compiler flags set for this compile only
        (``CompileOptions.env_option_overrides``, what ``jax.jit(compiler_options=...)`` sets)."""
        mlir = self._jax.mlir.hlo_to_stablehlo(proto)
        opts = self._jax.CompileOptions()
        if options:
            opts.env_option_overrides = list(options.items())
        return self.backend.compile_and_load(mlir, self.devices, opts)

    def params(self, proto: bytes) -> list[tuple[tuple[int, ...], object]]:
        """(shape, numpy dtype) of every entry parameter leaf, tuples flattened depth-first."""
        import numpy as np

        shape = self._hlo.XlaComputation(proto).program_shape()
        leaves = []

        def walk(s):
            if s.is_tuple():
                for sub in s.tuple_shapes():
                    walk(sub)
            else:
                leaves.append((tuple(int(d) for d in s.dimensions()), np.dtype(s.numpy_dtype())))

        for s in shape.parameter_shapes():
            walk(s)
        return leaves

    def inputs(self, leaves, seed: int) -> list:
        """Seeded random inputs drawn on the device: floats N(0, 1), integers in [0, INT_HIGH), bools."""
        import numpy as np

        jax, jnp = self.jax, self.jax.numpy
        key = jax.random.PRNGKey(seed)
        out = []
        with jax.default_device(self.device):
            for i, (shape, dtype) in enumerate(leaves):
                k = jax.random.fold_in(key, i)
                if dtype == np.bool_:
                    x = jax.random.bernoulli(k, 0.5, shape)
                elif np.issubdtype(dtype, np.integer):
                    x = jax.random.randint(k, shape, 0, INT_HIGH, dtype=jnp.int32).astype(dtype)
                else:
                    x = jax.random.normal(k, shape, dtype=jnp.float32).astype(dtype)
                out.append(x.block_until_ready())
        return out

    @staticmethod
    def run(exe, args: list, block: bool = True) -> list:
        results = exe.execute_sharded(args)
        outs = [per_device[0] for per_device in results.disassemble_into_single_device_arrays()]
        if block:
            for o in outs:
                o.block_until_ready()
        return outs


_ALIAS = re.compile(r"\{(\d*)\}:\s*\((\d+),\s*\{([\d,\s]*)\}")


def aliases(text: str) -> dict[int, int]:
    """Donated inputs: parameter leaf -> the output leaf that reuses its buffer (top-level leaves only)."""
    m = re.search(r"input_output_alias=\{(.*?)\}\s*(?:,\s*\w+=|\n)", text.split("\n", 1)[0] + "\n")
    if not m:
        return {}
    pairs = {}
    for out_index, param, param_index in _ALIAS.findall(m.group(1)):
        if not param_index.strip():
            pairs[int(param)] = int(out_index or 0)
    return pairs


class Runner:
    """One compiled variant and its inputs; a donated input is replaced by the output aliasing it."""

    def __init__(self, api: Api, exe, inputs: list, alias: dict[int, int]):
        self.api, self.exe, self.inputs, self.alias = api, exe, inputs, alias

    def once(self, block: bool = True) -> list:
        outs = self.api.run(self.exe, self.inputs, block)
        for param, out in self.alias.items():
            if param < len(self.inputs) and out < len(outs):
                self.inputs[param] = outs[out]
        return outs

    def sample(self, inner: int) -> float:
        """Seconds per call over ``inner`` calls dispatched back to back and waited for once, at the end, as
        a training loop runs: a wait after every call would add the host's round trip (tens of
        microseconds, and its jitter) to steps of 0.2-6 ms. One device stream runs them in order, so the
        last call's outputs being ready means all are done."""
        t0 = time.perf_counter()
        for i in range(inner):
            self.once(block=i == inner - 1)
        return (time.perf_counter() - t0) / inner


#: Output leaves up to this size are compared element by element on the host; larger ones (a KV cache)
#: by summaries computed on the device (sum, sum of absolute values, largest absolute value).
COMPARE_ON_HOST_BYTES = 16 << 20


def signature(outs: list) -> list:
    """What is kept of a run's outputs to compare another run with (small leaves whole)."""
    import numpy as np

    sig = []
    for o in outs:
        if o.size * o.dtype.itemsize <= COMPARE_ON_HOST_BYTES:
            sig.append(np.asarray(o))
        else:
            x = o.astype("float32")
            sig.append((o.shape, str(o.dtype), float(x.sum()), float(abs(x).sum()), float(abs(x).max())))
    return sig


#: ``(rtol, atol)`` per element type: ok when ``|t - o| <= atol + rtol * |o|`` (autotune's validation
#: tolerances, ``autotune/core/validation.py``: reassociation by a pass legally moves f32 results by
#: thousands of ulps through a deep network; bf16 by whole ulps). Integers and booleans: exact.
TOLERANCE = {"float64": (1e-9, 1e-10), "float32": (1e-3, 1e-4), "float16": (1e-2, 2e-3), "bfloat16": (5e-2, 1e-2)}


def same_outputs(a: list, b: list) -> tuple[bool, float]:
    """``a`` (the variant's) within tolerance of ``b`` (the default's): (ok, largest excess over the
    tolerance, 0 when within). Summarised leaves compare their sums and largest values the same way."""
    import numpy as np

    if len(a) != len(b):
        return False, math.inf
    worst = 0.0
    for x, y in zip(a, b):
        if isinstance(x, tuple) or isinstance(y, tuple):
            if not (isinstance(x, tuple) and isinstance(y, tuple)) or x[:2] != y[:2]:
                return False, math.inf
            rtol, atol = TOLERANCE.get(x[1], (1e-3, 1e-4))
            (s1, a1, m1), (s2, a2, m2) = x[2:], y[2:]
            if any(math.isfinite(u) != math.isfinite(v) for u, v in zip(x[2:], y[2:])):
                return False, math.inf
            if math.isfinite(a2):
                worst = max(worst, abs(s1 - s2) / (atol + rtol * a2), abs(a1 - a2) / (atol + rtol * a2),
                            abs(m1 - m2) / (atol + rtol * m2))
            continue
        if x.shape != y.shape or x.dtype != y.dtype:
            return False, math.inf
        if x.dtype.kind in "biu" or x.dtype == np.bool_:
            if not np.array_equal(x, y):
                return False, math.inf
            continue
        rtol, atol = TOLERANCE.get(x.dtype.name, (1e-3, 1e-4))
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        if not np.array_equal(np.isfinite(x64), np.isfinite(y64)):
            return False, math.inf
        finite = np.isfinite(x64)
        if finite.any():
            excess = np.abs(x64[finite] - y64[finite]) / (atol + rtol * np.abs(y64[finite]))
            worst = max(worst, float(excess.max()))
    return worst <= 1.0, worst


def input_bytes(leaves) -> int:
    return sum(math.prod(s) * d.itemsize for s, d in leaves)


def outputs_of(api: Api, exe, leaves, seed: int) -> list:
    """One run on fresh seeded inputs (regenerated, so a donated input is never reused), summarised."""
    inputs = api.inputs(leaves, seed)
    sig = signature(api.run(exe, inputs))
    del inputs
    return sig


def device_env(platform: str) -> None:
    """Set before jax first touches a backend (``device_gib`` does, in ``main``)."""
    if platform == "cpu":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the dry run: no CUDA plugin probing
    else:
        # jax lets its allocator have 75% of the device by default: on a 139 GiB H200 that is 104 GiB, less
        # than DeepSeek-V2's 58.6 GiB of inputs plus its 57 GiB temporary (out of memory on 2026-11-28, in
        # every process); the benchmark is the device's only user, so it takes 95% unless told otherwise.
        os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")


def device_gib(platform: str) -> float:
    """The device's own memory, in GiB (what its inputs must fit into)."""
    from jax._src import xla_bridge

    dev = xla_bridge.get_backend(platform).local_devices()[0]
    try:
        return dev.memory_stats()["bytes_limit"] / 2**30
    except Exception:
        return 16.0
