"""Plugins named ``module:Class``: the built-ins a registry lists, then third-party entry points.

Strategies, objectives and backends are all found this way; one loader keeps their error messages
(one line, ``BadInput``) and their lookup rules the same.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import entry_points

from autotune.errors import BadInput, UnknownName


def names(builtin: dict[str, str], group: str) -> dict[str, str]:
    """Plugin name -> ``module:Class``: the built-ins first, then the entry points of ``group``."""
    found = dict(builtin)
    for ep in entry_points(group=group):
        found.setdefault(ep.name, ep.value)
    return found


def import_object(path: str):
    """The object a ``module:Name`` path names (imports the module)."""
    module, _, name = path.partition(":")
    return getattr(import_module(module), name)


def load(kind: str, name: str, known: dict[str, str]):
    """The class registered as ``name`` (``UnknownName`` with suggestions, or ``BadInput`` if it cannot load)."""
    if name not in known:
        raise UnknownName(kind, str(name), list(known))
    module, _, cls = known[name].partition(":")
    try:
        return getattr(import_module(module), cls)
    except (ImportError, AttributeError) as exc:
        raise BadInput(f"{kind} '{name}' cannot be loaded from {known[name]}: {exc}") from None
