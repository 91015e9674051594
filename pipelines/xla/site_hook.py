"""Per-site decisions in a user's own JAX process (``autotune.jax``'s hook): the same rewrite the workers
apply (``sites.py``), installed once as a pre-scheduler module transformation of the CPU client.

Why a transformation and not a compile option: XLA has no option that names one instruction; the decision
lives in the optimised module (a library fusion or XLA's own code), so it is made where XLA hands the
optimised module out, ``jax.extend.xla.register_hlo_module_transformation``. The callback is process-global
and XLA may call it from a thread of its own, so the decisions are process state: ``deciding(...)`` holds
a lock for the one compile it wraps (decided compiles run one at a time), and every other compile passes
through untouched.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping

from autotune.pipelines.xla import sites

NAME = "autotune-site-decisions"

class _State:
    decisions: dict | None = None
    report = None


_state = _State()
_lock = threading.Lock()  # registration
_deciding = threading.Lock()  # one decided compile at a time
_installed = False


def _transform(module_bytes: bytes):
    decisions = getattr(_state, "decisions", None)
    if not decisions:
        return None
    decided, _state.report = sites.decide(module_bytes, decisions)
    return decided


def install() -> None:
    """Register the transformation with jax's CPU client (once per process)."""
    global _installed
    with _lock:
        if _installed:
            return
        from jax.extend import xla as jex_xla

        jex_xla.register_hlo_module_transformation(_transform, name=NAME, platforms="cpu")
        _installed = True


@contextlib.contextmanager
def deciding(decisions: Mapping[str, str]) -> Iterator[list]:
    """Within the block, this thread's compiles apply ``{instruction: choice}``; yields a list that holds
    the compile's ``sites.RewriteResult`` afterwards (empty when no compile reached the hook)."""
    install()
    report: list = []
    with _deciding:
        _state.decisions, _state.report = dict(decisions), None
        try:
            yield report
        finally:
            if _state.report is not None:
                report.append(_state.report)
            _state.decisions, _state.report = None, None
