"""``kernels``: kernel launches of one execution of the module as the target's GPU pipeline compiles it.

Every instruction of the GPU-compiled module that does work is a launch: a fusion, a library call
(cuBLAS, cuDNN), a copy or a collective; instructions inside a ``while`` count once per iteration
where XLA knows the trip count (``pipelines/xla/gpu_cost.py``). Fewer launches is less fixed cost per
step, which is what decode steps of small batch are made of. Only a GPU target reports it; measured
against GPU time on the H200 of the issue that asked for it, the launch count ranked 37 (module,
sequence) pairs like the GPU poorly (Spearman 0.05), so it is not the default (``docs/gpu.md``).
"""

from __future__ import annotations

from autotune.core.objectives import FigureObjective


class Kernels(FigureObjective):
    name = "kernels"
    description = "kernel launches per execution of the GPU-compiled module (GPU targets)"
    unit = "kernels"
    figure = "kernels"
