#!/usr/bin/env python
"""A flax model's training step, tuned in one call, then applied from the store in a new process and
timed by jax: results/flax_path.md.

Issue 65 asks that a user's flax program (jax 0.12, Python 3.12) go from untuned to a measured win in
one call, and that the next run apply the store with no tuning, timed by jax. flax and optax are not
dependencies of autotune: this bench runs in a venv that has them, as a user's would::

    python3.12 -m venv /tmp/fx && /tmp/fx/bin/pip install -c constraints/py3.12-newest.txt -e . flax optax
    /tmp/fx/bin/python bench/flax_path.py [--budget 20] [--time-limit 420]

Two processes, as a user runs a program twice:

1. **tune**: ``autotune.jax.tune(train_step, state, images, labels, budget=..., store=STORE)`` on a small
   flax.linen CNN (two convolutions, a dense head) with optax's adam: searched by measured time
   (``--objective runtime --space both``), validated, stored; its ``describe()`` is reported.
2. **use**, a new process: the step compiled plain (``jax.jit(...).lower(...).compile()``) and under
   ``autotune.jax.use()`` (the store; nothing given), timed interleaved by jax's dispatch
   (``options_parts.hook.jax_ratio``: calibrated samples, ratio of medians, 95% bootstrap interval), with a
   plain-against-plain control, the hook's own summary of what it applied and the outputs compared. A
   second ``tune`` call in this process must come from the store (nothing tuned again).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import RESULTS, ROOT, Provenance, log, max_rel_diff, write

BATCH, IMAGE, CLASSES = 32, 32, 10


def _program():
    """(train_step, (state, images, labels)): a flax.linen CNN and optax adam, as a user writes them."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Conv(32, (3, 3))(x))
            x = nn.avg_pool(x, (2, 2), (2, 2))
            x = nn.relu(nn.Conv(64, (3, 3))(x))
            x = nn.avg_pool(x, (2, 2), (2, 2))
            x = x.reshape(x.shape[0], -1)
            return nn.Dense(CLASSES)(nn.relu(nn.Dense(128)(x)))

    model, tx = CNN(), optax.adam(1e-3)
    rng = np.random.default_rng(0)
    images = jnp.asarray(rng.standard_normal((BATCH, IMAGE, IMAGE, 3)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, CLASSES, BATCH), jnp.int32)
    params = model.init(jax.random.PRNGKey(0), images)
    state = (params, tx.init(params))

    def train_step(state, images, labels):
        params, opt = state

        def loss_fn(p):
            logits = model.apply(p, images)
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt = tx.update(grads, opt, params)
        return (optax.apply_updates(params, updates), opt), loss

    return train_step, (state, images, labels)


def part_tune(store: Path, cache: Path, budget: int, time_limit: float) -> dict:
    import autotune.jax as aj

    step, args = _program()
    t0 = time.perf_counter()
    tuned = aj.tune(step, *args, budget=budget, time_limit=time_limit, store=store, cache=cache, workers=1,
                    progress=False)
    m = tuned.record.metrics
    return {"seconds": time.perf_counter() - t0, "describe": tuned.describe(), "keeps_default": tuned.keeps_default,
            "options": tuned.compiler_options, "sequence": list(tuned.sequence), "validation": tuned.validation,
            "tool": {k: m.get(k) for k in ("ratio", "ratio_low", "ratio_high")}}


def part_use(store: Path, cache: Path, rounds: int) -> dict:
    import jax

    import autotune.jax as aj
    from options_parts.hook import jax_ratio

    step, args = _program()
    plain = jax.jit(step).lower(*args).compile()
    control = jax.jit(step).lower(*args).compile()
    with aj.use(store=store, cache=cache) as stats:  # the store, as `autotune.jax.use()` with AUTOTUNE_STORE
        hooked = jax.jit(step).lower(*args).compile()
    summary = stats.summary()
    t0 = time.perf_counter()
    again = aj.tune(step, *args, store=store, cache=cache, workers=1, progress=False)
    return {"hook_summary": summary, "second_tune_from_store": again.from_store,
            "second_tune_seconds": time.perf_counter() - t0, "jax": jax_ratio(plain, hooked, args, rounds=rounds),
            "jax_control": jax_ratio(plain, control, args, rounds=rounds),
            "max_rel_diff": max_rel_diff(plain(*args), hooked(*args))}


def _child(part: str, tmp: Path, args) -> dict:
    cmd = [sys.executable, __file__, "--part", part, "--tmp", str(tmp), "--budget", str(args.budget),
           "--time-limit", str(args.time_limit), "--rounds", str(args.rounds)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=3600)
    if proc.returncode != 0:
        sys.exit(f"flax_path: the {part} process exited {proc.returncode}: {proc.stderr.strip()[-600:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _ci(d: dict | None) -> str:
    """``ratio [low, high]`` of a jax_ratio."""
    return "-" if not d or d.get("ratio") is None else f"{d['ratio']:.3f} [{d['low']:.3f}, {d['high']:.3f}]"


def markdown(data: dict) -> str:
    t, u = data["tune"], data["use"]
    tool = t["tool"]
    tool_s = "-" if tool.get("ratio") is None else (
        f"{tool['ratio']:.3f}" + (f" [{tool['ratio_low']:.3f}, {tool['ratio_high']:.3f}]"
                                  if tool.get("ratio_low") is not None else ""))
    j, c = u["jax"], u["jax_control"]
    answer = ("keep XLA's default" if t["keeps_default"] else
              ", ".join(f"{k}={v}" for k, v in t["options"].items()) + (f"; passes {','.join(t['sequence'])}"
                                                                          if t["sequence"] else ""))
    lines = ["# A flax training step: one call, then the store in a new process, timed by jax", "",
             f"A flax.linen CNN (two 3x3 convolutions, 32 and 64 channels, average pooling, a 128-wide dense layer) "
             f"on {BATCH} images of {IMAGE}x{IMAGE}x3, optax adam, the whole training step jitted.", "",
             "| | |", "|---|---|",
             f"| `autotune.jax.tune(train_step, state, images, labels, budget={data['budget']})` | {t['seconds']:.0f} s; "
             f"answer: {answer}; validation {t['validation'] or '-'} |",
             f"| the tool's claim (tuned / XLA's default) | {tool_s} |",
             f"| new process: `autotune.jax.use()` | {u['hook_summary'].splitlines()[0] if u['hook_summary'] else '-'} |",
             f"| jax's timing, hooked / plain ({j['rounds']} interleaved rounds) | **{_ci(j)}** "
             f"({j['hooked_ms']:.2f} vs {j['plain_ms']:.2f} ms a step) |",
             f"| jax's timing, plain / plain (control) | {_ci(c)} |",
             f"| outputs, hooked vs plain (max relative difference) | {u['max_rel_diff']:.1e} |",
             f"| a second `tune` call in the new process | {'from the store' if u['second_tune_from_store'] else 'TUNED AGAIN'} "
             f"({u['second_tune_seconds']:.1f} s) |", "",
             "`describe()` of the answer:", "", "```", t["describe"], "```", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=20)
    parser.add_argument("--time-limit", type=float, default=420.0)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--part", choices=("tune", "use"), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--tmp", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.part:
        tmp = Path(args.tmp)
        if args.part == "tune":
            out = part_tune(tmp / "store", tmp / "cache.db", args.budget, args.time_limit)
        else:
            out = part_use(tmp / "store", tmp / "cache.db", args.rounds)
        print(json.dumps(out))
        return
    try:
        import flax  # noqa: F401
        import optax  # noqa: F401
    except ImportError:
        sys.exit("flax_path: this bench needs flax and optax in its Python (pip install flax optax), as a user's "
                 "program has them")
    prov = Provenance.now(script="bench/flax_path.py")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        log("tune (process 1)")
        tuned = _child("tune", tmp, args)
        log("tune: " + tuned["describe"].replace("\n", " | "))
        log("use (process 2)")
        used = _child("use", tmp, args)
    data = {"budget": args.budget, "time_limit": args.time_limit, "tune": tuned, "use": used}
    write(Path(args.out), "flax_path", data, markdown(data), prov)
    log(f"jax: hooked/plain {_ci(used['jax'])}, control {_ci(used['jax_control'])}")


if __name__ == "__main__":
    main()
