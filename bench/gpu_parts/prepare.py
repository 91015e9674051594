"""``python bench/gpu.py prepare``: tune here, write every variant and its compile-only figures to the bundle."""

from __future__ import annotations

import gzip
import os
import random
import sys
import time
from pathlib import Path

from harness import REAL, Provenance, llm_steps, require, write_json
from gpu_parts.common import EXTRAS, ROOT, log


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
    prov = Provenance.now(target=args.target)
    with Session(db, workers=2, target=args.target) as gpu, Session(db, workers=2) as cpu:
        import jax

        manifest.update(target=gpu.target.key, target_description=gpu.target.description, jax=jax.__version__,
                        pipeline=gpu.evaluator.version)
        for name, group, text in modules:
            try:
                manifest["modules"].append(prepare_module(gpu, cpu, name, group, text, args, out))
            except Exception as exc:
                log(f"{name}: not prepared ({type(exc).__name__}: {str(exc).splitlines()[0]})")
            write_json(out / "manifest.json", manifest, prov, indent=1)
    size = sum(p.stat().st_size for p in out.iterdir())
    log(f"bundle {out}: {len(list(out.glob('*.hlo.gz')))} files, {size / 2**20:.1f} MiB")
    return 0
