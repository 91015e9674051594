"""Compiler backends ("pipelines"): one package or file per backend.

A backend implements ``autotune.core.backend.Backend``. The one shipped is ``xla``: XLA's HLO pass
pipeline driven through jaxlib. Others register under the ``autotune.backends`` entry-point group;
``get(name)`` constructs one by name (``autotune.core.backend.get``).
"""

from __future__ import annotations

from autotune.core.backend import available, get  # noqa: F401
