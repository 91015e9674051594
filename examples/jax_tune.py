"""The jax path in one short script: tune a jitted step by measured time, then use the store.

    python examples/jax_tune.py            # first run: tunes (a minute or two), stores the answer
    python examples/jax_tune.py            # later runs: found in the store, nothing tuned again

The same for a whole program you do not want to edit:

    autotune capture -o cap -- python train.py   # every module jax compiles, with its run time
    autotune tune cap                            # tuned by measured time, most time first, into the store
    autotune exec -- python train.py             # the program as it is, the store applied (or AUTOTUNE=1)
"""

import time

import jax
import jax.numpy as jnp
import numpy as np

import autotune.jax


def train_step(w, x, y):
    """A two-layer MLP's SGD step: loss, gradients, update."""

    def loss(w):
        h = jnp.tanh(x @ w["a"])
        return jnp.mean((h @ w["b"] - y) ** 2)

    value, grads = jax.value_and_grad(loss)(w)
    return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, w, grads), value


def arrays(seed: int = 0):
    """The step's arguments: weights, a batch of inputs and targets."""
    rng = np.random.default_rng(seed)
    w = {"a": jnp.asarray(rng.normal(size=(256, 512)) * 0.05, jnp.float32),
         "b": jnp.asarray(rng.normal(size=(512, 64)) * 0.05, jnp.float32)}
    x = jnp.asarray(rng.normal(size=(128, 256)), jnp.float32)
    y = jnp.asarray(rng.normal(size=(128, 64)), jnp.float32)
    return w, x, y


def main() -> None:
    w, x, y = arrays()
    # 1. One call: lowers the step for these arguments, searches XLA's options and pass order by measured time
    #    (autotune run --objective runtime --space both), validates, and stores the answer in the per-user store.
    tuned = autotune.jax.tune(train_step, w, x, y, budget=8)
    print(tuned.describe())

    # 2. From now on (this process or any later one): jax.jit compiles pick the store up.
    with autotune.jax.use() as stats:
        step = jax.jit(train_step)
        w2, value = step(w, x, y)
        start = time.perf_counter()
        for _ in range(50):
            w2, value = step(w2, x, y)
        jax.block_until_ready(value)
    print(f"50 steps in {time.perf_counter() - start:.3f} s, loss {float(value):.4f}")
    print(stats.summary())  # what was applied, and how (jax's compiler_options, or the compile patch)


if __name__ == "__main__":
    main()
