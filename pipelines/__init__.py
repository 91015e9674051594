"""Compiler backends ("pipelines"): one package or file per backend.

A backend implements ``autotune.core.backend.Backend``. The one shipped is ``xla``: XLA's HLO pass
pipeline driven through jaxlib. Others register under the ``autotune.backends`` entry-point group;
``autotune.core.backend.get(name)`` constructs one by name.
"""
