"""One observer protocol for long work (a tuning run, an exhaustive walk, policy training).

Like SB3's and optuna's callbacks: the loop calls ``on_run_start`` once, ``on_trial`` after every
evaluation (with the best so far, evaluations per second and the cache hit rate), ``on_run_end``
once, also when the loop stops early. The base class is silent (the API's default); the CLI and
the benchmarks pass ``autotune.reporting.progress.RichObserver``.
"""

from __future__ import annotations


class Observer:
    def on_run_start(self, total: int, description: str) -> None:
        """Work of ``total`` units begins (evaluations, pairs, timesteps)."""

    def on_trial(self, done: int, best: float | None, rate: float, hit_rate: float) -> None:
        """``done`` units so far; ``best`` so far (None before the first success)."""

    def on_run_end(self) -> None:
        """The loop ended (finished, stopped by a limit, or interrupted)."""
