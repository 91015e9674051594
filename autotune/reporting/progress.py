"""A rich progress display as an ``Observer``: the phase a run is in, and during the search a bar
with the best so far, evaluations/s and cache hit rate."""

from __future__ import annotations

from autotune.core.observer import Observer
from autotune.core.limits import duration


class RichObserver(Observer):
    """One rich display: a row naming the phase the run is in (with its estimate where one exists),
    and during the search a bar with the best so far, evaluations/s and the cache hit rate.

    rich refreshes the display on its own thread, so the elapsed time keeps moving while a long
    phase (an XLA compile, an execution) holds the main thread: no phase is silent.
    """

    def __init__(self, unit: str = ""):
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.unit = unit
        self._rp = Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                            TimeElapsedColumn(), transient=False)
        self._started = False
        self._task = None
        self._total = 0
        self._phase = None

    def _start(self) -> None:
        if not self._started:
            self._rp.start()
            self._started = True

    def on_phase(self, phase: str, detail: str | None = None, estimate: float | None = None) -> None:
        self._start()
        if phase == "search":
            if self._phase is not None:
                self._rp.update(self._phase, visible=False)
            return
        text = phase + (f": {detail}" if detail else "")
        info = f"~{duration(estimate)}" if estimate else ""
        if self._phase is None:
            self._phase = self._rp.add_task(text, total=None, info=info)
        else:
            self._rp.reset(self._phase, description=text, info=info, visible=True)

    def on_run_start(self, total: int, description: str) -> None:
        self._start()
        if self._phase is not None:
            self._rp.update(self._phase, visible=False)
        self._task = self._rp.add_task(description, total=total, info="")
        self._total = total

    def on_trial(self, done, best, rate, hit_rate) -> None:
        left = (self._total - done) / rate if rate > 0 and self._total > done else 0.0
        self._rp.update(self._task, completed=done,
                        info=f"{done}/{self._total}  best [cyan]{'-' if best is None else f'{best:g}'}[/]"
                             f"  {rate:.1f} eval/s  cache hits {hit_rate:.0%}"
                             + (f"  ~{duration(left)} left" if left else ""))

    def on_run_end(self) -> None:
        if self._started:
            if self._phase is not None:
                self._rp.update(self._phase, visible=False)
            self._rp.stop()
            self._started = False


class RichCompareProgress:
    """One rich display: a bar over runs, and a bar over the evaluations of the run in flight."""

    def __init__(self):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._rp = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[info]}"), TimeElapsedColumn(), transient=False)
        self._runs = None
        self._evals = None

    def start(self, total: int) -> None:
        self._rp.start()
        self._runs = self._rp.add_task("runs", total=total, info="")

    def run_started(self, index: int, label: str, module: str, seed: int, budget: int) -> None:
        self._rp.update(self._runs, description=f"runs: {label} / {module[:48]} / seed {seed}")
        if self._evals is None:
            self._evals = self._rp.add_task("evaluations", total=budget, info="")
        self._rp.reset(self._evals, total=budget, info="")

    def run_finished(self, index: int, row) -> None:
        imp, claim = row.improvement(True), row.claim or {}
        if claim.get("min_effect") is not None and not row.error:  # a measured objective: the time it measured
            last = f"time {claim['ratio']:.3f}x ({row.outcome})" if claim.get("measured") else f"keep default ({row.outcome})"
        else:
            last = "error" if row.error else ("n/a" if imp is None else f"{imp:+.1%}")
        self._rp.update(self._runs, advance=1, info=f"last: {last}")

    def tune_progress(self):
        outer = self

        class _Evals(Observer):
            def on_run_start(self, total, description):
                outer._rp.update(outer._evals, total=total)

            def on_trial(self, done, best, rate, hit_rate):
                outer._rp.update(outer._evals, completed=done,
                                 info=f"best {'-' if best is None else f'{best:g}'}  {rate:.1f} eval/s  hits {hit_rate:.0%}")

        return _Evals()

    def stop(self) -> None:
        self._rp.stop()
