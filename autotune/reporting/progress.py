"""A rich progress bar as an ``Observer``: best so far, evaluations/s and cache hit rate."""

from __future__ import annotations

from autotune.core.observer import Observer


class RichObserver(Observer):
    def __init__(self, unit: str = ""):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.unit = unit
        self._rp = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("best [cyan]{task.fields[best]}"), TextColumn("{task.fields[rate]} eval/s"),
            TextColumn("cache hits {task.fields[hits]}"), TimeElapsedColumn(), transient=False,
        )
        self._task = None

    def on_run_start(self, total: int, description: str) -> None:
        self._rp.start()
        self._task = self._rp.add_task(description, total=total, best="-", rate="-", hits="-")

    def on_trial(self, done, best, rate, hit_rate) -> None:
        self._rp.update(
            self._task, completed=done, best="-" if best is None else f"{best:g}",
            rate=f"{rate:.1f}", hits=f"{hit_rate:.0%}",
        )

    def on_run_end(self) -> None:
        self._rp.stop()


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
        imp = row.improvement(True)
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
