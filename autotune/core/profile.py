"""Where a module's time goes, as a value: what ``autotune profile`` prints and the search aims at.

A backend with the ``profile`` capability (XLA: ``pipelines/xla/profiling.py``) compiles the module
with its default, times the step, traces a few runs and returns, per thing that ran (a thunk: a
fusion, a library call, a copy, a loop), its share of the step and the input instructions it
computes. ``Profile`` holds that, frozen, with the questions asked of it: the hottest ops
(``hot``), the input instructions that hold the time (``hot_sites``: what per-site decisions aim
at), how much of the step is attributed to named input instructions, and whether the shares add up
to the step (``closure``). ``compare`` puts an answer's profile beside the default's: which ops got
faster. Core never imports a compiler: this module reads the backend's plain dict.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import asdict, dataclass, field

_LAYOUT = re.compile(r"\]\{[^{}]*\}")


def site_id(name: str, opcode: str, shape: str) -> str:
    """``name:opcode:shape`` (the shape without its layout): how a search and a record name one
    instruction of the input module."""
    return f"{name}:{opcode}:{_LAYOUT.sub(']', shape)}"


@dataclass(frozen=True)
class Entry:
    """One op that ran: its share of the step, and the input instruction it stands for."""

    op: str  #: the optimised module's instruction (the thunk's name in the trace)
    share: float  #: of the (untraced) step, wall time split evenly between ops running at once
    seconds: float  #: share x step
    kind: str  #: fusion kind or library (``kLoop``, ``__ynn_fusion``), custom-call target, else the opcode
    opcode: str  #: of the optimised instruction (``fusion``, ``custom-call``, ``copy``, ``while``)
    shape: str  #: its result shape, layout included
    site: str | None  #: ``name:opcode:shape`` of the input instruction it stands for; None: none found
    inputs: tuple[str, ...] = ()  #: every input instruction it computes (a fusion's whole body)
    layout: str = ""  #: the input instruction's result shape with its layout
    source: str | None = None  #: the framework's name of that instruction (the input's metadata)
    calls: float = 1.0  #: executions per step (a loop body's ops run many times)
    matched: str | None = None  #: how ``site`` was found: ``metadata``, ``shape`` (unique same-shape op)

    @property
    def name(self) -> str | None:
        """The input instruction's name (the first part of ``site``)."""
        return self.site.split(":", 1)[0] if self.site else None


@dataclass(frozen=True)
class Profile:
    """A module's measured step and where its time goes (``entries``, hottest first)."""

    module: str
    step_seconds: float  #: median untraced run (one run before each traced run)
    traced_step_seconds: float  #: median traced run: the tracer's own cost shows as the difference
    busy_seconds: float  #: median over traced runs of the time some op was running (what ``entries`` share)
    runs: int
    entries: tuple[Entry, ...]
    device: str = ""
    options: tuple = ()  #: the compiler options it was compiled with (``(name, value)``)
    label: str = "XLA's default"
    #: Of the traced step: time inside the executor's run with no op running (hand-offs between
    #: threads and thunks), and time outside it (launching the run, handing arguments and results over).
    between_ops: float = 0.0
    outside: float = 0.0
    #: Of ``outside``: what handing this module's arguments and results over (and launching a run)
    #: costs, measured as the time outside the run of a module of the same entry signature that does
    #: no work (the backend times it beside the module); capped at ``outside``. ``handover_missing``:
    #: why it was not measured, where it was not.
    handover: float = 0.0
    handover_missing: str = ""
    samples: dict = field(default_factory=dict, compare=False)  #: raw per-run seconds (plain, traced, busy)

    # ---- the questions --------------------------------------------------------------------------------
    @property
    def attributed(self) -> float:
        """Share of the step attributed to some op (the rest: dispatch, hand-offs, gaps)."""
        return sum(e.share for e in self.entries)

    @property
    def named(self) -> float:
        """Share of the step attributed to ops traced back to a named input instruction."""
        return sum(e.share for e in self.entries if e.site)

    @property
    def named_of_run(self) -> float:
        """``named`` as a share of the executor's run alone (the step less launching it and handing its
        arguments and results over, which no op of the module holds)."""
        inside = 1.0 - self.outside
        return self.named / inside if inside > 0 else 0.0

    @property
    def accounted(self) -> float:
        """``named`` plus ``handover``: the share of the step a user can put a name to (an instruction of
        the module, or its arguments and results)."""
        return self.named + self.handover

    @property
    def unattributed(self) -> float:
        return max(0.0, 1.0 - self.attributed)

    @property
    def closure(self) -> float:
        """The traced step over the untraced one (the median of the per-round ratios). The shares, the gaps between ops and the time outside
        the executor add up to the traced step by construction; this says whether that step is the one
        a user runs (1.0: the tracer and the machine's noise changed nothing; 1.1: the shares
        overstate the ops by up to 10%)."""
        plain, traced = self.samples.get("plain_seconds") or [], self.samples.get("traced_seconds") or []
        if plain and len(plain) == len(traced) and min(plain) > 0:  # paired by round, as a claim's ratio is
            return statistics.median(t / p for p, t in zip(plain, traced))
        return self.traced_step_seconds / self.step_seconds if self.step_seconds > 0 else float("nan")

    def hot(self, n: int = 10) -> tuple[Entry, ...]:
        """The ``n`` ops that hold the most time."""
        return self.entries[: max(0, int(n))]

    def hot_sites(self, min_share: float = 0.01) -> tuple[tuple[str, float], ...]:
        """Input instructions holding at least ``min_share`` of the step, ``(site, share)``, hottest first
        (an instruction several ops stand for sums their shares)."""
        shares: dict[str, float] = {}
        for e in self.entries:
            if e.site:
                shares[e.site] = shares.get(e.site, 0.0) + e.share
        return tuple(sorted(((s, v) for s, v in shares.items() if v >= min_share), key=lambda kv: -kv[1]))

    def by_kind(self) -> tuple[tuple[str, float], ...]:
        """Shares summed per kind (``__ynn_fusion``, ``kLoop``, ``copy``, ...), largest first."""
        shares: dict[str, float] = {}
        for e in self.entries:
            shares[e.kind] = shares.get(e.kind, 0.0) + e.share
        return tuple(sorted(shares.items(), key=lambda kv: -kv[1]))

    # ---- plain data ---------------------------------------------------------------------------------------
    @classmethod
    def from_backend(cls, module: str, data: dict, options=(), label: str = "XLA's default") -> "Profile":
        """Read a backend's ``profile`` reply (``pipelines/xla/profiling.py``'s dict)."""
        inputs = data.get("inputs", {})
        entries = []
        for op in data.get("ops", ()):
            name = op.get("site")
            info = inputs.get(name, {}) if name else {}
            entries.append(Entry(
                op=op["op"], share=float(op["share"]), seconds=float(op["seconds"]), kind=str(op.get("kind", "?")),
                opcode=str(op.get("opcode", "?")), shape=str(op.get("shape", "")),
                site=site_id(name, info.get("opcode", "?"), info.get("shape", "")) if name else None,
                inputs=tuple(op.get("inputs", ())), layout=str(info.get("shape", "")), source=info.get("source"),
                calls=float(op.get("calls", 1.0)), matched=op.get("matched"),
            ))
        entries.sort(key=lambda e: -e.share)
        busy = data.get("busy_seconds") or [0.0]
        traced = data.get("traced_seconds") or [0.0]
        spans = data.get("span_seconds") or traced
        total = sum(traced) or 1.0
        outside = max(0.0, (sum(traced) - sum(spans)) / total)
        handover = data.get("handover_seconds") or []
        handover_share = min(outside, statistics.median(handover) * len(traced) / total) if handover else 0.0
        return cls(module=module, step_seconds=float(data["step_seconds"]),
                   traced_step_seconds=float(data.get("traced_step_seconds", 0.0)),
                   busy_seconds=float(statistics.median(busy)), runs=int(data.get("runs", len(busy))),
                   entries=tuple(entries), device=str(data.get("device", "")),
                   options=tuple(tuple(p) for p in options), label=label,
                   between_ops=max(0.0, (sum(spans) - sum(busy)) / total),
                   outside=outside, handover=handover_share,
                   handover_missing="" if handover else str(data.get("handover_missing") or "not measured"),
                   samples={k: list(data.get(k, ())) for k in ("plain_seconds", "traced_seconds", "busy_seconds",
                                                                "span_seconds", "handover_seconds")})

    def to_dict(self, top: int | None = None) -> dict:
        """The ``--json`` form: the summary, then the ops (all, or the ``top`` hottest)."""
        entries = self.entries if top is None else self.hot(top)
        return {
            "module": self.module, "label": self.label, "device": self.device,
            "options": [list(p) for p in self.options],
            "step_seconds": self.step_seconds, "traced_step_seconds": self.traced_step_seconds,
            "busy_seconds": self.busy_seconds, "runs": self.runs,
            "attributed": self.attributed, "named": self.named, "named_of_run": self.named_of_run, "unattributed": self.unattributed,
            "between_ops": self.between_ops, "outside": self.outside, "handover": self.handover,
            "handover_missing": self.handover_missing, "accounted": self.accounted,
            "closure": self.closure, "ops_total": len(self.entries),
            "ops": [asdict(e) | {"inputs": list(e.inputs)} for e in entries],
            "sites": [{"site": s, "share": v} for s, v in self.hot_sites(0.0)[: (top or len(self.entries))]],
            "samples": self.samples,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Profile":
        """``to_dict``'s output back (a profile kept beside a run or a bench's results)."""
        entries = tuple(Entry(**{**e, "inputs": tuple(e.get("inputs", ()))}) for e in data["ops"])
        return cls(module=data["module"], step_seconds=data["step_seconds"],
                   traced_step_seconds=data["traced_step_seconds"], busy_seconds=data["busy_seconds"],
                   runs=data["runs"], entries=entries, device=data.get("device", ""),
                   options=tuple(tuple(p) for p in data.get("options", ())), label=data.get("label", "XLA's default"),
                   between_ops=data.get("between_ops", 0.0), outside=data.get("outside", 0.0),
                   handover=data.get("handover", 0.0), handover_missing=data.get("handover_missing", ""),
                   samples=data.get("samples", {}))


@dataclass(frozen=True)
class SiteChange:
    """One input instruction's time in the default's profile and in an answer's."""

    site: str
    before: float  #: seconds per step under the default
    after: float  #: seconds per step under the answer

    @property
    def ratio(self) -> float:
        return self.after / self.before if self.before > 0 else float("inf")


def compare(default: Profile, answer: Profile, min_share: float = 0.0) -> tuple[SiteChange, ...]:
    """Per input instruction holding >= ``min_share`` of either step: its seconds before and after,
    the largest saving first (the largest loss last). Sites are matched by ``name:opcode:shape``."""
    def seconds(p: Profile) -> dict[str, float]:
        out: dict[str, float] = {}
        for e in p.entries:
            if e.site:
                out[e.site] = out.get(e.site, 0.0) + e.seconds
        return out

    a, b = seconds(default), seconds(answer)
    keep = {s for s, v in default.hot_sites(min_share)} | {s for s, v in answer.hot_sites(min_share)}
    changes = [SiteChange(s, a.get(s, 0.0), b.get(s, 0.0)) for s in keep]
    return tuple(sorted(changes, key=lambda c: c.after - c.before))
