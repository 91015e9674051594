"""autotune's version, on its own so that any module can say which autotune wrote something (a tuning
record, a report) without importing the package's front door (``autotune/__init__``), which imports them."""

__version__ = "0.1.0"
