"""Compiler options: the second dimension of a candidate, beside the pass sequence.

A pass ordering changes which HLO XLA's later pipeline receives; a compiler option changes what that
pipeline and its code generator do with it (a library fusion, the scheduler, the vector width, one
late pass switched off). XLA's fixed pipeline re-normalises most of what a different order changes,
while its options move measured time module by module, in both directions, and some compute other
numbers (``docs/options.md``). So a candidate is ``(sequence, CompilerOptions)``: both are searched,
every cache key, trial, run, record and hook decision carries both, and only a measured objective
can judge options (an instruction count cannot see a library call).

Values here are the backend's own words, as strings (XLA: the flag parser's ``'True'``, ``'256'``,
``'LIBRARY_FUSION_TYPE_REDUCE'``, ``''`` for an empty repeated field). The catalogue of what exists
for a target, and which of it the installed compiler accepts, is the backend's
(``Backend.option_space``; XLA: ``pipelines/xla/options.py``); this module only holds the values
that cross layers and the one-line parsing of ``--compiler-option NAME=VALUE``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from autotune.errors import BadInput, UnknownName

#: The search spaces ``autotune run --space`` offers: the pass order, the compiler options, or both.
SPACES = ("passes", "options", "both")
#: What a dimension's choices hold for "leave the option at the compiler's default".
UNSET = None


@dataclass(frozen=True)
class CompilerOptions:
    """An option set, name -> value (strings), kept sorted so equal sets are equal values.

    Empty is the compiler's default: what a user gets without autotune. ``key`` is the set as one
    string (part of cache keys and trial rows), ``as_dict`` what JSON and records hold."""

    items: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        cleaned = tuple(sorted((str(k), str(v)) for k, v in dict(self.items).items()))
        object.__setattr__(self, "items", cleaned)

    @classmethod
    def of(cls, options: "CompilerOptions | Mapping[str, str] | Iterable[tuple[str, str]] | None") -> "CompilerOptions":
        """An option set from a mapping, pairs, another set or None (empty)."""
        if options is None:
            return EMPTY
        if isinstance(options, CompilerOptions):
            return options
        pairs = options.items() if isinstance(options, Mapping) else options
        return cls(tuple((str(k), str(v)) for k, v in pairs))

    @classmethod
    def from_key(cls, key: str | None) -> "CompilerOptions":
        """The inverse of ``key`` (trial rows store it)."""
        if not key:
            return EMPTY
        return cls(tuple(tuple(part.split("=", 1)) for part in key.split(";")))  # type: ignore[misc]

    def __bool__(self) -> bool:
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.items)

    @property
    def key(self) -> str:
        """``name=value;name=value`` (empty for the compiler's default). Values never hold ``;`` (XLA's
        repeated enums are comma-separated), so the key is unambiguous."""
        return ";".join(f"{k}={v}" for k, v in self.items)

    def as_dict(self) -> dict[str, str]:
        return dict(self.items)

    def merged(self, other: "CompilerOptions") -> "CompilerOptions":
        """This set with ``other``'s values on top."""
        return CompilerOptions(tuple({**self.as_dict(), **other.as_dict()}.items()))

    def without(self, names: Iterable[str]) -> "CompilerOptions":
        drop = set(names)
        return CompilerOptions(tuple((k, v) for k, v in self.items if k not in drop))

    def describe(self, empty: str = "the compiler's default options") -> str:
        """One line for a person: ``xla_cpu_...=REDUCE, xla_...=True`` (long enum prefixes kept)."""
        return ", ".join(f"{k}={v if v else repr('')}" for k, v in self.items) if self.items else empty


EMPTY = CompilerOptions()


@dataclass(frozen=True)
class OptionDim:
    """One option as a search dimension: its name, the values it may take besides the compiler's own
    default (the choice ``UNSET``), what it does, its group, and whether it changes numerics by design
    (fast math and its relatives: out of the space unless asked for)."""

    name: str
    values: tuple[str, ...]
    what: str = ""
    group: str = ""
    numerics: bool = False

    @property
    def choices(self) -> tuple[str | None, ...]:
        """``UNSET`` first (the compiler's default), then the values: what a strategy picks among."""
        return (UNSET, *self.values)


def parse_assignments(pairs: Iterable[str]) -> CompilerOptions:
    """``--compiler-option NAME=VALUE`` (repeatable) -> an option set; a malformed one is one line."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = str(pair).partition("=")
        if not sep or not name.strip():
            raise BadInput(f"--compiler-option takes NAME=VALUE (e.g. xla_cpu_enable_fast_min_max=True), not {pair!r}")
        out[name.strip()] = value.strip()
    return CompilerOptions.of(out)


def check_against(options: CompilerOptions, dims: Iterable[OptionDim], accepted: Mapping[str, tuple[str, ...]],
                  refused: Mapping[str, str] | None = None) -> CompilerOptions:
    """``options`` if every name and value is one the installed compiler accepts (``accepted``: name ->
    values it took); else ``UnknownName`` naming the nearest known option (or value), in one line.
    ``refused``: name -> why the compiler left it out (said instead of "unknown")."""
    known = {d.name: d for d in dims}
    for name, value in options.items:
        if name not in accepted:
            if refused and name in refused:
                raise BadInput(f"compiler option {name} is not accepted by the installed compiler: {refused[name]}")
            raise UnknownName("compiler option", name, list(accepted) + list(known))
        values = accepted[name]
        if values and value not in values and not _free_value(known.get(name), value):
            exc = UnknownName(f"value of {name}", value, list(values))
            exc.args = (f"{exc.args[0]} (accepted: {', '.join(repr(v) for v in values)})",)
            raise exc
    return options


def _free_value(dim: OptionDim | None, value: str) -> bool:
    """Integer-valued options (thresholds, widths) take any non-negative integer, not only the
    catalogue's candidates."""
    return dim is not None and all(v.isdigit() for v in dim.values) and value.isdigit()
