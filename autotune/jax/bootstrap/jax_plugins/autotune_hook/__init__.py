"""autotune's hook for an unmodified program, found by jax itself.

``autotune capture`` and ``autotune exec`` put the folder above ``jax_plugins`` on ``PYTHONPATH``; jax
discovers modules of its ``jax_plugins`` namespace package when it starts its backends (before the first
compile) and calls their ``initialize()``: no sitecustomize, no .pth file, no change to the program.
What it does is read from the environment (``autotune.jax.process``): ``AUTOTUNE_CAPTURE=DIR`` writes
every module jax compiles to DIR, ``AUTOTUNE=1`` applies the tuning store.
"""


def initialize():
    from autotune.jax.process import install_from_env

    install_from_env()
