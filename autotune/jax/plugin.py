"""The installed package's jax plugin entry point (``[project.entry-points.jax_plugins]``): with autotune
installed, ``AUTOTUNE=1`` (or ``AUTOTUNE_CAPTURE=DIR``) in a jax program's environment is enough; jax calls
``initialize()`` when it starts its backends, before the first compile (``autotune.jax.process``)."""


def initialize():
    from autotune.jax.process import install_from_env

    install_from_env()
