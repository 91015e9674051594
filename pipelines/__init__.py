"""Compiler backends ("pipelines"): one package or file per backend.

A pipeline turns a pass sequence into modules and measurements. The only one shipped is ``xla``:
XLA's HLO pass pipeline driven through jaxlib. ``get(name)`` returns a backend by name.
"""

from __future__ import annotations

from autotune.errors import UnknownName

BACKENDS = ("xla",)


def get(name: str = "xla", **options):
    """Return a pipeline instance; imports the backend lazily so listing names stays cheap."""
    if name == "xla":
        from autotune.pipelines.xla import XlaPipeline

        return XlaPipeline(**options)
    raise UnknownName("pipeline", name, BACKENDS)
