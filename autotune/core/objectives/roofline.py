"""``roofline``: a time estimate of the GPU-compiled module, kernel by kernel, on the target's rates.

Per kernel ``max(flops / peak, bytes / bandwidth)`` plus a launch cost, summed over one execution
(loops by their trip count), with the target's peak rates and bandwidth from its GpuTargetConfig
(``pipelines/xla/gpu_cost.py`` says what is counted). A model, not a measurement: trusted only as far
as its measured agreement with GPU time (``bench/gpu.py``); ``runtime`` measures on a GPU.
"""

from __future__ import annotations

from autotune.core.objectives import FigureObjective


class Roofline(FigureObjective):
    name = "roofline"
    description = "roofline time estimate (us) of the GPU-compiled module, kernel by kernel (GPU targets)"
    unit = "us (model)"
    figure = "estimate_us"
