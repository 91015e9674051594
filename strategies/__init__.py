"""Strategy plugins, one file each; installed as ``autotune.strategies``.

Listing them reads these files' syntax trees without importing them (see ``autotune.strategy``),
so a plugin may import heavy libraries (torch, optuna) at module level.
"""
