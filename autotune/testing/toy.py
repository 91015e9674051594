"""A toy compiler backend: the Backend contract in pure Python, on sums of products.

Why it exists: to prove that the engine (evaluator, cache, worker pool, strategies, tuner,
validation) depends on ``autotune.core.backend`` and nothing else. The shared contract tests
(``tests/test_backend_contract.py``) run on it and on XLA alike; it is also the template a plugin
author starts from: this file is the whole adapter, ``toy_compiler.py`` the compiler it adapts.

A program is a sum of terms, each a product of factors: ``x*1 + 0 + y*2 + x + x``. Passes rewrite it:

* ``fold-one``    drops ``*1`` factors;
* ``drop-zero``   drops ``0`` terms (and terms with a ``0`` factor);
* ``combine``     merges equal terms (``x + x`` -> ``2*x``);
* ``split``       the inverse (``2*x`` -> ``x + x``): it grows the program, and is why order matters;
* ``canon``       sorts factors and terms (a canonical form other passes are written against);
* ``shuffle-bug`` a miscompilation on purpose: turns ``x*y`` into ``x+y`` (validation must catch it);
* ``abort``       an internal compiler error: kills the worker process (``os.abort``) on any program
                  containing ``boom`` (crash isolation must contain it).

A module file (``.toy``) holds one program; ``autotune run --backend toy --strategy greedy prog.toy``
tunes it (``--executor ray``, ``--modules progs/`` and ``explain`` work as for XLA). The default
ordering runs ``canon, fold-one, drop-zero, combine, canon``; a program's "instructions" are its
tokens; executing one evaluates it on seeded random values of its variables.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import replace

import numpy as np

from autotune.core.backend import IDENTITY, BackendBase, Instruction, PassInfo, StepOut
from autotune.core.metrics import Metrics
from autotune.core.module import Module
from autotune.core.stats import summarize
from autotune.errors import BadInput
from autotune.testing.toy_compiler import PASSES, apply_pass, evaluate, fingerprint, metrics, parse, show, variables


class ToyWorker:
    """The handler a worker process serves (``autotune.core.workers``): ``StepRequests``."""

    def run_steps(self, proto: bytes, key: str | None, actions: list[str]):
        text = proto.decode()
        for action in actions:
            t0 = time.perf_counter()
            try:
                text = apply_pass(action, text)
            except BadInput as exc:
                yield StepOut(action, "error", message=str(exc), seconds=time.perf_counter() - t0)
                return
            yield StepOut(action, "ok", fingerprint(text), text.encode(), metrics(text), seconds=time.perf_counter() - t0)

    def measure(self, proto: bytes) -> dict:
        return {"fingerprint": fingerprint(proto.decode()), **metrics(proto.decode())}

    def ping(self) -> int:
        return os.getpid()


class ToyParam:
    """One input of a program: a float64 scalar per variable."""

    def __init__(self, name: str):
        self.path, self.shape, self.dtype, self.nbytes = name, (), np.dtype(np.float64), 8


class ToyBackend(BackendBase):
    """``autotune.core.backend.Backend`` for toy programs (registered as ``toy``); module files are
    program text (``.toy``). It executes and times programs in this process (microseconds each, so
    it neither estimates nor bounds a run) and explains by listing tokens; no regions, no stand-ins."""

    name = "toy"
    compiler = "toy"
    version = "toy:1"
    compiler_version = "toy-compiler-1.0"
    suffixes = (".toy",)
    worker = "autotune.testing.toy:ToyWorker"
    capabilities = frozenset({"execute", "time", "explain"})

    def __init__(self, workers: int = 1, cache=None, step_timeout: float = 30.0, executor=None, target=None, **_):
        super().__init__(workers, cache, step_timeout, executor, target)

    @staticmethod
    def module(text: str, name: str = "toy") -> Module:
        return Module(name, show(parse(text)).encode(), fingerprint(text))

    def passes(self) -> tuple[str, ...]:
        return PASSES

    def describe(self) -> list[PassInfo]:
        return [PassInfo(p, "toy", "pass") for p in PASSES]

    def parse(self, data: bytes, suffix: str, name: str | None) -> Module:
        try:
            return self.module(data.decode("utf-8").strip(), name or "toy")
        except UnicodeDecodeError:
            raise BadInput("not a toy program: not UTF-8 text") from None

    def to_text(self, module: Module) -> str:
        return module.proto.decode() + "\n"

    def normalize(self, module: Module) -> Module:
        return self.run_one(module, IDENTITY)

    def measure(self, module: Module) -> Metrics:
        return Metrics.from_dict(self.remote().measure(module.proto))

    # ---- capability "execute" --------------------------------------------------------------------
    def parameter_specs(self, module: Module) -> list[ToyParam]:
        return [ToyParam(v) for v in variables(module.proto.decode())]

    def compiles(self, module: Module) -> bool:
        parse(module.proto.decode())
        return True

    def execute(self, module: Module, seed: int = 0, floats: str = "normal", int_high: int = 4,
                timeout: float | None = None) -> list:
        text = module.proto.decode()
        rng = random.Random(seed)
        values = {v: rng.gauss(0.0, 1.0) for v in variables(text)}
        return [np.asarray(evaluate(text, values), dtype=np.float64)]

    # ---- capability "time" -------------------------------------------------------------------------
    def _once(self, module: Module, seed: int) -> float:
        t0 = time.perf_counter()
        self.execute(module, seed)
        return time.perf_counter() - t0

    def time(self, module: Module, seed: int = 0, repeats: int = 5, warmup: int = 1, min_seconds: float = 0.0) -> dict:
        seconds = [self._once(module, seed) for _ in range(warmup + repeats)][warmup:]
        return {"seconds": seconds, **summarize(seconds), "repeats": repeats, "warmup": warmup, "inner": 1}

    def time_ab(self, a: Module, b: Module, seed: int = 0, rounds: int = 30, warmup: int = 2,
                min_seconds: float = 0.01, b_first: bool = False) -> dict:
        """Interleaved A/B timing (A B, B A, ...): per-run seconds per round of each (``b_first``: B warmed
        up first, as XLA's sets B up first)."""
        for _ in range(warmup):
            if b_first:
                self._once(b, seed), self._once(a, seed)
            else:
                self._once(a, seed), self._once(b, seed)
        sa, sb = [], []
        for r in range(max(2, int(rounds))):
            first, second = ((a, sa), (b, sb)) if r % 2 == 0 else ((b, sb), (a, sa))
            first[1].append(self._once(first[0], seed))
            second[1].append(self._once(second[0], seed))
        return {"a": sa, "b": sb, "rounds": len(sa), "inner": 1, "warmup": warmup}

    # ---- capability "explain" ----------------------------------------------------------------------
    def instructions(self, module: Module) -> list[Instruction]:
        """The program as a chain of binary operations, one per token counted as an instruction:
        a ``parameter``/``constant`` per factor, ``multiply`` between factors, ``add`` between terms."""
        out: list[Instruction] = []

        def emit(name: str, opcode: str, args: tuple[str, ...] = (), literal: str = "") -> str:
            sig = f"{opcode}({literal})" if literal else opcode
            out.append(Instruction("main", name, opcode, f"{name} = {opcode}({literal or ', '.join(args)})", sig, sig,
                                   args))
            return name

        total = None
        for i, term in enumerate(parse(module.proto.decode())):
            value = None
            for j, f in enumerate(term):
                leaf = emit(f"t{i}.{j}", "constant" if f.isdigit() else "parameter", literal=f)
                value = leaf if value is None else emit(f"t{i}.m{j}", "multiply", (value, leaf))
            total = value if total is None else emit(f"s{i}", "add", (total, value))
        if out:
            out[-1] = replace(out[-1], root=True)
        return out

    def reproduce(self, sequence) -> dict:
        return {"toy_passes": list(sequence)}
