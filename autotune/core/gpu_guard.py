"""The GPU guard: for a GPU target, an answer that adds kernel launches or raises the roofline
estimate over XLA's default is not offered, whatever the objective says of it.

Why: the objective ranks candidates on one figure (``final-ops`` by default: the instructions of the
GPU-compiled module), and on a GPU the others can move the other way. Timed on an H200 (issue 30),
the answers that made steps slower were the ones that added launches: a public Gemma step 15% slower
under ``simplification,cse`` (1,428 -> 1,918 kernels; fewer instructions on the CPU), a MaxText step
8% slower under ``simplification`` (278 -> 279), LLaMA-3 0.4% slower under ``simplification,cse``
(83 -> 85). Deviceless here, the H100 answer on the shared gpt-oss prefill step lowers its
instructions (1,639 -> 1,600) and adds seven launches (1,114 -> 1,121). Across modules the default's
launches and roofline estimate rank measured step times at 0.97 and 0.99 (docs/gpu.md), so an answer
that raises either is predicted slower by the figures that track time best; one that raises
neither costs nothing measurable on the evidence so far. Both figures are deterministic and come with
every GPU step (``Metrics.compiled``), so the guard costs no compile.

A guarded candidate is set aside like an invalid one (``loop.choose`` tries the next best, the run's
``invalid`` list names it with the reason) and never reaches a record or ``tuned.hlo``.
``allow_regressions`` (``autotune run --allow-regressions``) turns the guard off.
"""

from __future__ import annotations

from autotune.core.metrics import Metrics

#: How every guard reason starts (a fleet's names the member first).
PREFIX = "GPU guard:"

#: (figure in ``Metrics.compiled``, what a person calls it, format of its value, relative rise allowed).
#: Launches: none (one added launch came with an 8% slower MaxText step). The estimate: 0.1%, the
#: H200's run-to-run floor on the LLM steps; below it a rise is the model's rounding, not a
#: prediction (``simplification`` on gpt-oss: 5 launches fewer, the estimate 0.002% higher).
GUARDED = (("kernels", "kernel launches", "{:g}", 0.0), ("estimate_us", "roofline estimate", "{:.1f} us", 1e-3))


def breach(candidate: Metrics, default: Metrics, target: str) -> str | None:
    """Why ``candidate`` (the final module after a sequence) may not be offered for ``target``, or
    None when it adds no launches and no estimated time (beyond ``GUARDED``'s slack) over ``default``
    (XLA's default ordering). A figure either module lacks is not judged (a CPU target reports none)."""
    raised = []
    for figure, label, fmt, slack in GUARDED:
        c, d = candidate.figure(figure), default.figure(figure)
        if c is None or d is None:
            continue
        if c > d + slack * abs(d):
            change = f" ({c / d - 1:+.1%})" if d else ""
            raised.append(f"{label} {fmt.format(d)} -> {fmt.format(c)}{change}")
    if not raised:
        return None
    return (f"{PREFIX} raises the {target}'s " + " and ".join(raised) + " over XLA's default "
            "(predicted slower there; --allow-regressions offers it)")


def is_guard_reason(reason: str) -> bool:
    """Whether a run's rejected candidate (``invalid``: sequence, reason) was set aside by this guard,
    not found invalid by validation (a fleet's reason names the member first)."""
    return reason.startswith(PREFIX) or f": {PREFIX}" in reason
