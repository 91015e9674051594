"""The Backend contract: exactly what the engine asks of a compiler, and how backends are found.

A backend turns pass sequences into modules and measurements. The core (evaluator, objectives,
validation, records, the CLI) calls only what is below; it never imports a backend's package. XLA's
HLO pipeline (``pipelines/xla``) is one implementation; ``autotune.testing.toy`` (a pure-Python
string-rewriting "compiler") is another, and the shared engine, cache and strategy tests run on both.

The shape follows CompilerGym's ``CompilationSession`` (compiler_version, action space, apply an
action, observe), plus what an autotuner needs beyond a gym: a default ordering to beat, a full
compile and execution to validate and time results, and isolation of the compiler in workers.

Steps run in worker processes: ``step_job`` describes one job (apply actions to a module, stream one
``StepOut``-like reply per step) and ``dispatcher()`` runs jobs on the backend's worker pool; a
compiler crash or hang costs one worker (see ``autotune.core.workers``). Backends register under
the ``autotune.backends`` entry-point group (``name = "package.module:Class"``); the class is
constructed with ``workers``, ``cache``, ``step_timeout`` and its own options.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from autotune.core import plugins

ENTRY_POINT_GROUP = "autotune.backends"
DEFAULT_BACKEND = "xla"
BUILTIN = {"xla": "autotune.pipelines.xla:XlaPipeline"}


@dataclass(frozen=True)
class PassInfo:
    """One action as a person sees it: its name, where the compiler runs it, what kind it is."""

    name: str
    runs_inside: str = ""
    kind: str = "pass"  # pass | sub-pipeline | target-specific kind


@runtime_checkable
class Backend(Protocol):
    """What the engine calls. Modules are ``autotune.core.module.Module`` (bytes + fingerprint)."""

    name: str

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

    # -- modules and steps (in workers) --
    def normalize(self, module):
        """The module after the compiler's own import round trip (what every result is measured on)."""

    def measure(self, module):
        """``Metrics`` of a module."""

    def step_job(self, proto: bytes, key: str | None, actions: Sequence[str]):
        """A worker job applying ``actions`` (or the pseudo-actions ``<identity>``/``<default>``)."""

    def dispatcher(self):
        """A dispatcher over the worker pool: ``submit(key, job)``; iterate for ``(key, reply)``."""

    # -- full compile and execution (validation, runtime) --
    def parameter_specs(self, module) -> list:
        """The entry parameters' leaves (objects with ``path``, ``shape``, ``dtype``, ``nbytes``), in
        the order ``execute`` feeds them; ``BadInput`` when the module cannot take random inputs."""

    def compiles(self, module) -> bool:
        """True when the full pipeline (codegen included) accepts the module; ``PassFailed`` if not."""

    def execute(self, module, seed: int = 0, floats: str = "normal", int_high: int = 4) -> list:
        """Run the fully compiled module once on seeded random inputs; every output as numpy."""

    def time(self, module, seed: int = 0, repeats: int = 5, warmup: int = 1, min_seconds: float = 0.0,
             **options) -> dict:
        """Wall time of the fully compiled module: ``seconds`` (per run, one per sample; a sample is
        a calibrated loop of >= ``min_seconds``), ``median``, ``min``, ``mad``, ``iqr``, ``inner``."""

    def time_ab(self, a, b, seed: int = 0, rounds: int = 30, warmup: int = 2, min_seconds: float = 0.01,
                **options) -> dict:
        """Two modules timed interleaved (A B, B A, ...) in one worker after one compile each, as
        ``autotune.core.stats`` needs for a claim: ``a``/``b`` lists of per-run seconds, one per round."""

    def close(self) -> None:
        """Stop the workers."""


def available() -> dict[str, str]:
    """Backend name -> ``module:Class``: the built-ins, then third-party entry points."""
    return plugins.names(BUILTIN, ENTRY_POINT_GROUP)


def default_name() -> str:
    return os.environ.get("AUTOTUNE_BACKEND") or DEFAULT_BACKEND


def get(name: str | None = None, **options) -> Backend:
    """Construct a backend by name (imported lazily, so listing names stays cheap)."""
    name = name or default_name()
    return plugins.load("backend", name, available())(**options)
