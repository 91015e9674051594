"""The Backend contract: exactly what the engine asks of a compiler, and how backends are found.

A backend turns pass sequences into modules and measurements. The core (evaluator, objectives,
validation, records, the CLI) calls only what is declared here; it never imports a backend's
package and never reads a module's bytes itself. XLA's HLO pipeline (``pipelines/xla``) is one
implementation; ``autotune.testing.toy`` (a pure-Python string-rewriting "compiler", about 300
lines) is another, and the shared engine, cache and strategy tests run on both.

The shape follows CompilerGym's ``CompilationSession`` (compiler_version, action space, apply an
action, observe), plus what an autotuner needs beyond a gym: a default ordering to beat, a full
compile and execution to validate and time results, and isolation of the compiler in workers.

Writing a backend, member by member (``BackendBase`` gives the plumbing and the defaults):

* **Modules.** A ``Module`` is the backend's own serialized program (opaque bytes to the core), a
  name and a fingerprint that the backend computes (equal programs, equal fingerprints: it is the
  cache key). ``parse`` turns file bytes into a Module (``autotune.core.module.load`` calls it),
  ``to_text`` prints one for people and files, ``suffixes`` names the file extensions.
* **Steps in workers.** ``step_job`` describes one job: apply actions to a module and stream one
  ``StepOut`` per step; ``dispatcher()`` runs jobs on ``pool`` (the backend's worker pool, built by
  its ``executor``: local processes or Ray actors). The handler class named by ``BackendBase.worker``
  runs inside the worker and answers ``run_steps(proto, key, actions)`` and ``measure(proto)``.
  Besides the vocabulary, a step job must accept the two pseudo-actions ``IDENTITY`` (the
  compiler's import round trip, no pass) and ``DEFAULT`` (the compiler's own default ordering).
* **Validation and timing.** ``parameter_specs``/``compiles``/``execute``/``time``/``time_ab``;
  ``stand_ins`` replaces what the host cannot run (default: nothing to replace).
* **Explanations.** ``instructions`` lists a module's instructions (``Instruction``) for the
  structural diff of ``autotune explain``; ``reproduce`` says how to replay a sequence with the
  compiler's own tools (default: nothing beyond autotune's commands).

Backends register under the ``autotune.backends`` entry-point group (``name = "package.module:Class"``);
the class is constructed with ``workers``, ``cache``, ``step_timeout``, ``executor`` and its own
options. Constructing one must start nothing: workers start on first use, so ``load`` can parse a
file with a fresh instance before any worker exists.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from autotune.core import plugins
from autotune.core.target import CPU, Target
from autotune.errors import BadInput

ENTRY_POINT_GROUP = "autotune.backends"
DEFAULT_BACKEND = "xla"
BUILTIN = {"xla": "autotune.pipelines.xla:XlaPipeline"}

#: Pseudo-action: the compiler's own import round trip, no pass (``normalize`` is built on it).
IDENTITY = "<identity>"
#: Pseudo-action: the compiler's own default ordering (the baseline every claim is measured against).
DEFAULT = "<default>"
PSEUDO_ACTIONS = (IDENTITY, DEFAULT)


@dataclass(frozen=True)
class PassInfo:
    """One action as a person sees it: its name, where the compiler runs it, what kind it is."""

    name: str
    runs_inside: str = ""
    kind: str = "pass"  # pass | sub-pipeline | target-specific kind


@dataclass(frozen=True)
class StepOut:
    """What a worker sends back for one step of a ``step_job`` (picklable, plain Python values).

    ``proto`` is None when the step left the module unchanged (``fingerprint`` equals the input's):
    the caller already holds those bytes, and a module with weights baked in is megabytes that
    would otherwise cross the socket, be unpickled and be compared for nothing on most steps.
    ``metrics`` is ``Metrics.to_dict()``-shaped (``instructions``, ``opcodes``, ``flops``, ...).
    """

    action: str
    status: str  # ok | error
    fingerprint: str | None = None
    proto: bytes | None = None
    metrics: dict | None = None
    message: str | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class Instruction:
    """One instruction of a module as ``autotune explain`` matches it structurally.

    ``signature`` identifies the instruction apart from its operands (opcode, shape, attributes),
    with every instruction and computation name removed; ``loose`` is the same with details that do
    not make it another instruction left out (XLA: layouts); ``operands`` name instructions of the
    same computation, ``called`` names computations. ``text`` is what a listing shows.
    """

    computation: str
    name: str
    opcode: str
    text: str
    signature: str
    loose: str
    operands: tuple[str, ...] = ()
    called: tuple[str, ...] = ()
    root: bool = False


@runtime_checkable
class Backend(Protocol):
    """What the engine calls. Modules are ``autotune.core.module.Module`` (bytes + fingerprint)."""

    name: str
    #: File extensions of this backend's module files, lower case; the first is the one it writes.
    suffixes: tuple[str, ...]
    #: Worker processes (or actors) steps are spread over.
    workers: int
    #: Seconds one step may take before its worker is killed and the step recorded as ``timeout``.
    step_timeout: float
    #: Where the workers live (``autotune.core.executors.Executor``).
    executor: object
    #: True when ``execution_estimate`` can say how long a run takes and ``execute(timeout=)`` can
    #: stop one: validation then bounds every execution (``--validate-seconds``).
    bounded_execution: bool
    #: True when ``regions`` can cut the changed regions of two final modules (``executed-region``).
    cuts_regions: bool
    #: The machine results are judged for: its pipeline applies and judges the passes, and it is
    #: part of ``version`` (every cache key), runs, records and policies (``core/target.py``).
    target: Target
    #: True when ``execute``/``time`` run the module on the target itself (the CPU target: always);
    #: False when executions happen elsewhere (a GPU target compiled deviceless runs its outputs'
    #: check on the host CPU), so a measured objective would time the wrong machine.
    runs_on_target: bool

    # -- identity and vocabulary --
    @property
    def version(self) -> str:
        """Part of every cache key: compiler version, pass inventory and engine semantics."""

    @property
    def compiler_version(self) -> str:
        """The compiler's own version string (records say which compiler produced them)."""

    def passes(self) -> tuple[str, ...]:
        """The default action vocabulary, in a stable order."""

    def describe(self) -> list[PassInfo]:
        """The vocabulary for people (``autotune passes``)."""

    def check_passes(self, names: Iterable[str]) -> tuple[str, ...]:
        """``names`` as a tuple, or ``UnknownName`` (with suggestions) for one that is not an action."""

    # -- the module format --
    def parse(self, data: bytes, suffix: str, name: str | None):
        """File bytes -> ``Module`` (``suffix``: the file's lower-case extension, "" when unknown;
        ``name`` None: the program's own name). ``BadInput`` with one line for anything else."""

    def to_text(self, module) -> str:
        """The module printed in the compiler's text form (parseable again by ``parse``)."""

    # -- modules and steps (in workers) --
    @property
    def pool(self):
        """The worker pool (``workers.PoolRequests``: ``call``, ``dispatcher``, ``crashes``, ``warm``)."""

    def normalize(self, module):
        """The module after the compiler's own import round trip (what every result is measured on)."""

    def measure(self, module):
        """``Metrics`` of a module."""

    def step_job(self, proto: bytes, key: str | None, actions: Sequence[str]):
        """A worker job applying ``actions`` (or the pseudo-actions ``IDENTITY``/``DEFAULT``)."""

    def dispatcher(self):
        """A dispatcher over the worker pool: ``submit(key, job)``; iterate for ``(key, reply)``."""

    # -- full compile and execution (validation, runtime) --
    def parameter_specs(self, module) -> list:
        """The entry parameters' leaves (objects with ``path``, ``shape``, ``dtype``, ``nbytes``), in
        the order ``execute`` feeds them; ``BadInput`` when the module cannot take random inputs."""

    def compiles(self, module) -> bool:
        """True when the full pipeline (codegen included) accepts the module; ``PassFailed`` if not."""

    def execute(self, module, seed: int = 0, floats: str = "normal", int_high: int = 4,
                timeout: float | None = None) -> list:
        """Run the fully compiled module once on seeded random inputs; every output as numpy. With
        ``timeout``, a run still going after that many seconds is stopped (its worker replaced) and
        raises ``PassFailed`` with status ``timeout``."""

    def execution_estimate(self, module) -> float | None:
        """Seconds one run of ``module`` should take on this machine, or None when the backend cannot
        tell. None also means validation does not bound the run (nothing to stop it by)."""

    def lift_constants(self, module) -> tuple | None:
        """``(surrogate, constants lifted, their bytes)``: ``module`` with its large constants as
        parameters, searched instead of it (cheaper steps); None when there is nothing to lift."""

    def execute_reference(self, module, seed: int = 0, floats: str = "normal", int_high: int = 4) -> list | None:
        """``module``'s outputs computed at a higher precision on the inputs ``execute`` uses (what
        narrow-float results are judged against, ``core/precision.py``); None when there is none."""

    def regions(self, default_final, tuned_final, max_input_bytes: int | None = None):
        """The region(s) where two final modules differ, as an object with ``regions`` (each with
        ``modules() -> (both sides in one module, the tuned side)``, ``describe()``, ``listing``,
        ``input_bytes``, ``instructions``, ``default_instructions``, ``tuned_instructions``);
        ``BadInput`` with the reason when no sound cut exists, when cutting takes too long, or (may)
        at the first region whose inputs exceed ``max_input_bytes``."""

    def exclusive(self):
        """A context manager in which one worker may use the memory every worker shares; it yields
        whether that lifted the limit (False where the executor has no per-worker limit). What an
        execution its own share refuses is retried in (``autotune.core.memory.with_memory``)."""

    @property
    def exclusive_runs(self) -> int:
        """How many times ``exclusive`` lifted the limit (a check's reason says when it needed that)."""

    def stand_ins(self, module, extra: Sequence[str] = ()) -> tuple:
        """``(module, replaced, targets)``: the module with host stand-ins for what the host cannot
        run (accelerator kernels), how many were replaced and their names; ``PassFailed`` if none
        can be built."""

    def time(self, module, seed: int = 0, repeats: int = 5, warmup: int = 1, min_seconds: float = 0.0,
             **options) -> dict:
        """Wall time of the fully compiled module: ``seconds`` (per run, one per sample; a sample is
        a calibrated loop of >= ``min_seconds``), ``median``, ``min``, ``mad``, ``iqr``, ``inner``."""

    def time_ab(self, a, b, seed: int = 0, rounds: int = 30, warmup: int = 2, min_seconds: float = 0.01,
                **options) -> dict:
        """Two modules timed interleaved (A B, B A, ...) in one worker after one compile each, as
        ``autotune.core.stats`` needs for a claim: ``a``/``b`` lists of per-run seconds, one per round."""

    # -- explanations --
    def instructions(self, module) -> list[Instruction]:
        """Every instruction of the module, in module order (``autotune explain``'s diff)."""

    def reproduce(self, sequence: Sequence[str]) -> dict:
        """How to replay ``sequence`` with the compiler's own tools (versions, flags per step)."""

    def close(self) -> None:
        """Stop the workers."""


class BackendBase:
    """Plumbing and declared defaults for a ``Backend``: the worker pool on the chosen executor,
    step jobs, the optional capabilities, context management. Subclasses set ``name``, ``worker``
    (``"module:Class"`` of the handler served in each worker) and ``suffixes`` and implement the
    compiler-specific members."""

    name: str = ""
    suffixes: tuple[str, ...] = ()
    worker: str = ""
    #: Environment of the worker processes (on top of the driver's).
    worker_env: dict | None = None
    bounded_execution: bool = False
    cuts_regions: bool = False

    #: The machine results are judged for (``core/target.py``); a backend with targets sets its own.
    target: Target = CPU
    #: The ``target`` value it was built with (None: the default), to build the same backend in
    #: another process (training env subprocesses).
    target_option: str | None = None
    runs_on_target: bool = True

    def __init__(self, workers: int = 1, cache=None, step_timeout: float = 120.0, executor=None,
                 target: str | None = None):
        if target not in (None, "", CPU.name):
            raise BadInput(f"the {self.name} backend compiles for the host CPU only; --target {target} needs the "
                           f"xla backend")
        self.workers = max(1, int(workers))
        self.cache = cache
        self.step_timeout = float(step_timeout)
        #: Where the workers live; the local processes unless the engine chose another executor.
        if executor is None:
            from autotune.core import executors

            executor = executors.get("local")
        self.executor = executor
        self._pool = None

    def worker_args(self) -> tuple:
        """The arguments the worker handler is constructed with (in every worker)."""
        return ()

    @property
    def pool(self):
        if self._pool is None:
            self._pool = self.executor.pool(self.worker, self.worker_args(), size=self.workers, env=self.worker_env)
        return self._pool

    def step_job(self, proto: bytes, key: str | None, actions: Sequence[str]):
        """The job ``run_steps(proto, key, actions)`` on a worker, ``step_timeout`` per step."""
        from autotune.core.workers import Job

        return Job("run_steps", (proto, key, list(actions)), self.step_timeout)

    def dispatcher(self):
        return self.pool.dispatcher()

    def stand_ins(self, module, extra: Sequence[str] = ()) -> tuple:
        """Nothing to replace: a backend whose modules the host runs as they are."""
        return module, 0, ()

    def instructions(self, module) -> list[Instruction]:
        """No instruction listing: ``explain`` then reports metrics and steps without a diff."""
        return []

    def reproduce(self, sequence: Sequence[str]) -> dict:
        return {}

    def execution_estimate(self, module) -> float | None:
        """Cannot estimate: validation runs the module unbounded (fine for a backend that runs fast)."""
        return None

    def lift_constants(self, module) -> tuple | None:
        """No surrogate: the module itself is searched."""
        return None

    def execute_reference(self, module, seed: int = 0, floats: str = "normal", int_high: int = 4) -> list | None:
        """No higher-precision reference: a failed comparison stands as it is."""
        return None

    def exclusive(self):
        """The pool's ``exclusive`` (``WorkerPool.exclusive``: one worker holding every worker's memory
        share); an executor without it yields False (nothing lifted)."""
        from contextlib import nullcontext

        solo = getattr(self.pool, "exclusive", None)
        return solo() if solo is not None else nullcontext(False)

    @property
    def exclusive_runs(self) -> int:
        """How many times ``exclusive`` lifted the memory limit (0 on an executor without it)."""
        return int(getattr(self.pool, "exclusive_runs", 0))

    def regions(self, default_final, tuned_final, max_input_bytes: int | None = None):
        """No region cutting (``cuts_regions`` is False): a declined execution stays ``compiled``."""
        raise BadInput(f"the {self.name} backend cannot cut regions")

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def available() -> dict[str, str]:
    """Backend name -> ``module:Class``: the built-ins, then third-party entry points."""
    return plugins.names(BUILTIN, ENTRY_POINT_GROUP)


def get(name: str | None = None, **options) -> Backend:
    """Construct a backend by name (default ``xla``; imported lazily, so listing names stays cheap)."""
    return plugins.load("backend", name or DEFAULT_BACKEND, available())(**options)
