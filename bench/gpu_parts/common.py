"""bench/gpu.py's settings and log, shared by both halves."""

from __future__ import annotations


from harness import ROOT, log  # noqa: F401  (both halves' log)

BUNDLE = ROOT / "bench" / "gpu_bundle"
EXTRAS = (("simplification",), ("simplification", "cse"))
#: Figures the deviceless pipeline gives for every variant (``prepare``), ranked against GPU time.
FIGURES = ("final_ops", "kernels", "estimate_us")
#: Integers are drawn from [0, INT_HIGH): indices into any dimension of 4 or more (autotune's runner).
INT_HIGH = 4
MIN_SAMPLE_S = 0.01

