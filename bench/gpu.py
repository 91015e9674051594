#!/usr/bin/env python
"""XLA's default vs the ordering tuned for a GPU vs the CPU's answer, compiled and timed on a real GPU.

Two halves, because the GPU machines have their own jax (0.11.x with CUDA, not the pinned 0.10.2) and
take at most 64 MiB of files:

``python bench/gpu.py prepare`` (here, with autotune installed): for every module, XLA's default, the
answer tuned for ``--target`` (default h100; nevergrad at ``--budget`` 40, the run's validation), the
CPU target's answer at the same budget, the target's shipped policy's zero-shot answer (``policy``:
``llm-h100``, one roll-out, as ``--strategy ppo --budget 4`` returns it), and extra orderings that
spread the ranking (``simplification``,
``simplification,cse``, one seeded random sequence), each written as the module *after* its sequence
(what XLA's own pipeline then compiles) to ``bench/gpu_bundle/`` (gzipped HLO text + ``manifest.json``
with every compile-only figure the target's deviceless pipeline gives: instructions, kernels, roofline).
Modules: the three LLM steps of tests/data/real-llm, the bundled decode step, DLRM, and ``--family``
(12) modules of the llm family's test split, stratified over decode/prefill/train, dense/MoE/latent.

``python bench/gpu.py`` (= ``run``; on the GPU machine, plain jax + numpy, no autotune import): compiles
every variant with the installed jax's default GPU pipeline, draws seeded random inputs on the device
(donated inputs are fed back from the outputs they alias, so a run never needs twice the memory),
compares every variant's outputs with the default's on the same inputs, and times each against the
default interleaved (AB, BA, ...; ``--rounds`` rounds, each sample a loop calibrated to >= 10 ms, its
calls dispatched back to back and waited for once): the
per-round ratio variant/default with a 95% bootstrap interval of its median. Then the rank correlation
(Spearman) between each compile-only figure's ratio and the measured ratio over every (module, variant)
pair. A deadline (``--deadline``, 480 s) stops it in time; per-module errors are logged and the module
skipped; device memory is freed between modules. Writes ``results/gpu.md`` and ``results/gpu.json``
with the GPU's name and the jax version that ran it. ``--platform cpu`` is the dry run on the host CPU
(modules whose inputs exceed ``--max-input-gib`` are skipped): ``results/gpu-dryrun-cpu.md``.
"""

from __future__ import annotations

import argparse
import sys

from gpu_parts.common import BUNDLE, ROOT
from gpu_parts.device import device_env, device_gib
from gpu_parts.prepare import prepare
from gpu_parts.timing import run


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("prepare", "run"):
        argv = ["run", *argv]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("prepare", help="tune here and write the bundle")
    p.add_argument("--target", default="h100")
    p.add_argument("--budget", type=int, default=40)
    p.add_argument("--family", type=int, default=12, help="llm-family modules of the test split")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bundle", default=str(BUNDLE))
    p.add_argument("--db", default=str(ROOT / ".autotune" / "gpu-bench.db"))
    p.add_argument("--spread", type=int, default=0, metavar="N",
                   help="instead of the answers: per module, the default and the random sequences (of N) that "
                        "move the target's launch count most either way (e.g. --bundle bench/gpu_bundle_spread)")
    r = sub.add_parser("run", help="compile and time the bundle here (plain jax)")
    r.add_argument("--bundle", default=str(BUNDLE))
    r.add_argument("--platform", default="gpu", choices=("gpu", "cuda", "cpu"))
    r.add_argument("--deadline", type=float, default=480.0, help="seconds for the whole run")
    r.add_argument("--rounds", type=int, default=12)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--max-input-gib", type=float, default=None,
                   help="skip modules whose inputs need more (default: 0.85 x the device's memory; 2 on the CPU)")
    r.add_argument("--out", default=str(ROOT / "results"))
    r.add_argument("--recompile", action="store_true",
                   help="also time the default against a second compile of itself (GEMM autotuning's spread)")
    r.add_argument("--labels", default=None, help="time only these orderings (comma-separated labels)")
    r.add_argument("--groups", default=None, help="only modules of these groups (comma-separated)")
    r.add_argument("--modules", default=None, help="only these modules, by name (comma-separated)")
    r.add_argument("--compiler-options", action="store_true",
                   help="also time the default ordering under each of COMPILER_OPTIONS (GPU flags)")
    args = ap.parse_args(argv)
    if args.what == "prepare":
        return prepare(args)
    device_env(args.platform)
    if args.max_input_gib is None:
        args.max_input_gib = 2.0 if args.platform == "cpu" else 0.85 * device_gib(args.platform)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
