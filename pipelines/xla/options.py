"""XLA's compiler options as a search space: the catalogue per target, and which of it the installed XLA takes.

The pass order is one way to change what XLA produces; its debug options are another (library fusions,
the scheduler, the vector width, one late pass switched off), and they move measured time module by
module, in both directions (``docs/options.md``; ``docs/xla-mechanics.md`` section 8). This module is
the catalogue: for each target the options worth searching, the candidate values of each (besides
XLA's own default, which is always a choice) and what each does, in the words of XLA's flag help.

Names and values change between XLA releases (``versions.py`` holds the names that moved for passes;
here nothing is assumed): ``probe`` compiles a tiny module once per name and value with the installed
compiler, and what it refuses (``No such compile option``, ``not a valid enum value``, a crash) is left
out of the space and said by ``autotune options``. The answer is remembered per compiler build like
the pass inventory (``machine_inventory``) and in the cache database.

Values are strings as XLA's flag parser reads them: ``'True'``/``'False'``, digits, full enum names,
repeated enums comma-separated and ``''`` to clear one (no library fusion of that library).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from autotune.core.options import OptionDim
from autotune.errors import PassFailed

#: Bumped when the catalogue changes: part of the remembered probe's key.
CATALOGUE_VERSION = 1

_LIBRARY_TYPES = ("DOT", "ELTWISE", "REDUCE", "INDIVIDUAL_DOT", "INDIVIDUAL_CONVOLUTION")
_LIBRARY_VALUES = ("", *(f"LIBRARY_FUSION_TYPE_{t}" for t in _LIBRARY_TYPES))
_BOOL = ("True", "False")


@dataclass(frozen=True)
class Entry:
    """One option of the catalogue: its values besides XLA's default, what it does, its group, whether it
    changes numerics by design (out of the space unless asked for), and whether it only matters to a
    partitioned step (collective combining)."""

    name: str
    values: tuple[str, ...]
    what: str
    group: str
    numerics: bool = False
    partitioned: bool = False


def _library(library: str, what: str) -> Entry:
    return Entry(f"xla_cpu_experimental_{library}_fusion_type", _LIBRARY_VALUES,
                 f"which ops XLA hands to {what} as library fusions ('' none; dots, elementwise, reductions, "
                 "single dots or convolutions)", "library fusion")


CPU: tuple[Entry, ...] = (
    _library("ynn", "YNNPACK"),
    _library("xnn", "XNNPACK"),
    _library("onednn", "oneDNN"),
    Entry("xla_cpu_experimental_xnn_graph_fusion_mode",
          ("XNN_GRAPH_FUSION_MODE_DISABLED", "XNN_GRAPH_FUSION_MODE_GREEDY", "XNN_GRAPH_FUSION_MODE_GREEDY_SLINKY"),
          "extract XNNPACK-compatible subgraphs greedily from the roots (with slinky: more ops)", "library fusion"),
    Entry("xla_cpu_use_xnnpack", _BOOL, "let XLA call XNNPACK at all", "library fusion"),
    Entry("xla_cpu_use_onednn", _BOOL, "let XLA call oneDNN at all", "library fusion"),
    Entry("xla_cpu_scheduler_type",
          ("CPU_SCHEDULER_TYPE_DEFAULT", "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED", "CPU_SCHEDULER_TYPE_CONCURRENCY_OPTIMIZED"),
          "how the instruction scheduler orders independent work: for memory or for concurrency", "scheduler"),
    Entry("xla_cpu_enable_concurrency_optimized_scheduler", _BOOL,
          "the concurrency-optimised scheduler (older switch of the same choice)", "scheduler"),
    Entry("xla_cpu_opt_preset", ("CPU_OPT_PRESET_DEFAULT", "CPU_OPT_PRESET_FAST_RUNTIME", "CPU_OPT_PRESET_FAST_COMPILE"),
          "XLA's optimisation preset: its default, fast runtime or fast compile", "codegen"),
    Entry("xla_cpu_prefer_vector_width", ("128", "256", "512"),
          "the vector width LLVM prefers in XLA's kernels (bits)", "codegen"),
    Entry("xla_cpu_use_fusion_emitters", _BOOL, "XLA's MLIR fusion emitters instead of the older ones", "codegen"),
    Entry("xla_cpu_disable_loop_unrolling", ("True",), "no loop unrolling in XLA's kernels", "codegen"),
    Entry("xla_cpu_flatten_after_fusion", _BOOL, "flatten the call graph again after fusion", "codegen"),
    Entry("xla_cpu_copy_insertion_use_region_analysis", _BOOL,
          "region analysis in copy insertion (fewer copies around loops and conditionals)", "codegen"),
    Entry("xla_cpu_enable_fast_min_max", _BOOL,
          "min/max without NaN propagation (a NaN operand may be dropped)", "numerics", numerics=True),
    Entry("xla_cpu_enable_fast_math", ("True",), "LLVM fast math: reassociation, approximations", "numerics",
          numerics=True),
    Entry("xla_cpu_fast_math_honor_nans", ("False",), "fast math may assume no NaNs", "numerics", numerics=True),
    Entry("xla_cpu_fast_math_honor_infs", ("False",), "fast math may assume no infinities", "numerics",
          numerics=True),
    Entry("xla_cpu_fast_math_honor_division", ("False",), "fast math may replace division by a reciprocal",
          "numerics", numerics=True),
    Entry("xla_cpu_fast_math_honor_functions", ("False",), "fast math may approximate transcendental functions",
          "numerics", numerics=True),
)

_THRESHOLDS = ("0", "1048576", "33554432", "268435456")
GPU: tuple[Entry, ...] = (
    Entry("xla_gpu_enable_triton_gemm", _BOOL, "matrix products as Triton kernels (else cuBLAS)", "gemm"),
    Entry("xla_gpu_autotune_level", ("0", "1", "2", "3", "4"),
          "how hard XLA autotunes GEMM and convolution kernels (0 off, 4 with correctness checks)", "gemm"),
    Entry("xla_gpu_enable_cublaslt", _BOOL, "cuBLASLt for matrix products", "gemm"),
    Entry("xla_gpu_enable_command_buffer", ("", "FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL"),
          "record kernels into CUDA graphs (command buffers; '' off)", "launch"),
    Entry("xla_gpu_enable_latency_hiding_scheduler", _BOOL,
          "the latency-hiding scheduler (overlaps communication and compute)", "scheduler"),
    Entry("xla_gpu_enable_while_loop_double_buffering", _BOOL, "double-buffer while loops (unroll by two)",
          "scheduler"),
    Entry("xla_gpu_enable_dynamic_slice_fusion", _BOOL, "fuse dynamic slices into library calls", "fusion"),
    Entry("xla_gpu_all_reduce_combine_threshold_bytes", _THRESHOLDS, "combine all-reduces up to this many bytes",
          "collectives", partitioned=True),
    Entry("xla_gpu_all_gather_combine_threshold_bytes", _THRESHOLDS, "combine all-gathers up to this many bytes",
          "collectives", partitioned=True),
    Entry("xla_gpu_reduce_scatter_combine_threshold_bytes", _THRESHOLDS,
          "combine reduce-scatters up to this many bytes", "collectives", partitioned=True),
    Entry("xla_gpu_enable_fast_min_max", _BOOL, "min/max without NaN propagation", "numerics", numerics=True),
)

#: The option that switches single passes of XLA's later pipeline off (its values: the passes).
DISABLE = "xla_disable_hlo_passes"
#: Late passes never offered for switching off, with the reason.
NOT_SWITCHED_OFF: dict[str, str] = {
    "copy-insertion": "inserts the copies that make buffer reuse correct: without it a module may overwrite what "
                      "it still reads",
    "propagate-call-metadata": "metadata only: nothing that runs changes",
    "reshape-decomposer": "off, XLA aborted the whole process at run time inside a YNN fusion on the GPT-2 step",
}


def disable_entry(late_passes: tuple[str, ...]) -> Entry:
    """``xla_disable_hlo_passes`` as one option whose values are the late passes (one switched off at a
    time), from the installed XLA's own inventory (``PassInventory.late_passes``)."""
    return Entry(DISABLE, tuple(p for p in late_passes if p not in NOT_SWITCHED_OFF),
                 "switch off one pass of XLA's later pipeline (fusion and after layout assignment), which the "
                 "order search does not reach", "late pass")


def catalogue(platform: str, late_passes: tuple[str, ...]) -> tuple[Entry, ...]:
    """Every option offered for ``platform`` (``cpu`` | ``gpu``), the late-pass switch included."""
    return (*(CPU if platform == "cpu" else GPU), disable_entry(late_passes))


def probe(worker, proto: bytes, pairs: list[tuple[str, str]]) -> list[str | None]:
    """In a worker: each ``(name, value)`` compiled alone with ``proto`` (the inventory's probe module: a
    dot, an exponential, a reduction; enough for XLA to parse every option and run its pipeline, ~40 ms a
    compile) through the worker's own ``compiles`` (the host's pipeline, or a GPU target's deviceless
    one): None where XLA takes it, else XLA's one-line refusal."""
    out: list[str | None] = []
    for name, value in pairs:
        try:
            worker.compiles(proto, [(name, value)])
            out.append(None)
        except PassFailed as exc:
            out.append(str(exc).splitlines()[0][:300] or "refused")
    return out


@dataclass(frozen=True)
class Accepted:
    """What the installed compiler took of a catalogue: name -> the values it accepted, and
    ``(name, value) -> why`` for each it refused (said by ``autotune options``)."""

    values: dict[str, tuple[str, ...]]
    refused: dict[tuple[str, str], str]

    def to_json(self) -> str:
        return json.dumps({"values": {k: list(v) for k, v in self.values.items()},
                           "refused": [[k, v, why] for (k, v), why in self.refused.items()]})

    @classmethod
    def from_json(cls, text: str) -> "Accepted":
        data = json.loads(text)
        return cls({str(k): tuple(str(x) for x in v) for k, v in data["values"].items()},
                   {(str(k), str(v)): str(why) for k, v, why in data["refused"]})

    def refusal(self, name: str) -> str | None:
        """Why ``name`` is not in the space at all (every value refused), in one clause; None if some value is."""
        whys = [why for (k, _), why in self.refused.items() if k == name]
        return whys[0] if whys and not self.values.get(name) else None


def is_accepted_record(text: str) -> bool:
    """A remembered probe reads back (``machine_inventory.get``'s ``valid``)."""
    return isinstance(Accepted.from_json(text).values, dict)


def accepted_of(entries: tuple[Entry, ...], answers: dict[tuple[str, str], str | None]) -> Accepted:
    """The ``Accepted`` of ``entries`` from the probe's answers (a value not probed is not accepted)."""
    values: dict[str, tuple[str, ...]] = {}
    refused: dict[tuple[str, str], str] = {}
    for entry in entries:
        took = []
        for value in entry.values:
            why = answers.get((entry.name, value), "not probed")
            if why is None:
                took.append(value)
            else:
                refused[(entry.name, value)] = why
        values[entry.name] = tuple(took)
    return Accepted(values, refused)


def dims(entries: tuple[Entry, ...], accepted: Accepted, numerics: bool = False,
         partitioned: bool = False) -> tuple[OptionDim, ...]:
    """The search dimensions: each entry with the values the compiler accepted (an entry with none is left
    out), numerics-changing ones only when asked for, collective thresholds only for a partitioned step."""
    out = []
    for entry in entries:
        values = accepted.values.get(entry.name, ())
        if not values or (entry.numerics and not numerics) or (entry.partitioned and not partitioned):
            continue
        out.append(OptionDim(entry.name, values, entry.what, entry.group, entry.numerics))
    return tuple(out)
