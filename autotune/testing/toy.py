"""A toy compiler backend: the whole Backend contract in pure Python, on sums of products.

Why it exists: to prove that the engine (evaluator, cache, worker pool, strategies, tuner,
validation) depends on ``autotune.core.backend.Backend`` and nothing else. The shared contract
tests (``tests/test_backend_contract.py``) run on it and on XLA alike; it also gives a plugin author
a backend that starts in milliseconds.

A program is a sum of terms, each a product of factors: ``x*1 + 0 + y*2 + x + x``. Passes rewrite it:

* ``fold-one``    drops ``*1`` factors;
* ``drop-zero``   drops ``0`` terms (and terms with a ``0`` factor);
* ``combine``     merges equal terms (``x + x`` -> ``2*x``);
* ``split``       the inverse (``2*x`` -> ``x + x``): it grows the program, and is why order matters;
* ``canon``       sorts factors and terms (a canonical form other passes are written against);
* ``shuffle-bug`` a miscompilation on purpose: turns ``x*y`` into ``x+y`` (validation must catch it);
* ``abort``       an internal compiler error: kills the worker process (``os.abort``) on any program
                  containing ``boom`` (crash isolation must contain it).

A module file (``.toy``) holds one program, e.g. ``2*x + x + x + y*1``; from the command line::

    autotune run --backend toy --strategy greedy --budget 12 prog.toy      # also --executor ray
    autotune run --backend toy --modules progs/                           # a fleet of .toy files
    autotune explain --backend toy RUN_ID

The default ordering runs ``canon, fold-one, drop-zero, combine, canon``. A program's metrics count its
tokens (variables, numbers and operators) as "instructions". Executing a program evaluates it on
seeded random values of its variables.
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from collections import Counter
from dataclasses import replace

import numpy as np

from autotune.core.backend import DEFAULT, IDENTITY, BackendBase, Instruction, PassInfo, StepOut
from autotune.core.metrics import Metrics
from autotune.core.module import Module
from autotune.core.workers import StopJob
from autotune.errors import BadInput, PassFailed, UnknownName

PASSES = ("fold-one", "drop-zero", "combine", "split", "canon", "shuffle-bug", "abort")
DEFAULT_ORDER = ("canon", "fold-one", "drop-zero", "combine", "canon")
WORKER = "autotune.testing.toy:ToyWorker"


# ---- the language ------------------------------------------------------------------------------------
def parse(text: str) -> list[list[str]]:
    """``"x*1 + 0"`` -> ``[["x", "1"], ["0"]]``; BadInput for anything that is not a sum of products."""
    terms = []
    for raw in text.replace(" ", "").replace("\n", "").split("+"):
        factors = raw.split("*")
        if not raw or any(not f or not (f.isalnum() or f.isdigit()) for f in factors):
            raise BadInput(f"not a toy program: {text[:60]!r}")
        terms.append(factors)
    return terms


def show(terms: list[list[str]]) -> str:
    return " + ".join("*".join(t) for t in terms) if terms else "0"


def _canon(terms):
    return sorted((sorted(t, key=lambda f: (not f.isdigit(), f)) for t in terms), key=lambda t: ("*".join(t)))


def _fold_one(terms):
    out = []
    for t in terms:
        kept = [f for f in t if f != "1"]
        out.append(kept or ["1"])
    return out


def _drop_zero(terms):
    return [t for t in terms if "0" not in t] or [["0"]]


def _combine(terms):
    counts = Counter(tuple(t) for t in terms)
    out = []
    for t, n in counts.items():
        out.append(([str(n)] if n > 1 else []) + list(t))
    return out


def _split(terms):
    out = []
    for t in terms:
        if len(t) > 1 and t[0].isdigit() and 1 < int(t[0]) <= 4:
            out.extend([t[1:]] * int(t[0]))
        else:
            out.append(t)
    return out


def _shuffle_bug(terms):
    out = []
    for t in terms:
        names = [f for f in t if not f.isdigit()]
        if len(names) >= 2:
            out.extend([[f] for f in t])  # x*y -> x + y: a wrong answer, not a crash
        else:
            out.append(t)
    return out


REWRITES = {"fold-one": _fold_one, "drop-zero": _drop_zero, "combine": _combine, "split": _split,
            "canon": _canon, "shuffle-bug": _shuffle_bug}


def apply_pass(name: str, text: str) -> str:
    if name == "abort":
        if "boom" in text:
            os.abort()  # what an XLA CHECK failure does to the process
        return text
    if name == IDENTITY:
        return show(parse(text))
    if name == DEFAULT:
        for p in DEFAULT_ORDER:
            text = apply_pass(p, text)
        return text
    return show(REWRITES[name](parse(text)))


def fingerprint(text: str) -> str:
    return hashlib.sha256(show(parse(text)).encode()).hexdigest()[:32]


def metrics(text: str) -> dict:
    terms = parse(text)
    ops = Counter()
    for t in terms:
        for f in t:
            ops["constant" if f.isdigit() else "parameter"] += 1
        ops["multiply"] += len(t) - 1
    ops["add"] += len(terms) - 1
    return {"instructions": sum(ops.values()), "opcodes": dict(ops), "flops": float(ops["multiply"] + ops["add"]),
            "transcendentals": 0.0, "bytes_accessed": float(8 * sum(ops.values()))}


def variables(text: str) -> list[str]:
    return sorted({f for t in parse(text) for f in t if not f.isdigit()})


def evaluate(text: str, values: dict[str, float]) -> float:
    total = 0.0
    for t in parse(text):
        prod = 1.0
        for f in t:
            prod *= float(f) if f.isdigit() else values[f]
        total += prod
    return total


# ---- the worker side ------------------------------------------------------------------------------------
class ToyWorker:
    """The handler a worker process serves (``autotune.core.workers``); methods are requests."""

    def run_steps(self, proto: bytes, key: str | None, actions: list[str]):
        text = proto.decode()
        for action in actions:
            t0 = time.perf_counter()
            try:
                text = apply_pass(action, text)
            except BadInput as exc:
                yield StepOut(action, "error", message=str(exc), seconds=time.perf_counter() - t0)
                return
            yield StepOut(action, "ok", fingerprint(text), text.encode(), metrics(text),
                          seconds=time.perf_counter() - t0)

    def measure(self, proto: bytes) -> dict:
        text = proto.decode()
        return {"fingerprint": fingerprint(text), **metrics(text)}

    def ping(self) -> int:
        return os.getpid()


# ---- the backend ------------------------------------------------------------------------------------------
class ToyParam:
    def __init__(self, name: str):
        self.path, self.shape, self.dtype = name, (), np.dtype(np.float64)

    @property
    def nbytes(self) -> int:
        return 8


class ToyBackend(BackendBase):
    """``autotune.core.backend.Backend`` for toy programs (registered as ``toy``).

    Module files are program text (``.toy``, e.g. ``x*1 + 0 + y*z``), one program per file.
    """

    name = "toy"
    version = "toy:1"
    compiler_version = "toy-compiler-1.0"
    suffixes = (".toy",)
    worker = WORKER

    def __init__(self, workers: int = 1, cache=None, step_timeout: float = 30.0, executor=None, target=None, **_):
        super().__init__(workers, cache, step_timeout, executor, target)

    @staticmethod
    def module(text: str, name: str = "toy") -> Module:
        return Module(name, show(parse(text)).encode(), fingerprint(text))

    def parse(self, data: bytes, suffix: str, name: str | None) -> Module:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise BadInput("not a toy program: not UTF-8 text") from None
        return self.module(text.strip(), name or "toy")

    def to_text(self, module: Module) -> str:
        return module.proto.decode() + "\n"

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

    def passes(self) -> tuple[str, ...]:
        return PASSES

    def describe(self) -> list[PassInfo]:
        return [PassInfo(p, "toy", "pass") for p in PASSES]

    def check_passes(self, names) -> tuple[str, ...]:
        out = tuple(names)
        for n in out:
            if n not in PASSES:
                raise UnknownName("pass", n, list(PASSES))
        return out

    def _one(self, module: Module, action: str) -> Module:
        for _, item in self.pool.run_many([self.step_job(module.proto, module.fingerprint, [action])]):
            if item is StopJob:
                break
            if isinstance(item, BaseException):
                raise item
            if item.status != "ok":
                raise PassFailed(item.message or "failed", "error", action)
            return Module(module.name, item.proto, item.fingerprint)
        raise PassFailed("no result", "crash", action)

    def normalize(self, module: Module) -> Module:
        return self._one(module, "<identity>")

    def measure(self, module: Module) -> Metrics:
        return Metrics.from_dict(self.pool.call("measure", module.proto, timeout=self.step_timeout))

    def parameter_specs(self, module: Module) -> list[ToyParam]:
        return [ToyParam(v) for v in variables(module.proto.decode())]

    def compiles(self, module: Module) -> bool:
        parse(module.proto.decode())
        return True

    def execute(self, module: Module, seed: int = 0, floats: str = "normal", int_high: int = 4) -> list:
        text = module.proto.decode()
        rng = random.Random(seed)
        values = {v: rng.gauss(0.0, 1.0) for v in variables(text)}
        return [np.asarray(evaluate(text, values), dtype=np.float64)]

    def time(self, module: Module, seed: int = 0, repeats: int = 5, warmup: int = 1, **_) -> dict:
        seconds = []
        for i in range(warmup + repeats):
            t0 = time.perf_counter()
            self.execute(module, seed)
            if i >= warmup:
                seconds.append(time.perf_counter() - t0)
        arr = np.asarray(seconds)
        return {"seconds": seconds, "median": float(np.median(arr)), "min": float(arr.min()),
                "p90": float(np.percentile(arr, 90)), "mean": float(arr.mean()), "repeats": repeats,
                "warmup": warmup}

    def time_ab(self, a: Module, b: Module, seed: int = 0, rounds: int = 30, warmup: int = 2, **_) -> dict:
        """Interleaved A/B timing (A B, B A, ...): per-run seconds per round of each."""
        def once(m):
            t0 = time.perf_counter()
            self.execute(m, seed)
            return time.perf_counter() - t0

        for _ in range(warmup):
            once(a), once(b)
        sa, sb = [], []
        for r in range(max(2, int(rounds))):
            if r % 2 == 0:
                sa.append(once(a)), sb.append(once(b))
            else:
                sb.append(once(b)), sa.append(once(a))
        return {"a": sa, "b": sb, "rounds": len(sa), "inner": 1, "warmup": warmup}

