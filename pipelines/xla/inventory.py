"""XLA's pass inventory, discovered from the installed compiler.

A compile with ``xla_dump_to`` and ``xla_dump_hlo_pass_re=.+`` writes one file per pass invocation,
named ``module_NNNN.NAME.SEQ.<pipeline>.after_<pass>.before_<next>.txt``. From those names alone
we rebuild the pipeline tree (which pass ran inside which pipeline, in what order) and derive:

* the **action vocabulary**: target-independent passes (and sub-pipelines, as macro actions) that
  XLA runs before layout assignment. A hard-coded list would rot with every XLA release;
* for every action, the set of names to keep enabled so that exactly that pass runs
  (``xla_disable_hlo_passes`` gets every other known name);
* XLA's own order of the same actions: the baseline ``default`` ordering.

Semantics of one action, stated once: the pass runs where XLA first runs it in the pre-layout
pipeline, inside its enclosing sub-pipelines. If that sub-pipeline is an ``HloPassFix`` (e.g.
``simplification``), XLA iterates it to a fixed point, so the pass runs to a fixed point too. A pass
that XLA also places directly in a top-level pipeline (which cannot be disabled by name) may run
once more there; the discovery test shows that no *other* pass ever runs.

The GPU pipeline (``platform="gpu"``) is shaped differently: it is a row of top-level pipelines
(``optimization`` with ``simplification`` nested in it, ``simplification-2``,
``collective-optimizations``, ``conv_canonicalization``, then ``layout_assignment`` and the
target's fusion, scheduling and codegen). Its *region* is every top-level pipeline before the one
that assigns layouts; its actions are the passes of the region from XLA's post-SPMD ``optimization``
pipeline on (``versions.GPU_REGION_START``; the ones before it prepare host offloading and SPMD
partitioning). A step disables every other name it knows but those that end the compile where the
GPU worker stops it (``versions.GPU_STOP``, ``gpu_worker.py``): what runs after the step's pass is
never read.

Pass names numbered per compile (``apply-xla-transforms-N`` from 0.11, ``versions.NUMBERED_FAMILIES``)
are read as their family's name, so one version's inventory does not depend on how many compiles the
discovering process had made, and the family's exclusion below holds on every version.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property

from autotune.pipelines.xla import versions

_DUMP_NAME = re.compile(
    r"^module_\d+\.(?P<module>[^.]+)\.(?P<seq>\d+)\.(?P<pipeline>.+?)\.after_(?P<after>.+?)\.before_(?P<before>.+)\.txt$"
)

#: Where layout assignment runs, passes become target-specific (layouts, fusion, buffers).
LAYOUT_PASS = "layout-assignment"

#: Passes in the pre-layout region that are nevertheless about the target, with the reason.
#: They stay out of the default vocabulary and can be opted in (``include_target_specific``).
TARGET_SPECIFIC_RULES: dict[str, str] = {
    "float-normalization-*": "rewrites element types the CPU backend cannot compute natively",
    "change-op-data-type": "CPU/oneDNN choice of element types",
    "convolution-canonicalization": "CPU-specific convolution layout canonicalisation",
    "sub-byte-size-setter": "memory layout of sub-byte types",
    "cpu-*": "CPU backend pass",
}

#: GPU passes left out of the vocabulary even with ``include_target_specific``, with the reason
#: (checked on the modules of tests/data and examples, each pass alone, jaxlib 0.10.2, H100 target).
GPU_EXCLUDED: dict[str, str] = {
    "apply-xla-transforms": "runs transforms registered from Python, not a pass of XLA's own",
    "scatter_simplifier": "kills the compiler (CHECK failure in hlo_creation_utils) on a scatter that "
                          "batched_gather_scatter_normalizer has not normalised, 6 of 16 modules",
}

#: The same for XLA's GPU pipeline: rewrites into cuDNN/cuBLAS/library custom calls and device
#: legalisation that the pipeline runs where it needs them (opt in with ``include_target_specific``).
GPU_TARGET_SPECIFIC_RULES: dict[str, str] = {
    **TARGET_SPECIFIC_RULES,
    "conv-*": "rewrites convolutions into cuDNN custom calls",
    "conv_*": "convolution canonicalisation for cuDNN",
    "cudnn*": "cuDNN custom-call rewrite",
    "*convolution*": "cuDNN convolution rewrite",
    "topk-*": "rewrites TopK into the GPU's TopK kernel",
    "windowed-einsum-handler": "collective matmul decomposition for the GPU",
    "ragged_dot_rewriter": "rewrites ragged dots for the GPU's grouped GEMM",
    "host*": "host offloading",
    "*offload*": "host offloading",
    "sharding-*": "SPMD partitioning",
}

def _jaxlib_of(xla_version: str) -> str | None:
    """The jaxlib version in a pipeline's ``xla_version`` (``jaxlib-0.12.0.1-cpu-x86_64``), or None
    (then ``versions`` reads the installed one)."""
    m = re.match(r"jaxlib-(\d[\w.]*?)-", xla_version)
    return m.group(1) if m else None


def _spaced(name: str) -> str:
    return name.replace("_", " ")


def is_target_specific(name: str, platform: str = "cpu") -> str | None:
    """The reason ``name`` is target-specific on ``platform``, or None."""
    rules = GPU_TARGET_SPECIFIC_RULES if platform == "gpu" else TARGET_SPECIFIC_RULES
    for pattern, reason in rules.items():
        if fnmatch.fnmatchcase(name, pattern):
            return reason
    return None


@dataclass(frozen=True)
class Invocation:
    seq: int
    pipeline: str
    name: str


@dataclass(frozen=True)
class Action:
    """One tunable step: a pass (or a whole sub-pipeline) and how to isolate it."""

    name: str
    order: int  # position of its first invocation in XLA's own pipeline
    path: tuple[str, ...]  # enclosing pipelines, innermost first, up to (excluding) the top level
    keep: frozenset[str]  # names left enabled when this action runs alone
    macro: bool  # a sub-pipeline (runs all of its passes, in XLA's order)
    target_specific: str | None  # reason, for opted-in target-specific actions
    pipeline: str = ""  # the pipeline it runs in (innermost; where its per-pass dump is named)


@dataclass(frozen=True)
class PassInventory:
    """The parsed dump of one default compile, plus everything derived from it."""

    xla_version: str
    invocations: tuple[Invocation, ...]
    include_target_specific: bool = False
    capture_names: frozenset[str] = field(default_factory=frozenset)
    platform: str = "cpu"  # cpu | gpu: which compiler's pipeline the dump came from

    # ---- construction / persistence -------------------------------------------------------
    @classmethod
    def from_dump_names(cls, xla_version: str, filenames, **kw) -> "PassInventory":
        invocations = []
        for fname in filenames:
            m = _DUMP_NAME.match(fname)
            if m:
                jaxlib = _jaxlib_of(xla_version)
                invocations.append(Invocation(int(m["seq"]), versions.family(m["pipeline"], jaxlib),
                                              versions.family(m["after"], jaxlib)))
        invocations.sort(key=lambda inv: inv.seq)
        if not invocations:
            raise RuntimeError("XLA wrote no per-pass dump files; cannot discover the pass inventory")
        return cls(xla_version, tuple(invocations), **kw)

    def to_json(self) -> str:
        data = {
            "xla_version": self.xla_version,
            "invocations": [[i.seq, i.pipeline, i.name] for i in self.invocations],
            "capture_names": sorted(self.capture_names),
        }
        if self.platform != "cpu":  # the CPU inventory's text (its digest, a cache key) stays as it was
            data["platform"] = self.platform
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str, include_target_specific: bool = False) -> "PassInventory":
        data = json.loads(text)
        jaxlib = _jaxlib_of(data["xla_version"])
        invs = tuple(Invocation(int(s), versions.family(p, jaxlib), versions.family(n, jaxlib))
                     for s, p, n in data["invocations"])
        return cls(data["xla_version"], invs, include_target_specific, frozenset(data.get("capture_names", ())),
                   data.get("platform", "cpu"))

    def with_target_specific(self, include: bool) -> "PassInventory":
        return PassInventory(self.xla_version, self.invocations, include, self.capture_names, self.platform)

    # ---- the pipeline tree ---------------------------------------------------------------
    @cached_property
    def _passes(self) -> tuple[Invocation, ...]:
        return tuple(i for i in self.invocations if i.name != "pipeline-start")

    @cached_property
    def all_names(self) -> frozenset[str]:
        """Every pass and pipeline name XLA reported."""
        names = {i.name for i in self._passes} | {i.pipeline for i in self.invocations}
        return frozenset(names - self.capture_names)

    @cached_property
    def pipelines(self) -> frozenset[str]:
        return frozenset(i.pipeline for i in self.invocations)

    @cached_property
    def pipeline_parent(self) -> dict[str, str]:
        """sub-pipeline name -> the pipeline it runs in (first invocation)."""
        parent: dict[str, str] = {}
        for inv in self._passes:
            if inv.name in self.pipelines and inv.name != inv.pipeline:
                parent.setdefault(inv.name, inv.pipeline)
        return parent

    @cached_property
    def top_level(self) -> frozenset[str]:
        """Pipelines run directly by the compiler; the disable filter cannot switch them off."""
        return frozenset(p for p in self.pipelines if p not in self.pipeline_parent)

    def chain(self, pipeline: str) -> tuple[str, ...]:
        """``pipeline`` and its enclosing pipelines, innermost first, ending at a top-level one."""
        out = [pipeline]
        while out[-1] in self.pipeline_parent and len(out) < 64:
            out.append(self.pipeline_parent[out[-1]])
        return tuple(out)

    def descendants(self, pipeline: str) -> frozenset[str]:
        out: set[str] = set()
        todo = [pipeline]
        while todo:
            p = todo.pop()
            for inv in self._passes:
                if inv.pipeline == p and inv.name not in out and inv.name != p:
                    out.add(inv.name)
                    if inv.name in self.pipelines:
                        todo.append(inv.name)
        return frozenset(out)

    @cached_property
    def main_pipeline(self) -> str:
        for inv in self._passes:
            if inv.name == LAYOUT_PASS:
                return inv.pipeline
        raise RuntimeError(f"no '{LAYOUT_PASS}' pass in the dump; cannot find XLA's main pipeline")

    # ---- actions ---------------------------------------------------------------------------
    @cached_property
    def _layout_seq(self) -> int:
        return min(i.seq for i in self._passes if i.name == LAYOUT_PASS)

    @cached_property
    def late_passes(self) -> tuple[str, ...]:
        """Passes XLA first runs after layout assignment (fusion, its wrappers, the task assigner, copy
        insertion ...), in that order: beyond the order search's reach, so the compiler options offer
        switching each off alone (``xla_disable_hlo_passes``, ``options.py``): the fusion decisions
        Xtat tunes. Pipelines and the capture pass are not passes to switch off."""
        first: dict[str, int] = {}
        for inv in self._passes:
            first.setdefault(inv.name, inv.seq)
        late = sorted((seq, name) for name, seq in first.items() if seq > self._layout_seq)
        return tuple(name for _, name in late if name not in self.pipelines and name not in self.capture_names)

    # ---- the GPU pipeline's region (see the module docstring) -----------------------------------
    @cached_property
    def _top_order(self) -> tuple[str, ...]:
        """Top-level pipelines in the order they first run."""
        first: dict[str, int] = {}
        for inv in self.invocations:
            top = self.chain(inv.pipeline)[-1]
            first.setdefault(top, inv.seq)
        return tuple(sorted(first, key=first.get))

    @cached_property
    def region(self) -> tuple[str, ...]:
        """GPU: the top-level pipelines before the one that assigns layouts (what a step may disable)."""
        layout = next((self.chain(i.pipeline)[-1] for i in self._passes if i.name == LAYOUT_PASS), None)
        if layout is None:
            raise RuntimeError(f"no '{LAYOUT_PASS}' pass in the dump; cannot find the GPU pipeline's layout stage")
        order = self._top_order
        return order[:order.index(layout)]

    @cached_property
    def tunable(self) -> tuple[str, ...]:
        """GPU: the region's pipelines from XLA's post-SPMD optimization pipeline on
        (``versions.GPU_REGION_START``); a dump without it is a pipeline ``versions.py`` does not know."""
        region, start = self.region, versions.at(versions.GPU_REGION_START, self._jaxlib)
        if start not in region:
            raise RuntimeError(f"XLA's GPU pipeline ({self.xla_version}) has no top-level pipeline '{start}' before "
                               f"layout assignment; autotune/pipelines/xla/versions.py GPU_REGION_START needs its name")
        return region[region.index(start):]

    @property
    def _jaxlib(self) -> str | None:
        return _jaxlib_of(self.xla_version)

    @cached_property
    def region_names(self) -> frozenset[str]:
        """Every pass and sub-pipeline name that runs inside the region's pipelines."""
        names: set[str] = set()
        for top in self.region:
            names |= self.descendants(top)
        return frozenset(names - self.top_level - self.capture_names - {"pipeline-start", "pipeline-end"})

    def _gpu_actions(self) -> dict[str, Action]:
        actions: dict[str, Action] = {}
        tunable = set(self.tunable)
        for inv in self._passes:
            chain = self.chain(inv.pipeline)
            name = inv.name
            if (chain[-1] not in tunable or name in actions or name in self.top_level or name in self.capture_names
                    or name in GPU_EXCLUDED):
                continue
            reason = is_target_specific(name, "gpu")
            if reason and not self.include_target_specific:
                continue
            path = chain[:-1]
            keep = {name, *path}
            macro = name in self.pipelines
            order = inv.seq
            if macro:
                keep |= self.descendants(name)
                order = min(i.seq for i in self.invocations if i.pipeline == name)
            actions[name] = Action(name, order, path, frozenset(keep), macro, reason, inv.pipeline)
        return dict(sorted(actions.items(), key=lambda kv: kv[1].order))

    @cached_property
    def actions(self) -> dict[str, Action]:
        """name -> Action, in XLA's pipeline order (target-specific ones only when opted in)."""
        if self.platform == "gpu":
            return self._gpu_actions()
        pre: list[tuple[Invocation, tuple[str, ...]]] = []
        post: list[tuple[Invocation, tuple[str, ...]]] = []
        for inv in self._passes:
            if inv.name in self.top_level or inv.name in self.capture_names:
                continue
            chain = self.chain(inv.pipeline)
            in_main = chain[-1] == self.main_pipeline and inv.seq < self._layout_seq
            (pre if in_main else post).append((inv, chain))
        actions: dict[str, Action] = {}
        for group, stage_reason in ((pre, None), (post, "runs outside XLA's pre-layout pipeline (target-specific stage)")):
            for inv, chain in group:
                name = inv.name
                if name in actions:
                    continue
                reason = is_target_specific(name) or stage_reason
                if reason and not self.include_target_specific:
                    continue
                path = chain[:-1]  # enclosing sub-pipelines; the top level is always on
                keep = {name, *path}
                macro = name in self.pipelines
                order = inv.seq
                if macro:  # a sub-pipeline is reported when it ends; it starts at its first pass
                    keep |= self.descendants(name)
                    order = min(i.seq for i in self.invocations if i.pipeline == name)
                actions[name] = Action(name, order, path, frozenset(keep), macro, reason, inv.pipeline)
        return dict(sorted(actions.items(), key=lambda kv: kv[1].order))

    def names(self) -> tuple[str, ...]:
        return tuple(self.actions)

    def disabled_for(self, keep: frozenset[str] | set[str]) -> tuple[str, ...]:
        """Everything else: the value of ``xla_disable_hlo_passes`` that leaves ``keep`` running.

        Dump file names are sanitised: a pipeline XLA calls "simplification after layout
        assignment" is dumped as ``simplification_after_layout_assignment``, and only the real name
        disables it. So every name is listed in both spellings (a name that does not exist is
        ignored by XLA); without this, the after-layout simplification pipelines would keep running.
        """
        keep_all = set(keep) | {_spaced(k) for k in keep} | set(self.always_on)
        names = (self.all_names - self.top_level) | {_spaced(n) for n in self.all_names - self.top_level}
        return tuple(sorted(names - keep_all))

    @property
    def always_on(self) -> tuple[str, ...]:
        """GPU: the passes a step leaves on after its own (``versions.GPU_STOP``, ``gpu_worker.py``):
        they wrap what is left into fusions and then stop the compile cleanly. Everything else after
        the step's pass is off: later passes running on a module whose earlier passes were skipped can
        fail a CHECK (seen: ``host-offloader`` on the bundled decode step after a lone ``algsimp``),
        which would cost the worker and the step's result with it."""
        return versions.at(versions.GPU_STOP, self._jaxlib).always_on if self.platform == "gpu" else ()

    @cached_property
    def default_keep(self) -> frozenset[str]:
        """XLA's own ordering of the whole (target-independent) action set: keep them all."""
        keep: set[str] = set()
        for action in self.actions.values():
            if not action.target_specific:
                keep |= action.keep
        return frozenset(keep)

    @cached_property
    def digest(self) -> str:
        """Short hash of the inventory: part of the pipeline version, so cache keys move with it."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:12]
