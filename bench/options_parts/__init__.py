"""bench/options.py in parts: ``report`` (results/options.md from the stages' figures) and ``hook`` (a record
with compiler options applied by the JAX hook, timed by jax itself)."""
