"""The JAX compile hook: a jitted function's compiled module reflects the tuned sequence."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import autotune
from autotune.pipelines.xla import hlo
import autotune.jax as autotune_jax
from autotune.core.record import TuningRecord


def attention_loss(p, x):
    """A small two-head attention block: XLA's default ordering leaves room here (85 -> 81 ops)."""
    q, k, v = x @ p["q"], x @ p["k"], x @ p["v"]
    b, t, d = q.shape

    def heads(z):
        return z.reshape(b, t, 2, d // 2).transpose(0, 2, 1, 3)

    a = jax.nn.softmax(heads(q) @ heads(k).transpose(0, 1, 3, 2) / 4.0, axis=-1)
    o = (a @ heads(v)).transpose(0, 2, 1, 3).reshape(b, t, d)
    return ((o @ p["o"]) ** 2).mean()


f = jax.grad(attention_loss)
_rng = np.random.default_rng(0)
X = {n: jnp.asarray(_rng.normal(size=(8, 8)) * 0.3, jnp.float32) for n in "qkvo"}
W = jnp.asarray(_rng.normal(size=(2, 4, 8)), jnp.float32)
SEQUENCE = ("algsimp",)


@pytest.fixture(scope="module")
def record(engine):
    root = engine.prepare(autotune.load(jax.jit(f).lower(X, W)))
    tuned = engine.evaluate(root, SEQUENCE)
    assert tuned.ok
    # The sequence must change what XLA finally compiles, or the test could not tell the difference.
    assert engine.final(tuned.state).state != engine.default(root).state
    return TuningRecord(module="f", fingerprint=root.fingerprint, sequence=SEQUENCE, objective="final-ops",
                        pipeline_version=engine.version, xla_version="", autotune_version=autotune.__version__,
                        metrics={"cost": 0.0, "default_cost": 0.0}, valid=True), tuned.state


def _compiled_text(backend_module_mlir) -> str:
    from jax._src import xla_bridge
    from jax._src.lib import _jax

    backend = xla_bridge.get_backend("cpu")
    exe = backend.compile_and_load(backend_module_mlir, _jax.DeviceList(tuple(backend.devices()[:1])), _jax.CompileOptions())
    return _program(exe.hlo_modules()[0])


def _program(module) -> str:
    """Canonical text without the header line (which carries JAX's compile options)."""
    return hlo.canonical_text(module).partition("\n")[2]


def test_jit_compile_uses_the_tuned_module(engine, db_path, record):
    rec, tuned_state = record
    reference = f(X, W)
    untuned_text = _program(jax.jit(f).lower(X, W).compile().runtime_executable().hlo_modules()[0])
    with autotune_jax.use([rec], cache=db_path) as stats:
        compiled = jax.jit(f).lower(X, W).compile()
        out = jax.jit(f)(X, W)
    assert stats.applied and stats.applied[0] == (rec.fingerprint, SEQUENCE)
    assert not stats.errors
    # What XLA compiled is exactly the tuned module's full compile ...
    from jax._src.lib import _jax

    tuned_mlir = _jax.mlir.hlo_to_stablehlo(engine.module(tuned_state).proto)
    compiled_text = _program(compiled.runtime_executable().hlo_modules()[0])
    assert compiled_text == _compiled_text(tuned_mlir)
    assert compiled_text != untuned_text
    # ... and it computes the same thing.
    for name in "qkvo":
        np.testing.assert_allclose(np.asarray(out[name]), np.asarray(reference[name]), rtol=1e-5, atol=1e-6)


def test_other_functions_pass_through_untouched(db_path, record):
    rec, _ = record

    def g(x):
        return jnp.sin(x) * 3.0

    with autotune_jax.use([rec], cache=db_path) as stats:
        out = jax.jit(g)(W)
    assert stats.applied == [] and stats.passed_through >= 1
    np.testing.assert_allclose(np.asarray(out), np.sin(np.asarray(W)) * 3.0, rtol=1e-6)


def test_hook_is_removed_after_the_block(db_path, record):
    from jax._src import compiler

    original = compiler.backend_compile_and_load
    rec, _ = record
    with autotune_jax.use([rec], cache=db_path):
        assert compiler.backend_compile_and_load is not original
    assert compiler.backend_compile_and_load is original


# ---- with a policy: zero-shot at compile time, remembered by fingerprint ---------------------------------
@pytest.fixture(scope="module")
def algsimp_policy(engine, tmp_path_factory):
    """A policy trained here (tiny), whose deterministic choice is made ``algsimp`` (never STOP): on
    the attention gradient that beats XLA's default, on ``sin(x) * 3`` it changes nothing. Training
    needs torch (``xla-autotune[train]``): without it (CI's newest-jax leg) the shipped policy's hook runs in
    tests/test_policy_forward.py instead."""
    torch = pytest.importorskip("torch")
    from stable_baselines3 import PPO

    from autotune.rl.train import train_policy

    out = tmp_path_factory.mktemp("policy") / "algsimp.zip"
    train_policy(engine, [autotune.load(jax.jit(f).lower(X, W))], out, timesteps=32, seed=0, max_length=2)
    model = PPO.load(out, device="cpu")
    with torch.no_grad():
        model.policy.action_net.bias[engine.pipeline.passes().index("algsimp")] = 1e4
    model.save(out)
    return out


def test_policy_sequence_is_used_when_it_beats_the_default_and_remembered(db_path, algsimp_policy):
    reference = f(X, W)
    with autotune_jax.use(policy=algsimp_policy, cache=db_path) as stats:
        out = jax.jit(f)(X, W)
    assert not stats.errors, stats.errors
    ((fp, sequence, how),) = stats.policy_decisions
    assert sequence == ("algsimp",) and how == "rollout"  # the roll-out's best, pruned to what helps
    assert stats.applied == [(fp, ("algsimp",))]
    for name in "qkvo":
        np.testing.assert_allclose(np.asarray(out[name]), np.asarray(reference[name]), rtol=1e-5, atol=1e-6)

    with autotune_jax.use(policy=str(algsimp_policy), cache=db_path) as again:
        jax.jit(f)(X, W)
    assert again.policy_decisions == [(fp, ("algsimp",), "remembered")]  # no roll-out the second time
    assert again.applied == [(fp, ("algsimp",))]


def test_policy_keeps_the_default_when_it_does_not_beat_it_and_remembers(db_path, algsimp_policy):
    def g(x):
        return jnp.sin(x) * 3.0

    with autotune_jax.use(policy=algsimp_policy, cache=db_path) as stats:
        out = jax.jit(g)(W)
    assert not stats.errors, stats.errors
    ((fp, sequence, how),) = stats.policy_decisions
    assert sequence == () and how == "rollout" and stats.applied == []  # XLA's default compiled it
    np.testing.assert_allclose(np.asarray(out), np.sin(np.asarray(W)) * 3.0, rtol=1e-6)
    from autotune.core.cache import Cache

    cache = Cache(db_path)
    try:
        decisions = [json.loads(r[0]) for r in cache.db.execute(
            "SELECT report FROM reports WHERE kind=? AND key LIKE ?", [autotune_jax.DECISION_KIND, f"%|{fp}"])]
    finally:
        cache.close()
    assert len(decisions) == 1 and decisions[0]["reason"] == "does not beat XLA's default"
    assert decisions[0]["rollout"]  # the policy did propose a sequence: it was judged, then refused

    with autotune_jax.use(policy=algsimp_policy, cache=db_path) as again:
        jax.jit(g)(W)
    assert again.policy_decisions == [(fp, (), "remembered")] and again.applied == []


def test_a_committee_rolls_out_each_member_and_applies_the_best(tmp_path, db_path, algsimp_policy, engine):
    """A committee directory (``autotune.policies.members``): its first member only STOPs (alone, XLA's
    default would compile), the second is the algsimp policy; the hook rolls out both and applies
    algsimp. Its decision is remembered under the committee's digest, not a member's."""
    import shutil

    import torch
    from stable_baselines3 import PPO

    committee = tmp_path / "pair"
    committee.mkdir()
    stop = PPO.load(algsimp_policy, device="cpu")
    with torch.no_grad():
        stop.policy.action_net.bias[-1] = 1e5  # STOP, the last action, beats every pass
    stop.save(committee / "a_stop.zip")
    shutil.copy(f"{algsimp_policy}.json", committee / "a_stop.zip.json")
    for suffix in (".zip", ".zip.json"):
        shutil.copy(f"{algsimp_policy}"[: -len(".zip")] + suffix, committee / f"b_algsimp{suffix}")
    with autotune_jax.use(policy=committee, cache=db_path) as stats:
        jax.jit(f)(X, W)
    assert not stats.errors, stats.errors
    ((fp, sequence, how),) = stats.policy_decisions
    assert sequence == ("algsimp",) and how == "rollout" and stats.applied == [(fp, ("algsimp",))]
    with autotune_jax.use(policy=committee / "a_stop.zip", cache=db_path) as alone:
        jax.jit(f)(X, W)
    assert alone.policy_decisions == [(fp, (), "rollout")] and alone.applied == []  # its own decision


def test_policy_that_cannot_be_read_fails_at_use(tmp_path, db_path):
    with pytest.raises(autotune.BadInput, match="no such policy"):
        with autotune_jax.use(policy=tmp_path / "missing.zip", cache=db_path):
            pass


def test_remembered_policy_decisions_are_keyed_by_the_compiler_version(engine):
    """A decision remembered under one XLA is never replayed under another: the key names the
    installed compiler (jaxlib) version, the pipeline version, the policy's digest and the objective."""
    from autotune.jax import _PolicyDecider

    decider = _PolicyDecider("llm", "final-ops")
    key = decider.key(engine, "f" * 32)
    assert engine.pipeline.compiler_version in key and engine.version in key
    assert decider.digest in key and key.endswith("|final-ops|" + "f" * 32)
