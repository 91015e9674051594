"""The engine: modules and fingerprints, the cache, the evaluator and its worker pool, objectives,
validation, the tuning loop and the run store. Nothing here imports a backend's internals."""
