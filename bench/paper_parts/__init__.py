"""bench/paper.py in parts: ``settings`` (the presets) and ``report`` (results/paper/ and results/README.md)."""
