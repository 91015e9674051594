"""Reinforcement learning over pass orderings: the gymnasium environment and policy training.

``import autotune`` registers ``autotune/PassOrdering-v0`` with gymnasium (``register_env``) without
importing gymnasium itself (importing it would triple the cost of ``import autotune``): when gymnasium
is already imported the id is registered at once, otherwise right after gymnasium's own import
finishes, through a one-shot import hook. Either way ``gymnasium.make("autotune/PassOrdering-v0",
module="model.hlo")`` works after ``import autotune``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

ENV_ID = "autotune/PassOrdering-v0"
ENTRY_POINT = "autotune.rl.env:make_env"


def _register_now() -> None:
    import gymnasium

    if ENV_ID not in gymnasium.registry:
        gymnasium.register(id=ENV_ID, entry_point=ENTRY_POINT)


class _AfterGymnasiumImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps gymnasium's loader so the env id is registered once it has loaded.

    It asks the other finders for gymnasium's spec, and leaves ``sys.meta_path`` only after
    gymnasium has executed (removing itself while the import system iterates over the list would
    make it skip the next finder)."""

    def __init__(self):
        self.done = False

    def find_spec(self, fullname, path, target=None):
        if fullname != "gymnasium" or self.done:
            return None
        self.done = True
        spec = None
        for finder in [f for f in sys.meta_path if f is not self and hasattr(f, "find_spec")]:
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            _register_now()

        spec.loader.exec_module = exec_module
        return spec


def register_env() -> None:
    """Register the environment with gymnasium now or as soon as gymnasium is imported (idempotent)."""
    if "gymnasium" in sys.modules:
        _register_now()
    elif not any(isinstance(f, _AfterGymnasiumImport) and not f.done for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterGymnasiumImport())
