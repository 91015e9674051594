"""One observer protocol for long work (a tuning run, an exhaustive walk, policy training).

Like SB3's and optuna's callbacks: the loop calls ``on_run_start`` once, ``on_trial`` after every
evaluation (with the best so far, evaluations per second and the cache hit rate), ``on_run_end``
once, also when the loop stops early. ``on_phase`` names what the work is doing between trials
(loading, normalising, XLA's default, validation, confirmation), so that no phase is silent; it may
come before ``on_run_start`` and after the last trial. The base class is silent (the API's
default); the CLI and the benchmarks pass ``autotune.reporting.progress.RichObserver``.
"""

from __future__ import annotations

#: The phases of a tuning run, in order (``TuneResult.phases`` has the seconds of each).
PHASES: tuple[str, ...] = ("load", "normalise", "default", "screen", "search", "prune", "validation", "confirmation")


class Observer:
    def on_phase(self, phase: str, detail: str | None = None, estimate: float | None = None) -> None:
        """The work entered ``phase`` (one of ``PHASES``) or a step of it (``detail``, one line);
        ``estimate``: seconds it is expected to take, where known."""

    def on_run_start(self, total: int, description: str) -> None:
        """Work of ``total`` units begins (evaluations, pairs, timesteps)."""

    def on_trial(self, done: int, best: float | None, rate: float, hit_rate: float) -> None:
        """``done`` units so far; ``best`` so far (None before the first success)."""

    def on_run_end(self) -> None:
        """The loop ended (finished, stopped by a limit, or interrupted)."""
