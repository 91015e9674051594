"""autotune's version and distribution name, on their own so that any module can say which autotune wrote
something (a tuning record, a report) or how to install an extra, without importing the package's front door
(``autotune/__init__``), which imports them.

The distribution is ``xla-autotune``: ``autotune`` on the package index is an unrelated project, so every
install line the tool prints names this one (``install_line``); the import package and the command stay
``autotune``.
"""

__version__ = "0.1.0"
DISTRIBUTION = "xla-autotune"


def install_line(extra: str | None = None) -> str:
    """The pip command that installs autotune, with ``extra`` (``train``, ``gpu``, ``ray``) when named."""
    return f"pip install '{DISTRIBUTION}[{extra}]'" if extra else f"pip install {DISTRIBUTION}"
