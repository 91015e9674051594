"""Use tuning records inside a JAX program: ``jax.jit`` compiles pick up tuned sequences.

    records = [autotune.TuningRecord.load("tuned.json")]
    with autotune.jax.use(records):
        step = jax.jit(train_step)
        step(params, batch)          # compiled from the tuned module when its fingerprint matches

How, and why this way. jaxlib offers ``jax.extend.xla.register_hlo_module_transformation``, but
its callback sees a module only at the pre-scheduler stage, i.e. *after* XLA's HLO pipeline has
run: the original program can no longer be recognised (its fingerprint is that of the optimised
module) and a pass sequence can no longer be run *instead of* the default one. So the hook works
one level up, at the single function through which every ``jax.jit`` compile passes in the pinned
jax (``jax._src.compiler.backend_compile_and_load``): it converts the lowered StableHLO to HLO,
normalises and fingerprints it like ``autotune.load`` does, and when a record matches, applies the
recorded sequence (in autotune's crash-isolated workers, through the cache) and hands XLA the
tuned module to compile with its full pipeline. Everything else compiles untouched.

Limits: compiles already in JAX's caches are not redone (``use`` clears JAX's in-memory caches on
entry unless ``clear_caches=False``); multi-device (sharded) compiles are passed through.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from autotune.core.record import TuningRecord


@dataclass
class HookStats:
    """What the hook did, for tests and for users who want to know."""

    seen: list[str] = field(default_factory=list)  # normalised fingerprints of every compile seen
    applied: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)  # (fingerprint, sequence)
    passed_through: int = 0
    errors: list[str] = field(default_factory=list)


class _Hook:
    def __init__(self, records: Iterable[TuningRecord | str | Path], cache, workers: int, strict: bool):
        recs = [r if isinstance(r, TuningRecord) else TuningRecord.load(r) for r in records]
        self.records = {fp: r for r in recs for fp in r.applies_to}  # a fleet record: every member
        self.cache, self.workers, self.strict = cache, workers, strict
        self.stats = HookStats()
        self._session = None
        self._lock = threading.RLock()

    @property
    def session(self):
        if self._session is None:
            from autotune.api import Session

            self._session = Session(self.cache, self.workers)
        return self._session

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def compile(self, original, backend, module, executable_devices, options, host_callbacks):
        if len(executable_devices) != 1 or getattr(backend, "platform", "cpu") != "cpu":
            self.stats.passed_through += 1
            return original(backend, module, executable_devices, options, host_callbacks)
        with self._lock:
            try:
                tuned_mlir = self._tuned(module)
            except Exception as exc:  # never break the user's program over a tuning problem
                if self.strict:
                    raise
                self.stats.errors.append(f"{type(exc).__name__}: {exc}")
                tuned_mlir = None
        if tuned_mlir is None:
            self.stats.passed_through += 1
            return original(backend, module, executable_devices, options, host_callbacks)
        if host_callbacks:
            return backend.compile_and_load(tuned_mlir, executable_devices=executable_devices,
                                            compile_options=options, host_callbacks=host_callbacks)
        return backend.compile_and_load(tuned_mlir, executable_devices=executable_devices, compile_options=options)

    def _tuned(self, module) -> bytes | None:
        from jax._src.interpreters import mlir as jax_mlir
        from jax._src.lib import _jax

        from autotune.pipelines.xla import hlo, loader

        proto = hlo.from_mlir(jax_mlir.module_to_bytecode(module))
        root = self.session.normalize(loader.module_from_proto(proto))
        self.stats.seen.append(root.fingerprint)
        record = self.records.get(root.fingerprint)
        if record is None:
            return None
        tuned = self.session.apply(root, record.sequence)
        self.stats.applied.append((root.fingerprint, tuple(record.sequence)))
        return _jax.mlir.hlo_to_stablehlo(tuned.proto)


_active: list[_Hook] = []


@contextlib.contextmanager
def use(records: Iterable[TuningRecord | str | Path], cache: str | Path | None = None, workers: int = 1,
        clear_caches: bool = True, strict: bool = False) -> Iterator[HookStats]:
    """Apply ``records`` to matching ``jax.jit`` compiles inside the ``with`` block.

    Yields ``HookStats`` (which compiles were seen, which were tuned). ``strict=True`` raises
    instead of falling back to the untuned compile when tuning a matching module fails.
    """
    import jax
    from jax._src import compiler

    hook = _Hook(records, cache, workers, strict)
    original = compiler.backend_compile_and_load

    def patched(backend, module, executable_devices, options, host_callbacks):
        return hook.compile(original, backend, module, executable_devices, options, host_callbacks)

    if clear_caches:
        jax.clear_caches()
    compiler.backend_compile_and_load = patched
    _active.append(hook)
    try:
        yield hook.stats
    finally:
        compiler.backend_compile_and_load = original
        _active.remove(hook)
        hook.close()
        if clear_caches:
            jax.clear_caches()
