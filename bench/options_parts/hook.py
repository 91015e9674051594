"""A record with compiler options, applied by the JAX hook, timed by jax itself (``hook_experiment``).

The goal: a user's ``jax.jit`` compile of the function a record was made for gets the record's options,
and what jax itself measures of the jitted function lies within the record's interval. So: the zoo's
GPT-2 training step (a jax function, ``autotune.zoo``; the configuration of examples/gpt2_train_step.hlo)
is tuned for time on its compiler options alone, its record exported; then, in this process, the
function is jitted plain and under
``autotune.jax.use([record])``, and the two compiled functions are timed interleaved by
``time.perf_counter`` around ``block_until_ready`` (calibrated samples of >= 50 ms after a warm-up, as
the tool's own confirmation), the
ratio hooked/plain with its 95% bootstrap interval (``autotune.core.stats``).
"""

from __future__ import annotations

import time
from pathlib import Path

from harness import log

#: The program: the GPT-2 example's configuration (examples/generate.py), a two-layer training step with Adam.
CONFIG = dict(layers=2, d_model=64, heads=2, seq=32, batch=2, vocab=128, bias=False, optimizer="adam_flat")
#: The search stage's own settings (random search over options and order at budget 100, seed 0).
BUDGET = 100
QUICK_BUDGET = 12
ROUNDS = 60  # as many as a replicated claim's (two confirmations of 30)


def _arrays(args, seed: int = 0):
    import jax
    import numpy as np

    rng = np.random.default_rng(seed)

    def draw(spec):
        if np.issubdtype(spec.dtype, np.integer):
            return jax.numpy.asarray(rng.integers(0, 4, spec.shape), spec.dtype)
        return jax.numpy.asarray(rng.standard_normal(spec.shape).astype(np.float32), spec.dtype)

    return jax.tree_util.tree_map(draw, args)


def _sample(fn, args, inner: int) -> float:
    start = time.perf_counter()
    for _ in range(inner):
        out = fn(*args)
    import jax

    jax.block_until_ready(out)
    return (time.perf_counter() - start) / inner


def jax_ratio(plain, hooked, args, rounds: int = ROUNDS, min_seconds: float = 0.05) -> dict:
    """``hooked`` against ``plain`` (compiled jax functions), timed by jax's dispatch: interleaved rounds of
    calibrated samples, the ratio of medians with its interval."""
    from autotune.core import stats

    for fn in (plain, hooked):  # first calls allocate and fault pages in: not timed
        _sample(fn, args, 3)
    inner = 1
    while _sample(plain, args, inner) * inner < min_seconds and inner < 10_000:
        inner *= 2
    a, b = [], []
    for r in range(rounds):
        pair = [(a, plain), (b, hooked)] if r % 2 == 0 else [(b, hooked), (a, plain)]
        for samples, fn in pair:
            samples.append(_sample(fn, args, inner))
    cmp = stats.time_ratio(a, b)
    return {"ratio": cmp.ratio, "low": cmp.low, "high": cmp.high, "rounds": rounds, "inner": inner,
            "plain_ms": 1e3 * cmp.a.median, "hooked_ms": 1e3 * cmp.b.median}


def hook_experiment(tmp: Path, quick: bool = False) -> dict:
    import jax

    import autotune
    import autotune.jax as autotune_jax
    from autotune.core.engine import open_engine
    from autotune.core.record import from_run
    from autotune.core.spec import RunSpec
    from autotune.core.tuner import tune
    from autotune.zoo import GPT2Config, program as zoo_program

    program = zoo_program("gpt2", "train", GPT2Config(**CONFIG))
    args = _arrays(program.args)
    budget = QUICK_BUDGET if quick else BUDGET
    what = (f"The zoo's GPT-2 training step (`{program.name}`, the configuration of examples/gpt2_train_step.hlo), "
            f"a jax function: tuned with `--objective runtime --space both --strategy random --budget {budget}`, "
            "its record exported, then jitted plain and under `autotune.jax.use([record])` and timed by jax.")
    db = tmp / "hook.db"
    with open_engine(db, workers=1) as ev:
        result = tune(ev, autotune.load(jax.jit(program.fn).lower(*args)),
                      spec=RunSpec(strategy="random", budget=budget, objective="runtime", space="both"))
        said = result.claim.message if result.claim else "no claim"
        log(f"hook: {said}")
        if not result.beats_default:
            return {"what": what, "note": f"No option set beat XLA's default on it here ({said}): nothing for the "
                                          "hook to apply."}
        record = from_run(ev, result.run_id)
    plain = jax.jit(program.fn).lower(*args).compile()
    again = jax.jit(program.fn).lower(*args).compile()  # the control: plain against plain, timed the same way
    with autotune_jax.use([record], cache=db) as stats:
        hooked = jax.jit(program.fn).lower(*args).compile()
    measured = jax_ratio(plain, hooked, args)
    control = jax_ratio(plain, again, args)
    m = record.metrics
    return {"what": what, "record": {"options": record.compiler_options, "sequence": list(record.sequence),
                                     "ratio": m["ratio"], "low": m["ratio_low"],
                                     "high": m["ratio_high"], "validation": record.validation},
            "applied": stats.options, "applied_sequences": [list(seq) for _, seq in stats.applied],
            "errors": stats.errors, "jax": measured, "jax_control": control,
            "within": m["ratio_low"] <= measured["ratio"] <= m["ratio_high"],
            "overlap": measured["low"] <= m["ratio_high"] and m["ratio_low"] <= measured["high"]}
