"""autotune: search XLA's own HLO pass orderings for the best module.

The Python API a build script calls (all lazily imported, so ``import autotune`` is cheap)::

    import autotune
    module = autotune.load("model.hlo")            # or a jax.jit(f).lower(...) result
    result = autotune.tune(module, strategy="greedy", budget=200)
    tuned = autotune.apply(module, result.best_sequence)
    report = autotune.validate(module, tuned)
"""

from __future__ import annotations

from autotune.version import __version__  # noqa: E402,F401

import os as _os

# jaxlib logs through absl; keep informational chatter (e.g. "Invalid stack_frame_id" when parsing
# older HLO dumps) off the user's terminal unless they asked for it.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from autotune.api import Session, apply, explain, tune, tune_fleet, validate  # noqa: E402
from autotune.errors import AutotuneError, BadInput, CheckFailed, PassFailed  # noqa: E402
from autotune.core.module import Module, load  # noqa: E402
from autotune.core.record import TuningRecord  # noqa: E402
from autotune.rl import register_env as _register_env  # noqa: E402

_register_env()  # gymnasium.make("autotune/PassOrdering-v0", module=...) after `import autotune`

__all__ = [
    "AutotuneError", "BadInput", "CheckFailed", "Module", "PassFailed", "Session", "TuningRecord", "__version__",
    "apply", "explain", "load", "tune", "tune_fleet", "validate",
]
