"""Modules: loaders for every input format, and fingerprints that ignore names but not programs."""

from __future__ import annotations

import re

import pytest

from autotune.pipelines.xla import hlo
from autotune.pipelines.xla.loader import hlo_module, module_text
from autotune.errors import BadInput
from autotune.core.module import load
from conftest import REAL, SMALL

TEXT = SMALL.read_text()


def rename(text: str, suffix: str) -> str:
    """Rename every instruction and computation (and the module) without changing the program."""
    inst = set(re.findall(r"^\s*(?:ROOT )?([A-Za-z_][\w.\-]*) = ", text, re.M))
    for name in sorted(inst, key=len, reverse=True):  # definitions and operand uses, not opcodes
        text = re.sub(rf"(?<![\w.\-]){re.escape(name)}(?= =|[,)])", name + suffix, text)
    for comp in re.findall(r"^(?:ENTRY )?([A-Za-z_][\w.\-]*) \{", text, re.M):
        text = re.sub(rf"^(ENTRY )?{re.escape(comp)} \{{", rf"\g<1>{comp}{suffix} {{", text, flags=re.M)
        text = text.replace(f"to_apply={comp}\n", f"to_apply={comp}{suffix}\n")
    return text.replace("HloModule small_redundant", "HloModule another_name")


def test_fingerprint_ignores_names_and_metadata():
    base = load(TEXT)
    renamed = load(rename(TEXT, "_x"))
    assert module_text(renamed) != module_text(base)
    assert renamed.fingerprint == base.fingerprint
    with_metadata = TEXT.replace("exponential(xm)\n", 'exponential(xm), metadata={op_name="jit(f)/exp" source_file="a.py" source_line=3}\n', 1)
    assert load(with_metadata).fingerprint == base.fingerprint


def test_fingerprint_sees_constants_shapes_and_structure():
    base = load(TEXT).fingerprint
    assert load(TEXT.replace("constant(3)", "constant(4)")).fingerprint != base
    assert load(TEXT.replace("e2 = f32[8,16] exponential(xm)", "e2 = f32[8,16] tanh(xm)")).fingerprint != base
    # A dead computation is part of the module (it counts as instructions).
    extra = TEXT.replace("ENTRY main {", "unused {\n  p = f32[] parameter(0)\n  ROOT n = f32[] negate(p)\n}\n\nENTRY main {")
    assert load(extra).fingerprint != base


def test_computation_order_does_not_matter():
    two = TEXT.replace("ENTRY main {", "mul {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT m = f32[] multiply(a, b)\n}\n\nENTRY main {")
    head, _, rest = two.partition("\n\n")
    blocks = rest.split("\n\n")
    swapped = "\n\n".join([head, blocks[1], blocks[0], *blocks[2:]])
    assert load(two).fingerprint == load(swapped).fingerprint


def test_all_loaders_agree_after_normalisation(engine, tmp_path):
    """HLO text, HloModuleProto, MLIR text and a lowered JAX function give the same program."""
    import jax
    import jax.numpy as jnp

    def f(x, w):
        return jnp.tanh(x @ w).sum(axis=1)

    lowered = jax.jit(f).lower(jnp.zeros((4, 8), jnp.float32), jnp.zeros((8, 3), jnp.float32))
    (tmp_path / "f.mlir").write_text(lowered.as_text())
    from_jax = load(lowered)
    from_mlir = load(tmp_path / "f.mlir")
    (tmp_path / "f.hlo").write_text(module_text(from_mlir))
    (tmp_path / "f.pb").write_bytes(from_mlir.proto)
    roots = {engine.prepare(m).fingerprint for m in (from_jax, from_mlir, load(tmp_path / "f.hlo"), load(tmp_path / "f.pb"))}
    assert len(roots) == 1


def test_normalisation_is_a_fixed_point(engine):
    root = engine.prepare(load(SMALL))
    again = engine.pipeline.normalize(root)
    assert again.fingerprint == root.fingerprint


@pytest.mark.parametrize("path", REAL, ids=[p.name for p in REAL])
def test_real_third_party_modules(engine, path):
    """Real modules (custom-calls, old syntax, big constants) load, normalise and take the default."""
    root = engine.prepare(load(path))
    base = engine.metrics(root.fingerprint)
    assert base.instructions > 50 and sum(dict(base.opcodes).values()) == base.instructions
    default = engine.default(root)
    assert default.ok, default.message


def test_load_refuses_non_modules(tmp_path):
    with pytest.raises(BadInput):
        load(tmp_path / "missing.hlo")
    with pytest.raises(BadInput):
        load(b"\x00\x01garbage")


def test_opcode_histogram_spells_opcodes_like_hlo_text():
    counts = hlo.opcode_histogram(hlo_module(load(TEXT)))
    assert counts["exponential"] == 2 and counts["parameter"] == 4
    assert set(counts) <= set(hlo.opcode_vocabulary())
