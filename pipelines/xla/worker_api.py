"""The requests an XLA worker answers, as one typed interface both sides keep to.

``XlaPipeline`` calls its workers through ``BackendBase.remote`` typed by these classes, never by
request names in strings; the contract test checks ``worker.XlaWorker`` and
``gpu_worker.XlaGpuWorker`` against them, signatures included. Why a separate file: the handlers
import jax and set up XLA when they load; this interface is what the driver process may import.
Every argument crosses a process boundary, so each is plain bytes, numbers, strings or lists.
"""

from __future__ import annotations

from typing import Protocol

from autotune.core.backend import StepRequests


class XlaRequests(StepRequests, Protocol):
    """The CPU worker (``worker.XlaWorker``): steps, metrics, full compiles, runs and timings."""

    def discover(self) -> list[str]:
        """Every pass the pipeline runs, as per-pass dump names (the inventory's source)."""

    def trace(self, proto: bytes, action: str) -> list[str]:
        """The per-pass dump names when ``action`` runs alone (which passes really ran)."""

    def run_plain(self, text: str, actions: list[str]) -> list[str | None]:
        """Each action's module as text, applied in order (a check of the step path, for tests)."""

    def execute(self, proto: bytes, seed: int = 0, floats: str = "normal", int_high: int = 4, options=None) -> list:
        """Full default compile (with compiler ``options``, ``[(name, value)]``), one run on seeded random
        inputs; every output as numpy."""

    def execute_reference(self, proto: bytes, seed: int = 0, floats: str = "normal", int_high: int = 4):
        """The module with bf16/f16 widened to f32, run on ``execute``'s inputs."""

    def time(self, proto: bytes, seed: int = 0, repeats: int = 5, warmup: int = 1, floats: str = "normal",
             int_high: int = 4, min_seconds: float = 0.0, options=None) -> dict:
        """``warmup`` untimed and ``repeats`` timed samples of the fully compiled module."""

    def time_ab(self, proto_a: bytes, proto_b: bytes, seed: int = 0, rounds: int = 30, warmup: int = 2,
                floats: str = "normal", int_high: int = 4, min_seconds: float = 0.01, options_a=None,
                options_b=None, stop_above=None, min_rounds: int = 3, b_first: bool = False) -> dict:
        """Both modules compiled once (A first unless ``b_first``), then timed interleaved round by round
        (raced: stopped once B's ratio to A provably lies above ``stop_above``)."""

    def profile(self, proto: bytes, rounds: int = 5, seed: int = 0, floats: str = "normal", int_high: int = 4,
                options=None, handover: bool = True) -> dict:
        """Full default compile (with compiler ``options``), ``rounds`` untraced and traced runs: the step
        and each thunk's share of it, traced back to the input's instructions (``profiling.profile``);
        ``handover`` False: without the probe of the time outside XLA's run."""

    def calibrate(self) -> dict:
        """This machine's execution rates (``flops_per_s``, ``bytes_per_s``)."""

    def cost(self, proto: bytes) -> dict:
        """XLA's cost analysis of the module as given (flops, transcendentals, bytes)."""

    def stand_ins(self, proto: bytes, extra: tuple = ()) -> tuple:
        """``(proto, fingerprint, replaced, targets)``: host stand-ins for custom calls."""

    def compiles(self, proto: bytes, options=None) -> bool:
        """True when the full pipeline, codegen included, accepts the module; ``PassFailed`` if not."""

    def sites(self, proto: bytes, options=None) -> list:
        """Where per-site decisions can be made (``sites.find_sites``): ``[name, opcode, shape, default,
        choices]`` per site of the module XLA optimises with ``options``."""

    def probe_options(self, pairs: list) -> list:
        """Each compiler option ``(name, value)`` compiled alone on a tiny module: None where XLA accepts
        it, else its refusal (``options.probe``)."""

    def host_compiles(self, proto: bytes, options=None) -> bool:
        """The host CPU's full compile, kept for ``execute``/``time`` of the same module (for a GPU
        target's worker, not ``compiles``); ``PassFailed`` if it fails."""

    def memory(self, proto: bytes, options=None) -> dict:
        """Bytes per device the fully compiled module needs (XLA's buffer assignment), nothing run."""


class XlaGpuRequests(XlaRequests, Protocol):
    """A GPU target's worker (``gpu_worker.XlaGpuWorker``): the CPU worker's requests, compiled for
    the GPU where they judge, plus the module a whole deviceless compile leaves."""

    def gpu_module(self, proto: bytes) -> bytes:
        """The module as XLA's whole GPU pipeline leaves it (scheduled, copies inserted)."""
