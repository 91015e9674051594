"""What a GPU-compiled module costs, read off its HLO: kernels launched and a roofline estimate.

The input is the module XLA's GPU pipeline produced (``gpu_worker.py`` reads it after fusion, where
every instruction of the entry computation that does work is a kernel: a fusion, a library call,
a copy or a collective). Two figures, both per launch and weighted by loop trip counts where XLA
knows them (``known_trip_count`` on a ``while``):

* ``kernels``: kernel launches of one execution of the module.
* ``estimate_us``: a roofline time per kernel, ``max(flops / peak, bytes / bandwidth) +
  LAUNCH_US``, summed, plus ``LOOP_ITERATION_US`` per loop iteration (the condition's result goes
  back to the host). ``bytes`` are the kernel's operands and results, except that a fused parameter
  read only through slices (``slice``, ``dynamic-slice``, ``gather``) counts what the slices read and
  an in-place ``dynamic-update-slice`` counts its update (a KV cache is not streamed whole per
  token). ``flops`` count dots (2 x output x contraction, at the tensor-core rate of their element
  type) and one per output element of everything else (at the CUDA cores' FP32 rate).

A model, stated as one: XLA's own cost model is not reachable from Python, the figures here come
from the device's published peak rates (``targets.GpuSpec``), and an estimate is trusted only as far
as its measured agreement with GPU time (``bench/gpu.py``).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from autotune.pipelines.xla.structure import called_computations, parse_computations

#: Fixed cost of one kernel launch (seconds x 1e6): a launch from a CUDA graph or stream, as XLA's
#: GPU performance model also charges one.
LAUNCH_US = 2.0
#: One iteration of a device ``while``: the condition kernel's result is copied to the host.
LOOP_ITERATION_US = 5.0
#: Tensor-core throughput over the CUDA cores' FP32 rate, by compute capability major and dot input
#: type (dense; NVIDIA's published figures: A100 156/312 TF of 19.5, H100 495/989/1979 of 67, B200
#: 1.1/2.25/4.5 PF of 75). f32 dots run as TF32, jax's default precision on these GPUs.
TENSOR_CORE = {8: {"tf32": 8.0, "16": 16.0, "8": 16.0}, 9: {"tf32": 7.4, "16": 14.8, "8": 29.5},
               10: {"tf32": 15.0, "16": 30.0, "8": 60.0}}

#: Instructions that launch nothing (views, tuples, bookkeeping, the second half of async pairs).
FREE = frozenset({
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "add-dependency",
    "opt-barrier", "domain", "partition-id", "replica-id", "copy-done", "send-done", "recv-done",
    "all-reduce-done", "all-gather-done", "collective-permute-done", "async-done", "async-update",
})
_SLICING = frozenset({"slice", "dynamic-slice", "gather"})
_ARRAY = re.compile(r"\b(pred|s4|s8|s16|s32|s64|u4|u8|u16|u32|u64|f16|bf16|f32|f64|c64|c128|f8\w*|f4\w*)\[([\d,]*)\]")
_BYTES = {"pred": 1, "s4": 0.5, "s8": 1, "s16": 2, "s32": 4, "s64": 8, "u4": 0.5, "u8": 1, "u16": 2, "u32": 4,
          "u64": 8, "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16}
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
_ENTRY = re.compile(r"^ENTRY\s+%?([\w.\-]+)", re.M)
_CONTRACT = re.compile(r"lhs_contracting_dims=\{([\d,]*)\}")
_CONTRACT_JSON = re.compile(r'"lhs_contracting_dimensions":\[([^\]]*)\]')


@dataclass(frozen=True)
class GpuCost:
    kernels: int
    estimate_us: float

    def to_dict(self) -> dict:
        return {"kernels": self.kernels, "estimate_us": round(self.estimate_us, 3)}


def arrays(shape: str) -> list[tuple[str, tuple[int, ...]]]:
    """Every array in a shape's text, e.g. ``(f32[4,8]{1,0}, s32[])`` -> [("f32", (4, 8)), ("s32", ())]."""
    return [(t, tuple(int(d) for d in dims.split(",") if d)) for t, dims in _ARRAY.findall(shape)]


def nbytes(shape: str) -> float:
    return sum(_BYTES.get(t, 1 if not t.startswith("f4") else 0.5) * math.prod(d) for t, d in arrays(shape))


def elements(shape: str) -> int:
    return sum(math.prod(d) for _, d in arrays(shape))


class _Model:
    """One module's computations and the device's rates; ``cost(computation)`` walks one."""

    def __init__(self, text: str, spec):
        self.comps = parse_computations(text)
        self.shapes = {c: {i[0]: i[1] for i in insts} for c, insts in self.comps.items()}
        self.spec = spec
        self.fp32 = spec.fp32_flops
        self.tc = TENSOR_CORE.get(spec.compute_capability[0], TENSOR_CORE[9] if spec.compute_capability[0] > 9
                                  else {"tf32": 1.0, "16": 2.0, "8": 2.0})

    def cost(self, comp: str, depth: int = 0) -> tuple[float, float]:
        """(kernel launches, microseconds) of one execution of computation ``comp``."""
        kernels, us = 0.0, 0.0
        if depth > 32 or comp not in self.comps:
            return kernels, us
        for name, shape, opcode, operands, attrs, root in self.comps[comp]:
            if opcode in FREE:
                continue
            called = dict(called_computations(attrs))
            if opcode == "while":
                m = _TRIP.search(attrs)
                trips = int(m.group(1)) if m else 1
                bk, bu = self.cost(called.get("body", ""), depth + 1)
                ck, cu = self.cost(called.get("condition", ""), depth + 1)
                kernels += trips * bk + (trips + 1) * ck
                us += trips * (bu + LOOP_ITERATION_US) + (trips + 1) * cu
            elif opcode == "conditional":
                branches = [c for role, c in called_computations(attrs)]
                costs = [self.cost(b, depth + 1) for b in branches] or [(0.0, 0.0)]
                worst = max(costs, key=lambda kc: kc[1])
                kernels += 1 + worst[0]
                us += LAUNCH_US + worst[1]
            elif opcode == "call":
                ck, cu = self.cost(called.get("to_apply", ""), depth + 1)
                kernels += ck
                us += cu
            else:
                kernels += 1
                us += self.kernel_us(comp, name, shape, opcode, operands, attrs, called.get("calls"))
        return kernels, us

    def kernel_us(self, comp, name, shape, opcode, operands, attrs, fused) -> float:
        shapes = self.shapes[comp]
        operand_bytes = [nbytes(shapes.get(o, "")) for o in operands]
        out_bytes = nbytes(shape)
        flops, dot_flops, dot_rate = float(elements(shape)), 0.0, self.fp32
        if opcode == "fusion" and fused in self.comps:
            operand_bytes, out_bytes = self.fused_bytes(fused, operand_bytes, out_bytes)
            flops, dot_flops, dot_rate = self.fused_flops(fused)
        elif opcode == "custom-call" and ("gemm" in attrs or "matmul" in attrs.lower()):
            dot_flops, dot_rate = self.gemm_flops(comp, shape, operands, attrs)
            flops = 0.0
        elif opcode in ("copy", "copy-start"):
            flops = 0.0
        seconds = max(flops / self.fp32 + dot_flops / dot_rate, (sum(operand_bytes) + out_bytes) / self.spec.memory_bandwidth)
        return 1e6 * seconds + LAUNCH_US

    def fused_bytes(self, fused: str, operand_bytes: list[float], out_bytes: float) -> tuple[list[float], float]:
        insts = self.comps[fused]
        users: dict[str, list[tuple]] = {}
        for inst in insts:
            for o in inst[3]:
                users.setdefault(o, []).append(inst)
        params = {}
        for name, shape, opcode, operands, attrs, root in insts:
            if opcode == "parameter":
                m = re.match(r"\s*(\d+)", attrs)
                if m:
                    params[int(m.group(1))] = name
        out = list(operand_bytes)
        for i, pname in params.items():
            if i >= len(out):
                continue
            readers = self._through_views(pname, users)
            if readers and all(r[2] in _SLICING for r in readers):
                out[i] = min(out[i], sum(nbytes(r[1]) for r in readers))
        for name, shape, opcode, operands, attrs, root in insts:
            if opcode == "dynamic-update-slice" and operands and len(operands) > 1:
                base = self._view_source(operands[0], insts)
                if base in params.values():
                    i = next(k for k, v in params.items() if v == base)
                    update = nbytes(next((x[1] for x in insts if x[0] == operands[1]), ""))
                    if i < len(out):
                        out[i] = min(out[i], update)
                    out_bytes = max(0.0, out_bytes - nbytes(shape) + update)
        return out, out_bytes

    @staticmethod
    def _through_views(name: str, users: dict) -> list[tuple]:
        """The instructions that read ``name``, looking through bitcasts and reshapes."""
        out, todo, seen = [], [name], set()
        while todo:
            n = todo.pop()
            for u in users.get(n, []):
                if u[0] in seen:
                    continue
                seen.add(u[0])
                if u[2] in ("bitcast", "reshape"):
                    todo.append(u[0])
                else:
                    out.append(u)
        return out

    @staticmethod
    def _view_source(name: str, insts: list[tuple]) -> str:
        by_name = {i[0]: i for i in insts}
        while name in by_name and by_name[name][2] in ("bitcast", "reshape") and by_name[name][3]:
            name = by_name[name][3][0]
        return name

    def fused_flops(self, fused: str) -> tuple[float, float, float]:
        flops, dots, rate = 0.0, 0.0, self.fp32
        shapes = self.shapes[fused]
        for name, shape, opcode, operands, attrs, root in self.comps[fused]:
            if opcode in FREE or opcode in ("bitcast", "reshape", "broadcast", "slice", "dynamic-slice", "iota"):
                continue
            if opcode == "dot" and operands:
                lhs = arrays(shapes.get(operands[0], ""))
                m = _CONTRACT.search(attrs)
                k = math.prod(lhs[0][1][int(d)] for d in m.group(1).split(",") if d) if (lhs and m) else 1
                dots += 2.0 * elements(shape) * k
                rate = self.dot_rate(lhs[0][0] if lhs else "f32")
            else:
                flops += elements(shape)
        return flops, dots, rate

    def gemm_flops(self, comp: str, shape: str, operands: tuple, attrs: str) -> tuple[float, float]:
        lhs = arrays(self.shapes[comp].get(operands[0], "")) if operands else []
        m = _CONTRACT_JSON.search(attrs)
        dims = [int(d.strip().strip('"')) for d in m.group(1).split(",") if d.strip()] if m else []
        k = math.prod(lhs[0][1][d] for d in dims if d < len(lhs[0][1])) if lhs else 1
        result = arrays(shape)
        out = math.prod(result[0][1]) if result else 0
        return 2.0 * out * k, self.dot_rate(lhs[0][0] if lhs else "f32")

    def dot_rate(self, dtype: str) -> float:
        if dtype in ("f32",):
            return self.fp32 * self.tc["tf32"]
        if dtype in ("bf16", "f16"):
            return self.fp32 * self.tc["16"]
        if dtype.startswith(("f8", "s8", "u8")):
            return self.fp32 * self.tc["8"]
        return self.fp32  # f64 and the rest: the CUDA cores


def analyse(text: str, spec) -> GpuCost:
    """Kernels and roofline microseconds of one execution of a GPU-compiled module's HLO text."""
    m = _ENTRY.search(text)
    model = _Model(text, spec)
    entry = m.group(1) if m else next(iter(model.comps), "")
    kernels, us = model.cost(entry)
    return GpuCost(int(round(kernels)), us)


def dumps(cost: GpuCost) -> str:
    return json.dumps(cost.to_dict(), sort_keys=True)
