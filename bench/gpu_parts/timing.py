"""``python bench/gpu.py run``: every variant timed against XLA's default, interleaved, with intervals."""

from __future__ import annotations

import gc
import gzip
import json
import os
import sys
import time
from pathlib import Path

from gpu_parts.common import MIN_SAMPLE_S, log
from gpu_parts.device import Api, Runner, aliases, input_bytes, outputs_of, same_outputs
from gpu_parts.report import GROUP_ORDER, GROUP_WEIGHT, write


def bootstrap_median(ratios: list[float], seed: int = 0, n: int = 2000) -> tuple[float, float, float]:
    import numpy as np

    r = np.asarray(ratios, dtype=float)
    rng = np.random.default_rng(seed)
    meds = np.median(rng.choice(r, size=(n, len(r)), replace=True), axis=1)
    return float(np.median(r)), float(np.quantile(meds, 0.025)), float(np.quantile(meds, 0.975))


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
