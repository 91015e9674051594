"""The Backend contract: exactly what the engine asks of a compiler, and how backends are found.

A backend turns pass sequences into modules and measurements. The core (evaluator, objectives,
validation, records, the CLI) calls only what is declared here; it never imports a backend's
package and never reads a module's bytes itself. XLA's HLO pipeline (``pipelines/xla``) is one
implementation; ``autotune.testing.toy`` (a pure-Python string-rewriting "compiler") is another,
and the shared engine, cache, strategy and contract tests run on both.

The shape follows CompilerGym's ``CompilationSession`` (compiler_version, action space, apply an
action, observe), plus what an autotuner needs beyond a gym: a default ordering to beat, a full
compile and execution to validate and time results, and isolation of the compiler in workers.

Writing a backend: subclass ``BackendBase`` (the worker pool on the chosen executor, step jobs,
``run_one``, ``check_passes``, ``remote``, the baseline's words) and write

* **the required members** (``Backend``): ``name``, ``worker``, ``suffixes``, ``target``,
  ``capabilities``, ``version``, ``compiler_version``, ``passes``, ``describe``, ``parse``,
  ``to_text``, ``normalize``, ``measure``. A ``Module`` is the backend's own serialized program
  (opaque bytes to the core), a name and a fingerprint the backend computes (equal programs, equal
  fingerprints: it is the cache key).
* **a worker handler** (the class ``worker`` names), served in each worker process or Ray actor,
  answering at least ``StepRequests``: ``run_steps(proto, key, actions)`` streams one ``StepOut``
  per step and accepts the pseudo-actions ``IDENTITY`` (the compiler's import round trip) and
  ``DEFAULT`` (its own default ordering); ``measure(proto)``; ``ping()``. A backend with more requests declares
  them in a ``Protocol`` (``worker_api``) and calls them through ``remote``.
* **the optional capabilities it has**, listed in ``capabilities`` (``CAPABILITIES``: ``execute``,
  ``bounded-execution``, ``time``, ``reference``, ``regions``, ``stand-ins``, ``explain``,
  ``surrogate``, ``memory``, ``options``). The engine asks ``supports`` and does without the rest: a backend that cannot
  execute is validated no further than its own steps, one without ``time`` refuses
  ``--objective runtime``, one without ``regions`` never reaches ``executed-region``.

``contract_problems`` checks all of it, signatures included; a declared capability without its
members fails at class definition. Backends register under the ``autotune.backends`` entry-point
group (``name = "package.module:Class"``); the class is constructed with ``workers``, ``cache``,
``step_timeout``, ``executor``, ``target`` and its own options. Constructing one must start
nothing: workers start on first use, so ``load`` can parse a file with a fresh instance.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar, cast

from autotune.core import executors, plugins
from autotune.core.target import CPU, Target
from autotune.core.workers import Job, StopJob
from autotune.errors import BadInput, PassFailed, UnknownName

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


class Backend(Protocol):
    """The required members: what the engine calls on every backend (``BackendBase`` gives the
    plumbing; a backend writes the rest). Modules are ``autotune.core.module.Module`` values."""

    #: The name users pick it by (``--backend``), and the handler class its workers serve
    #: (``"module:Class"``; ``worker_api`` is that handler's typed interface, see ``remote``).
    name: str
    worker: str
    #: File extensions of this backend's module files, lower case; the first is the one it writes.
    suffixes: tuple[str, ...]
    #: The machine results are judged for: its pipeline applies and judges the passes, and it is
    #: part of ``version`` (every cache key), runs, records and policies (``core/target.py``).
    target: Target
    #: The optional capabilities it implements (``CAPABILITIES``); the engine asks ``supports``.
    capabilities: frozenset[str]

    @property
    def version(self) -> str:
        """Part of every cache key: compiler version, target, pass inventory and engine semantics."""

    @property
    def compiler_version(self) -> str:
        """The compiler's own version string (records say which compiler produced them)."""

    def passes(self) -> tuple[str, ...]:
        """The default action vocabulary, in a stable order."""

    def describe(self) -> list[PassInfo]:
        """The vocabulary for people (``autotune passes``)."""

    def parse(self, data: bytes, suffix: str, name: str | None):
        """File bytes -> ``Module`` (``suffix``: the file's lower-case extension, "" when unknown;
        ``name`` None: the program's own name). ``BadInput`` with one line for anything else."""

    def to_text(self, module) -> str:
        """The module printed in the compiler's text form (parseable again by ``parse``)."""

    def normalize(self, module):
        """The module after the compiler's own import round trip (what every result is measured on)."""

    def measure(self, module):
        """``Metrics`` of a module."""


class Executes(Protocol):
    """``execute``: the fully compiled module runs on this machine (validation's output comparison)."""

    def parameter_specs(self, module) -> list:
        """The entry parameters' leaves (objects with ``path``, ``shape``, ``dtype``, ``nbytes``), in
        the order ``execute`` feeds them; ``BadInput`` when the module cannot take random inputs."""

    def compiles(self, module) -> bool:
        """True when the full pipeline (codegen included) accepts the module; ``PassFailed`` if not."""

    def execute(self, module, seed: int = 0, floats: str = "normal", int_high: int = 4,
                timeout: float | None = None) -> list:
        """Run the fully compiled module once on seeded random inputs; every output as numpy. A backend
        with ``bounded-execution`` stops a run past ``timeout`` seconds (its worker replaced) and raises
        ``PassFailed`` with status ``timeout``; others may ignore it."""


class BoundsExecution(Protocol):
    """``bounded-execution``: how long a run takes is known beforehand, and ``execute(timeout=)`` stops
    one: validation then bounds every execution (``--validate-seconds``)."""

    def execution_estimate(self, module) -> float | None:
        """Seconds one run of ``module`` should take on this machine; None when it cannot tell."""

    def warm(self, module) -> None:
        """Compile ``module`` as ``execute`` will run it, so that the bounded run after it is timed
        alone (for a target the host does not run, the host's compile, not ``compiles``)."""


class Times(Protocol):
    """``time``: wall time of the fully compiled module (``--objective runtime``, claims)."""

    def time(self, module, seed: int = 0, repeats: int = 5, warmup: int = 1, min_seconds: float = 0.0) -> dict:
        """``seconds`` (per run, one per sample; a sample is a calibrated loop of >= ``min_seconds``),
        ``median``, ``min``, ``mean``, ``p90``, ``mad``, ``iqr`` (``autotune.core.stats.summarize``)."""

    def time_ab(self, a, b, seed: int = 0, rounds: int = 30, warmup: int = 2, min_seconds: float = 0.01) -> dict:
        """Two modules timed interleaved (A B, B A, ...) in one worker after one compile each, as
        ``autotune.core.stats`` needs for a claim: ``a``/``b`` lists of per-run seconds, one per round."""


class Profiles(Protocol):
    """``profile``: where the fully compiled module's time goes (``autotune profile``,
    ``core/profile.py``): the step timed, a few runs traced, the time of each thing that ran traced
    back to the input's instructions."""

    def profile(self, module, rounds: int = 5, seed: int = 0, handover: bool = True) -> dict:
        """``step_seconds`` and, per op that ran, its share of the step and the input instructions it
        computes (``core.profile.Profile.from_dict`` reads it); with ``handover``, also the time outside
        the backend's run of it (``handover_seconds``), where the backend can measure that."""


class ComputesReference(Protocol):
    """``reference``: outputs at a higher precision, what narrow-float results are judged against."""

    def execute_reference(self, module, seed: int = 0, floats: str = "normal", int_high: int = 4,
                          timeout: float | None = None) -> list | None:
        """``module``'s outputs at a higher precision on the inputs ``execute`` uses
        (``core/precision.py``); None when there is none. Past ``timeout`` seconds (compile included)
        ``PassFailed`` with status ``timeout``, as ``execute``."""


class CutsRegions(Protocol):
    """``regions``: the changed regions of two final modules run alone (``executed-region``)."""

    def regions(self, default_final, tuned_final, max_input_bytes: int | None = None):
        """The region(s) where two final modules differ, as an object with ``regions`` (each with
        ``modules() -> (both sides in one module, the tuned side)``, ``describe()``, ``listing``,
        ``input_bytes``, ``instructions``, ``default_instructions``, ``tuned_instructions``);
        ``BadInput`` with the reason when no sound cut exists, when cutting takes too long, or (may)
        at the first region whose inputs exceed ``max_input_bytes``."""


class HasStandIns(Protocol):
    """``stand-ins``: what the host cannot run (accelerator kernels) replaced so the rest runs."""

    def stand_ins(self, module, extra: Sequence[str] = ()) -> tuple:
        """``(module, replaced, targets)``: the module with host stand-ins, how many were replaced and
        their names; ``PassFailed`` if none can be built."""


class Explains(Protocol):
    """``explain``: instructions for the structural diff of ``autotune explain``, and replay steps."""

    def instructions(self, module) -> list[Instruction]:
        """Every instruction of the module, in module order."""

    def reproduce(self, sequence: Sequence[str]) -> dict:
        """How to replay ``sequence`` with the compiler's own tools (versions, flags per step)."""


class LiftsConstants(Protocol):
    """``surrogate``: large constants lifted to parameters, searched instead of the module (cheaper)."""

    def lift_constants(self, module) -> tuple | None:
        """``(surrogate, constants lifted, their bytes)``; None when there is nothing to lift."""


class MeasuresMemory(Protocol):
    """``memory``: what the fully compiled module needs, from the compiler's buffer assignment (nothing
    runs): a run's answer is checked against XLA's default for memory, which final-ops cannot see."""

    def memory(self, module) -> dict:
        """Bytes per device: ``arguments``, ``outputs``, ``temporaries``, ``aliased``, ``total``;
        ``PassFailed`` when the module does not compile."""


class TakesOptions(Protocol):
    """``options``: compiler options as a second search dimension (``core/options.py``): the backend says
    which exist for its target and which the installed compiler accepts, and every compile of a module
    (``execute``, ``time``, ``time_ab``, ``compiles``, ``warm``, ``memory``) uses ``module.options``."""

    def option_space(self, numerics: bool = False, partitioned: bool = False) -> tuple:
        """The options to search (``OptionDim``s), each with the values the installed compiler accepted;
        ``numerics``: also those that change numerics by design; ``partitioned``: those that only matter
        to a partitioned step."""

    def option_report(self) -> list:
        """Every catalogued option for ``autotune options``: dicts with ``name``, ``group``, ``what``,
        ``numerics``, ``values`` (accepted) and ``refused`` (``[value, why]``)."""

    def check_options(self, options):
        """``options`` (a ``CompilerOptions``) if the installed compiler accepts every name and value;
        ``UnknownName`` naming the nearest known option otherwise (one line)."""


class DecidesPerSite(Protocol):
    """``sites``: decisions per instruction of the compiled module (who generates a convolution's, a dot's
    or a reduce's code: a library or the compiler), carried as ``site:<kind>:<instruction>`` entries of a
    candidate's ``CompilerOptions`` so every layer that carries options carries them."""

    def sites(self, module) -> tuple:
        """Where decisions can be made in ``module`` as the target's pipeline leaves it."""

    def site_space(self, module, only=None, limit=None) -> tuple:
        """Those sites as ``OptionDim``s (all, those named in ``only`` in its order, at most ``limit``)."""


#: Optional capability -> the members it promises. A backend lists the ones it has in
#: ``capabilities``; the engine asks ``supports(backend, name)`` and does without the rest (no
#: execution: validation stops at ``compiled``; no regions: no ``executed-region``; and so on).
CAPABILITIES: dict[str, type] = {
    "execute": Executes, "bounded-execution": BoundsExecution, "time": Times, "reference": ComputesReference,
    "regions": CutsRegions, "stand-ins": HasStandIns, "explain": Explains, "surrogate": LiftsConstants,
    "memory": MeasuresMemory, "options": TakesOptions, "sites": DecidesPerSite, "profile": Profiles,
}


def supports(backend, capability: str) -> bool:
    """True when ``backend`` declares ``capability`` (one of ``CAPABILITIES``)."""
    if capability not in CAPABILITIES:
        raise KeyError(capability)
    return capability in backend.capabilities


@functools.cache
def members(api: type) -> tuple[str, ...]:
    """The public members a protocol (or handler class) declares, its bases' included, in definition
    order (cached: ``remote`` asks for its interface's on every request)."""
    names: list[str] = []
    for klass in reversed(api.__mro__):
        if klass is object or klass.__module__ in ("typing", "typing_extensions", "abc"):
            continue
        names += list(vars(klass).get("__annotations__", {}))
        names += [n for n, v in vars(klass).items() if not n.startswith("_") and (callable(v) or isinstance(v, property))]
    return tuple(dict.fromkeys(names))


def signature_problems(impl, api: type) -> list[str]:
    """Where ``impl`` (a class or an instance) breaks ``api``'s declared members: a member missing, or
    a method whose parameters differ (each of the protocol's must exist with the same kind and
    default; an implementation may add optional parameters after them). Empty when it conforms."""
    problems = []
    cls = impl if isinstance(impl, type) else type(impl)
    for name in members(api):
        want = getattr(api, name, None)
        if not hasattr(impl, name):
            problems.append(f"{cls.__name__} lacks {api.__name__}.{name}")
            continue
        have = getattr(impl, name)
        if not callable(want) or isinstance(want, property):
            continue
        if not callable(have):
            problems.append(f"{cls.__name__}.{name} is not a method")
            continue
        problems += _parameter_problems(f"{cls.__name__}.{name}", inspect.signature(have), inspect.signature(want))
    return problems


def _parameter_problems(where: str, have: inspect.Signature, want: inspect.Signature) -> list[str]:
    got = [p for p in have.parameters.values() if p.name != "self"]
    promised = [p for p in want.parameters.values() if p.name != "self"]
    if any(p.kind is p.VAR_KEYWORD for p in got) and any(p.kind is p.VAR_POSITIONAL for p in got):
        return []  # (*args, **kwargs): accepts anything
    out = []
    for i, p in enumerate(promised):
        q = have.parameters.get(p.name)
        if q is None:
            out.append(f"{where} lacks parameter '{p.name}'")
        elif i < len(got) and got[i].name != p.name and p.kind is not p.KEYWORD_ONLY:
            out.append(f"{where}: parameter {i + 1} is '{got[i].name}', not '{p.name}'")
        elif q.default != p.default:
            out.append(f"{where}: '{p.name}' defaults to {q.default!r}, not {p.default!r}")
    extra = [p for p in got if p.name not in want.parameters and p.default is p.empty
             and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    out += [f"{where}: extra parameter '{p.name}' has no default" for p in extra]
    return out


def contract_problems(candidate) -> list[str]:
    """Everything ``candidate`` (a backend class or instance) breaks of the contract: the required
    members, each declared capability's members, and its worker handler against its ``worker_api``.
    A candidate is not yet known to be a backend, hence the probing."""
    problems = signature_problems(candidate, Backend)
    caps = getattr(candidate, "capabilities", frozenset())
    problems += [f"unknown capability '{c}'" for c in sorted(caps) if c not in CAPABILITIES]
    for cap in sorted(c for c in caps if c in CAPABILITIES):
        problems += signature_problems(candidate, CAPABILITIES[cap])
    api, worker = getattr(candidate, "worker_api", None), getattr(candidate, "worker", "")
    if api is not None and worker:
        problems += signature_problems(plugins.import_object(worker), api)
    return problems


class StepRequests(Protocol):
    """What every worker handler answers (``BackendBase.step_job`` and ``measure``); a backend's
    ``worker_api`` extends it with its own requests."""

    def run_steps(self, proto: bytes, key: str | None, actions: list[str]):
        """Apply ``actions`` (or the pseudo-actions) in order; yield one ``StepOut`` per step."""

    def measure(self, proto: bytes) -> dict:
        """``Metrics.to_dict()`` of the module, with its ``fingerprint``."""

    def ping(self) -> int:
        """The worker's process id: a no-op round trip (dispatch overhead, liveness)."""


class BackendBase:
    """What every backend shares, so that a backend writes only ``Backend``'s members and its
    capabilities: the worker pool on the chosen executor (``pool``, ``remote``), step jobs and their
    dispatcher, one step at a time (``run_one``), ``check_passes``, the per-worker memory escape
    hatch (``exclusive``), the words for the baseline, context management. Subclasses set ``name``,
    ``worker`` (``"module:Class"`` of the handler served in each worker), ``worker_api``,
    ``suffixes`` and ``capabilities``.

    Every subclass is checked when it is defined: a declared capability whose members are missing
    is a ``TypeError`` at import, not a surprise in the middle of a run (``contract_problems`` checks
    signatures too; the shared contract test runs it on every registered backend)."""

    name: str = ""
    suffixes: tuple[str, ...] = ()
    worker: str = ""
    #: Worker processes (or actors) steps are spread over; seconds one step may take before its
    #: worker is killed and the step recorded as ``timeout``; where the workers live.
    workers: int
    step_timeout: float
    executor: object
    #: The worker handler's typed interface (a ``Protocol``): what ``remote`` lets a backend call.
    worker_api: type = StepRequests
    #: Environment of the worker processes (on top of the driver's).
    worker_env: dict | None = None
    capabilities: frozenset[str] = frozenset()
    #: What the compiler is called in reports (``Target.compiler``: "XLA's default", "XLA's CPU pipeline").
    compiler: str = "XLA"

    #: The machine results are judged for (``core/target.py``); a backend with targets sets its own.
    target: Target = CPU
    #: The ``target`` value it was built with (None: the default), to build the same backend in
    #: another process (training env subprocesses).
    target_option: str | None = None
    #: True when ``execute``/``time`` run the module on the target itself (the CPU target: always);
    #: False when executions happen elsewhere (a GPU target compiled deviceless runs its outputs'
    #: check on the host CPU), so a measured objective would time the wrong machine.
    runs_on_target: bool = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        unknown = sorted(set(cls.capabilities) - set(CAPABILITIES))
        missing = [f"unknown capability {unknown}"] if unknown else [
            f"{cap}: {m}" for cap in cls.capabilities for m in members(CAPABILITIES[cap])
            if not callable(getattr(cls, m, None))]
        if missing:
            raise TypeError(f"backend {cls.__name__} declares what it does not implement: {', '.join(missing)}")

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
            executor = executors.get("local")
        self.executor = executor
        self._pool = None
        if self.target.compiler != self.compiler:  # the host CPU, judged by this backend's compiler
            self.target = replace(self.target, compiler=self.compiler)

    @property
    def baseline(self) -> str:
        """The baseline every claim is measured against, in words: "XLA's default", "toy's default"."""
        return self.target.baseline

    def worker_args(self) -> tuple:
        """The arguments the worker handler is constructed with (in every worker)."""
        return ()

    @property
    def pool(self):
        """The worker pool (``workers.PoolRequests``: ``dispatcher``, ``run_many``, ``warm``)."""
        if self._pool is None:
            self._pool = self.executor.pool(self.worker, self.worker_args(), size=self.workers, env=self.worker_env)
        return self._pool

    def remote(self, timeout: float | None = None):
        """The workers through ``worker_api``: ``self.remote().measure(proto)`` runs ``measure`` on a
        worker (``timeout`` seconds, default ``step_timeout``). A name the interface does not declare
        is an ``AttributeError`` here, not a failed request in a worker."""
        return remote(self.pool, self.worker_api, self.step_timeout if timeout is None else timeout)

    def step_job(self, proto: bytes, key: str | None, actions: Sequence[str]):
        """The job ``run_steps(proto, key, actions)`` on a worker, ``step_timeout`` per step."""
        return Job("run_steps", (proto, key, list(actions)), self.step_timeout)

    def dispatcher(self):
        return self.pool.dispatcher()

    def run_steps(self, module, actions: Sequence[str]) -> list[StepOut]:
        """Apply ``actions`` to ``module`` in one worker job: every step's ``StepOut`` (an unchanged
        module's step carries the bytes it kept); a step that failed ends the list, a crash raises
        ``PassFailed`` naming the action it died in."""
        outs: list[StepOut] = []
        proto = module.proto
        for _, item in self.pool.run_many([self.step_job(module.proto, module.fingerprint, list(actions))]):
            if item is StopJob:
                break
            if isinstance(item, PassFailed):
                item.action = actions[len(outs)] if len(outs) < len(actions) else None
                raise item
            if isinstance(item, BaseException):
                raise item
            if item.status == "ok":
                item = item if item.proto is not None else replace(item, proto=proto)
                proto = item.proto
            outs.append(item)
        return outs

    def run_one(self, module, action: str, failure: str = ""):
        """``module`` after the one ``action`` (a pass or a pseudo-action), or ``PassFailed`` with
        ``failure`` (default: the action's name) and the compiler's message."""
        outs = self.run_steps(module, [action])
        if not outs or outs[-1].status != "ok":
            message = outs[-1].message if outs else "no result"
            raise PassFailed(f"{failure or action} failed: {message}", "error", action)
        return replace(module, proto=outs[-1].proto, fingerprint=outs[-1].fingerprint)

    def check_passes(self, names: Iterable[str]) -> tuple[str, ...]:
        """``names`` as a tuple, or ``UnknownName`` (with suggestions) for one that is not an action."""
        known = self.passes()
        out = tuple(names)
        for n in out:
            if n not in known:
                raise UnknownName("pass", n, list(known))
        return out

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

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


T = TypeVar("T")


class _Remote:
    """Requests to a worker pool through a handler's declared interface (see ``remote``)."""

    def __init__(self, pool, api: type, timeout: float):
        self._pool, self._api, self._timeout = pool, api, float(timeout)
        self._names = members(api)

    def __getattr__(self, name: str):
        if name.startswith("_") or name not in self._names:
            raise AttributeError(f"{self._api.__name__} declares no request '{name}'")
        pool, timeout = self._pool, self._timeout
        return lambda *args: pool.call(name, *args, timeout=timeout)


def remote(pool, api: type[T], timeout: float) -> T:
    """``pool``'s workers as an object typed like ``api`` (the worker handler's ``Protocol``): method
    calls become requests on a worker, each bounded by ``timeout`` seconds. Why not
    ``pool.call("name", ...)``: a misspelt or undeclared request fails here, and the interface both
    sides keep to is one class a contract test checks the handler against."""
    return cast(T, _Remote(pool, api, timeout))


def available() -> dict[str, str]:
    """Backend name -> ``module:Class``: the built-ins, then third-party entry points."""
    return plugins.names(BUILTIN, ENTRY_POINT_GROUP)


def get(name: str | None = None, **options) -> Backend:
    """Construct a backend by name (default ``xla``; imported lazily, so listing names stays cheap)."""
    return plugins.load("backend", name or DEFAULT_BACKEND, available())(**options)
