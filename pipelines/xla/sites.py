"""Decisions per site: which instructions of XLA's optimised CPU module run as a library call and which
as XLA's own code, chosen one instruction at a time.

Why here and how. XLA's CPU pipeline decides per module, by a flag, which ops become library fusions
(YNNPACK's ``__ynn_fusion``: convolutions, some dots, some reduces) and which it emits itself (Eigen
thunks, loop fusions). The best choice differs per op: on ResNet-50 the global "reduce only" flag wins
because it takes the convolutions *out* of YNNPACK, and which of them pay differs by shape. XLA keeps
the choice in the module (a ``kCustom`` fusion with a ``fusion_config`` backend config), so a decision
can be made per instruction by rewriting the module where XLA has already made its own choices: the
pre-scheduler stage, reached by the callback jaxlib registers with
``jax.extend.xla.register_hlo_module_transformation`` (the worker's capture hook). XLA honours the
rewritten module from there on (scheduling, buffer assignment, codegen). Forming such fusions in the
*input* module does not work: the MLIR round trip of a compile drops their backend config.

A site is named by the input module's instruction at its heart (the convolution, dot or reduce the
library fusion computes, or the plain instruction XLA left to itself), so a decision survives another
pass order and reads as an op of the user's module. Decisions travel as compiler options named
``site:<kind>:<instruction>`` (``CompilerOptions``): cache keys, trials, records, ``check``, ``explain``
and fleets carry them as they carry XLA's own options; ``runner.compile_full`` splits them off and the
worker applies them through the hook. A decision whose site the compiled module does not hold applies
to nothing and is reported as such (``RewriteResult.missing``).

Everything here is text in, text out: testable without a compile, and a wrong rewrite is caught by the
execution every answer goes through (a rule that changes what the module computes is a bug).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from autotune.pipelines.xla import hlo, loops, versions

#: The prefix of a decision's name among a candidate's compiler options.
PREFIX = "site:"
#: Who generates the code for a site (this module's kind of decision).
LIBRARY = "library"
#: The kinds of decision: the library choice (here, on XLA's optimised module) and loop unrolling
#: (``loops.py``, on the input module).
KINDS = (LIBRARY, loops.UNROLL)
#: Its values: the site as a library fusion (YNNPACK) or as XLA's own code (Eigen thunk / loop fusion);
#: for a library fusion of a whole subgraph (several convolutions or dots with the elementwise work
#: between them), also ``split``: each convolution or dot a library fusion of its own, the rest XLA's.
AS_LIBRARY, AS_XLA, SPLIT = "ynn", "xla", "split"
CHOICES = (AS_LIBRARY, AS_XLA)
SUBGRAPH_CHOICES = (AS_LIBRARY, AS_XLA, SPLIT)

#: The library fusion kinds the CPU pipeline forms (jaxlib 0.10-0.12).
LIBRARY_KINDS = ("__ynn_fusion",)
#: Ops XLA may hand to a library as a fusion of one instruction.
LIBRARY_OPS = ("convolution", "dot")
#: Element types the library takes for a site offered in that direction.
LIBRARY_TYPES = ("f32",)

_INST = re.compile(r"^(?P<lead>\s*(?:ROOT )?)%(?P<name>[\w.\-]+) = (?P<shape>[a-z0-9]+\[[0-9,]*\](?:\{[^}]*\})?) "
                   r"(?P<op>[a-z\-]+)\((?P<operands>[^)]*)\)(?P<rest>.*)$")
_COMP = re.compile(r"^(?:ENTRY )?%(?P<name>[\w.\-]+) \((?P<params>.*)\) -> .* \{$")
_CALLS = re.compile(r", calls=%(?P<comp>[\w.\-]+)")
_KIND = re.compile(r"\"fusion_config\":\{\"kind\":\"(?P<kind>[\w]+)\"")
_METADATA = re.compile(r", metadata=\{.*?\}(?=(, [a-z_]+=|$))")
_BACKEND = re.compile(r", backend_config=(\{.*\})(?=(, [a-z_]+=|$))")


@dataclass(frozen=True)
class Site:
    """One place a decision can be made: ``name`` is the input module's instruction at its heart,
    ``opcode`` and ``shape`` (its result, layout dropped) say what it computes, ``default`` what XLA chose
    (``AS_LIBRARY`` or ``AS_XLA``) and ``choices`` what may be chosen instead."""

    name: str
    opcode: str
    shape: str
    default: str
    choices: tuple[str, ...] = CHOICES
    kind: str = LIBRARY

    @property
    def id(self) -> str:
        """``name:opcode:shape``, the form ``autotune profile`` names an op by."""
        return f"{self.name}:{self.opcode}:{self.shape}"

    @property
    def elements(self) -> int:
        """The result's element count: the order sites are offered in where no profile ranks them (0 for a
        loop, whose ``shape`` is its trip count)."""
        if "[" not in self.shape:
            return 0
        n = 1
        for d in self.shape.split("[", 1)[1].rstrip("]").split(","):
            n *= int(d) if d else 1
        return n

    @property
    def option(self) -> str:
        """The compiler-option name a decision on this site travels under."""
        return option_name(self.kind, self.name)

    def describe(self) -> str:
        other = [c for c in self.choices if c != self.default]
        if self.kind == loops.UNROLL:
            return f"while {self.name} ({self.shape}): as written, may be unrolled {', '.join(other)}"
        return f"{self.opcode} {self.name} {self.shape}: XLA's default {self.default}, may be {', '.join(other)}"


@dataclass(frozen=True)
class RewriteResult:
    """The rewritten module text and which decisions it applied, or found no site for."""

    text: str
    applied: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = field(default=())  # decisions equal to XLA's own choice
    #: The module aliased inputs to outputs and this jaxlib's hook drops that (``versions.HOOK_KEEPS_ALIASING``):
    #: the decided executable copies every aliased buffer each step, a cost its measured time includes.
    aliasing_dropped: bool = False


def option_name(kind: str, name: str) -> str:
    return f"{PREFIX}{kind}:{name}"


def is_site_option(name: str) -> bool:
    return str(name).startswith(PREFIX)


def parse_option(name: str) -> tuple[str, str]:
    """``site:<kind>:<instruction>`` -> ``(kind, instruction)``; ValueError for a malformed one."""
    body = str(name)[len(PREFIX):]
    kind, sep, inst = body.partition(":")
    if not sep or not inst or kind not in KINDS:
        raise ValueError(f"a site decision is named site:<{'|'.join(KINDS)}>:<instruction>, not {name!r}")
    return kind, inst


def split(overrides: Iterable[tuple[str, str]] | None) -> tuple[list[tuple[str, str]], dict[str, str], dict[str, str]]:
    """``(XLA's own options, {instruction: library choice}, {while instruction: unroll choice})`` of a
    candidate's option pairs: the library decisions are made on XLA's optimised module, the loop decisions
    on the input module before it is compiled."""
    plain, decisions, unrolls = [], {}, {}
    for name, value in overrides or ():
        if is_site_option(name):
            kind, inst = parse_option(name)
            (unrolls if kind == loops.UNROLL else decisions)[inst] = str(value)
        else:
            plain.append((name, value))
    return plain, decisions, unrolls


def check_decision(name: str, value: str) -> None:
    """ValueError (one line) for a decision this module cannot apply anywhere."""
    kind, _ = parse_option(name)
    if kind == loops.UNROLL:
        if value != loops.FULL and not (str(value).isdigit() and int(value) >= 1):
            raise ValueError(f"{name} takes {loops.FULL} or an unroll factor (2, 4, ...), not {value!r}")
    elif value not in SUBGRAPH_CHOICES:
        raise ValueError(f"{name} takes one of {', '.join(SUBGRAPH_CHOICES)}, not {value!r}")


def loop_sites(text: str) -> list[Site]:
    """The input module's counted while loops as sites (``loops.find_loops``): kind ``unroll``, XLA's
    default the loop as written."""
    return [Site(loop.name, "while", f"{loop.trips} trips", loops.AS_WRITTEN, (loops.AS_WRITTEN, *loop.choices),
                 loops.UNROLL) for loop in loops.find_loops(text)]


def drops_donation(proto: bytes) -> bool:
    """Whether a per-site decision on this module costs its donated buffers here: the module aliases inputs
    to outputs and the installed jaxlib's transformation drops that (``versions.HOOK_KEEPS_ALIASING``)."""
    return _drops_donation(hlo.elided_text(hlo.parse_proto(proto)))


def _drops_donation(text: str) -> bool:
    """``drops_donation`` of a module's text (its header line says whether it aliases)."""
    return not versions.hook_keeps_aliasing() and "input_output_alias=" in text.split("\n", 1)[0]


def tag(proto: bytes) -> bytes:
    """``proto`` with every instruction's metadata ``op_name`` set to its own name (``profiling.tagged_text``,
    the profile's link back to the input): what a compile with decisions, and the listing of sites,
    compile, so that a site is named by the input instruction whatever XLA renames it to. Metadata does
    not reach the generated code."""
    text, _ = hlo.tagged_text(hlo.to_text(hlo.parse_proto(proto), metadata=True))
    return hlo.parse_text(text).as_serialized_hlo_module_proto()


def decide(module_bytes: bytes, decisions: Mapping[str, str]) -> tuple[bytes | None, RewriteResult]:
    """What a pre-scheduler hook hands back to XLA for ``decisions``: the serialized optimised module
    rewritten (None when no decision found its site: XLA keeps its own), and what was applied. The one
    step both the workers (``worker.py``) and a user's JAX process (``site_hook.py``) take."""
    result = rewrite(hlo.to_text(hlo.parse_proto(module_bytes), metadata=True), decisions)
    if not result.applied:
        return None, result
    if _drops_donation(result.text):
        result = dataclasses.replace(result, aliasing_dropped=True)
    return hlo.parse_text(result.text).as_serialized_hlo_module_proto(), result


# ---- reading the optimised module --------------------------------------------------------------------
@dataclass
class _Comp:
    name: str
    header: int  # line index of the computation's header
    lines: list[int] = field(default_factory=list)  # line indexes of its instructions
    params: dict[str, str] = field(default_factory=dict)  # parameter name -> shape (header form)


def _computations(lines: list[str]) -> dict[str, _Comp]:
    comps: dict[str, _Comp] = {}
    current = None
    for i, line in enumerate(lines):
        m = _COMP.match(line)
        if m:
            current = comps[m.group("name")] = _Comp(m.group("name"), i)
            continue
        if line.startswith("}"):
            current = None
        elif current is not None and line.strip():
            current.lines.append(i)
    return comps


_OP_NAME = re.compile(r'op_name="(?:[^"]*/)?([\w.\-]+)"')  # XLA prefixes an inlined call's ("call.6/dot.5")


def _name(m) -> str:
    """The input instruction an optimised one stands for: its metadata's ``op_name`` when that is an
    instruction name (the workers tag every input instruction so before compiling: ``profiling.tagged_text``;
    XLA copies metadata onto fused clones, whose own names it renumbers), else its own name."""
    meta = _OP_NAME.search(m.group("rest")) if "metadata=" in m.group("rest") else None
    return meta.group(1) if meta else m.group("name")


def _shape_only(shape: str) -> str:
    return shape.split("{", 1)[0]


_COMMENT = re.compile(r"/\*.*?\*/")


def _operands(text: str) -> list[str]:
    """Operand names of an operand list (XLA prints ``/*index=5*/`` before every fifth one)."""
    return [o.strip().lstrip("%") for o in _COMMENT.sub("", text).split(",") if o.strip()]


def _single_op_body(lines: list[str], comp: _Comp):
    """``(root match, parameter numbers by name)`` when the computation is parameters plus one op."""
    params, others = {}, []
    for i in comp.lines:
        m = _INST.match(lines[i])
        if m is None:
            return None
        if m.group("op") == "parameter":
            params[m.group("name")] = int(m.group("operands"))
        else:
            others.append(m)
    if len(others) != 1 or not others[0].group("lead").strip().startswith("ROOT"):
        return None
    return others[0], params


def _hero(lines: list[str], comp: _Comp, fusion):
    """The instruction a library fusion exists for: the one conv/dot/reduce in it, else (a subgraph) the
    convolution or dot with the largest result that ``autotune profile`` names the fusion's time by
    (``profiling.principal``: the one the fusion's own metadata names, else the last in the body), else
    its root."""
    found = [m for i in comp.lines if (m := _INST.match(lines[i])) and m.group("op") in (*LIBRARY_OPS, "reduce")]
    if len(found) == 1:
        return found[0]
    heavy = [m for m in found if m.group("op") in LIBRARY_OPS]
    if heavy:
        def rank(m):
            return LIBRARY_OPS.index(m.group("op")), -_elements(m.group("shape"))
        best = min(rank(m) for m in heavy)
        tied = [m for m in heavy if rank(m) == best]
        return next((m for m in tied if _name(m) == _name(fusion)), tied[-1])
    roots = [m for i in comp.lines if (m := _INST.match(lines[i])) and m.group("lead").strip().startswith("ROOT")]
    return roots[0] if roots else None


def _library_fusions(lines: list[str], comps: dict[str, _Comp]):
    """``(line index, fusion match, called computation, hero match)`` per library fusion."""
    for i, line in enumerate(lines):
        if " fusion(" not in line or "kind=kCustom" not in line:
            continue
        m, kind, calls = _INST.match(line), _KIND.search(line), _CALLS.search(line)
        if m is None or kind is None or calls is None or kind.group("kind") not in LIBRARY_KINDS:
            continue
        comp = comps.get(calls.group("comp"))
        hero = _hero(lines, comp, m) if comp else None
        if hero is not None:
            yield i, m, comp, hero


def _fused_names(comps: dict[str, _Comp], lines: list[str]) -> set[str]:
    """Computations called by fusions (their instructions are not plain sites)."""
    out = set()
    for line in lines:
        if " fusion(" in line and (c := _CALLS.search(line)):
            out.add(c.group("comp"))
    return out


def _elements(shape: str) -> int:
    return math.prod(_dims(shape))


def _dims(shape: str) -> list[int]:
    body = shape.split("[", 1)[1].split("]", 1)[0]
    return [int(d) for d in body.split(",") if d]


def _row_major(shape: str) -> bool:
    """No layout printed, or the descending one YNNPACK takes (``{2,1,0}``)."""
    if "{" not in shape:
        return True
    layout = [int(d) for d in shape.split("{", 1)[1].split("}", 1)[0].split(",") if d.strip().isdigit()]
    return layout == sorted(layout, reverse=True)


def _attr_dims(rest: str, name: str) -> list[int]:
    m = re.search(rf"{name}=\{{([0-9,]*)\}}", rest)
    return [int(d) for d in m.group(1).split(",") if d] if m else []


def _library_takes_dot(m, lhs: str | None, rhs: str | None) -> bool:
    """Whether YNNPACK takes this dot as a one-op fusion: f32, row-major, batch dimensions leading on both
    sides, the lhs contracting its last dimension and the rhs its first after the batch (no transposes),
    one free dimension each, and not tiny (XLA's own ``IsDotSupportedByYnn`` rules, conservatively)."""
    if lhs is None or rhs is None or not all(s.startswith("f32[") for s in (lhs, rhs, m.group("shape"))):
        return False
    if not all(_row_major(s) for s in (lhs, rhs, m.group("shape"))):
        return False
    rest = m.group("rest")
    lb, rb = _attr_dims(rest, "lhs_batch_dims"), _attr_dims(rest, "rhs_batch_dims")
    lc, rc = _attr_dims(rest, "lhs_contracting_dims"), _attr_dims(rest, "rhs_contracting_dims")
    ld, rd = _dims(lhs), _dims(rhs)
    b = len(lb)
    if lb != list(range(b)) or rb != list(range(b)) or len(ld) != b + 2 or len(rd) != b + 2:
        return False
    if lc != [b + 1] or rc != [b]:
        return False
    mm, k, n = ld[b], ld[b + 1], rd[b + 1]
    if mm == 1 or n == 1:  # a matrix-vector product: jaxlib 0.10's YNNPACK refuses it
        return False
    return max(mm, k, n) >= 8


def _plain_candidates(lines: list[str], comps: dict[str, _Comp]):
    """``(line index, match, computation)`` per plain dot XLA left to its own code that the library takes
    (convolutions are only ever taken *out* of the library: which ones it takes varies by version)."""
    fused = _fused_names(comps, lines)
    for comp in comps.values():
        if comp.name in fused:
            continue
        for i in comp.lines:
            m = _INST.match(lines[i])
            if m and m.group("op") == "dot":
                operands = _operands(m.group("operands"))
                if len(operands) == 2 and _library_takes_dot(m, *(_shape_of(lines, comp, o) for o in operands)):
                    yield i, m, comp


def find_sites(text: str) -> list[Site]:
    """The sites of an optimised module (XLA's pre-scheduler form): every library fusion (may become
    XLA's code: a single convolution or dot inlined, another fusion emitted as a loop fusion when it
    holds no convolution or dot) and every plain f32 dot or convolution (may become a library fusion)."""
    lines = text.splitlines()
    comps = _computations(lines)
    out: dict[str, Site] = {}
    for _, _fusion, comp, hero in _library_fusions(lines, comps):
        single = _single_op_body(lines, comp)
        subgraph = single is None and any((m := _INST.match(lines[i])) and m.group("op") in LIBRARY_OPS
                                          for i in comp.lines)
        out.setdefault(_name(hero), Site(_name(hero), hero.group("op"), _shape_only(hero.group("shape")), AS_LIBRARY,
                                         SUBGRAPH_CHOICES if subgraph else CHOICES))
    for _, m, _comp in _plain_candidates(lines, comps):
        out.setdefault(_name(m), Site(_name(m), m.group("op"), _shape_only(m.group("shape")), AS_XLA))
    return list(out.values())


# ---- rewriting it ------------------------------------------------------------------------------------
def _without_backend_config(rest: str) -> str:
    return _BACKEND.sub("", rest)


def _inline(lines: list[str], idx: int, fusion, single) -> str:
    """The fusion line replaced by its one op applied to the fusion's operands (keeping the fusion's
    name, so its users are untouched)."""
    root, params = single
    outer = _operands(fusion.group("operands"))
    by_param = {name: outer[n] for name, n in params.items()}
    args = ", ".join(f"%{by_param[o]}" for o in _operands(root.group("operands")))
    rest = _METADATA.sub("", root.group("rest"))
    return f"{fusion.group('lead')}%{fusion.group('name')} = {fusion.group('shape')} {root.group('op')}({args}){rest}"


def _as_loop(line: str) -> str:
    return _without_backend_config(line.replace("kind=kCustom", "kind=kLoop"))


def _shape_of(lines: list[str], comp: _Comp, operand: str) -> str | None:
    for i in comp.lines:
        m = _INST.match(lines[i])
        if m and m.group("name") == operand:
            return m.group("shape")
    return None


def _library_call(m, cname: str, shapes: list[str], lead: str, name: str, operands: str) -> tuple[str, list[str]]:
    """``m`` (a dot or convolution) as a one-op library fusion: (the call line ``lead%name = ... fusion(operands)``,
    the new computation ``cname`` taking parameters of ``shapes``). The op's metadata goes with the call, which
    is what a profile names the library call's time by."""
    params = ", ".join(f"p{k}: {_shape_only(s)}" for k, s in enumerate(shapes))
    body = [f"%{cname} ({params}) -> {_shape_only(m.group('shape'))} {{"]
    body += [f"  %{cname}.p{k} = {s} parameter({k})" for k, s in enumerate(shapes)]
    args = ", ".join(f"%{cname}.p{k}" for k in range(len(shapes)))
    meta = _METADATA.search(m.group("rest"))
    rest = _METADATA.sub("", m.group("rest"))
    body += [f"  ROOT %{cname}.root = {m.group('shape')} {m.group('op')}({args}){rest}", "}", ""]
    config = '{"outer_dimension_partitions":[],"fusion_config":{"kind":"__ynn_fusion"}}'
    call = (f"{lead}%{name} = {m.group('shape')} fusion({operands}), kind=kCustom, calls=%{cname}"
            f"{meta.group(0) if meta else ''}, backend_config={config}")
    return call, body


def _outline(lines: list[str], idx: int, m, comp: _Comp, n: int) -> tuple[str, list[str]] | None:
    """A plain dot/convolution as a one-op library fusion: (the new call line, the new computation)."""
    shapes = [_shape_of(lines, comp, o) for o in _operands(m.group("operands"))]
    if any(s is None for s in shapes):
        return None
    return _library_call(m, f"autotune_site_{n}", shapes, m.group("lead"), m.group("name"), m.group("operands"))


_REF = re.compile(r"%([\w.\-]+)")


def _unfuse(lines: list[str], fusion, comp: _Comp, split_heavy: bool, n: int) -> tuple[str, list[str]] | None:
    """A library fusion of a subgraph taken apart: its instructions in place of the fusion line (its
    parameters replaced by the fusion's operands, its root renamed to the fusion, so that the fusion's
    users are untouched), each XLA's own op, or with ``split_heavy`` each convolution or dot a one-op
    library fusion of its own. Returns (the replacement lines joined, the new computations)."""
    outer = _operands(fusion.group("operands"))
    rename: dict[str, str] = {}
    shapes: dict[str, str] = {}
    body: list[str] = []
    out: list[str] = []
    matches = [_INST.match(lines[i]) for i in comp.lines]
    if any(m is None for m in matches):
        return None
    for m in matches:
        shapes[m.group("name")] = m.group("shape")
        if m.group("op") == "parameter":
            rename[m.group("name")] = outer[int(m.group("operands"))]
    lead = fusion.group("lead")
    for k, m in enumerate(matches):
        if m.group("op") == "parameter":
            continue
        root = m.group("lead").strip().startswith("ROOT")
        name = fusion.group("name") if root else m.group("name")
        operands = _REF.sub(lambda r: "%" + rename.get(r.group(1), r.group(1)), m.group("operands"))
        head = lead if root else "  "
        if split_heavy and m.group("op") in LIBRARY_OPS:
            call, made = _library_call(m, f"autotune_split_{n}_{k}", [shapes[o] for o in _operands(m.group("operands"))],
                                       head, name, operands)
            out.append(call)
            body += made
        else:
            out.append(f"{head}%{name} = {m.group('shape')} {m.group('op')}({operands}){m.group('rest')}")
    return "\n".join(out), body


def rewrite(text: str, decisions: Mapping[str, str]) -> RewriteResult:
    """``text`` with each ``{instruction: choice}`` applied where the module holds that site."""
    lines = text.splitlines()
    comps = _computations(lines)
    applied, unchanged, new_comps = [], [], []
    for idx, fusion, comp, hero in list(_library_fusions(lines, comps)):
        choice = decisions.get(_name(hero))
        if choice is None:
            continue
        if choice == AS_LIBRARY:
            unchanged.append(_name(hero))
            continue
        single = _single_op_body(lines, comp)
        if single is not None and single[0].group("op") in LIBRARY_OPS:
            if choice != AS_XLA:
                continue
            lines[idx] = _inline(lines, idx, fusion, single)
        elif not any((m := _INST.match(lines[i])) and m.group("op") in LIBRARY_OPS for i in comp.lines):
            if choice != AS_XLA:
                continue
            lines[idx] = _as_loop(lines[idx])
        else:
            made = _unfuse(lines, fusion, comp, choice == SPLIT, len(new_comps))
            if made is None:
                continue
            lines[idx], body = made
            new_comps += body
        applied.append(_name(hero))
    for n, (idx, m, comp) in enumerate(list(_plain_candidates(lines, comps))):
        choice = decisions.get(_name(m))
        if choice is None or _name(m) in applied:
            continue
        if choice == AS_XLA:
            unchanged.append(_name(m))
            continue
        made = _outline(lines, idx, m, comp, n)
        if made is None:
            continue
        lines[idx], body = made
        new_comps += body
        applied.append(_name(m))
    if new_comps:
        first = next(i for i, line in enumerate(lines) if _COMP.match(line))
        lines[first:first] = new_comps
    applied, unchanged = tuple(dict.fromkeys(applied)), tuple(dict.fromkeys(unchanged))
    missing = tuple(sorted(set(decisions) - set(applied) - set(unchanged)))
    return RewriteResult("\n".join(lines) + "\n", applied, missing, unchanged)
