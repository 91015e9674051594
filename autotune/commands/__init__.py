"""Extra CLI commands, one module each; every module here registers itself on ``autotune.cli.cli``.

Keeping commands in their own files lets a command grow (train, compare, suite, validate, ...)
without every change touching one big ``cli.py``.
"""
