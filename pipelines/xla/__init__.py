"""XLA's HLO pass pipeline as a tuning backend (through jaxlib), for the CPU or a GPU target.

``XlaPipeline`` implements ``autotune.core.backend.Backend`` (what the engine calls: version,
passes/describe/check_passes, parse/to_text, normalize, measure, step_job/dispatcher,
parameter_specs, compiles, execute, time, stand_ins, instructions, reproduce), plus conveniences for
tests and tools (``apply``, ``default``, ``trace``). Every compile happens in a pool of worker
processes (or Ray actors: the executor decides) running ``worker.XlaWorker``; this object only keeps
the inventory and turns worker replies into ``Module``/``Metrics`` values. HLO itself (parsing,
printing, fingerprints) is ``hlo.py``; reading module files is ``loader.py``.

``target`` picks whose pipeline applies and judges the passes: the host CPU (``worker.py``, the
default) or a GPU compiled deviceless (``targets.py``, ``gpu_worker.py``; ``docs/gpu.md``). The
target is part of ``version``, so every cache key, run and record is the target's own.
"""

from __future__ import annotations

import json
import os
import platform
import re
from collections.abc import Iterable, Iterator, Sequence

from autotune.core.backend import DEFAULT, IDENTITY, BackendBase, PassInfo, remote
from autotune.core.metrics import Metrics
from autotune.core.module import Module
from autotune.core.target import CPU
from autotune.core.workers import WorkerPool
from autotune.errors import BadInput, PassFailed, UnknownName
from autotune.core.options import CompilerOptions, OptionDim, check_against
from autotune.version import DISTRIBUTION
from autotune.pipelines.xla import (device, hlo, loader, loops, machine_inventory, partitioned, region, sites, standins,
                                    surrogate, targets, versions)
from autotune.pipelines.xla import options as catalogue
from autotune.pipelines.xla.inventory import PassInventory
from autotune.pipelines.xla.runner import parameter_specs
from autotune.pipelines.xla.worker_api import XlaGpuRequests, XlaRequests

#: Bumped when the meaning of a cached step changes (capture method, fingerprint, metrics).
ENGINE_VERSION = 7  # 6: Metrics.structure (structural counts for learned policies); 7: its partition counts
#: The oldest engine whose steps are the same as this one's but for structural counts a policy may not
#: observe: engine 7 only added ``structure.PARTITION_COUNTS``, so a policy trained on engine 6 without
#: ``partition:`` coordinates sees the same vectors here (``autotune.rl.train.other_pipeline_version``).
SAME_STEPS_SINCE = 6
#: The same for a GPU target's steps (per-pass dumps, the stop at autotuning, Metrics.compiled, how the
#: module reaches XLA).
GPU_ENGINE_VERSION = 2  # 2: the module handed to XLA as HLO (pjrt_hlo.py), no MLIR round trip

WORKER = "autotune.pipelines.xla.worker:XlaWorker"
GPU_WORKER = "autotune.pipelines.xla.gpu_worker:XlaGpuWorker"
#: Executes and times a GPU target's modules on a jax device (``device.py`` chooses which).
DEVICE_WORKER = "autotune.pipelines.xla.device_worker:XlaDeviceWorker"
#: Workers start with ``partitioned.DEVICES`` CPU devices: one is used, except to run one device's
#: program of a partitioned step with its peers (validation).
WORKER_ENV = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"--xla_force_host_platform_device_count={partitioned.DEVICES}",
              "TF_CPP_MIN_LOG_LEVEL": "1"}
#: The worker that times modules on the host (``XlaPipeline._timing_remote``): jax's CPU platform as a user's
#: process has it, one device and the driver's own ``XLA_FLAGS`` (none set here).
TIMING_ENV = {"JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "1"}
#: A GPU worker compiles deviceless: the CUDA plugin must not insist on a driver and libraries.
GPU_WORKER_ENV = {**WORKER_ENV, "JAX_SKIP_CUDA_CONSTRAINTS_CHECK": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}


def xla_version() -> str:
    import jaxlib

    return versions.xla_build(jaxlib.__version__)


class XlaPipeline(BackendBase):
    """XLA's pipeline for ``target`` (``cpu``, a shipped GPU name or a ``GpuTargetConfig`` path).
    ``cache`` (optional) stores the discovered inventory per XLA version and target."""

    name = "xla"
    suffixes = loader.TEXT_SUFFIXES + loader.PROTO_SUFFIXES + loader.MLIR_SUFFIXES
    worker = WORKER
    worker_api = XlaRequests
    worker_env = WORKER_ENV
    compiler = "XLA"
    #: bounded-execution: cost-analysis estimates, and a run stopped at its bound; regions: region.py
    #: cuts the changed regions of two final modules; surrogate: surrogate.py; reference: reference.py.
    capabilities = frozenset({"execute", "bounded-execution", "time", "reference", "regions", "stand-ins",
                              "explain", "surrogate", "memory", "options", "sites", "profile"})

    def __init__(self, workers: int = 1, cache=None, include_target_specific: bool = False,
                 step_timeout: float = 120.0, inventory: PassInventory | None = None, executor=None,
                 target: str | None = None, execution_platform: str | None = None):
        super().__init__(workers, cache, step_timeout, executor)
        self.gpu = targets.resolve(target)
        if self.gpu is not None:
            targets.require_plugin(self.gpu)
            self.worker, self.worker_api, self.worker_env = GPU_WORKER, XlaGpuRequests, GPU_WORKER_ENV
            # A GPU-compiled final module is fused and laid out for the device: the CPU cannot run
            # its regions (whole tuned modules still run on the CPU, see gpu_worker.py).
            # Its memory is the device's, which the host's compile does not give: not offered.
            # Per-site decisions rewrite the CPU pipeline's module at its pre-scheduler hook (sites.py),
            # and a profile traces the host's CPU thunks: the GPU pipelines offer neither.
            self.capabilities = self.capabilities - {"regions", "memory", "sites", "profile"}
        self.target = self.gpu.target if self.gpu is not None else CPU
        self.target_option = target if self.gpu is not None else None
        self.include_target_specific = include_target_specific
        #: Where executions run (``device.choose``): decided on first use, since for a GPU target it asks
        #: jax in a child process whether a CUDA device is there.
        self._execution_request = device.requested(execution_platform)
        self._execution = None
        self._device_pool = None
        self._timing_pool = None  # the host's timing worker (``_timing_remote``), started on first use
        if self._execution_request == "cuda":  # required: refused now, in one line, not in the middle of a run
            _ = self.execution
        self._cache = cache
        self._inventory = inventory.with_target_specific(include_target_specific) if inventory else None

    # ---- inventory ---------------------------------------------------------------------------------
    @property
    def inventory(self) -> PassInventory:
        """The pass inventory of the installed XLA for this target: from the cache database, else from this
        machine's record of the same compiler build (``machine_inventory``), else discovered by a probe."""
        if self._inventory is None:
            key = f"{xla_version()}:engine-{ENGINE_VERSION}"
            if self.gpu is not None:
                key += f":gpu-{GPU_ENGINE_VERSION}:{self.target.key}"
            text = self._cache.get_inventory(key) if self._cache is not None else None
            if text is None:
                compiler = machine_inventory.installed_compiler(versions.at(versions.CUDA_PLUGINS) if self.gpu else ())
                text = machine_inventory.get(key, compiler)
                if text is None:
                    text = self._discover_inventory()
                    machine_inventory.put(key, compiler, text)
                if self._cache is not None:
                    self._cache.put_inventory(key, text)
            self._inventory = PassInventory.from_json(text, self.include_target_specific)
        return self._inventory

    def _discover_inventory(self) -> str:
        """Compile the probe with a per-pass dump in a worker of its own; the inventory as JSON."""
        with WorkerPool(self.worker, self._probe_args(), size=1, env=self.worker_env) as probe:
            names = remote(probe, self.worker_api, 300).discover()
        from autotune.pipelines.xla.worker import CAPTURE_PASS_NAME

        inv = PassInventory.from_dump_names(xla_version(), names, capture_names=frozenset({CAPTURE_PASS_NAME}),
                                            platform="gpu" if self.gpu is not None else "cpu")
        return inv.to_json()

    def _probe_args(self) -> tuple:
        return (None,) if self.gpu is None else (None, False, self.gpu.config, self.gpu.name)

    @property
    def version(self) -> str:
        """Part of every cache key: XLA version, platform, target, inventory digest and engine version."""
        if self.gpu is None:
            return f"xla:{xla_version()}:inv-{self.inventory.digest}:engine-{ENGINE_VERSION}"
        return (f"xla:{xla_version()}:{self.target.key}:inv-{self.inventory.digest}:"
                f"engine-{ENGINE_VERSION}.gpu-{GPU_ENGINE_VERSION}")

    @property
    def compiler_version(self) -> str:
        return xla_version() if self.gpu is None else f"{xla_version()} for {self.target.key} (deviceless)"

    def passes(self) -> tuple[str, ...]:
        return self.inventory.names()

    def describe(self) -> list:
        inv = self.inventory
        return [
            PassInfo(a.name, " > ".join(reversed(inv.chain(a.pipeline))) if not a.target_specific else "",
                     "sub-pipeline" if a.macro else (a.target_specific or "pass"))
            for a in inv.actions.values()
        ]

    def check_passes(self, names: Iterable[str]) -> tuple[str, ...]:
        """As ``BackendBase``'s, suggesting from every pass XLA runs (not only the actions)."""
        known = self.inventory.actions
        out = []
        for name in names:
            if name not in known:
                raise UnknownName("pass", name, list(known) + list(self.inventory.all_names))
            out.append(name)
        return tuple(out)

    # ---- compiler options (the second search dimension: options.py) -----------------------------------
    @property
    def catalogue(self) -> tuple:
        """The options catalogued for this target (``options.catalogue``), late passes from the inventory."""
        return catalogue.catalogue("gpu" if self.gpu is not None else "cpu", self.inventory.late_passes)

    @property
    def accepted_options(self) -> "catalogue.Accepted":
        """What the installed compiler accepts of the catalogue: from the cache database, else this
        machine's record for the same compiler build, else probed (one tiny compile per name and value)."""
        if getattr(self, "_accepted", None) is None:
            key = f"options-{catalogue.CATALOGUE_VERSION}:{xla_version()}:{self.target.key}:inv-{self.inventory.digest}"
            text = self._cache.get_inventory(key) if self._cache is not None else None
            if text is None:
                compiler = machine_inventory.installed_compiler(versions.at(versions.CUDA_PLUGINS) if self.gpu else ())
                text = machine_inventory.get(key, compiler, catalogue.is_accepted_record)
                if text is None:
                    text = self._probe_options().to_json()
                    machine_inventory.put(key, compiler, text)
                if self._cache is not None:
                    self._cache.put_inventory(key, text)
            self._accepted = catalogue.Accepted.from_json(text)
        return self._accepted

    def _probe_options(self) -> "catalogue.Accepted":
        """Every catalogued (name, value) compiled on the probe module in the workers; a batch whose compile
        killed its worker is split until the culprit is alone (it is then refused as a crash)."""
        entries = self.catalogue
        answers: dict[tuple[str, str], str | None] = {}
        todo = [[(e.name, v) for e in entries for v in e.values]]
        while todo:
            batch = todo.pop()
            try:
                answers.update(zip(batch, self.remote(300).probe_options([list(p) for p in batch])))
            except PassFailed as exc:
                if len(batch) == 1:
                    answers[batch[0]] = f"the compiler crashed on it ({exc.status}): {str(exc)[:200]}"
                else:
                    todo += [batch[: len(batch) // 2], batch[len(batch) // 2:]]
        return catalogue.accepted_of(entries, answers)

    def option_space(self, numerics: bool = False, partitioned: bool = False) -> tuple:
        return catalogue.dims(self.catalogue, self.accepted_options, numerics, partitioned)

    def option_report(self) -> list:
        accepted = self.accepted_options
        return [{"name": e.name, "group": e.group, "what": e.what, "numerics": e.numerics,
                 "partitioned": e.partitioned, "values": list(accepted.values.get(e.name, ())),
                 "refused": [[v, why] for (k, v), why in accepted.refused.items() if k == e.name]}
                for e in self.catalogue]

    # ---- decisions per site (sites.py) ---------------------------------------------------------------
    def sites(self, module: Module) -> tuple:
        """The module's sites (``sites.Site``) as XLA's pipeline leaves it with the module's options."""
        if "sites" not in self.capabilities:
            raise BadInput(f"per-site decisions are made on the CPU pipeline, not for {self.target.name}")
        rows = self.remote(self.run_timeout).sites(module.proto, _overrides(module))
        return tuple(sites.Site(n, op, shape, default, tuple(choices), *kind) for n, op, shape, default, choices, *kind in rows)

    def site_space(self, module: Module, only: Iterable[str] | None = None, limit: int | None = None) -> tuple:
        """Per-site decisions as option dimensions (``OptionDim`` named ``site:<kind>:<instruction>``, its
        unset value XLA's own choice): all sites, or those whose instruction name or ``name:opcode:shape``
        id is in ``only`` (a profile's hot sites, in that order), at most ``limit`` of them; the input's counted
        while loops (``loops.py``) always, in front."""
        every = self.sites(module)
        loops_ = [s for s in every if s.kind == loops.UNROLL]  # few, and a loop holds its body's time: always
        found = sorted((s for s in every if s.kind != loops.UNROLL), key=lambda s: -s.elements)
        if only is not None:
            order = {key: i for i, key in enumerate(only)}
            found = sorted((s for s in found if s.name in order or s.id in order),
                           key=lambda s: order.get(s.id, order.get(s.name, 0)))
        if limit is not None:
            found = found[:limit]
        return tuple(OptionDim(s.option, tuple(c for c in s.choices if c != s.default), s.describe(), "site")
                     for s in loops_ + found)

    def check_options(self, options) -> CompilerOptions:
        """As the contract says; ``xla_disable_hlo_passes`` takes any pass this XLA runs (comma-separated),
        also those the search leaves out (``NOT_SWITCHED_OFF``): fixing one is the user's call. Per-site
        decisions (``site:...``) are checked for form here; one whose site the module lacks applies to
        nothing, and the compile says so."""
        options = CompilerOptions.of(options)
        decided = [name for name in options.names if sites.is_site_option(name)]
        for name in decided:
            if "sites" not in self.capabilities:
                raise BadInput(f"per-site decisions ({name}) are made on the CPU pipeline, not for {self.target.name}")
            try:
                sites.check_decision(name, options.as_dict()[name])
            except ValueError as exc:
                raise BadInput(str(exc)) from None
        if decided:
            return CompilerOptions.of(self.check_options(options.without(decided)).items
                                      + tuple((n, options.as_dict()[n]) for n in decided))
        accepted = self.accepted_options
        refused = {e.name: why for e in self.catalogue if (why := accepted.refusal(e.name))}
        dims = catalogue.dims(self.catalogue, accepted, numerics=True, partitioned=True)
        passes = options.as_dict().get(catalogue.DISABLE)
        if passes is not None:
            known = self.inventory.all_names
            for name in (p.strip() for p in passes.split(",") if p.strip()):
                if name not in known:
                    raise UnknownName(f"pass for {catalogue.DISABLE}", name, sorted(known))
            check_against(options.without([catalogue.DISABLE]), dims, accepted.values, refused)
            return options
        return check_against(options, dims, accepted.values, refused)

    # ---- workers (the pool itself, step_job and dispatcher come from BackendBase) ---------------------
    def worker_args(self) -> tuple:
        if self.gpu is not None:
            return (self.inventory.to_json(), self.include_target_specific, self.gpu.config, self.gpu.name)
        return (self.inventory.to_json(), self.include_target_specific)

    # ---- the module format --------------------------------------------------------------------------
    def parse(self, data: bytes, suffix: str, name: str | None) -> Module:
        """HLO text, a serialized HloModuleProto or StableHLO/MHLO MLIR -> Module (parsed in a child
        process: XLA's parser aborts the process on some malformed inputs)."""
        return loader.parse_isolated(data, suffix, name)

    def to_text(self, module: Module) -> str:
        return loader.module_text(module)

    def instructions(self, module: Module) -> list:
        return hlo.instructions(loader.hlo_module(module))

    def reproduce(self, sequence: Sequence[str]) -> dict:
        """The pinned jax/jaxlib and, per step, the ``xla_disable_hlo_passes`` the worker compiles with.

        The versions are read from the installed distributions, not by importing jax: that import
        would cost a second and, with the ``gpu`` extra, print the CUDA plugin's driver lines at the
        end of every ``autotune run --out``."""
        from importlib.metadata import version

        jax_version, jaxlib_version = version("jax"), version("jaxlib")
        inv = self.inventory
        steps = [{"action": a, "xla_disable_hlo_passes": ",".join(inv.disabled_for(inv.actions[a].keep)),
                  "keeps": sorted(inv.actions[a].keep)} for a in sequence]
        out = {"jax": jax_version, "jaxlib": jaxlib_version,
               "install": f"pip install jax=={jax_version} jaxlib=={jaxlib_version} {DISTRIBUTION}",
               "target": self.target.key}
        if self.gpu is None:
            steps.append({"action": DEFAULT, "xla_disable_hlo_passes": ",".join(inv.disabled_for(inv.default_keep)),
                          "keeps": ["(XLA's default pre-layout pipeline)"]})
            out["default_pipeline"] = f"XLA's default HLO pipeline (jaxlib {jaxlib_version}, CPU)"
        else:
            from autotune.pipelines.xla.gpu_worker import STOP_FLAG

            steps.append({"action": DEFAULT, "xla_disable_hlo_passes": "", "keeps": ["(XLA's whole GPU pipeline)"]})
            out.update(default_pipeline=f"XLA's GPU pipeline for {self.target.description} (jaxlib {jaxlib_version},"
                                        f" compiled deviceless)",
                       install=out["install"] + "[gpu]", gpu_target_config=self.gpu.config,
                       compile=("jax.experimental.topologies.get_topology_desc(platform='cuda', target_config=<gpu_target_config>,"
                                " topology='1x1x1').devices[0].client.compile(...), each step with its flags plus "
                                f"{STOP_FLAG[0]}=true and a per-pass proto dump of the step's pass"))
        out["xla_steps"] = steps
        return out

    # ---- steps -----------------------------------------------------------------------------------------
    def run_steps_many(self, jobs: Sequence[tuple[bytes, str | None, Sequence[str]]]) -> Iterator[tuple[int, object]]:
        """Run several step lists in parallel; yields ``(job, StepOut | PassFailed | StopJob)``."""
        yield from self.pool.run_many([self.step_job(*job) for job in jobs])

    def apply(self, module: Module, passes: Sequence[str]) -> Module:
        """Apply ``passes`` in order, one compile each (uncached; the Evaluator adds the cache)."""
        passes = self.check_passes(passes)
        if not passes:
            return module
        outs = self.run_steps(module, passes)
        last = outs[-1]
        if last.status != "ok":
            raise PassFailed(f"pass '{last.action}' failed: {last.message}", "error", last.action)
        return Module(module.name, last.proto, last.fingerprint)

    def normalize(self, module: Module, rounds: int = 4) -> Module:
        """Round-trip through XLA's importer (no HLO pass) until the fingerprint is stable. For a GPU
        target, a module with custom calls other than partitioning markers must also compile for it
        (``_check_custom_calls``; the markers, which XLA removes everywhere, cost no compile)."""
        current = module
        for _ in range(rounds):
            nxt = self.run_one(current, IDENTITY, "XLA's import of this module")
            stable, current = nxt.fingerprint == current.fingerprint, nxt
            if stable:
                break
        if self.gpu is not None and b"custom-call" in current.proto and (
                set(standins.custom_call_targets(hlo.elided_text(loader.hlo_module(current))))
                - standins.PARTITIONING_MARKERS):
            self._check_custom_calls(current)
        return current

    def _check_custom_calls(self, module: Module) -> None:
        """A GPU step stops before codegen, where a custom call with no implementation for the target
        (a CPU LAPACK kernel, say) would fail: tuned anyway, every answer would be one the target cannot
        compile. One whole deviceless compile of the input finds out before anything is cached
        (``PassFailed``: the caller's one-line refusal); a failure for another reason is validation's."""
        try:
            self.compiles(module)
        except PassFailed as exc:
            if _CUSTOM_CALL_MISSING.search(str(exc)):
                raise PassFailed(f"XLA's GPU pipeline for {self.target.description or self.target.name} cannot "
                                 f"compile this module's custom calls (checked without a GPU): {exc}", "error") from None

    def default(self, module: Module) -> Module:
        """XLA's own ordering of the same action set (its pre-layout target-independent pipeline)."""
        return self.run_one(module, DEFAULT, "XLA's default pipeline on this module")

    def measure(self, module: Module) -> Metrics:
        data = self.remote().measure(module.proto)
        return Metrics.from_dict(data)

    def trace(self, module: Module, action: str) -> list[str]:
        """Names of the per-pass dump files when ``action`` runs alone (which passes really ran)."""
        return self.remote().trace(module.proto, action)

    # ---- full compile and execution (validation, runtime objective) --------------------------------
    #: Seconds allowed for one full compile plus its runs: codegen of a 10k-instruction module
    #: takes tens of seconds on a small machine, and a slow module may be timed several times.
    run_timeout: float = 600.0

    @property
    def execution(self) -> "device.Execution | None":
        """Where executions run: None for the host worker (the CPU target; a GPU target with no CUDA
        device), else the device worker's platform (``device.choose``)."""
        if self._execution is None:
            cuda = device.cuda_devices() if self.gpu is not None and self._execution_request != "cpu" else 0
            self._execution = (device.choose(self.target, self._execution_request, cuda),)
        return self._execution[0]

    @property
    def runs_on_target(self) -> bool:
        """True when ``execute``/``time`` run on the target (the CPU target; a GPU target's device
        worker, or jax's CPU device on the explicit request ``AUTOTUNE_EXECUTION_PLATFORM=cpu``)."""
        return self.gpu is None or self.execution is not None

    @property
    def executes_on(self) -> str:
        """Where executions run, in the words a validation verdict uses."""
        chosen = self.execution
        if chosen is None:
            return "the host CPU"
        return f"the {self.target.name}'s CUDA device" if chosen.on_gpu else \
            f"jax's CPU device standing in for the {self.target.name} ({device.PLATFORM_ENV}=cpu)"

    def missing_device(self) -> str:
        """Why a GPU target's modules cannot run here, in one clause (``device.missing``)."""
        return device.missing(self.target)

    def _run_remote(self, timeout: float):
        """Execution requests' workers: the device worker's pool where one is chosen, else the step pool."""
        chosen = self.execution
        if chosen is None:
            return self.remote(timeout)
        if self._device_pool is None:
            env = device.worker_env(chosen.platform, WORKER_ENV)
            if chosen.on_gpu and getattr(self.executor, "name", "") == "local":
                # No host memory limit (RLIMIT_DATA) on the CUDA worker: its runs are bounded by the
                # device's memory (runner.device_limit) and the host's check of its inputs, and CUDA maps
                # large regions whose accounting under that limit has not been checked on a GPU.
                self._device_pool = WorkerPool(DEVICE_WORKER, (chosen.platform,), size=1, env=env, memory_limit=0,
                                               start_timeout=self.executor.start_timeout, pin=self.executor.pin)
            else:
                self._device_pool = self.executor.pool(DEVICE_WORKER, (chosen.platform,), size=1, env=env)
            self._device_remote = lambda t: remote(self._device_pool, XlaRequests, t)
        return self._device_remote(timeout)

    def _timing_remote(self, timeout: float):
        """Timing requests' worker: the device worker where one is chosen; on the host, a worker of its own
        started as a user's jax process starts (one CPU device, the driver's own ``XLA_FLAGS``), not as the
        step workers (``WORKER_ENV``: eight host devices, for running a partitioned step's devices in
        validation). Measured on the GPT-2 example: the same option set ran at 0.79 of XLA's default with
        eight host devices and 0.93 with one, and XLA's default itself 1.25 ms against 1.12 ms; a claim
        timed in the first would not hold in the user's program."""
        if self.execution is not None:
            return self._run_remote(timeout)
        if self._timing_pool is None:
            self._timing_pool = self.executor.pool(self.worker, self.worker_args(), size=1, env=TIMING_ENV)
        return remote(self._timing_pool, self.worker_api, timeout)

    def close(self) -> None:
        for name in ("_device_pool", "_timing_pool"):
            pool = getattr(self, name)
            if pool is not None:
                pool.close()
                setattr(self, name, None)
        super().close()

    def execute(self, module: Module, seed: int = 0, floats: str = "normal", int_high: int = 4,
                timeout: float | None = None) -> list:
        """Compile ``module`` with XLA's full CPU pipeline and run it once on seeded random inputs.

        ``floats`` picks how float parameters are drawn (``runner.FLOAT_DISTRIBUTIONS``), integers
        are drawn from [0, ``int_high``) (see ``runner.INT_HIGH`` for why small indices).
        Returns every output (tuples flattened) as a numpy array. A compile or run error raises
        ``PassFailed`` ("error"); a compiler crash or a run past ``run_timeout`` raises ``PassFailed``
        ("crash"/"timeout"); unusable inputs (too large, token parameters) raise ``BadInput``.
        ``timeout`` (default ``run_timeout``) bounds the request: validation compiles first
        (``compiles``, which warms the worker's executable cache) and then gives the run alone its
        time bound; a run past it costs that worker (killed and replaced).
        """
        return self._run_remote(self.run_timeout if timeout is None else float(timeout)).execute(
            module.proto, int(seed), floats, int(int_high), _overrides(module))

    def execute_reference(self, module: Module, seed: int = 0, floats: str = "normal",
                          int_high: int = 4, timeout: float | None = None) -> list | None:
        """Outputs of ``module`` with its bf16/f16 arithmetic widened to f32, on the inputs ``execute``
        uses (``reference.py``): what ``core/precision.py`` judges narrow-float results against.
        None when the module has no bf16/f16; ``PassFailed`` when the widened module cannot run.
        ``timeout`` (default ``run_timeout``) bounds the request, its compile included: past it
        ``PassFailed`` ("timeout"), the worker replaced (the validation phase's cap)."""
        return self._run_remote(self.run_timeout if timeout is None else float(timeout)).execute_reference(
            module.proto, int(seed), floats, int(int_high))

    def stand_ins(self, module: Module, extra: Sequence[str] = ()) -> tuple[Module, int, tuple[str, ...]]:
        """``(module with host stand-ins, how many custom calls were replaced, their targets)``.

        Custom calls the host cannot run (accelerator kernels) become deterministic functions of
        their operands (``standins.py``), so the rest of the module can be executed; ``extra``
        forces more targets. Raises ``PassFailed`` when no stand-in can be built.
        """
        proto, fp, n, targets = self._run_remote(self.run_timeout).stand_ins(module.proto, tuple(extra))
        return (module if n == 0 else Module(module.name, proto, fp, module.options)), n, tuple(targets)

    def regions(self, default_final: Module, tuned_final: Module, max_input_bytes: int | None = None):
        """The changed region(s) of two final modules as standalone module pairs (``region.cut``);
        ``BadInput`` with the reason when no sound cut exists, when cutting runs past
        ``region.CUT_SECONDS``, or at the first region whose inputs exceed ``max_input_bytes``.
        Parses and prints only (this process)."""
        try:
            return region.cut(default_final.proto, tuned_final.proto, max_input_bytes=max_input_bytes)
        except region.CannotCut as exc:
            raise BadInput(str(exc)) from None

    def parameter_specs(self, module: Module) -> list:
        """The entry computation's parameter leaves (``runner.ParamSpec``), read in this process; for
        one device's program of a partitioned step, one set per device its collectives name (each
        device draws its own inputs, ``partitioned``), and ``BadInput`` beyond the devices a worker
        runs (``partitioned.DEVICES``): it cannot run here at all."""
        n = self.devices_spanned(module)
        partitioned.check_devices(n)
        return parameter_specs(module.proto) * n

    def devices_spanned(self, module: Module) -> int:
        """How many devices ``module``'s collectives name (``partitioned.partitions``; cached)."""
        cache = self.__dict__.setdefault("_spanned", {})
        if module.fingerprint not in cache:
            cache[module.fingerprint] = partitioned.partitions(hlo.parse_proto(module.proto))
        return cache[module.fingerprint]

    def _single_device(self, module: Module) -> None:
        """``BadInput`` for a partitioned step's per-device program: its time on CPU devices standing in
        for the step's is no measure of anything."""
        n = self.devices_spanned(module)
        if n > 1:
            raise BadInput(f"it is one device's program of a step partitioned over {n} devices: its run time "
                           "here says nothing about the step's (use final-ops or a GPU target)")

    def memory(self, module: Module) -> dict:
        """Bytes per device the fully compiled module needs (``runner.memory``); ``PassFailed`` when
        it does not compile."""
        return dict(self.remote(self.run_timeout).memory(module.proto, _overrides(module)))

    def compiles(self, module: Module) -> bool:
        """True if the full default pipeline compiles ``module``; raises ``PassFailed`` otherwise."""
        return bool(self.remote(self.run_timeout).compiles(module.proto, _overrides(module)))

    def warm(self, module: Module) -> None:
        """Compile ``module`` the way ``execute`` runs it (the host CPU's pipeline, whatever the
        target), so that a bounded run that follows is timed alone. For a GPU target this is not
        ``compiles`` (the GPU's pipeline): validation's executions happen on the host."""
        self._run_remote(self.run_timeout).host_compiles(module.proto, _overrides(module))

    def time(self, module: Module, seed: int = 0, repeats: int = 5, warmup: int = 1, min_seconds: float = 0.0,
             floats: str = "normal", int_high: int = 4) -> dict:
        """Run time of the fully compiled module: ``seconds`` per run for each sample, ``median``,
        ``min``, ``mad``, ``iqr``, ``p90``; each sample a calibrated loop of >= ``min_seconds``."""
        self._single_device(module)
        return self._timing_remote(self.run_timeout).time(module.proto, int(seed), int(repeats), int(warmup), floats,
                                                  int(int_high), float(min_seconds), _overrides(module))

    def time_ab(self, a: Module, b: Module, seed: int = 0, rounds: int = 30, warmup: int = 2,
                min_seconds: float = 0.01, floats: str = "normal", int_high: int = 4,
                options_a: Sequence[tuple[str, str]] | None = None,
                options_b: Sequence[tuple[str, str]] | None = None, stop_above: float | None = None,
                min_rounds: int = 3, b_first: bool = False) -> dict:
        """``a`` and ``b`` timed interleaved in ONE worker (one request: both compiled once, then
        ``rounds`` alternating samples): per-run seconds per round in ``a`` and ``b``. Each arm compiles
        with its module's compiler options, or ``options_*`` when given (``[("xla_disable_hlo_passes",
        "fusion")]``). ``stop_above``: raced (``timing.time_ab``): stopped once B provably lies above that
        ratio to A (``stopped``, ``rounds`` done of ``planned``). ``b_first``: ``b`` compiled and its inputs
        placed before ``a``'s (``bench/arm_order.py`` checks that this order does not matter)."""
        self._single_device(a)
        oa = list(options_a) if options_a is not None else _overrides(a)
        ob = list(options_b) if options_b is not None else _overrides(b)
        return self._timing_remote(self.run_timeout).time_ab(a.proto, b.proto, int(seed), int(rounds), int(warmup), floats,
                                                     int(int_high), float(min_seconds), oa or None, ob or None,
                                                     None if stop_above is None else float(stop_above), int(min_rounds),
                                                     bool(b_first))

    def profile(self, module: Module, rounds: int = 5, seed: int = 0, handover: bool = True, floats: str = "normal",
                int_high: int = 4) -> dict:
        """Where the fully compiled module's time goes (``profiling.profile``), on the timing worker (one
        CPU device, as a user's jax process): the untraced step, and each thunk's share of it traced
        back to the module's instructions. The module's compiler options apply. ``handover`` False: no
        probe of the time outside XLA's run (``Profile.handover_missing`` says so)."""
        self._single_device(module)
        return self._timing_remote(self.run_timeout).profile(module.proto, int(rounds), int(seed), floats,
                                                             int(int_high), _overrides(module), bool(handover))

    # ---- weights at the price of parameters ----------------------------------------------------------
    def lift_constants(self, module: Module, min_bytes: int | None = None) -> tuple[Module, int, int] | None:
        """``(surrogate, constants lifted, their bytes)``: ``module`` with its large entry constants as
        parameters (``surrogate.py``), or None when it has none that large. Runs in this process."""
        lifted = surrogate.lift_constants(module.proto, surrogate.LIFT_MIN_BYTES if min_bytes is None else min_bytes)
        if lifted is None:
            return None
        proto, n, nbytes = lifted
        return loader.module_from_proto(proto, module.name), n, nbytes

    # ---- how long an execution would take (validation's time budget) -------------------------------
    def execution_rates(self) -> dict:
        """This machine's rates (``flops_per_s``, ``bytes_per_s``), measured once per machine and XLA
        version in a worker (timing.calibrate_rates, under a second) and kept in the cache."""
        key = f"execution-rates-all-cores:{machine_key()}"
        if self.execution is not None:  # the device worker's rates, not the host's
            key += f"|device-{self.execution.platform}"  # measured under all_cores() (the old key held rates pinned to one core)
        rates = _RATES.get(key)
        if rates is None and self._cache is not None:
            text = self._cache.get_inventory(key)
            rates = json.loads(text) if text else None
        if rates is None:
            rates = self._run_remote(self.run_timeout).calibrate()
            if self._cache is not None:
                self._cache.put_inventory(key, json.dumps(rates))
        _RATES[key] = rates
        return rates

    def execution_estimate(self, module: Module) -> float | None:
        """Seconds one run of ``module`` should take here: XLA's cost analysis (flops, bytes accessed)
        over the calibrated rates at ``EXECUTION_EFFICIENCY``, plus drawing its random inputs. A loop's trip count is unknown to cost analysis (its body counts
        once), so this is a lower bound for loops: the caller's time bound is the guard. None when
        XLA cannot analyse the module."""
        cost = self.remote().cost(module.proto)
        rates = self.execution_rates()
        if not (cost["flops"] >= 0 and cost["bytes"] >= 0):
            return None
        flops = cost["flops"] + TRANSCENDENTAL_FLOPS * cost["transcendentals"]
        compute = (flops / rates["flops_per_s"] + cost["bytes"] / rates["bytes_per_s"]) / EXECUTION_EFFICIENCY
        try:
            inputs = sum(s.nbytes for s in self.parameter_specs(module)) / INPUT_BYTES_PER_S
        except Exception:
            inputs = 0.0
        return compute + inputs


def _overrides(module: Module) -> list | None:
    """A module's compiler options as the worker's ``[(name, value)]`` (None: XLA's default)."""
    options = getattr(module, "options", None)
    return [list(p) for p in options.items] if options else None


#: How XLA says a custom call has no implementation for the platform (FFI and legacy registries).
_CUSTOM_CALL_MISSING = re.compile(r"No FFI handler registered|No registered implementation for custom call|"
                                  r"custom call target .* not found|Unknown custom-call", re.IGNORECASE)
#: Real programs reach a fraction of the calibration kernels' rates (a lone large dot, one fused
#: elementwise loop): measured on ViT, ResNet-50 and DLRM, 1.9x to 11x slower than the raw estimate
#: (the small ones dominated by fixed costs). Half the rate keeps the large, costly ones close.
EXECUTION_EFFICIENCY = 0.5
#: Seeded random inputs are drawn in the worker at about this rate (numpy normal draws, one core),
#: inside the execution's time bound.
INPUT_BYTES_PER_S = 150e6
#: What one transcendental (exp, log, tanh, ...) costs in flops for the estimate: a vectorised
#: polynomial approximation of ~10-20 operations.
TRANSCENDENTAL_FLOPS = 10.0
#: Execution rates per machine key, for this process (the cache keeps them across processes).
_RATES: dict[str, dict] = {}


def machine_key() -> str:
    """What the execution rates belong to: this XLA, this host, its CPU model and core count."""
    model = ""
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), "")
    except OSError:
        pass
    return f"{xla_version()}|{platform.node()}|{model}|{os.cpu_count()}"
