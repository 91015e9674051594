"""The XLA side of a worker that tunes for a GPU: XLA's GPU pipeline, compiled without a GPU.

jax's CUDA plugin compiles for the device a ``GpuTargetConfig`` describes without one (a topology,
not a client: ``pjrt_hlo.py``); no GPU, driver or CUDA runtime is needed. Two things differ from the
CPU worker (``worker.py``), both checked on jaxlib 0.10.2:

* **No capture hook.** ``register_hlo_module_transformation`` registers on clients the jax backend
  initialises; jax's compile-only client for a topology refuses it ("implemented for a
  PjRt-compatible backend only"). XLA's per-pass dump works instead: a compile with ``xla_dump_to``,
  ``xla_dump_hlo_pass_re=^PASS$`` and ``xla_dump_hlo_as_proto`` writes the module after every run
  of that pass as a serialized ``HloModuleProto`` (exact: large constants included, unlike text
  dumps), named ``module_N.NAME.SEQ.<pipeline>.after_<pass>.before_<next>.hlo.pb``.
* **Stopping the compile.** Codegen is four fifths of a deviceless compile (LLaMA-3 8B decode step:
  0.21 s of HLO passes, 1.04 s in all). ``xla_gpu_require_complete_aot_autotune_results`` makes the
  GPU pipeline's autotuning stage (after fusion, before scheduling and LLVM) fail cleanly, as no
  tuning results exist without a device; a step's module is read from the dump, so that failure
  ends every step compile early. A module with no fusion never reaches it and simply compiles.
  Where that stage is and what it is called moved in 0.11 (``versions.GPU_STOP``).

A step of pass P disables every other name of the pre-layout region (``PassInventory.disabled_for``)
and reads the last dump of P in its pipeline; ``<default>`` disables nothing and reads the module
entering the autotuning stage (after ``fusion-wrapper``: every kernel is an instruction of it);
``<identity>`` reads ``before_optimizations``.
The CUDA plugin is jax's CUDA 12 or CUDA 13 one, whichever jax loaded (``pjrt_hlo.cuda_api``). Execution still happens on this process's CPU client
(``XlaWorker``): the tuned module's semantics do not depend on the device (``docs/gpu.md``).

Every GPU compile here hands XLA the serialized ``HloModuleProto`` itself (``pjrt_hlo.py``), not the
MLIR that jax's compile-only client takes: a third of the cost, no round trip that changes the module
between steps, and SPMD-partitioned steps compile. jax's topology is still made first: it checks the
target config with jax's own messages and initialises the plugin.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile

from autotune.errors import BadInput, PassFailed
from autotune.pipelines.xla import gpu_cost, hlo, versions
from autotune.pipelines.xla.pjrt_hlo import PjrtHloCompiler, Unavailable
from autotune.pipelines.xla.worker import XlaWorker, compiler_message
from autotune.pipelines.xla.targets import parse_config

#: Where a GPU compile is stopped (the stage that autotunes kernels fails without a device under
#: ``STOP_FLAG``), entered after ``fusion-wrapper`` has turned every remaining instruction into a
#: kernel: ``versions.GPU_STOP`` names the pipeline and pass for each jaxlib.
STOP_FLAG = ("xla_gpu_require_complete_aot_autotune_results", True)
#: ``xla_dump_hlo_pass_re`` matching no pass: only the module-level dumps are written.
NO_PASS = "^autotune-nothing$"
_DUMP = re.compile(r"^module_(?P<id>\d+)\.(?P<module>.+?)\.(?P<seq>\d+)\.(?P<pipeline>[^.]+)\.after_(?P<after>.+?)"
                   r"\.before_(?P<before>.+)\.hlo\.pb$")


def dump_root() -> str | None:
    """A memory-backed directory for dumps when the machine has one (a step writes and reads one file)."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


class XlaGpuWorker(XlaWorker):
    """Handler served by ``autotune.core.workers``; requests as ``XlaWorker``'s, steps for the GPU."""

    def __init__(self, inventory_json: str | None = None, include_target_specific: bool = False,
                 target_config: str = "", target_name: str = "gpu"):
        os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
        super().__init__(inventory_json, include_target_specific)
        from jax.experimental import topologies

        self.spec = parse_config(target_config, target_name, "worker")
        topologies.get_topology_desc(platform="cuda", target_config=target_config, topology="1x1x1")
        try:
            self.compiler = PjrtHloCompiler(target_config)
        except Unavailable as exc:
            raise BadInput(f"--target {target_name}: the installed CUDA plugin cannot be driven ({exc}); "
                           "install xla-autotune[gpu] with the pinned jax") from None
        if self.inventory is not None:
            self._overrides["<default>"] = []  # XLA's own GPU pipeline, every pass on

    # ---- compiling for the GPU ---------------------------------------------------------------------
    def program(self, proto: bytes, key: str | None) -> bytes:
        """A GPU step compiles the serialized module itself (no MLIR: see the module docstring)."""
        return proto

    def gpu_compile(self, proto: bytes, overrides: list, dump_re: str | None, stop: bool = True,
                    dump_final: bool = False) -> tuple[str | None, str | None]:
        """Compile for the target with ``overrides``; with ``dump_re`` (or ``dump_final``: the module
        the whole compile leaves) the proto dump goes to a fresh directory. Returns
        ``(directory or None, XLA's error message or None)``."""
        options = self._jax.CompileOptions()
        extra = [STOP_FLAG] if stop else []
        tmp = None
        if dump_re is not None or dump_final:
            tmp = tempfile.mkdtemp(prefix="autotune-gpu-", dir=dump_root())
            extra += [("xla_dump_to", tmp), ("xla_dump_hlo_pass_re", dump_re or NO_PASS),
                      ("xla_dump_hlo_as_proto", True), ("xla_dump_hlo_as_text", False)]
        options.env_option_overrides = list(overrides) + extra
        return tmp, self.compiler.compile(proto, options.SerializeAsString())

    def _read_dump(self, proto: bytes, overrides: list, dump_re: str, pick) -> bytes:
        """Compile, then the bytes of the dump file ``pick(files)`` names; ``PassFailed`` if none."""
        tmp, error = self.gpu_compile(proto, overrides, dump_re)
        try:
            chosen = pick(os.listdir(tmp))
            if chosen is None:
                reason = compiler_message(error) if error is not None and not _is_stop(error) else \
                    "the pass did not run in XLA's GPU pipeline"
                raise PassFailed(reason)
            with open(os.path.join(tmp, chosen), "rb") as fh:
                return hlo.unwrap_hlo_proto(fh.read())
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def step(self, proto: bytes, action: str, overrides: list[tuple[str, str]]) -> bytes:
        if action == "<identity>":
            return self._read_dump(proto, overrides, NO_PASS, _before_optimizations)
        if action == "<default>":
            stop = versions.at(versions.GPU_STOP)
            return self._read_dump(proto, [], f"^{re.escape(stop.pass_)}$", lambda fs: _last(fs, stop.pipeline, stop.pass_))
        pipeline = self.inventory.actions[action].pipeline
        return self._read_dump(proto, overrides, f"^{re.escape(action)}$", lambda fs: _last(fs, pipeline, action))

    def metrics_of(self, module, final: bool = False) -> dict:
        metrics = super().metrics_of(module)
        if final:
            metrics["compiled"] = gpu_cost.analyse(hlo.elided_text(module), self.spec).to_dict()
        return metrics

    # ---- requests that differ for the GPU -----------------------------------------------------------
    def discover(self) -> list[str]:
        """The GPU pipeline's per-pass dump names for the probe module (text names, as the CPU's)."""
        from autotune.pipelines.xla.worker import PROBE_HLO

        return self._dump_names(hlo.parse_text(PROBE_HLO).as_serialized_hlo_module_proto(), [],
                                lambda f: f.endswith(".hlo.pb"))

    def trace(self, proto: bytes, action: str) -> list[str]:
        """The passes of the pre-layout region that ran when ``action`` ran alone (isolation proof)."""
        return self._dump_names(proto, self._overrides[action], lambda f: _in_region(f, self.inventory))

    def _dump_names(self, proto: bytes, overrides: list, keep) -> list[str]:
        tmp, _ = self.gpu_compile(proto, overrides, ".+")
        try:
            return sorted(f.removesuffix(".hlo.pb") + ".txt" for f in os.listdir(tmp) if keep(f))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def compiles(self, proto: bytes, options=None) -> bool:
        """True if XLA's whole GPU pipeline, codegen included, accepts the module for the target (compiled
        with the compiler ``options``, ``[(name, value)]``, when given)."""
        _, error = self.gpu_compile(proto, [(str(k), str(v)) for k, v in (options or [])], None, stop=False)
        if error is not None:
            raise PassFailed(compiler_message(error))
        return True

    def gpu_module(self, proto: bytes) -> bytes:
        """The module as the full deviceless compile leaves it (XLA's ``after_optimizations`` dump:
        scheduled, copies inserted)."""
        tmp, error = self.gpu_compile(proto, [], None, stop=False, dump_final=True)
        try:
            if error is not None:
                raise PassFailed(compiler_message(error))
            found = sorted(f for f in os.listdir(tmp) if f.endswith("_after_optimizations.hlo.pb"))
            if not found:
                raise PassFailed("XLA's GPU compile wrote no after_optimizations module")
            with open(os.path.join(tmp, found[0]), "rb") as fh:
                return hlo.unwrap_hlo_proto(fh.read())
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _is_stop(error: str) -> bool:
    text = str(error)
    return "autotune_cache_hit_required" in text or "Failed to get configs" in text or "No cached config" in text


def _before_optimizations(files: list[str]) -> str | None:
    found = sorted(f for f in files if f.endswith(".before_optimizations.hlo.pb"))
    return found[0] if found else None


def _last(files: list[str], pipeline: str, action: str) -> str | None:
    """The last dump of ``action`` in ``pipeline`` of the compiled module (not of a nested one)."""
    best, ids = None, set()
    for f in files:
        m = _DUMP.match(f)
        if m:
            ids.add(int(m["id"]))
    main = min(ids) if ids else None
    for f in files:
        m = _DUMP.match(f)
        if m and int(m["id"]) == main and m["pipeline"] == pipeline.replace(" ", "_") and m["after"] == action:
            if best is None or int(m["seq"]) > best[0]:
                best = (int(m["seq"]), f)
    return best[1] if best else None


def _in_region(name: str, inventory) -> bool:
    """True for a dump file of a pass in the pre-layout region (``PassInventory.region``)."""
    m = _DUMP.match(name)
    return bool(m) and inventory.chain(m["pipeline"])[-1] in set(inventory.region)
