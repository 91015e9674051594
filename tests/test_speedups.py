"""Every speed-up is honest: the engine's results equal the straightforward method's.

The straightforward method (``XlaWorker.run_plain``) starts every step from HLO text: parse,
convert, one capture compile, print back. The engine keeps modules as bytes, reuses MLIR for
unchanged states and across jobs, walks the cache, and compiles in parallel workers. Both must
reach the same module (fingerprint) after every step.
"""

from __future__ import annotations

import random

import pytest

from autotune.core.module import load
from autotune.pipelines.xla.loader import module_text
from conftest import DATA, GPT2, SMALL

MODULES = [SMALL, DATA / "mlp_train_step.hlo", DATA / "real" / "hloenv_maml_train_step.hlo", GPT2]


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_engine_matches_the_straightforward_method(engine, path):
    root = engine.prepare(load(path))
    actions = [a for a in engine.pipeline.passes() if a not in ("scatter_simplifier",)]  # aborts a worker
    rng = random.Random(path.stem)
    sequences = [tuple(rng.choice(actions) for _ in range(rng.randint(1, 5))) for _ in range(6)]
    sequences.append(("cse", "algsimp", "dce", "reshape-mover", "cse"))
    results = engine.evaluate_many(root, sequences)  # parallel, cached, MLIR reused
    text = module_text(root)
    for seq, result in zip(sequences, results):
        plain = engine.pipeline.pool.call("run_plain", text, list(seq), timeout=300)
        if result.ok:
            assert plain[-1] == result.state, seq
            # Every prefix agrees too (the cache walks prefixes).
            for k in range(1, len(seq)):
                assert engine.evaluate(root, seq[:k]).state == plain[k - 1], seq[:k]
        else:
            assert plain[result.failed_at] is None, seq
