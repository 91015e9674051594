"""Does a per-site lever move time on this CPU, before it is built? results/levers.md.

Issue 64 asks for decisions per subgraph beyond the library choice of ``pipelines/xla/sites.py`` (which
did not pay: results/sites.md). Each lever here is measured at its best case before any rewrite is
written: two jax programs that compute the same thing, one as XLA gets it today and one as the rewrite
would leave it, compiled with XLA's default and timed interleaved in this process
(``options_parts.hook.jax_ratio``: calibrated samples, ratio of medians, 95% bootstrap interval), outputs
compared. A lever that does not pay at its best case is not worth a rewrite; one that does goes on to be
built as a site decision (executed and compared by the tool like every answer).

Levers:

- **Loop unrolling** (built: ``pipelines/xla/loops.py``, ``site:unroll:<while>``): each counted while loop
  of the zoo's LLM train, decode and prefill steps (layers under ``lax.scan``, how LLM stacks keep their
  compiles short), the LLM decode example and a real JAX RL workload, unrolled by 2, 4 or fully by the
  tool's rewrite, timed and executed by the tool's worker against the module as written. XLA's CPU
  pipeline has no while-loop unroller (``autotune passes`` lists none).
- **Convolution layout**: a PyTorch-style NCHW convolution stack (how DETR-like graphs exported from
  PyTorch arrive) against the same stack with its activations transposed to NHWC once at the ends.
- **Dot merging**: two sibling dots that share their left operand (a SwiGLU's gate and up projections)
  against one dot on the concatenated weights, split after (XLA's GPU pipeline merges such dots; the CPU's
  does not), the concatenation inside the step as a rewrite would leave it.
- **Library subgraphs taken apart** (built: ``site:library:<conv>=split|xla``, ``pipelines/xla/sites.py``):
  YNNPACK fuses a ResNet's last stage (several convolutions, their batch norms and ReLUs, the pooling) into
  one library fusion, 26% of ResNet-50's step. Split (each convolution its own library fusion) or all XLA's
  own code, by the tool's rewrite against the module as XLA compiles it: real ResNet-50, the GPT-2 and
  BERT examples (their one such fusion), ResNet-style tails made here with jax, the zoo's ResNet at
  ResNet-18 widths (inference).
- **The hook itself** (``aliasing``): every per-site decision reaches XLA through jax's pre-scheduler
  transformation. On jaxlib 0.10 that rebuilds the module without its input/output aliasing
  (``versions.HOOK_KEEPS_ALIASING``), so a decided executable copies every donated buffer each step. Measured
  in this process on the worker: the module handed back unchanged against no transformation, and each
  decision against that unchanged hand-back (its own effect, the copy cost taken out).

    python bench/levers.py            # 40 interleaved rounds per pair
    python bench/levers.py --quick    # 16 rounds, fewer programs
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable


from harness import RESULTS, ROOT, Provenance, log, max_rel_diff, write

from levers_parts import NOTES, aliasing, decided_rows, subgraphs
from options_parts.hook import jax_ratio

ROUNDS, QUICK_ROUNDS = 40, 16
#: LLM configurations: small and mid width, the layer counts a scan is written for.
LLM = (
    dict(layers=4, d_model=64, ffn=256),
    dict(layers=8, d_model=64, ffn=256),
    dict(layers=8, d_model=128, ffn=512),
)
LLM_COMMON = dict(heads=4, kv_heads=2, vocab=512, seq=64, batch=2, dtype="f32")


def _pair(lever: str, program: str, variant: str, base: Callable, other: Callable, args, rounds: int) -> dict:
    import jax

    t0 = time.perf_counter()
    plain, changed = (f if isinstance(f, jax.stages.Compiled) else jax.jit(f).lower(*args).compile()
                      for f in (base, other))
    r = jax_ratio(plain, changed, args, rounds=rounds)
    row = {"lever": lever, "program": program, "variant": variant, **r,
           "max_rel_diff": max_rel_diff(plain(*args), changed(*args)), "seconds": time.perf_counter() - t0}
    log(f"{lever} {program} {variant}: {r['ratio']:.3f} [{r['low']:.3f}, {r['high']:.3f}] "
        f"({r['plain_ms']:.3f} ms -> {r['hooked_ms']:.3f} ms), max rel diff {row['max_rel_diff']:.1e}")
    return row


def _loop_modules(quick: bool):
    """(name, Module) pairs holding counted while loops: the zoo's LLM steps (layers under ``lax.scan``),
    the LLM decode example and a real JAX RL workload (a PRNG loop)."""
    import jax

    import autotune
    import autotune.zoo.llm as llm
    from autotune.core.module import load
    from autotune.zoo import LLMConfig

    for sizes in LLM[:2] if quick else LLM:
        cfg = LLMConfig(**sizes, **LLM_COMMON)
        for kind in ("train", "decode", "prefill"):
            prog = llm.program(cfg, kind)
            yield f"LLM {kind} L={cfg.layers} d={cfg.d_model}", autotune.load(jax.jit(prog.fn).lower(*prog.args))
    for path in (ROOT / "examples/llm_decode_step.hlo", ROOT / "tests/data/real/hloenv_jaxrl_td_target.hlo"):
        yield path.name, load(path)


def unrolling(rounds: int, quick: bool) -> list[dict]:
    """Each counted while loop unrolled by the tool's own rewrite (``site:unroll:<while>``, loops.py) against
    the module as written, timed and executed by the tool's worker."""
    from autotune.pipelines.xla import loops

    def decisions(pipeline, root):
        for site in (s for s in pipeline.sites(root) if s.kind == loops.UNROLL):
            for choice in site.choices:
                if choice != site.default:
                    yield site, choice, "full" if choice == loops.FULL else f"by {choice}"

    return decided_rows(_loop_modules(quick), decisions, "loop unrolling (site:unroll)", rounds)


def conv_layout(rounds: int, quick: bool) -> list[dict]:
    """A NCHW convolution stack against the same stack run in NHWC (transposed once at each end)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    def nchw(x, ws):
        for w in ws:
            x = jax.nn.relu(lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NCHW", "OIHW", "NCHW")))
        return x

    def nhwc(x, ws):
        x = jnp.transpose(x, (0, 2, 3, 1))
        for w in ws:
            x = jax.nn.relu(lax.conv_general_dilated(x, jnp.transpose(w, (2, 3, 1, 0)), (1, 1), "SAME",
                                                     dimension_numbers=("NHWC", "HWIO", "NHWC")))
        return jnp.transpose(x, (0, 3, 1, 2))

    rows = []
    shapes = ((8, 64, 28), (2, 128, 14)) if quick else ((8, 64, 28), (2, 128, 14), (8, 32, 56))
    for batch, channels, size in shapes:
        rng = np.random.default_rng(0)
        ws = [jnp.asarray(rng.normal(size=(channels, channels, 3, 3)) * 0.05, jnp.float32) for _ in range(4)]
        x = jnp.asarray(rng.normal(size=(batch, channels, size, size)), jnp.float32)
        rows.append(_pair("convolution layout", f"4 convs 3x3, x[{batch},{channels},{size},{size}]", "NCHW -> NHWC",
                          nchw, nhwc, (x, ws), rounds))
    return rows


def dot_merging(rounds: int, quick: bool) -> list[dict]:
    """A SwiGLU's gate and up projections: two dots sharing x against one dot on [w_gate | w_up]."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    def two(x, wg, wu, wd):
        return (jax.nn.silu(x @ wg) * (x @ wu)) @ wd

    def merged(x, wg, wu, wd):
        h = x @ jnp.concatenate([wg, wu], axis=1)
        g, u = jnp.split(h, 2, axis=1)
        return (jax.nn.silu(g) * u) @ wd

    rows = []
    shapes = ((2, 256, 1024), (256, 256, 1024)) if quick else ((2, 256, 1024), (256, 256, 1024), (2, 1024, 4096),
                                                                (512, 512, 2048))
    for tokens, d, f in shapes:
        rng = np.random.default_rng(0)
        x = jnp.asarray(rng.normal(size=(tokens, d)), jnp.float32)
        wg, wu = (jnp.asarray(rng.normal(size=(d, f)) * 0.05, jnp.float32) for _ in range(2))
        wd = jnp.asarray(rng.normal(size=(f, d)) * 0.05, jnp.float32)
        rows.append(_pair("dot merging", f"SwiGLU x[{tokens},{d}] ffn {f}", "gate+up as one dot", two, merged,
                          (x, wg, wu, wd), rounds))
    return rows


LEVERS = {"unrolling": unrolling, "layout": conv_layout, "dots": dot_merging, "subgraph": subgraphs,
          "aliasing": aliasing}


def markdown(data: dict) -> str:
    lines = ["# Per-site levers measured at their best case, before building them", "",
             f"Each pair: the program as XLA gets it today against the same program as the rewrite leaves "
             f"it, both compiled with XLA's default pipeline on this CPU and timed interleaved ({data['rounds']} "
             "rounds of calibrated samples; ratio of medians with its 95% bootstrap interval; < 1 is faster): "
             "loop unrolling and library subgraphs by the tool's own rewrite in its worker (executed and compared "
             "on two draws), the pre-scheduler hook's rows on a worker in this process (the module handed back "
             "unchanged against none, and a decision against that unchanged hand-back: its own effect), the other "
             "levers (not built) at their best case by jax in this process. A ratio counts as a win only when its "
             "whole interval lies below 0.98 and the outputs are the same.", "",
             "| lever | program | variant | XLA's default (ms) | ratio [95% interval] | verdict | max rel diff |",
             "|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        wrong = r.get("same") is False or r["max_rel_diff"] != r["max_rel_diff"]
        verdict = "WRONG" if wrong else "win" if r["high"] < 0.98 else ("loss" if r["low"] > 1.02 else "no difference")
        lines.append(f"| {r['lever']} | {r['program']} | {r['variant']} | {r['plain_ms']:.3f} | "
                     f"{r['ratio']:.3f} [{r['low']:.3f}, {r['high']:.3f}] | {verdict} | {r['max_rel_diff']:.1e} |")
    lines += ["", "## Per lever", ""]
    for lever in dict.fromkeys(r["lever"] for r in data["rows"]):
        rows = [r for r in data["rows"] if r["lever"] == lever]
        wins = [r for r in rows if r["high"] < 0.98 and r.get("same", True)]
        losses = [r for r in rows if r["low"] > 1.02]
        ratios = sorted(r["ratio"] for r in rows)
        lines.append(f"- {lever}: {len(wins)} win(s), {len(losses)} loss(es) in {len(rows)} pairs; ratios "
                     f"{ratios[0]:.3f} to {ratios[-1]:.3f}, median {ratios[len(ratios) // 2]:.3f}")
    if data.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in data["notes"]]
    lines += ["", f"Load average (1 min) at the start and end: {data['load'][0]:.1f} -> {data['load'][1]:.1f} on "
              f"{os.cpu_count()} cores. Seconds: {data['seconds']:.0f}."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_ROUNDS} rounds, fewer programs")
    ap.add_argument("--only", choices=sorted(LEVERS), action="append", help="measure only these levers")
    ap.add_argument("--out", type=os.fspath, default=RESULTS)
    opts = ap.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    prov = Provenance.now(target="cpu")
    rounds = QUICK_ROUNDS if opts.quick else ROUNDS
    load, t0, rows = [os.getloadavg()[0]], time.perf_counter(), []
    for name in opts.only or LEVERS:
        log(f"lever: {name}")
        rows += LEVERS[name](rounds, opts.quick)
    load.append(os.getloadavg()[0])
    data = {"rounds": rounds, "quick": opts.quick, "rows": rows, "load": load, "seconds": time.perf_counter() - t0,
            "notes": NOTES}
    log(f"wrote {write(opts.out, 'levers', data, markdown(data), prov)}")


if __name__ == "__main__":
    main()
