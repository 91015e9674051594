"""bench/realscale.py in parts: ``search`` (--search-pair, --before-after) and ``report`` (realscale.md)."""
