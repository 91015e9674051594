"""(Re)write the bundled example modules and the small test modules from the model zoo.

Why a script: the ``.hlo`` files in ``examples/`` and ``tests/data/`` are generated, never edited
by hand. They are bit-for-bit reproducible for the pinned jax version, so this script both
regenerates them (default) and checks that the committed files are what the zoo produces
(``--check``, exit 1 on any difference, e.g. after a jax upgrade or a zoo change).

Run from anywhere::

    python examples/generate.py            # rewrite all six files, print their sizes
    python examples/generate.py --check    # compare only

Sizes were chosen to be realistic yet fast to compile many times (demo, tests): the GPT-2 step is
two layers with Adam, as a flat ("fused") optimizer state so the update adds a handful of
instructions rather than ~30 per tensor; see the table printed by the script for the counts.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable as a plain script from a checkout
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from autotune.zoo import BertConfig, GPT2Config, ResNetConfig, program  # noqa: E402
from autotune.zoo.llm import LLMConfig  # noqa: E402
from autotune.zoo import common  # noqa: E402
from autotune.zoo.common import Program, PyTree  # noqa: E402


def mlp_classifier_program(batch: int = 8, features: int = 32, hidden: int = 64, classes: int = 10) -> Program:
    """A 2-layer ReLU MLP classifier training step with SGD + momentum (the smallest test module).

    Not a zoo family: it exists only so tests have a real training step (dots, reductions,
    softmax cross-entropy, an optimizer) of ~150 instructions that compiles in a blink.
    """
    dims = [features, hidden, classes]

    def init() -> dict[str, dict[str, jax.Array]]:
        keys = jax.random.split(jax.random.PRNGKey(common.SEED), len(dims) - 1)
        return {
            f"layer{i}": {"w": common.normal(k, (a, b), jnp.float32, a**-0.5), "b": jnp.zeros((b,), jnp.float32)}
            for i, (k, a, b) in enumerate(zip(keys, dims[:-1], dims[1:], strict=True))
        }

    def loss_fn(params: PyTree, x: jax.Array, labels: jax.Array) -> jax.Array:
        h = x
        for i in range(len(dims) - 1):
            h = common.dense(h, params[f"layer{i}"]["w"], params[f"layer{i}"]["b"])
            if i < len(dims) - 2:
                h = jax.nn.relu(h)
        return common.cross_entropy(h, labels)

    def train_step(params: PyTree, opt_state: PyTree, x: jax.Array, labels: jax.Array):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, labels)
        params, opt_state = common.optimizer_update("sgd", params, grads, opt_state)
        return params, opt_state, loss

    params = common.specs_of(init)
    args = (
        params, common.optimizer_specs("sgd", params),
        common.spec((batch, features), jnp.float32), common.spec((batch,), jnp.int32),
    )
    return Program(f"mlp_train_b{batch}_in{features}_h{hidden}_c{classes}_sgd_f32", train_step, args)


#: Output path (relative to the repo root) -> what to lower there.
TARGETS: dict[str, Callable[[], Program]] = {
    # The demo's lead: an LLM decode step of the llm family's test split (2 layers under lax.scan,
    # GQA 6/2 heads, rotary, RMSNorm, GELU, KV cache updated by dynamic-update-slice, f32): a
    # module where a better ordering than XLA's default exists and passes the execution check.
    "examples/llm_decode_step.hlo": lambda: program(
        "llm", "decode",
        LLMConfig(layers=2, d_model=96, heads=6, kv_heads=2, ffn=192, vocab=384, seq=48, batch=4,
                  positions="rope", norm="rms", mlp="gelu", scan=True, cache="dus", dtype="f32"),
    ),
    # GPT-2 style: 2 layers, d_model 64, 2 heads, seq 32, batch 2, vocab 128, f32, Adam (flat state),
    # bias-free linears/layer norms (nanoGPT's bias=False) to stay within ~900 instructions.
    "examples/gpt2_train_step.hlo": lambda: program(
        "gpt2", "train",
        GPT2Config(layers=2, d_model=64, heads=2, seq=32, batch=2, vocab=128, bias=False, optimizer="adam_flat"),
    ),
    # BERT style: one post-LN encoder block, MLM head and weighted loss, Adam (flat state).
    "examples/bert_encoder_step.hlo": lambda: program(
        "bert", "train", BertConfig(layers=1, d_model=64, heads=2, seq=32, batch=2, vocab=128, optimizer="adam_flat")
    ),
    # ResNet style: 16x16x3 images, 2 stages (8 and 16 channels) of one basic block, SGD + momentum.
    "examples/resnet_train_step.hlo": lambda: program(
        "resnet", "train", ResNetConfig(stages=2, blocks=1, width=8, image=16, batch=2, optimizer="sgd")
    ),
    "tests/data/mlp_train_step.hlo": mlp_classifier_program,
    # One attention-only, bias-free block with flat SGD: the smallest GPT-2 step that still has
    # causal attention, an embedding gather and its scatter-add gradient.
    "tests/data/tiny_gpt2_train_step.hlo": lambda: program(
        "gpt2", "train",
        GPT2Config(
            layers=1, d_model=32, heads=2, seq=16, batch=2, vocab=64, mlp_ratio=0, bias=False, optimizer="sgd_flat"
        ),
    ),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the files on disk, write nothing")
    args = parser.parse_args(argv)
    stale = []
    for rel, make in TARGETS.items():
        text = common.lower_to_hlo(make())
        path = ROOT / rel
        same = path.exists() and path.read_text(encoding="utf-8") == text
        if args.check:
            if not same:
                stale.append(rel)
        elif not same:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        status = "ok" if same else ("STALE" if args.check else "written")
        print(f"{rel:40} {common.count_instructions(text):5d} instructions {len(text.encode()):7d} bytes  {status}")
    if stale:
        print(f"{len(stale)} file(s) differ from what the zoo generates: run {sys.argv[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
