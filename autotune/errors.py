"""Error hierarchy.

Every failure the user can cause or meet is an ``AutotuneError``; the CLI turns each one into a
single line on stderr and an exit code, never a traceback. ``exit_code`` says which: 2 for bad
usage or bad input (the user must change something), 1 for a check that ran and failed.
"""

from __future__ import annotations


class AutotuneError(Exception):
    """Base class: a message meant for a person, and the CLI exit code it maps to."""

    exit_code = 2


class BadInput(AutotuneError):
    """A file, option or value the tool cannot use (missing, unreadable, malformed, unknown)."""


class UnknownName(BadInput):
    """A pass, strategy, objective ... name that does not exist; the message carries close matches."""

    def __init__(self, kind: str, name: str, known: list[str] | tuple[str, ...]):
        import difflib

        close = difflib.get_close_matches(name, list(dict.fromkeys(known)), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        super().__init__(f"unknown {kind} '{name}'{hint}")
        self.kind, self.name, self.suggestions = kind, name, close


class CacheError(AutotuneError):
    """The cache database cannot be opened or is not an autotune cache."""


class PassFailed(AutotuneError):
    """The compiler refused or crashed on one step.

    ``status`` is one of ``error`` (XLA returned an error status), ``crash`` (the worker process
    died, e.g. a CHECK failure or a signal) or ``timeout`` (the step ran past its limit and the worker
    was killed). A failed step is a normal search outcome, recorded in the cache like a success.
    """

    exit_code = 1

    def __init__(self, message: str, status: str = "error", action: str | None = None):
        super().__init__(message)
        self.status = status
        self.action = action


class CheckFailed(AutotuneError):
    """A check ran and its answer was no (validation mismatch, regression against a record)."""

    exit_code = 1


class WorkerStartFailed(AutotuneError):
    """A compiler worker process could not start (its Python environment is broken: a missing
    module, an import error). Said as such, with the worker's own last words, so that it is never
    mistaken for a crash of the compiler on the user's input."""
