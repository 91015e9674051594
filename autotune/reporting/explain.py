"""``explain``: what a tuned sequence changes, which pass did it, and how to reproduce it with XLA.

A win like DLRM's 929 -> 913 final-ops is only useful to a compiler engineer who can see it. For a
module and a sequence this report gives, comparing XLA's default module with the tuned module
*after* the default pipeline (what the backend compiles in both cases):

* per-opcode deltas, and flops / bytes-accessed deltas from XLA's cost analysis;
* the instructions present in one module and not the other, **matched structurally**: each
  instruction gets a hash of its opcode, shape and attributes and of its operands' and called
  computations' hashes, computed bottom-up with every name ignored; the two multisets of hashes
  are subtracted. The unmatched ones are shown as HLO text under their computation (capped);
* which step made the difference: the final-ops after each prefix of the sequence, walked through
  the cache's transitions (nothing is recompiled when the run already evaluated the sequence; the
  final of a prefix is one default-pipeline step, which the cache answers when known);
* a ddmin-minimal sequence (``autotune.core.ddmin``) and a self-contained "missed optimization"
  report: the minimal sequence, its effect, and the exact commands that reproduce it with the pinned
  jaxlib, through autotune and through XLA's own flags (``xla_disable_hlo_passes`` as the worker
  builds them for each step).
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field, replace

from autotune.core.backend import supports
from autotune.core.graph import bottom_up, digest
from autotune.core.metrics import Metrics
from autotune.core import backend as backends
from autotune.core.ddmin import ddmin_result
from autotune.errors import AutotuneError, BadInput, PassFailed
from autotune.core.module import Module
from autotune.core.runs import RunStore
from autotune.core.fleet import FleetResult
from autotune.core.options import EMPTY, CompilerOptions
from autotune.reporting.explain_options import OptionsEffect, explain_options
from autotune.core.profile import Profile
from autotune.reporting.profile import faster_rows

#: How many unmatched instructions a report lists per side (a big module can differ in thousands).
LIST_CAP = 40
#: An instruction's HLO text is cut at this many characters in listings (large constants).
TEXT_CAP = 300


# ---- structural matching ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Instr:
    """One instruction of a module, as a diff lists it."""

    computation: str
    name: str
    opcode: str
    text: str  # HLO text, metadata removed, cut at TEXT_CAP
    frontier: bool = False  # all its operands are matched: the difference starts here


@dataclass(frozen=True)
class ModuleDiff:
    """Two modules compared instruction by instruction (``before``: XLA's default; ``after``: tuned).

    Three levels: ``matched`` instructions are structurally identical (the same subgraph below
    them); ``rewired`` ones exist in both with the same opcode, shape, attributes and called
    computations but read different inputs (they differ only because something below them does);
    the rest really ``vanished`` (only in before) or ``appeared`` (only in after).
    """

    before_instructions: int
    after_instructions: int
    matched: int
    rewired: int
    opcodes: tuple[tuple[str, int, int], ...]  # (opcode, before, after) for every opcode whose count changed
    vanished: tuple[Instr, ...]  # in before only (capped at the listing limit)
    appeared: tuple[Instr, ...]  # in after only (capped)
    vanished_total: int  # before the cap
    appeared_total: int

    @property
    def delta(self) -> int:
        return self.after_instructions - self.before_instructions

    def to_dict(self) -> dict:
        data = asdict(self)
        data["opcodes"] = [{"opcode": o, "before": b, "after": a, "delta": a - b} for o, b, a in self.opcodes]
        data["delta"] = self.delta
        return data


@dataclass(frozen=True)
class Node:
    """One instruction with its two signatures (see ``structural_index``)."""

    hash: str  # the whole subgraph below it, names ignored
    local: str  # the instruction alone: opcode, shape, attributes, operand count, called computations
    operands: tuple[str, ...]  # operand hashes
    instr: Instr


def structural_index(instructions) -> list[Node]:
    """A ``Node`` for every instruction (``core.backend.Instruction``, in module order, as the
    backend's ``instructions`` lists them).

    The hash covers the instruction's signature (opcode, shape, attributes; no names), the
    operands' hashes in order and the called computations' hashes (a computation's hash is its
    root's); instruction and computation names never enter it. Computed bottom-up without recursion
    (deep modules).
    """
    info: dict[tuple[str, str], object] = {}
    order: list[tuple[str, str]] = []
    roots: dict[str, tuple[str, str]] = {}
    last: dict[str, tuple[str, str]] = {}
    for inst in instructions:
        key = (inst.computation, inst.name)
        info[key] = inst
        order.append(key)
        last[inst.computation] = key
        if inst.root:
            roots[inst.computation] = key
    for comp, key in last.items():
        roots.setdefault(comp, key)

    def operand_keys(inst) -> list[tuple[str, str]]:
        return [(inst.computation, o) for o in inst.operands]

    def deps(key):
        inst = info[key]
        return [o for o in operand_keys(inst) if o in info] + [roots[c] for c in inst.called if c in roots]

    def combine(key, hashes):
        inst = info[key]
        return digest([inst.signature] + [hashes.get(o, "?") for o in operand_keys(inst)]
                      + ["C" + hashes.get(roots.get(c), "?") for c in inst.called])

    hashes = bottom_up(order, deps, combine)
    out = []
    for key in order:
        inst = info[key]
        text = inst.text if len(inst.text) <= TEXT_CAP else inst.text[:TEXT_CAP] + " ..."
        local = digest([inst.loose] + ["C" + hashes.get(roots.get(c), "?") for c in inst.called])
        out.append(Node(hashes[key], local, tuple(hashes.get(o, "?") for o in operand_keys(inst)),
                        Instr(key[0], key[1], inst.opcode, text)))
    return out


def diff_modules(before, after, cap: int = LIST_CAP) -> ModuleDiff:
    """Compare two modules structurally, given as their instruction lists (``Backend.instructions``);
    see ``ModuleDiff``."""
    a, b = structural_index(before), structural_index(after)
    ha, hb = Counter(n.hash for n in a), Counter(n.hash for n in b)

    ua, ub = _unmatched(a, hb, "hash"), _unmatched(b, ha, "hash")
    # Second level: unmatched instructions with the same local signature on both sides are the
    # same instruction reading different inputs; only the rest vanished or appeared.
    la, lb = Counter(n.local for n in ua), Counter(n.local for n in ub)
    va, vb = _unmatched(ua, lb, "local"), _unmatched(ub, la, "local")
    rewired = len(ua) - len(va)

    def marked(nodes: list[Node], other: Counter) -> list[Instr]:
        # "frontier": every operand also exists in the other module, so this is where the two
        # programs start to differ (not merely downstream of another difference).
        return [replace(n.instr, frontier=all(o in other for o in n.operands)) for n in nodes]

    vanished, appeared = marked(va, hb), marked(vb, ha)
    oa, ob = Counter(n.instr.opcode for n in a), Counter(n.instr.opcode for n in b)
    opcodes = tuple((op, oa.get(op, 0), ob.get(op, 0)) for op in sorted(set(oa) | set(ob)) if oa.get(op, 0) != ob.get(op, 0))
    return ModuleDiff(len(a), len(b), sum((ha & hb).values()), rewired, opcodes, tuple(_capped(vanished, cap)),
                      tuple(_capped(appeared, cap)), len(vanished), len(appeared))


def _unmatched(nodes: list[Node], other: Counter, key: str) -> list[Node]:
    """The nodes left once each is paired with one of ``other``'s (a multiset of ``key`` values)."""
    left = dict(other)
    out = []
    for n in nodes:
        k = getattr(n, key)
        if left.get(k, 0) > 0:
            left[k] -= 1
        else:
            out.append(n)
    return out


def _capped(items: list[Instr], cap: int) -> list[Instr]:
    """At most ``cap`` instructions, frontier ones first (they say where the difference starts)."""
    if len(items) <= cap:
        return items
    keep = [i for i in items if i.frontier][:cap]
    rest = [i for i in items if not i.frontier][: cap - len(keep)]
    chosen = {id(i) for i in keep + rest}
    return [i for i in items if id(i) in chosen]


# ---- the explanation of one sequence ------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """The sequence's prefix ending at ``index`` (0 = nothing applied): its module and its final."""

    index: int
    action: str | None
    state: str | None
    instructions: int | None  # right after the prefix
    final_state: str | None
    final_instructions: int | None  # after XLA's default pipeline
    changed: bool  # the pass changed the module
    decisive: bool  # the final-ops changed at this step


@dataclass(frozen=True)
class Explanation:
    module: str
    fingerprint: str
    pipeline_version: str
    sequence: tuple[str, ...]  # as given (a run's best)
    minimal: tuple[str, ...]  # ddmin: same final module, 1-minimal
    minimal_same: str  # what "same" meant for ``minimal``
    input: Metrics
    default: Metrics  # XLA's default pipeline on the input
    tuned: Metrics  # the sequence, then XLA's default pipeline
    tuned_raw: Metrics  # right after the sequence
    default_state: str
    tuned_state: str
    tuned_final_state: str
    diff: ModuleDiff
    steps: tuple[Step, ...]
    minimal_steps: tuple[Step, ...]
    steps_compiled: int  # compiles this explanation needed (0 when the cache knew everything)
    reproduce: dict  # commands
    run_id: str | None = None
    model_path: str | None = None
    notes: tuple[str, ...] = field(default=())
    #: The baseline in the backend's words (``Backend.baseline``: "XLA's default").
    baseline: str = "XLA's default"
    #: The compiler options of the win, explained by measurement (``explain_options``); None without options.
    options: OptionsEffect | None = None
    #: Which ops got faster (a runtime win, with a backend that profiles): per input instruction its
    #: ``(site, ms before, ms after, after/before)`` from a profile of each (``core/profile.py``).
    faster: tuple = ()

    @property
    def final_delta(self) -> int:
        return self.tuned.instructions - self.default.instructions

    def to_dict(self) -> dict:
        return {
            "module": self.module, "fingerprint": self.fingerprint, "pipeline_version": self.pipeline_version,
            "run_id": self.run_id, "sequence": list(self.sequence), "minimal_sequence": list(self.minimal),
            "minimal_same": self.minimal_same,
            "input": self.input.to_dict(), "default": self.default.to_dict(), "tuned": self.tuned.to_dict(),
            "tuned_raw": self.tuned_raw.to_dict(),
            "deltas": _deltas(self.default, self.tuned),
            "default_state": self.default_state, "tuned_state": self.tuned_state,
            "tuned_final_state": self.tuned_final_state,
            "diff": self.diff.to_dict(),
            "steps": [asdict(s) for s in self.steps], "minimal_steps": [asdict(s) for s in self.minimal_steps],
            "steps_compiled": self.steps_compiled, "reproduce": self.reproduce, "notes": list(self.notes),
            "baseline": self.baseline, "compiler_options": self.options.to_dict() if self.options else None,
            "faster": [list(r) for r in self.faster],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_markdown(self) -> str:
        return render_markdown(self)

    def missed_optimization(self) -> str:
        return render_missed(self)


def _deltas(default: Metrics, tuned: Metrics) -> dict:
    def d(a, b):
        return None if a is None or b is None or math.isnan(a) or math.isnan(b) else b - a

    return {
        "instructions": tuned.instructions - default.instructions,
        "flops": d(default.flops, tuned.flops),
        "transcendentals": d(default.transcendentals, tuned.transcendentals),
        "bytes_accessed": d(default.bytes_accessed, tuned.bytes_accessed),
    }


def trace(evaluator, root, sequence) -> tuple[tuple[Step, ...], int]:
    """Every prefix of ``sequence`` through the cache, and its final; returns (steps, compiles)."""
    compiled0 = evaluator.stats.steps_compiled
    seq = tuple(sequence)
    prefixes = [seq[:k] for k in range(len(seq) + 1)]
    results = evaluator.evaluate_many(root, prefixes)
    states = list(dict.fromkeys(r.state for r in results if r.ok))
    finals = dict(zip(states, evaluator.final_many(states))) if states else {}
    steps: list[Step] = []
    prev_state, prev_final = None, None
    for k, r in enumerate(results):
        f = finals.get(r.state) if r.ok else None
        final_n = f.metrics.instructions if f is not None and f.ok else None
        steps.append(Step(
            index=k, action=seq[k - 1] if k else None, state=r.state,
            instructions=r.metrics.instructions if r.ok else None,
            final_state=f.state if f is not None and f.ok else None, final_instructions=final_n,
            changed=k > 0 and r.state != prev_state,
            decisive=k > 0 and final_n is not None and prev_final is not None and final_n != prev_final,
        ))
        prev_state, prev_final = r.state, final_n
    return tuple(steps), evaluator.stats.steps_compiled - compiled0


def _reproduce(evaluator, module_name: str, model_path: str | None, minimal: tuple[str, ...]) -> dict:
    """autotune's commands that replay ``minimal``, plus what the backend adds (``Backend.reproduce``:
    for XLA the pinned versions and the per-step ``xla_disable_hlo_passes`` as ``xla_steps``)."""
    backend = evaluator.pipeline
    suffix = (backend.suffixes or (".txt",))[0]
    model = model_path or f"{module_name}{suffix}"
    which = "" if backend.name == backends.DEFAULT_BACKEND else f" --backend {backend.name}"
    passes = ",".join(minimal)
    return {
        "compiler": backend.compiler_version,
        "autotune": [
            f"autotune baseline{which} {model}",
            f"autotune apply{which} --passes {passes} {model} -o tuned{suffix}",
            f"autotune baseline{which} tuned{suffix}",
        ],
        **(backend.reproduce(minimal) if supports(backend, "explain") else {}),
    }


def explain(evaluator, root, sequence, run_id: str | None = None, model_path: str | None = None,
            minimize: bool = True, cap: int = LIST_CAP, options: CompilerOptions = EMPTY,
            ratio: float | None = None) -> Explanation:
    """Explain ``sequence`` on ``root`` (a prepared ``Module``): see the module docstring. ``options``: the
    win's compiler options, explained by measurement (each alone, a ddmin-minimal set: ``explain_options``;
    ``ratio``: the whole win's confirmed ratio, when known)."""
    compiled0 = evaluator.stats.steps_compiled
    seq = tuple(evaluator.pipeline.check_passes(sequence))
    default = evaluator.default(root)
    base = evaluator.pipeline.baseline
    if not default.ok:
        raise AutotuneError(f"{base} pipeline fails on {root.name}: {default.message}")
    result = evaluator.evaluate(root, seq)
    if not result.ok:
        raise AutotuneError(f"the sequence fails at step {result.failed_at + 1} ({seq[result.failed_at]}): {result.message}")
    final = evaluator.final(result.state)
    if not final.ok:
        raise AutotuneError(f"{base} pipeline fails after the sequence: {final.message}")
    notes = []
    minimal, same = seq, "not minimised"
    if minimize and seq:
        m = ddmin_result(evaluator, root, seq, same="final")
        minimal, same = m.sequence, m.same
        if final.state != default.state:
            # Failing a shorter sequence with the same final module, one with the same final-ops.
            by_cost = ddmin_result(evaluator, root, minimal, same="cost")
            if len(by_cost.sequence) < len(minimal):
                notes.append(f"a shorter sequence reaches the same final-ops with a different module: "
                             f"{','.join(by_cost.sequence)}")
    steps, _ = trace(evaluator, root, seq)
    minimal_steps, _ = trace(evaluator, root, minimal) if minimal != seq else (steps, 0)
    backend = evaluator.pipeline
    listing = backend.instructions if supports(backend, "explain") else (lambda module: [])
    diff = diff_modules(listing(evaluator.module(default.state)), listing(evaluator.module(final.state)), cap=cap)
    if final.state == default.state:
        notes.append(f"the sequence reaches exactly {base} final module: "
                     + ("the win is the compiler options'" if options else "nothing to explain"))
    effect = explain_options(evaluator, root, result.state, options, ratio=ratio) if options else None
    faster = _faster(evaluator, root, result.state, options) if options or ratio is not None else ()
    return Explanation(
        module=root.name, fingerprint=root.fingerprint, pipeline_version=evaluator.version, sequence=seq,
        minimal=minimal, minimal_same=same, input=evaluator.metrics(root.fingerprint), default=default.metrics,
        tuned=final.metrics, tuned_raw=result.metrics, default_state=default.state, tuned_state=result.state,
        tuned_final_state=final.state, diff=diff, steps=steps, minimal_steps=minimal_steps,
        steps_compiled=evaluator.stats.steps_compiled - compiled0,
        reproduce=_reproduce(evaluator, root.name, model_path, minimal), run_id=run_id, model_path=model_path,
        notes=tuple(notes), baseline=base, options=effect, faster=faster,
    )


#: Traced samples per profile in ``explain``'s "Which ops got faster" (a few: it is read, not claimed).
PROFILE_ROUNDS = 3


def _faster(evaluator, root, state: str, options: CompilerOptions, top: int = 8) -> tuple:
    """Rows of "which ops got faster": the default's profile against the win's (its passes' module,
    compiled with its options); empty where the backend does not profile or a profile fails."""
    backend = evaluator.pipeline
    if not supports(backend, "profile"):
        return ()
    tuned = evaluator.module(state, root.name)
    tuned = tuned.with_options(options) if options else tuned
    try:
        # the ops' shares are the section; the hand-over probe (a second compile each) is not read here
        a = Profile.from_backend(root.name, backend.profile(root, rounds=PROFILE_ROUNDS, handover=False))
        b = Profile.from_backend(root.name, backend.profile(tuned, rounds=PROFILE_ROUNDS, handover=False))
    except (PassFailed, AutotuneError):  # a section of the report, not its verdict: left out
        return ()
    return tuple(faster_rows(a, b, top))


def explain_run(evaluator, run_id: str, model_path: str | None = None, minimize: bool = True,
                cap: int = LIST_CAP, member: str | None = None) -> Explanation:
    """``explain`` for a finished run in the cache: its module and its best (pruned) sequence.

    ``member`` picks one module of a fleet run (name or fingerprint; default: its biggest win)."""
    run = RunStore(evaluator.cache).get(run_id)
    if run.version != evaluator.version:
        raise BadInput(f"run '{run_id}' was made with {run.version}, not {evaluator.version}")
    result = run.result
    if result is None:
        raise BadInput(f"run '{run_id}' has not finished (status {run.status}); nothing to explain")
    sequence = result.best_sequence
    options = result.best_options
    if not sequence and not options:
        raise BadInput(f"run '{run_id}' found no sequence to explain ({result.target.baseline} ordering is the answer)")
    ratio = result.claim.ratio if getattr(result, "claim", None) is not None and result.claim.measured else None
    fingerprint, name = run.module, run.module_name
    if isinstance(result, FleetResult):  # explain one of its modules
        members = result.members
        if member is None:  # the biggest relative win
            ranked = sorted((m for m in members if m.ratio is not None), key=lambda m: m.ratio)
            pick = ranked[0] if ranked else members[0]
        else:
            found = [m for m in members if member in (m.name, m.fingerprint)]
            if not found:
                raise BadInput(f"fleet run '{run_id}' has no module '{member}' "
                               f"(members: {', '.join(m.name for m in members)})")
            pick = found[0]
        fingerprint, name = pick.fingerprint, pick.name
    elif member is not None:
        raise BadInput(f"run '{run_id}' tuned one module; --module applies to fleet runs")
    proto = evaluator.cache.state_proto(evaluator.version, fingerprint)
    if proto is None:
        raise BadInput(f"run '{run_id}': its module is no longer in the cache")
    root = Module(name, proto, fingerprint)
    return explain(evaluator, root, sequence, run_id=run_id, model_path=model_path, minimize=minimize, cap=cap,
                   options=options, ratio=ratio)


# ---- rendering ----------------------------------------------------------------------------------------
def _num(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:+,.0f}" if isinstance(x, (int, float)) else str(x)


def _listing(items: tuple[Instr, ...], total: int) -> list[str]:
    if not items:
        return ["(none)", ""]
    lines = []
    by_comp: dict[str, list[Instr]] = defaultdict(list)
    for i in items:
        by_comp[i.computation].append(i)
    for comp, insts in by_comp.items():
        lines.append(f"computation `{comp}`:")
        lines.append("```")
        lines.extend(("* " if i.frontier else "  ") + i.text for i in insts)
        lines.append("```")
    if total > len(items):
        lines.append(f"... {total - len(items)} more not listed (where the difference starts first).")
    lines.append("")
    return lines


def render_markdown(e: Explanation) -> str:
    d = e.diff
    delta = _deltas(e.default, e.tuned)
    title = f"# Explain: {e.module}" + (f" (run {e.run_id})" if e.run_id else "")
    lines = [title, "",
             f"Sequence: `{','.join(e.sequence) or '(empty)'}`  ",
             (f"Minimal (ddmin, same final module): `{','.join(e.minimal) or '(empty)'}` "
              f"({len(e.minimal)} of {len(e.sequence)} passes)  " if e.minimal_same == "final" else
              "Not minimised (`--no-minimize`).  "),
             f"Pipeline: `{e.pipeline_version}`; compiles needed for this report: {e.steps_compiled}", "",
             f"| | input | {e.baseline} | tuned (raw) | tuned + default pipeline | delta vs default |",
             "|---|---:|---:|---:|---:|---:|",
             f"| instructions | {e.input.instructions} | {e.default.instructions} | {e.tuned_raw.instructions} | "
             f"{e.tuned.instructions} | {_num(delta['instructions'])} |"]
    for key, label in (("flops", "flops"), ("transcendentals", "transcendentals"), ("bytes_accessed", "bytes accessed")):
        vals = [getattr(m, key) for m in (e.input, e.default, e.tuned_raw, e.tuned)]
        lines.append(f"| {label} | " + " | ".join(_num(v).lstrip("+") for v in vals) + f" | {_num(delta[key])} |")
    if e.options is not None:
        lines += [""] + e.options.markdown(e.baseline)
    if e.faster:
        lines += ["", "## Which ops got faster", "",
                  f"From a profile of {e.baseline} and one of the win (`autotune profile`: each op's time traced back "
                  "to the input instruction it computes; two profiles timed one after the other).", "",
                  "| input instruction | ms before | ms after | after/before |", "|---|---:|---:|---:|"]
        lines += [f"| `{a}` | {b} | {c} | {d} |" for a, b, c, d in e.faster]
    lines += ["", f"## Opcodes ({e.baseline} -> tuned, after the default pipeline)", ""]
    if d.opcodes:
        lines += ["| opcode | default | tuned | delta |", "|---|---:|---:|---:|"]
        lines += [f"| {o} | {b} | {a} | {a - b:+d} |" for o, b, a in d.opcodes]
    else:
        lines.append("No opcode count changed.")
    lines += ["", "## Which step made the difference", "",
              f"Final-ops after each prefix of the sequence (the prefix, then {e.baseline} pipeline); "
              f"prefix 0 is {e.baseline}.", "",
              "| step | pass | changed the module | instructions | final-ops |", "|---:|---|---|---:|---:|"]
    for s in e.steps:
        mark = " **<-**" if s.decisive else ""
        lines.append(f"| {s.index} | {s.action or '(none)'} | {'yes' if s.changed else ('-' if not s.index else 'no')} | "
                     f"{s.instructions if s.instructions is not None else 'fails'} | "
                     f"{s.final_instructions if s.final_instructions is not None else 'fails'}{mark} |")
    if e.minimal != e.sequence and e.minimal_steps:
        lines += ["", "The minimal sequence, step by step: " + ", ".join(
            f"{s.action or 'start'} -> {s.final_instructions}" for s in e.minimal_steps)]
    lines += ["", "## Instructions that differ (matched structurally, names ignored)", "",
              f"{d.matched} instructions are identical with everything below them; {d.rewired} more exist in both "
              f"but read different inputs (they differ only because something below them does); "
              f"{d.vanished_total} are only in {e.baseline} module and {d.appeared_total} only in the tuned one. "
              "`*` marks an instruction whose operands both modules share: where a difference starts.", "",
              f"### Only in {e.baseline} (vanish with the tuned sequence): {d.vanished_total}", ""]
    lines += _listing(d.vanished, d.vanished_total)
    lines += [f"### Only in the tuned module: {d.appeared_total}", ""]
    lines += _listing(d.appeared, d.appeared_total)
    for note in e.notes:
        lines.append(f"Note: {note}")
    lines += ["", render_missed(e, heading="##")]
    return "\n".join(lines).rstrip() + "\n"


def render_missed(e: Explanation, heading: str = "#") -> str:
    """The self-contained report a compiler engineer can file: minimal sequence, effect, commands."""
    r = e.reproduce
    passes = ",".join(e.minimal)
    vanished = Counter(i.opcode for i in e.diff.vanished if i.frontier) or Counter(i.opcode for i in e.diff.vanished)
    lines = [f"{heading} Missed optimization: {e.module}", "",
             f"{r.get('default_pipeline') or 'The default pipeline of ' + str(r['compiler'])} leaves "
             f"{e.default.instructions} instructions; "
             f"running `{passes}` first, then the same default pipeline, leaves {e.tuned.instructions} "
             f"({e.tuned.instructions - e.default.instructions:+d}).",
             (f"Minimal: removing any one of these {len(e.minimal)} passes loses the effect (ddmin)."
              if e.minimal_same == "final" else "The sequence as found (not minimised)."), ""]
    if e.options is not None:
        lines.append(f"Compiled with `{CompilerOptions.of(e.options.minimal).describe()}` (minimal, measured): "
                     f"{e.options.ratio:.3f} of {e.baseline}'s time with all the win's options."
                     if e.options.ratio is not None else "")
    if e.diff.opcodes:
        lines.append("Effect by opcode: " + ", ".join(f"{o} {a - b:+d}" for o, b, a in e.diff.opcodes) + ".")
    if vanished:
        lines.append("Where it starts (default-only instructions whose operands both modules share): "
                     + ", ".join(f"{n} x {o}" for o, n in vanished.most_common()) + ".")
    lines += ["", f"Reproduce with autotune (same {r['compiler']}):", "", "```sh",
              *([r["install"]] if r.get("install") else []), *r["autotune"], "```", "",
              *([] if not r.get("xla_steps") else [
              "Reproduce with XLA's own flags: one compile per step, each capturing the module at the pre-scheduler "
              "stage (`xla_dump_to=DIR`, `xla_dump_hlo_pass_re=.+` shows which passes ran), feeding each step's "
              "module to the next; the last step is XLA's default pre-layout pipeline. Each pass runs where XLA "
              "first runs it, inside its enclosing sub-pipelines (a pass inside `simplification` runs to a fixed "
              "point). The value of `xla_disable_hlo_passes` per step, as an environment variable (names "
              "with spaces are XLA's real pipeline names, listed next to their dump spellings; both are needed) "
              "or from JAX as `.lower(...).compile(compiler_options={\"xla_disable_hlo_passes\": ...})`:", ""])]
    for i, step in enumerate(r.get("xla_steps") or (), 1):
        lines += [f"{i}. `{step['action']}` (kept: {', '.join(step['keeps'])})", "",
                  "   ```sh", f"   XLA_FLAGS='--xla_disable_hlo_passes=\"{step['xla_disable_hlo_passes']}\"'", "   ```", ""]
    return "\n".join(lines).rstrip() + "\n"
