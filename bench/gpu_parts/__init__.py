"""bench/gpu.py in parts: ``common``, ``prepare`` (here, with autotune), ``device`` and ``timing`` (the GPU
machine, plain jax), ``report`` (correlations and results/gpu.{json,md})."""
