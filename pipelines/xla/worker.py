"""The XLA side of a worker process: a warm CPU client with a capture hook.

How one pass is applied (see ``docs/xla-mechanics.md``): compile the module with
``xla_disable_hlo_passes`` naming every known pass except the action and the sub-pipelines that hold
it. A callback registered with ``jax.extend.xla.register_hlo_module_transformation`` at the
pre-scheduler stage receives the module after those passes and raises, which aborts the compile
before LLVM codegen (most of a compile's cost). The callback is process-global, so a flag decides
whether a compile is such a probe; in a worker every compile is.

This module is imported only inside worker processes (``autotune.core.workers``): an XLA fatal error
here costs one process, never the run.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections import OrderedDict

from autotune.core.backend import StepOut
from autotune.core.workers import all_cores
from autotune.errors import BadInput, PassFailed
from autotune.pipelines.xla import hlo, loops, profiling, reference, runner, sites, timing
from autotune.pipelines.xla import options as catalogue
from autotune.pipelines.xla.inventory import PassInventory
from autotune.pipelines.xla.structure import structure_counts

CAPTURE_PASS_NAME = "autotune-capture"

#: A tiny program compiled once per XLA version to read the pass inventory from the dump.
PROBE_HLO = """HloModule autotune_probe

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[4,8] parameter(0)
  w = f32[8,8] parameter(1)
  d = f32[4,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  e = f32[4,8] exponential(d)
  z = f32[] constant(0)
  r = f32[4] reduce(e, z), dimensions={1}, to_apply=add
  ROOT t = (f32[4], f32[4,8]) tuple(r, d)
}
"""


class _Captured(Exception):
    """Raised inside the hook to abort the compile once the module is in hand."""


class XlaWorker:
    """Handler object served by ``autotune.core.workers``; its public methods are the requests."""

    def __init__(self, inventory_json: str | None = None, include_target_specific: bool = False):
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        from jax._src import xla_bridge
        from jax._src.lib import _jax
        from jax.extend import xla as jex_xla

        self._jax = _jax
        #: jaxlib's extension module (``jax._src.lib._jax``), public for ``timing.py`` and benchmarks.
        self.jax_lib = _jax
        self.backend = xla_bridge.get_backend("cpu")
        self.devices = _jax.DeviceList(tuple(self.backend.devices()[:1]))
        self._capturing = False
        self._captured: bytes | None = None
        #: Per-site decisions of the full compile in progress (``runner.compile_full`` sets and clears them).
        self.site_decisions: dict[str, str] = {}
        self.site_report = None
        self.loop_report = None  # what the last compile's loop decisions applied (loops.UnrollResult)
        jex_xla.register_hlo_module_transformation(self._hook, name=CAPTURE_PASS_NAME, platforms="cpu")
        self.inventory = None
        if inventory_json:
            self.inventory = PassInventory.from_json(inventory_json, include_target_specific)
            self._overrides = {
                name: [("xla_disable_hlo_passes", ",".join(self.inventory.disabled_for(a.keep)))]
                for name, a in self.inventory.actions.items()
            }
            self._overrides["<identity>"] = [("xla_disable_hlo_passes", ",".join(self.inventory.disabled_for(set())))]
            self._overrides["<default>"] = [
                ("xla_disable_hlo_passes", ",".join(self.inventory.disabled_for(self.inventory.default_keep)))
            ]
        self._mlir_cache: OrderedDict[str, bytes] = OrderedDict()
        self._hand_back = None  # ``handing_back``'s transform while its block runs

    # ---- the capture mechanism -----------------------------------------------------------------
    def _hook(self, module_bytes: bytes):
        decided = self._decide_sites(module_bytes) if self.site_decisions or self._hand_back else None
        if not self._capturing:
            return decided
        self._captured = decided or module_bytes
        raise _Captured()

    def _decide_sites(self, module_bytes: bytes) -> bytes | None:
        """A full compile with per-site decisions (``sites.py``): the optimised module, rewritten where
        the decisions say, handed back to XLA for scheduling and codegen. What was applied (and what
        found no site) is kept in ``site_report`` for the compile's caller."""
        if self._hand_back is not None:
            self.site_report = None
            return self._hand_back(module_bytes)
        decided, self.site_report = sites.decide(module_bytes, self.site_decisions)
        return decided

    @contextlib.contextmanager
    def handing_back(self, transform):
        """Within the block, this worker's compiles hand XLA's pre-scheduler module to ``transform`` (bytes ->
        bytes or None) instead of the per-site rewrite: how ``bench/levers.py`` measures what handing a module
        back costs by itself (jaxlib 0.10 drops its input/output aliasing even for the unchanged bytes)."""
        self._hand_back = transform
        try:
            yield
        finally:
            self._hand_back = None

    def capture(self, mlir: bytes, overrides: list[tuple[str, str]]) -> bytes:
        """Compile ``mlir`` with debug-option ``overrides`` and return the serialized HloModuleProto the
        hook captured at the pre-scheduler stage (one step; ``PassFailed`` when XLA refuses).

        Public (like ``to_mlir`` and ``flags``) because ``bench/perf.py`` and ``bench/realscale.py``
        time the parts of a step; a request too, though the engine only sends ``run_steps``.
        """
        options = self._jax.CompileOptions()
        options.env_option_overrides = overrides
        self._captured = None
        self._capturing = True
        try:
            self.backend.compile_and_load(mlir, self.devices, options)
        except Exception as exc:
            if self._captured is None:
                raise PassFailed(compiler_message(exc)) from None
        finally:
            self._capturing = False
        if self._captured is None:
            raise PassFailed("compile finished without reaching the capture stage")
        return self._captured

    def to_mlir(self, proto: bytes, key: str | None) -> bytes:
        """StableHLO bytecode of a serialized HloModuleProto (the form a compile takes), memoised by
        fingerprint ``key`` for the last 32 modules (None: not memoised)."""
        if key is not None and key in self._mlir_cache:
            self._mlir_cache.move_to_end(key)
            return self._mlir_cache[key]
        mlir = self._jax.mlir.hlo_to_stablehlo(proto)
        if key is not None:
            self._mlir_cache[key] = mlir
            while len(self._mlir_cache) > 32:
                self._mlir_cache.popitem(last=False)
        return mlir

    def program(self, proto: bytes, key: str | None) -> bytes:
        """What a step compiles from: StableHLO (the CPU client takes nothing else); the GPU worker
        overrides this to hand XLA the proto itself."""
        return self.to_mlir(proto, key)

    def flags(self, action: str) -> list[tuple[str, str]]:
        """The debug-option overrides (``xla_disable_hlo_passes``) one step of ``action`` compiles with."""
        return list(self._overrides[action])

    def step(self, program: bytes, action: str, overrides: list[tuple[str, str]]) -> bytes:
        """One step: the module after ``action`` (its ``overrides``), as a serialized HloModuleProto,
        from ``program`` (``self.program``'s form of the module). The CPU captures it with the
        pre-scheduler hook; the GPU worker reads XLA's per-pass dump."""
        return self.capture(program, overrides)

    def metrics_of(self, module, final: bool = False) -> dict:
        """``Metrics.to_dict()``-shaped metrics of a jaxlib ``HloModule`` (counts, XLA's cost analysis).
        ``final``: the module is the target pipeline's output (``<default>``), not an intermediate state."""
        metrics = {
            "instructions": hlo.instruction_count(module),
            "opcodes": hlo.opcode_histogram(module),
            "structure": structure_counts(hlo.elided_text(module)),
        }
        try:
            cost = self._jax.hlo_module_cost_analysis(self.backend, module)
            metrics.update(
                flops=float(cost.get("flops", 0.0)),
                transcendentals=float(cost.get("transcendentals", 0.0)),
                bytes_accessed=float(cost.get("bytes accessed", 0.0)),
            )
        except Exception:
            metrics.update(flops=float("nan"), transcendentals=float("nan"), bytes_accessed=float("nan"))
        return metrics

    # ---- requests ------------------------------------------------------------------------------
    def ping(self) -> int:
        return os.getpid()

    def discover(self) -> list[str]:
        """Compile the probe with a per-pass dump; return the dump's file names."""
        with tempfile.TemporaryDirectory(prefix="autotune-dump-") as tmp:
            proto = hlo.parse_text(PROBE_HLO).as_serialized_hlo_module_proto()
            self.capture(
                self._jax.mlir.hlo_to_stablehlo(proto),
                [("xla_dump_to", tmp), ("xla_dump_hlo_pass_re", ".+")],
            )
            return sorted(os.listdir(tmp))

    def trace(self, proto: bytes, action: str) -> list[str]:
        """Apply one action with a per-pass dump and return the dump file names (isolation proof)."""
        with tempfile.TemporaryDirectory(prefix="autotune-trace-") as tmp:
            overrides = list(self._overrides[action]) + [("xla_dump_to", tmp), ("xla_dump_hlo_pass_re", ".+")]
            self.capture(self.to_mlir(proto, None), overrides)
            return sorted(os.listdir(tmp))

    def measure(self, proto: bytes) -> dict:
        module = hlo.parse_proto(proto)
        return {"fingerprint": hlo.fingerprint(module, proto), **self.metrics_of(module)}

    def run_plain(self, text: str, actions: list[str]) -> list[str | None]:
        """The straightforward method, kept as the reference the fast path is tested against.

        Every step starts from HLO *text*: parse, convert to MLIR, one capture compile, print the
        result back to text; no MLIR reuse, no fingerprint-keyed caches. Returns the fingerprint
        after each step (None from the first failing step on).
        """
        out: list[str | None] = []
        for action in actions:
            try:
                proto = hlo.parse_text(text).as_serialized_hlo_module_proto()
                result = self.capture(self._jax.mlir.hlo_to_stablehlo(proto), self._overrides[action])
            except PassFailed:
                return out + [None] * (len(actions) - len(out))
            module = hlo.parse_proto(result)
            out.append(hlo.fingerprint(module))
            text = hlo.to_text(module)
        return out

    def run_steps(self, proto: bytes, key: str | None, actions: list[str]):
        """Apply ``actions`` one compile each, starting from ``proto``; yield a StepOut per step.

        ``key`` is the start state's fingerprint (lets the worker reuse its ``program``, the MLIR on
        the CPU). Steps that leave the module unchanged reuse it too: most passes are no-ops on a
        given module.
        A failing step ends the stream (later steps have no defined input).
        """
        program = self.program(proto, key)
        for i, action in enumerate(actions):
            overrides = self._overrides.get(action)
            if overrides is None:
                raise BadInput(f"unknown pass '{action}'")
            t0 = time.perf_counter()
            try:
                out = self.step(program, action, overrides)
            except PassFailed as exc:
                yield StepOut(action, "error", message=str(exc), seconds=time.perf_counter() - t0)
                return
            module = hlo.parse_proto(out)
            fp = hlo.fingerprint(module, out)
            metrics = self.metrics_of(module, final=action == "<default>")
            changed = fp != key
            if i + 1 < len(actions) and changed:
                program = self.program(out, fp)
            key = fp
            yield StepOut(action, "ok", fp, out if changed else None, metrics, seconds=time.perf_counter() - t0)

    # ---- full compile and execution (validation, runtime objective; see runner.py) ----------------
    def execute(self, proto: bytes, seed: int = 0, floats: str = "normal", int_high: int = 4, options=None) -> list:
        """Full default compile (with compiler ``options``), one run on seeded random inputs; all outputs
        as numpy arrays."""
        with all_cores():
            return runner.execute(self, proto, seed, floats, int_high, options)

    def execute_reference(self, proto: bytes, seed: int = 0, floats: str = "normal", int_high: int = 4):
        """The module with bf16/f16 widened to f32, run on ``execute``'s inputs (see reference.py)."""
        with all_cores():
            return reference.execute_reference(self, proto, seed, floats, int_high)

    def time(self, proto: bytes, seed: int = 0, repeats: int = 5, warmup: int = 1, floats: str = "normal",
             int_high: int = 4, min_seconds: float = 0.0, options=None) -> dict:
        """Full default compile (with compiler ``options``), then ``warmup`` untimed and ``repeats`` timed
        samples (seconds per run; each sample a calibrated loop of at least ``min_seconds``)."""
        with all_cores():
            return timing.time_execution(self, proto, seed, repeats, warmup, floats, int_high, min_seconds, options)

    def time_ab(self, proto_a: bytes, proto_b: bytes, seed: int = 0, rounds: int = 30, warmup: int = 2,
                floats: str = "normal", int_high: int = 4, min_seconds: float = 0.01, options_a=None,
                options_b=None, stop_above=None, min_rounds: int = 3, b_first: bool = False) -> dict:
        """Both modules compiled once in this process, then timed interleaved (see timing.time_ab; raced
        with ``stop_above``; B built first with ``b_first``)."""
        with all_cores():
            return timing.time_ab(self, proto_a, proto_b, seed, rounds, warmup, floats, int_high, min_seconds,
                                  options_a, options_b, stop_above, min_rounds, b_first=bool(b_first))

    def profile(self, proto: bytes, rounds: int = 5, seed: int = 0, floats: str = "normal", int_high: int = 4,
                options=None, handover: bool = True) -> dict:
        """Where the compiled module's time goes: ``rounds`` untraced and traced runs (see profiling.py)."""
        with all_cores():
            return profiling.profile(self, proto, rounds, seed, floats, int_high, options, handover)

    def calibrate(self) -> dict:
        """This machine's execution rates for validation's time estimate (see timing.calibrate_rates)."""
        with all_cores():
            return timing.calibrate_rates(self)

    def cost(self, proto: bytes) -> dict:
        """XLA's cost analysis of the module as given (flops, transcendentals, bytes accessed)."""
        return timing.cost_of(self, proto)

    def stand_ins(self, proto: bytes, extra: tuple = ()) -> tuple:
        """The module with host stand-ins for custom calls the host cannot run (see standins.py)."""
        return runner.stand_ins(proto, tuple(extra))

    def memory(self, proto: bytes, options=None) -> dict:
        """What the fully compiled module needs per device, from XLA's buffer assignment (see
        runner.memory); the compile is cached, as validation's is."""
        with all_cores():
            return runner.memory(self, proto, options)

    def compiles(self, proto: bytes, options=None) -> bool:
        """True if the full default pipeline (codegen included) accepts the module; else PassFailed."""
        return self.host_compiles(proto, options)

    def sites(self, proto: bytes, options=None) -> list:
        """The module's sites (``sites.find_sites`` of XLA's optimised module, compiled with compiler
        ``options`` and after the per-site decisions among them), as ``[name, opcode, shape, default,
        choices, kind]`` lists (the input's counted while loops first)."""
        plain, decisions, unrolls = sites.split(options)
        found = sites.loop_sites(hlo.to_text(hlo.parse_proto(proto)))  # loops: the input's own while loops
        if unrolls:
            proto, _ = loops.apply(proto, unrolls)
        self.site_decisions = decisions
        try:
            text = hlo.to_text(hlo.parse_proto(self.capture(self.to_mlir(sites.tag(proto), None), plain)), metadata=True)
        finally:
            self.site_decisions = {}
        found += sites.find_sites(text)
        return [[s.name, s.opcode, s.shape, s.default, list(s.choices), s.kind] for s in found]

    def probe_options(self, pairs: list) -> list:
        """Each ``(name, value)`` compiled alone on a tiny module: None where XLA accepts it, else its
        one-line refusal (``options.probe``: what the installed compiler takes)."""
        proto = hlo.parse_text(PROBE_HLO).as_serialized_hlo_module_proto()
        return catalogue.probe(self, proto, [tuple(p) for p in pairs])

    def host_compiles(self, proto: bytes, options=None) -> bool:
        """The compile ``execute`` and ``time`` run (this host's full CPU pipeline), kept for them: a
        later execute/time of the same module reuses it. The same as ``compiles`` here; a worker for
        another target overrides ``compiles`` (its own pipeline) and keeps this one."""
        with all_cores():
            runner.cached_compile(self, proto, 1, options)
        return True


def compiler_message(exc: BaseException) -> str:
    """XLA's error status, first meaningful line, without Python traceback noise."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for ln in lines:
        if not ln.startswith(("Traceback", "File ", "---", "For simplicity")):
            return ln[:500]
    return type(exc).__name__
