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
import gc
import gzip
import json
import math
import os
import random
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "bench" / "gpu_bundle"
EXTRAS = (("simplification",), ("simplification", "cse"))
#: Figures the deviceless pipeline gives for every variant (``prepare``), ranked against GPU time.
FIGURES = ("final_ops", "kernels", "estimate_us")
#: Integers are drawn from [0, INT_HIGH): indices into any dimension of 4 or more (autotune's runner).
INT_HIGH = 4
MIN_SAMPLE_S = 0.01


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# =========================================================================================================
# prepare: here, with autotune
# =========================================================================================================
def family_sample(n: int) -> list[tuple[str, str]]:
    """``n`` llm-family modules of the test split, (name, HLO text): kinds and variants spread evenly
    (decode / prefill / train; dense, MoE, latent attention; scan or not), in a fixed hash order."""
    import hashlib

    from autotune.zoo import suite

    everything = suite.configs()
    test = set(suite.split(everything)["test"])
    pool = [e for e in everything if e.family == "llm" and e.name in test]

    def stratum(e) -> str:
        cfg = e.config_dict()
        return f"{e.kind}/{'moe' if cfg.get('experts') else 'latent' if cfg.get('latent') else 'dense'}"

    strata: dict[str, list] = {}
    for e in sorted(pool, key=lambda e: hashlib.sha256(e.name.encode()).hexdigest()):
        strata.setdefault(stratum(e), []).append(e)
    picked = []
    while len(picked) < n and any(strata.values()):
        for key in sorted(strata):
            if strata[key] and len(picked) < n:
                picked.append(strata[key].pop(0))
    return [(e.name, suite.lower_entry(e.family, e.kind, e.config_dict())) for e in picked]


def module_list(family: int) -> list[tuple[str, str, str]]:
    """(name, group, HLO text) of every module the benchmark measures."""
    sys.path.insert(0, str(ROOT / "bench"))
    from realmods import REAL, llm_steps, require

    fixed = [(p, "shared-llm") for p in llm_steps()] + [(ROOT / "examples" / "llm_decode_step.hlo", "bundled"),
                                                         (REAL / "xla_dlrm_train_step.hlo", "dlrm")]
    require([p for p, _ in fixed], "module")
    out = [(p.stem, group, p.read_text()) for p, group in fixed]
    return out + [(name, "llm-family", text) for name, text in family_sample(family)]


def figures(session, text: str) -> dict:
    """What the target's deviceless pipeline says of a module: XLA's default pipeline on it."""
    root = session.normalize(text)
    final = session.evaluator.default(root)
    if not final.ok:
        return {"error": final.message}
    m = final.metrics
    return {"final_ops": m.instructions, "kernels": m.figure("kernels"), "estimate_us": m.figure("estimate_us")}


def tuned(session, text: str, budget: int, seed: int) -> dict:
    """The session's target's answer (nevergrad at ``budget``, validated as ``autotune run`` does)."""
    r = session.tune(text, strategy="nevergrad", budget=budget, seed=seed)
    return {"sequence": list(r.best_sequence), "validation": r.validation_level, "run_id": r.run_id,
            "cost": r.best_cost, "default_cost": r.default_cost, "seconds": round(r.seconds, 1)}


def zero_shot(session, text: str, seed: int) -> dict | None:
    """The target's shipped policy (``llm-h100`` for an H100) as ``autotune run --strategy ppo
    --budget 4 -O finetune=false`` returns it: one deterministic roll-out, pruned, validated; None
    when this installation ships no policy for the target."""
    from autotune import policies

    name = policies.default_name(session.target.key)
    if policies.find(name) is None:
        return None
    r = session.tune(text, strategy="ppo", budget=4, max_length=4, seed=seed,
                     options={"policy": name, "finetune": False})
    return {"sequence": list(r.best_sequence), "validation": r.validation_level, "run_id": r.run_id, "policy": name,
            "cost": r.best_cost, "default_cost": r.default_cost, "seconds": round(r.seconds, 1)}


def variant_text(session, text: str, sequence) -> str:
    """The module after ``sequence`` (applied by the session's target's pipeline), as HLO text."""
    module = session.apply(text, list(sequence)) if sequence else session.normalize(text)
    return session.evaluator.pipeline.to_text(module)


def spread_plan(gpu, name: str, text: str, n: int, seed: int) -> tuple[list, dict]:
    """``--spread N``: of ``n`` random sequences (1-4 passes) judged by the target's deviceless pipeline,
    the two that lower its launches (``kernels``) most and the two that raise them most, labelled by
    rank (``spread-1`` lowest), and how far the launches moved over all of them. Why: on the modules of the first runs the orderings barely moved the
    compile-only figures (launches by at most 4.4%), so GPU time had nothing to rank; pairs that differ
    most are where a figure's ranking can be checked against time."""
    rng = random.Random(f"spread:{seed}:{name}")
    passes = gpu.passes()
    seqs = list({tuple(rng.sample(passes, rng.randint(1, 4))) for _ in range(n)})
    ev = gpu.evaluator
    root = gpu.normalize(text)
    base = ev.default(root).metrics.figure("kernels")
    scored = []
    for seq, res in zip(seqs, ev.evaluate_many(root, seqs)):
        final = ev.final(res.state) if res.ok else None
        if final is not None and final.ok:
            scored.append((final.metrics.figure("kernels") / base, seq))
    scored.sort()
    low = [(f"spread-{i + 1}", seq) for i, (r, seq) in enumerate(scored[:2]) if r < 1]
    high = [(f"spread+{i + 1}", seq) for i, (r, seq) in enumerate(reversed(scored[-2:])) if r > 1]
    log(f"{name}: {len(scored)} random sequences, launches x{scored[0][0]:.3f} .. x{scored[-1][0]:.3f} of the default"
        if scored else f"{name}: no random sequence compiled")
    stats = {"sequences": len(scored), "kernels_min": scored[0][0] if scored else None,
             "kernels_max": scored[-1][0] if scored else None,
             "moved": sum(abs(r - 1) > 1e-9 for r, _ in scored)}
    return low + high, stats


def prepare_module(gpu, cpu, name: str, group: str, text: str, args, out: Path) -> dict:
    t0 = time.perf_counter()
    entry = {"name": name, "group": group, "variants": []}
    if args.spread:
        plan, entry["spread"] = spread_plan(gpu, name, text, args.spread, args.seed)
        return write_variants(entry, [("default", (), gpu)] + [(label, seq, gpu) for label, seq in plan],
                              gpu, name, text, args, out, {}, t0)
    answer_gpu = tuned(gpu, text, args.budget, args.seed)
    answer_cpu = tuned(cpu, text, args.budget, args.seed)
    rng = random.Random(f"{args.seed}:{name}")
    answer_policy = zero_shot(gpu, text, args.seed)
    plan = [("default", (), gpu), (args.target, tuple(answer_gpu["sequence"]), gpu),
            ("cpu", tuple(answer_cpu["sequence"]), cpu)]
    if answer_policy is not None:
        plan.append(("policy", tuple(answer_policy["sequence"]), gpu))
    plan += [(",".join(seq), seq, gpu) for seq in EXTRAS]
    plan.append(("random", tuple(rng.sample(gpu.passes(), 3)), gpu))
    searches = {args.target: answer_gpu, "cpu": answer_cpu, "policy": answer_policy}
    return write_variants(entry, plan, gpu, name, text, args, out, searches, t0)


def write_variants(entry: dict, plan, gpu, name: str, text: str, args, out: Path, searches: dict, t0: float) -> dict:
    """Each (label, sequence, session) of ``plan`` written as the module after its sequence (one file per
    distinct module), with the target's compile-only figures, into ``entry``."""
    seen: dict[str, str] = {}
    for label, seq, session in plan:
        try:
            body = variant_text(session, text, seq)
        except Exception as exc:  # a sequence that fails on this module: recorded, not measured
            entry["variants"].append({"label": label, "sequence": list(seq), "error": str(exc).splitlines()[0]})
            continue
        digest = __import__("hashlib").sha256(body.encode()).hexdigest()[:12]
        file = f"{name}.{digest}.hlo.gz"
        if digest not in seen:
            # mtime=0: the same module gives the same bytes, so a re-prepared bundle changes only where it differs
            with gzip.GzipFile(out / file, "wb", compresslevel=9, mtime=0) as fh:
                fh.write(body.encode())
        variant = {"label": label, "sequence": list(seq), "file": file, "same_as": seen.get(digest),
                   "judged_by": session.target.key, **figures(gpu, body)}
        if searches.get(label) is not None:
            variant["search"] = searches[label]
        seen.setdefault(digest, label)
        entry["variants"].append(variant)
    shown = ", ".join(f"{v['label']}={v.get('final_ops')}" for v in entry["variants"])
    log(f"{name}: {shown} ({time.perf_counter() - t0:.0f} s)")
    return entry


def prepare(args) -> int:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # lowering and tuning never need a device here
    sys.path.insert(0, str(ROOT))
    from autotune.api import Session

    out = Path(args.bundle)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.hlo.gz"):
        old.unlink()
    modules = module_list(args.family)
    log(f"{len(modules)} modules; tuning for {args.target} and for the CPU at budget {args.budget}")
    db = Path(args.db)
    db.parent.mkdir(parents=True, exist_ok=True)
    manifest = {"command": "python bench/gpu.py prepare" + "".join(f" {a}" for a in sys.argv[2:]),
                "budget": args.budget, "seed": args.seed, "modules": []}
    with Session(db, workers=2, target=args.target) as gpu, Session(db, workers=2) as cpu:
        import jax

        manifest.update(target=gpu.target.key, target_description=gpu.target.description, jax=jax.__version__,
                        pipeline=gpu.evaluator.version)
        for name, group, text in modules:
            try:
                manifest["modules"].append(prepare_module(gpu, cpu, name, group, text, args, out))
            except Exception as exc:
                log(f"{name}: not prepared ({type(exc).__name__}: {str(exc).splitlines()[0]})")
            (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    size = sum(p.stat().st_size for p in out.iterdir())
    log(f"bundle {out}: {len(list(out.glob('*.hlo.gz')))} files, {size / 2**20:.1f} MiB")
    return 0


# =========================================================================================================
# run: on the GPU machine, plain jax + numpy
# =========================================================================================================
class Api:
    """The few jaxlib calls ``run`` needs, found in the installed jax (0.10.x here, 0.11.x on the GPUs)."""

    def __init__(self, platform: str):
        import jax
        from jax._src import xla_bridge
        from jax._src.lib import _jax

        self.jax, self._jax = jax, _jax
        self.backend = xla_bridge.get_backend(platform)
        self.device = self.backend.local_devices()[0]
        self.devices = _jax.DeviceList((self.device,))
        try:
            from jaxlib import _hlo

            self._hlo = _hlo
        except ImportError:  # where the HLO bindings moved
            from jax._src.lib import _hlo  # type: ignore

            self._hlo = _hlo

    def proto(self, text: str) -> bytes:
        return self._hlo.hlo_module_from_text(text).as_serialized_hlo_module_proto()

    def compile(self, proto: bytes, options: dict | None = None):
        """XLA's default pipeline for this backend; ``options``: compiler flags set for this compile only
        (``CompileOptions.env_option_overrides``, what ``jax.jit(compiler_options=...)`` sets)."""
        mlir = self._jax.mlir.hlo_to_stablehlo(proto)
        opts = self._jax.CompileOptions()
        if options:
            opts.env_option_overrides = list(options.items())
        return self.backend.compile_and_load(mlir, self.devices, opts)

    def params(self, proto: bytes) -> list[tuple[tuple[int, ...], object]]:
        """(shape, numpy dtype) of every entry parameter leaf, tuples flattened depth-first."""
        import numpy as np

        shape = self._hlo.XlaComputation(proto).program_shape()
        leaves = []

        def walk(s):
            if s.is_tuple():
                for sub in s.tuple_shapes():
                    walk(sub)
            else:
                leaves.append((tuple(int(d) for d in s.dimensions()), np.dtype(s.numpy_dtype())))

        for s in shape.parameter_shapes():
            walk(s)
        return leaves

    def inputs(self, leaves, seed: int) -> list:
        """Seeded random inputs drawn on the device: floats N(0, 1), integers in [0, INT_HIGH), bools."""
        import numpy as np

        jax, jnp = self.jax, self.jax.numpy
        key = jax.random.PRNGKey(seed)
        out = []
        with jax.default_device(self.device):
            for i, (shape, dtype) in enumerate(leaves):
                k = jax.random.fold_in(key, i)
                if dtype == np.bool_:
                    x = jax.random.bernoulli(k, 0.5, shape)
                elif np.issubdtype(dtype, np.integer):
                    x = jax.random.randint(k, shape, 0, INT_HIGH, dtype=jnp.int32).astype(dtype)
                else:
                    x = jax.random.normal(k, shape, dtype=jnp.float32).astype(dtype)
                out.append(x.block_until_ready())
        return out

    @staticmethod
    def run(exe, args: list, block: bool = True) -> list:
        results = exe.execute_sharded(args)
        outs = [per_device[0] for per_device in results.disassemble_into_single_device_arrays()]
        if block:
            for o in outs:
                o.block_until_ready()
        return outs


_ALIAS = re.compile(r"\{(\d*)\}:\s*\((\d+),\s*\{([\d,\s]*)\}")


def aliases(text: str) -> dict[int, int]:
    """Donated inputs: parameter leaf -> the output leaf that reuses its buffer (top-level leaves only)."""
    m = re.search(r"input_output_alias=\{(.*?)\}\s*(?:,\s*\w+=|\n)", text.split("\n", 1)[0] + "\n")
    if not m:
        return {}
    pairs = {}
    for out_index, param, param_index in _ALIAS.findall(m.group(1)):
        if not param_index.strip():
            pairs[int(param)] = int(out_index or 0)
    return pairs


class Runner:
    """One compiled variant and its inputs; a donated input is replaced by the output aliasing it."""

    def __init__(self, api: Api, exe, inputs: list, alias: dict[int, int]):
        self.api, self.exe, self.inputs, self.alias = api, exe, inputs, alias

    def once(self, block: bool = True) -> list:
        outs = self.api.run(self.exe, self.inputs, block)
        for param, out in self.alias.items():
            if param < len(self.inputs) and out < len(outs):
                self.inputs[param] = outs[out]
        return outs

    def sample(self, inner: int) -> float:
        """Seconds per call over ``inner`` calls dispatched back to back and waited for once, at the end, as
        a training loop runs: a wait after every call would add the host's round trip (tens of
        microseconds, and its jitter) to steps of 0.2-6 ms. One device stream runs them in order, so the
        last call's outputs being ready means all are done."""
        t0 = time.perf_counter()
        for i in range(inner):
            self.once(block=i == inner - 1)
        return (time.perf_counter() - t0) / inner


def bootstrap_median(ratios: list[float], seed: int = 0, n: int = 2000) -> tuple[float, float, float]:
    import numpy as np

    r = np.asarray(ratios, dtype=float)
    rng = np.random.default_rng(seed)
    meds = np.median(rng.choice(r, size=(n, len(r)), replace=True), axis=1)
    return float(np.median(r)), float(np.quantile(meds, 0.025)), float(np.quantile(meds, 0.975))


#: Output leaves up to this size are compared element by element on the host; larger ones (a KV cache)
#: by summaries computed on the device (sum, sum of absolute values, largest absolute value).
COMPARE_ON_HOST_BYTES = 16 << 20


def signature(outs: list) -> list:
    """What is kept of a run's outputs to compare another run with (small leaves whole)."""
    import numpy as np

    sig = []
    for o in outs:
        if o.size * o.dtype.itemsize <= COMPARE_ON_HOST_BYTES:
            sig.append(np.asarray(o))
        else:
            x = o.astype("float32")
            sig.append((o.shape, str(o.dtype), float(x.sum()), float(abs(x).sum()), float(abs(x).max())))
    return sig


#: ``(rtol, atol)`` per element type: ok when ``|t - o| <= atol + rtol * |o|`` (autotune's validation
#: tolerances, ``autotune/core/validation.py``: reassociation by a pass legally moves f32 results by
#: thousands of ulps through a deep network; bf16 by whole ulps). Integers and booleans: exact.
TOLERANCE = {"float64": (1e-9, 1e-10), "float32": (1e-3, 1e-4), "float16": (1e-2, 2e-3), "bfloat16": (5e-2, 1e-2)}


def same_outputs(a: list, b: list) -> tuple[bool, float]:
    """``a`` (the variant's) within tolerance of ``b`` (the default's): (ok, largest excess over the
    tolerance, 0 when within). Summarised leaves compare their sums and largest values the same way."""
    import numpy as np

    if len(a) != len(b):
        return False, math.inf
    worst = 0.0
    for x, y in zip(a, b):
        if isinstance(x, tuple) or isinstance(y, tuple):
            if not (isinstance(x, tuple) and isinstance(y, tuple)) or x[:2] != y[:2]:
                return False, math.inf
            rtol, atol = TOLERANCE.get(x[1], (1e-3, 1e-4))
            (s1, a1, m1), (s2, a2, m2) = x[2:], y[2:]
            if any(math.isfinite(u) != math.isfinite(v) for u, v in zip(x[2:], y[2:])):
                return False, math.inf
            if math.isfinite(a2):
                worst = max(worst, abs(s1 - s2) / (atol + rtol * a2), abs(a1 - a2) / (atol + rtol * a2),
                            abs(m1 - m2) / (atol + rtol * m2))
            continue
        if x.shape != y.shape or x.dtype != y.dtype:
            return False, math.inf
        if x.dtype.kind in "biu" or x.dtype == np.bool_:
            if not np.array_equal(x, y):
                return False, math.inf
            continue
        rtol, atol = TOLERANCE.get(x.dtype.name, (1e-3, 1e-4))
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        if not np.array_equal(np.isfinite(x64), np.isfinite(y64)):
            return False, math.inf
        finite = np.isfinite(x64)
        if finite.any():
            excess = np.abs(x64[finite] - y64[finite]) / (atol + rtol * np.abs(y64[finite]))
            worst = max(worst, float(excess.max()))
    return worst <= 1.0, worst


def time_pair(base: Runner, other: Runner, rounds: int) -> dict:
    """Interleaved A/B: ``rounds`` rounds, the order alternating; per-round ratio other/base."""
    inner = 1
    while base.sample(inner) * inner < MIN_SAMPLE_S and inner < 4096:
        inner *= 2
    base.sample(inner), other.sample(inner)  # warm-up
    ratios, ta, tb = [], [], []
    for r in range(rounds):
        if r % 2 == 0:
            a, b = base.sample(inner), other.sample(inner)
        else:
            b, a = other.sample(inner), base.sample(inner)
        ta.append(a)
        tb.append(b)
        ratios.append(b / a)
    ratio, low, high = bootstrap_median(ratios)
    return {"ratio": ratio, "low": low, "high": high, "rounds": rounds, "inner": inner,
            "base_us": 1e6 * sorted(ta)[len(ta) // 2], "variant_us": 1e6 * sorted(tb)[len(tb) // 2],
            "ratios": [round(x, 5) for x in ratios]}


def input_bytes(leaves) -> int:
    return sum(math.prod(s) * d.itemsize for s, d in leaves)


def outputs_of(api: Api, exe, leaves, seed: int) -> list:
    """One run on fresh seeded inputs (regenerated, so a donated input is never reused), summarised."""
    inputs = api.inputs(leaves, seed)
    sig = signature(api.run(exe, inputs))
    del inputs
    return sig


def run_module(api: Api, entry: dict, bundle: Path, args, deadline: float) -> dict:
    """Compile, compare and time every variant of one module against its default, until ``deadline``.

    Each variant's outputs are checked on fresh inputs that are freed before the timing inputs are drawn,
    so a module never holds its inputs twice (the shared LLM steps need 30-78 GiB of them)."""
    variants = [v for v in entry["variants"] if "file" in v]
    texts = {v["file"]: gzip.open(bundle / v["file"], "rt").read() for v in variants}
    base = next(v for v in variants if v["label"] == "default")
    base_text = texts[base["file"]]
    proto = api.proto(base_text)
    leaves = api.params(proto)
    need = input_bytes(leaves)
    row = {"name": entry["name"], "group": entry["group"], "input_gib": round(need / 2**30, 2), "variants": []}
    if need > args.max_input_gib * 2**30:
        row["skipped"] = f"inputs need {need / 2**30:.1f} GiB, more than --max-input-gib {args.max_input_gib:g}"
        return row
    t0 = time.perf_counter()
    alias = aliases(base_text)
    base_exe = api.compile(proto)
    row["compile_s"] = round(time.perf_counter() - t0, 2)
    reference = outputs_of(api, base_exe, leaves, args.seed)
    # The floors a variant is read against: the default against itself, timed (the same executable in both
    # arms), and run twice on the same inputs (a GPU reduction by atomics, e.g. a scatter-add in a
    # gradient, is not deterministic, so even the default's outputs move from run to run).
    _, row["default_excess"] = same_outputs(outputs_of(api, base_exe, leaves, args.seed), reference)
    inputs = api.inputs(leaves, args.seed)
    runner = Runner(api, base_exe, inputs, alias)
    row["noise"] = time_pair(runner, runner, args.rounds)
    del inputs, runner
    log(f"  {entry['name']} default vs itself: {row['noise']['ratio']:.3f} [{row['noise']['low']:.3f}, "
        f"{row['noise']['high']:.3f}], outputs run to run {row['default_excess']:.2f}")
    if args.recompile:  # the default compiled a second time: a GPU compile autotunes its GEMMs by timing them
        again = api.compile(proto)
        inputs = api.inputs(leaves, args.seed)
        row["recompiled"] = time_pair(Runner(api, base_exe, inputs, alias), Runner(api, again, inputs, alias),
                                      args.rounds)
        del again, inputs
        log(f"  {entry['name']} default recompiled: {row['recompiled']['ratio']:.3f} "
            f"[{row['recompiled']['low']:.3f}, {row['recompiled']['high']:.3f}]")
    if args.labels:
        variants = [v for v in variants if v["label"] in ("default", *args.labels.split(","))]
    timed: dict[str, dict] = {}  # file -> the first variant's result: the same module is timed once
    for v in variants:
        if v["label"] == "default":
            continue
        if v["file"] in timed:
            first = timed[v["file"]]
            row["variants"].append({**first, "label": v["label"], "sequence": v["sequence"], "same_as": first["label"]})
            continue
        if time.time() > deadline:
            row["variants"].append({"label": v["label"], "skipped": "time share"})
            continue
        out = {"label": v["label"], "sequence": v["sequence"]}
        if v["file"] != base["file"]:
            timed[v["file"]] = out
        build = None if v["file"] == base["file"] else (lambda text=texts[v["file"]]: api.compile(api.proto(text)))
        row["variants"].append(measure(api, out, build, base_exe, leaves, alias, reference, args, entry["name"]))
    if args.compiler_options:
        row["options"] = time_options(api, entry, proto, leaves, alias, base_exe, reference, args, deadline)
    del reference, base_exe
    return row


#: ``--compiler-options``: XLA GPU flags, each set alone on the default ordering and timed against the
#: default (issue 30 item 7: options as a second search dimension is worth building only where they move
#: measured time). Command buffers (CUDA graphs) off, GEMMs without Triton or autotuning, and schedules
#: and fusions the default leaves off. A flag the installed XLA does not know is an error for that row.
COMPILER_OPTIONS = (("xla_gpu_enable_command_buffer", ""), ("xla_gpu_enable_triton_gemm", False),
                    ("xla_gpu_autotune_level", 0), ("xla_gpu_enable_latency_hiding_scheduler", True),
                    ("xla_gpu_enable_cublaslt", True), ("xla_gpu_enable_while_loop_double_buffering", True),
                    ("xla_gpu_enable_dynamic_slice_fusion", True))


def time_options(api: Api, entry: dict, proto: bytes, leaves, alias, base_exe, reference, args,
                 deadline: float) -> list[dict]:
    """The default ordering compiled with each of ``COMPILER_OPTIONS`` alone, checked and timed like a
    variant (until ``deadline``)."""
    rows = []
    for flag, value in COMPILER_OPTIONS:
        out = {"label": f"{flag}={value!r}", "flag": flag, "value": value}
        if time.time() > deadline:
            rows.append({**out, "skipped": "time share"})
            continue
        build = lambda flag=flag, value=value: api.compile(proto, {flag: value})  # noqa: E731
        rows.append(measure(api, out, build, base_exe, leaves, alias, reference, args, entry["name"]))
    return rows


def measure(api: Api, out: dict, build, base_exe, leaves, alias, reference, args, module: str) -> dict:
    """``build()`` compiles a variant (None: the default's own executable); its outputs are compared with ``reference`` on fresh inputs (freed
    before the timing inputs are drawn), then it is timed interleaved against ``base_exe``; all into
    ``out``, an error as that row's (logged)."""
    try:
        t0 = time.perf_counter()
        exe = base_exe if build is None else build()
        out["compile_s"] = round(time.perf_counter() - t0, 2)
        out["same_outputs"], out["excess"] = same_outputs(outputs_of(api, exe, leaves, args.seed), reference)
        inputs = api.inputs(leaves, args.seed)
        out.update(time_pair(Runner(api, base_exe, inputs, alias), Runner(api, exe, inputs, alias), args.rounds))
        del exe, inputs
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    log(f"  {module} {out['label']}: " + (f"{out['ratio']:.3f} [{out['low']:.3f}, {out['high']:.3f}]"
                                         if "ratio" in out else out.get("error", "")))
    return out


def spearman(xs: list[float], ys: list[float]) -> float | None:
    import numpy as np

    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:  # a constant side ranks nothing
        return None
    try:
        from scipy.stats import spearmanr

        rho = spearmanr(xs, ys).statistic
    except ImportError:
        def ranks(v):
            order = np.argsort(np.argsort(v, kind="stable"), kind="stable").astype(float)
            return order

        rho = float(np.corrcoef(ranks(np.asarray(xs)), ranks(np.asarray(ys)))[0, 1])
    return None if rho is None or math.isnan(rho) else float(rho)


def correlations(manifest: dict, rows: list[dict]) -> dict:
    """Spearman of each compile-only figure's ratio to the default against the measured time ratio."""
    figures_of = {(m["name"], v["label"]): v for m in manifest["modules"] for v in m["variants"]}
    pairs = []
    for row in rows:
        base = figures_of.get((row["name"], "default"), {})
        for v in row.get("variants", []):
            fig = figures_of.get((row["name"], v["label"]), {})
            if "ratio" in v and base and not v.get("same_as"):  # one pair per distinct module timed
                pairs.append((fig, base, v["ratio"]))
    out = {"pairs": len(pairs)}
    for name in FIGURES:
        xs, ys = [], []
        for fig, base, ratio in pairs:
            if fig.get(name) and base.get(name):
                xs.append(fig[name] / base[name])
                ys.append(ratio)
        out[name] = spearman(xs, ys)
    return out


#: Order and weight of a group in the run: the small modules first (most of the ranked pairs, seconds each),
#: the shared LLM steps last with three shares of the time each (30-78 GiB of inputs, slower compiles).
GROUP_ORDER = {"bundled": 0, "dlrm": 1, "llm-family": 2, "shared-llm": 3}
GROUP_WEIGHT = {"shared-llm": 3.0}


def device_env(platform: str) -> None:
    """Set before jax first touches a backend (``device_gib`` does, in ``main``)."""
    if platform == "cpu":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the dry run: no CUDA plugin probing
    else:
        # jax lets its allocator have 75% of the device by default: on a 139 GiB H200 that is 104 GiB, less
        # than DeepSeek-V2's 58.6 GiB of inputs plus its 57 GiB temporary (out of memory on 2026-11-28, in
        # every process); the benchmark is the device's only user, so it takes 95% unless told otherwise.
        os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")


def has_work(entry: dict, args) -> bool:
    """Whether a module has anything to time against its default: an ordering (of ``--labels``, if given)
    whose module differs from the default's, or the default itself under ``--compiler-options`` or
    ``--recompile``. A spread bundle keeps modules whose launches no ordering moved as a default alone."""
    if args.compiler_options or args.recompile:
        return True
    base = next((v.get("file") for v in entry["variants"] if v["label"] == "default"), None)
    wanted = args.labels.split(",") if args.labels else None
    return any(v["label"] != "default" and v.get("file") not in (None, base) and (wanted is None or v["label"] in wanted)
               for v in entry["variants"])


def run(args) -> int:
    bundle = Path(args.bundle)
    if not (bundle / "manifest.json").is_file():
        print(f"gpu.py: error: no {bundle}/manifest.json (make it with `python bench/gpu.py prepare`)", file=sys.stderr)
        return 2
    manifest = json.loads((bundle / "manifest.json").read_text())
    deadline = time.time() + args.deadline
    api = Api(args.platform)  # main() has set the environment (device_env) before jax touched a backend
    gpu_name = getattr(api.device, "device_kind", args.platform)
    # gpt-oss (78 GiB of inputs) last: were it to take the process down, the others are already written
    chosen = [m for m in manifest["modules"] if (not args.groups or m["group"] in args.groups.split(","))
              and (not args.modules or m["name"] in args.modules.split(","))]
    idle = [m["name"] for m in chosen if not has_work(m, args)]
    if idle:  # a default alone, with nothing to time against it, would only spend the module's share
        log(f"nothing to time on {len(idle)} modules (their only ordering is XLA's default): {', '.join(idle)}")
        chosen = [m for m in chosen if m["name"] not in idle]
    modules = sorted(chosen, key=lambda m: (GROUP_ORDER.get(m["group"], 9), "gpt_oss" in m["name"]))
    log(f"{len(modules)} modules on {gpu_name} (jax {api.jax.__version__}), deadline {args.deadline} s")
    data = {"command": "python bench/gpu.py" + "".join(f" {a}" for a in sys.argv[1:]), "device": gpu_name,
            "platform": args.platform, "jax": api.jax.__version__, "bundle": manifest.get("command"),
            "target": manifest.get("target"), "rows": [], "date": time.strftime("%Y-%m-%d"),
            "mem_fraction": os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")}
    for i, entry in enumerate(modules):
        now = time.time()
        if now > deadline:
            data["rows"].append({"name": entry["name"], "group": entry["group"], "skipped": "deadline"})
            continue
        # A fair share of the time left: a slow module cannot starve the ones after it, and time a module
        # leaves unused goes to the rest.
        weights = [GROUP_WEIGHT.get(m["group"], 1.0) for m in modules[i:]]
        share = now + (deadline - now) * weights[0] / sum(weights)
        log(f"{entry['name']} ({share - now:.0f} s)")
        try:
            data["rows"].append(run_module(api, entry, bundle, args, share))
            if data["rows"][-1].get("skipped"):
                log(f"  skipped: {data['rows'][-1]['skipped']}")
        except Exception as exc:
            log(f"  {entry['name']}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
            data["rows"].append({"name": entry["name"], "group": entry["group"],
                                 "error": str(exc).splitlines()[0][:300]})
        gc.collect()
        api.jax.clear_caches()
        write(data, manifest, Path(args.out))  # after every module: a run cut short keeps what it measured
    log(f"wrote {write(data, manifest, Path(args.out))}")
    return 0


def write(data: dict, manifest: dict, out: Path) -> Path:
    data["correlation"] = correlations(manifest, data["rows"])
    out.mkdir(parents=True, exist_ok=True)
    stem = "gpu" if data["platform"] != "cpu" else "gpu-dryrun-cpu"
    (out / f"{stem}.json").write_text(json.dumps(data, indent=1) + "\n")
    (out / f"{stem}.md").write_text(markdown(data, manifest))
    return out / f"{stem}.md"


def markdown(data: dict, manifest: dict) -> str:
    target = manifest.get("target", "?")
    dry = data["platform"] == "cpu"
    lines = [f"# {'Dry run on the host CPU' if dry else 'Timed on a GPU'}: XLA's default vs the answer tuned for "
             f"{target.split('-')[0]} vs the CPU's answer", "",
             f"Made by `{data['command']}` on **{data['device']}** with jax {data['jax']} ({data['date']}); "
             f"the orderings were tuned by `{data['bundle']}` (autotune, jax {manifest.get('jax')}, target "
             f"`{target}`: XLA's GPU pipeline compiled without a GPU).", ""]
    if dry:
        lines += ["**A dry run**: the same script on the CPU backend, to show it works end to end. These are not GPU "
                  "figures; the GPU figures are pending a machine with a GPU (`python bench/gpu.py` there).", ""]
    lines += ["Each cell: median time ratio variant / XLA's default over interleaved rounds, with its 95% bootstrap "
              "interval; below 1 is faster. `=out` the outputs equal the default's on the same seeded random inputs "
              "within autotune's validation tolerances (f32: rtol 1e-3, atol 1e-4; bf16: 5e-2, 1e-2; integers "
              "exact); `!out` they do not (bf16 arithmetic inside an f32 output is not given autotune's f32 second "
              "opinion here). Outputs over 16 MiB, e.g. a KV cache, are compared by sum, absolute sum and largest "
              "absolute value. `~out`: outside the tolerance, but no further from the default's outputs than twice "
              "the default's own run-to-run difference on the same inputs (column `run to run`, in units of the "
              "tolerance: a GPU reduction by atomics is not deterministic). `itself`: the default timed against "
              "itself, the noise floor of the ratios in that row; `recompiled` (with `--recompile`): against a "
              "second compile of itself (the GPU compile autotunes its GEMMs by timing them).", "",
              "| module | group | inputs | itself | recompiled | run to run | " + " | ".join(_labels(manifest)) + " |",
              "|---|---|---:|---|---|---:|" + "---|" * len(_labels(manifest))]
    for row in data["rows"]:
        floor = row.get("default_excess")
        cells = {v["label"]: _cell(v, floor) for v in row.get("variants", [])}
        why = row.get("skipped") or row.get("error")
        labels = _labels(manifest)
        values = [cells.get(lb, "") for lb in labels] if not why else [why] + [""] * (len(labels) - 1)
        noise = _cell(row["noise"]) if "noise" in row else ""
        again = _cell(row["recompiled"]) if "recompiled" in row else ""
        lines.append(f"| {row['name']} | {row['group']} | {row.get('input_gib', '')} GiB | {noise} | {again} | "
                     f"{'' if floor is None else format(floor, '.2f')} | " + " | ".join(values) + " |")
    opt_rows = [r for r in data["rows"] if r.get("options")]
    if opt_rows:
        flags = [o["label"] for o in opt_rows[0]["options"]]
        lines += ["", "Compiler options (`--compiler-options`): XLA's default ordering compiled with one flag set, "
                  "time ratio against the default compile:", "",
                  "| module | " + " | ".join(f"`{f}`" for f in flags) + " |", "|---|" + "---|" * len(flags)]
        for r in opt_rows:
            cells = {o["label"]: _cell(o, r.get("default_excess")) for o in r["options"]}
            lines.append(f"| {r['name']} | " + " | ".join(cells.get(f, "") for f in flags) + " |")
    c = data["correlation"]
    lines += ["", f"Rank correlation (Spearman) of each compile-only figure (its ratio to the default, from the "
                  f"target's deviceless pipeline) with the measured time ratio, over {c['pairs']} (module, ordering) "
                  "pairs:", "", "| figure | Spearman |", "|---|---:|"]
    lines += [f"| {name} | {'n/a' if c.get(name) is None else format(c[name], '.2f')} |" for name in FIGURES]
    return "\n".join(lines) + "\n"


def _labels(manifest: dict) -> list[str]:
    seen = []
    for m in manifest["modules"]:
        for v in m["variants"]:
            if v["label"] != "default" and v["label"] not in seen:
                seen.append(v["label"])
    return seen


def _cell(v: dict, floor: float | None = None) -> str:
    if "ratio" not in v:
        return v.get("error", v.get("skipped", ""))[:60]
    mark = {True: " =out", False: " !out"}.get(v.get("same_outputs"), "")
    if mark == " !out" and floor and v.get("excess", math.inf) <= 2 * floor:
        mark = " ~out"
    return f"{v['ratio']:.3f} [{v['low']:.3f}, {v['high']:.3f}]{mark}"


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


def device_gib(platform: str) -> float:
    """The device's own memory, in GiB (what its inputs must fit into)."""
    from jax._src import xla_bridge

    dev = xla_bridge.get_backend(platform).local_devices()[0]
    try:
        return dev.memory_stats()["bytes_limit"] / 2**30
    except Exception:
        return 16.0


if __name__ == "__main__":
    sys.exit(main())
