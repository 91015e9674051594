#!/usr/bin/env python
"""Measured speed from XLA's compiler options: writes results/options.md, .json and .png.

Does searching XLA's compiler options together with the pass order make a real step faster on this
CPU, computing what XLA's default computes? Six stages (``--stage``, default all):

1. **search**: ``autotune run --objective runtime --space both`` (``--strategy``, ``--budget``, ``--seed``)
   on every module at hand whose step runs in under ``--max-ms`` here: the real modules of tests/data/real
   and the examples. Per module: XLA's default time, the answer (options and passes), its confirmed ratio
   and interval (the objective's claim), its validation level, the faster-but-wrong option sets met, the
   search's wall time and what racing saved.
2. **aa**: A/A confirmations, XLA's default against itself at the objective's defaults: how many false wins.
3. **race**: the budget-20 options-and-order search on ResNet-50 raced and not raced, same seed, side by
   side: the timing each spends and whether both give the same answer (``--no-race``).
4. **hook**: a record with options applied by the JAX hook to a jitted zoo ResNet (``options_parts.hook``):
   jax's own timing of the jitted function, hooked against plain, interleaved, against the record's interval.
5. **effect**: what each search's answer is worth, measured apart from the search that chose it
   (``options_parts.effect``): independent A/B measurements of the answer against XLA's default, an A/A
   beside each; the answers are the search stage's, or those of earlier runs' JSON (``--from``).
6. **claim**: the same answers claimed again at the runtime objective's defaults (``options_parts.claims``):
   what a run's end would now offer for each, beside the claim the run made.

Every stage runs on one worker in a fresh cache database (nothing measured before is reused), one process
at a time on the machine's cores; the machine may be shared (load averages are recorded): the verdicts
and ratios are the result, absolute times are this machine's.

    python bench/options.py [--quick] [--stage search|aa|race|hook|effect|claim] [--budget 100] [--strategy random]
    python bench/options.py --stage effect --from results/quiet/options.json results/quiet-extended/options.json \
        --out results/effect
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from harness import RESULTS, ROOT, Provenance, log, pyplot, rel, save_figure, write

from autotune.core.engine import open_engine
from autotune.core.module import load
from autotune.core.objectives.runtime import CONFIRM_MIN_SECONDS, Runtime
from autotune.core.spec import RunSpec
from autotune.core.tuner import tune
from options_parts.claims import claim_stage, claim_summary
from options_parts.effect import INSTANCES, effect_plot, effect_stage, effect_summary, merged_rows
from options_parts.hook import hook_experiment
from options_parts.report import markdown
from runtime import binomial_upper, confirm

COMMAND = "python bench/options.py"
MODULES = [
    "tests/data/real/xla_resnet50_keras_jax.hlo", "tests/data/real/xla_dlrm_train_step.hlo",
    "tests/data/real/rocm_vit_predict.hlo", "tests/data/real/hloenv_maml_train_step.hlo",
    "tests/data/real/hloenv_jaxrl_td_target.hlo", "examples/gpt2_train_step.hlo", "examples/bert_encoder_step.hlo",
    "examples/resnet_train_step.hlo", "examples/llm_decode_step.hlo",
    # the zoo's other single-device families, each its default config's training step, lowered at run time
    "zoo:t5:train", "zoo:vit:train", "zoo:diffusion:train",
]
RACE_MODULE = "tests/data/real/xla_resnet50_keras_jax.hlo"
#: A/A confirmations per module (at least 50 in all: the goal's count).
AA_TRIALS = 8


def module_file(path: str, tmp: Path) -> Path:
    """Where ``path``'s HLO text is: a file of the checkout, or ``zoo:FAMILY:KIND`` lowered now (the family's
    default config) into ``tmp``. Lowered, not committed: the zoo is reproducible for the pinned jax."""
    if not path.startswith("zoo:"):
        return ROOT / path
    from autotune.zoo import CONFIGS, lower

    _, family, kind = path.split(":")
    out = tmp / f"{family}_{kind}.hlo"
    if not out.exists():
        out.write_text(lower(family, kind, CONFIGS[family]()))
    return out


def load_now() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def default_ms(ev, root) -> float:
    return 1e3 * float(ev.pipeline.time(root, repeats=3, warmup=1, min_seconds=0.01)["median"])


def search_one(db: Path, path: str, strategy: str, budget: int, seed: int, race: bool = True) -> dict:
    """One runtime search of ``path`` in a fresh database: what a user running autotune gets."""
    objective = {} if race else {"race": False}
    spec = RunSpec(strategy=strategy, budget=budget, objective="runtime", seed=seed, space="both",
                   objective_options=objective)
    t0 = time.perf_counter()
    with open_engine(db, workers=1) as ev:
        result = tune(ev, load(module_file(path, db.parent)), spec=spec)
        timed = [json.loads(r) for (r,) in ev.cache.db.execute("SELECT report FROM reports WHERE kind='runtime'")]
    claim = result.claim
    return {
        "module": Path(path).stem, "path": path, "strategy": strategy, "budget": budget, "seed": seed,
        "race": race, "default_us": result.default_cost, "win": bool(result.beats_default),
        "options": result.best_options.as_dict(), "sequence": list(result.best_sequence),
        "found_options": result.best.found_options.as_dict() if result.best else {},
        "found_sequence": list(result.best.found) if result.best else [],
        "ratio": claim.ratio if claim else None, "low": claim.low if claim else None,
        "high": claim.high if claim else None, "message": claim.message if claim else None,
        "instances": claim.instances if claim else None,
        "compile_s": claim.compile_seconds if claim else None,
        "default_compile_s": claim.default_compile_seconds if claim else None,
        "validation": result.validation_level,
        "validation_reason": result.validation.reason if result.validation else None,
        "faster_but_wrong": list(result.faster_but_wrong), "invalid": [list(i) for i in result.invalid],
        "search_notes": result.search_notes, "phases": dict(result.phases), "seconds": time.perf_counter() - t0,
        "run_id": result.run_id,
        # every executable the search timed against XLA's default: its options, ratio and rounds (racing)
        "timed": [{k: t.get(k) for k in ("options", "ratio", "rounds", "planned", "stopped", "timing_seconds")}
                  for t in timed if "ratio" in t],
    }


def step_times(tmp: Path, modules: list[str]) -> dict[str, float]:
    """Each module's default step here (ms): the stages leave out those over ``--max-ms``."""
    with open_engine(tmp / "probe.db", workers=1) as ev:
        return {path: default_ms(ev, ev.prepare(load(module_file(path, tmp)))) for path in modules}


def search_stage(tmp: Path, modules: list[str], timed: dict[str, float], args) -> list[dict]:
    rows = []
    for path in modules:
        if timed[path] > args.max_ms:
            log(f"{path}: {timed[path]:.0f} ms a step, over --max-ms {args.max_ms:g}: left out")
            rows.append({"module": Path(path).stem, "path": path, "skipped": f"{timed[path]:.0f} ms a step"})
            continue
        log(f"search {path} ({timed[path]:.1f} ms a step)")
        row = search_one(tmp / f"{Path(path).stem}.db", path, args.strategy, args.budget, args.seed)
        log(f"  -> {row['message']}; options {row['options']}; {row['validation']}; {row['seconds']:.0f} s")
        rows.append(row)
    return rows


def aa_stage(tmp: Path, modules: list[str], quick: bool) -> list[dict]:
    """XLA's default against itself, the confirmation at the runtime objective's defaults."""
    rows = []
    with open_engine(tmp / "aa.db", workers=1) as ev:
        for path in modules:
            root = ev.prepare(load(module_file(path, tmp)))
            for k in range(2 if quick else AA_TRIALS):
                row = confirm(ev, root, root, seed=k, rounds=Runtime().rounds)
                rows.append({"module": root.name, "trial": k, **row})
            log(f"A/A {root.name}: {sum(r['win'] for r in rows if r['module'] == root.name)} false wins")
    return rows


def race_stage(tmp: Path, args) -> dict:
    """The same search raced and not, side by side: timing spent and the answers."""
    out = {}
    for race in (True, False):
        log(f"race={race}: {RACE_MODULE}, budget {args.race_budget}")
        out["raced" if race else "full"] = search_one(tmp / f"race-{race}.db", RACE_MODULE, args.strategy,
                                                      args.race_budget, args.seed, race)
    raced, full = out["raced"], out["full"]
    spent = lambda r: (r["search_notes"] or {}).get("seconds", 0.0)  # noqa: E731
    out["timing_cut"] = 1.0 - spent(raced) / spent(full) if spent(full) else None
    out["same_answer"] = (raced["options"], raced["sequence"]) == (full["options"], full["sequence"])
    return out


def effect_of(tmp: Path, sources: list[dict], instances: int) -> list[dict]:
    """The effect stage on the search rows of ``sources`` (later ones replace earlier ones' modules)."""
    with open_engine(tmp / "effect.db", workers=1) as ev:
        return effect_stage(ev, merged_rows(sources), module_file, tmp, CONFIRM_MIN_SECONDS, log, instances)


def claims_of(tmp: Path, sources: list[dict]) -> list[dict]:
    """The claim stage on the search rows of ``sources`` (later ones replace earlier ones' modules)."""
    with open_engine(tmp / "claim.db", workers=1) as ev:
        return claim_stage(ev, merged_rows(sources), module_file, tmp, confirm, log)


def plot(data: dict):
    def draw(path: Path) -> None:
        rows = [r for r in data.get("search", []) if r.get("ratio") is not None]
        if not rows and data.get("effect"):
            save_figure(effect_plot(data, pyplot()), path)
            return
        if not rows:
            return
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.5))
        for i, r in enumerate(rows):
            color = "tab:green" if r["win"] else "tab:gray"
            ax.errorbar(r["ratio"], i, xerr=[[r["ratio"] - r["low"]], [r["high"] - r["ratio"]]], fmt="o", color=color)
            for w in r["faster_but_wrong"]:
                if w.get("ratio"):
                    ax.plot(w["ratio"], i, "x", color="tab:red")
        ax.axvline(1.0, color="black", lw=0.8)
        ax.axvline(0.98, color="tab:green", lw=0.8, ls="--")
        ax.set_yticks(range(len(rows)), [r["module"] for r in rows])
        ax.set_xlabel("time / XLA's default (95% CI); green: confirmed win; red x: faster but wrong (search sample)")
        ax.set_title(f"Compiler options and pass order, measured on the CPU (jax {data.get('jax', '?')})")
        save_figure(fig, path)

    return draw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three modules, fewer trials (a smoke run)")
    parser.add_argument("--stage", choices=("all", "search", "aa", "race", "hook", "effect", "claim"), default="all")
    parser.add_argument("--from", dest="sources", nargs="+", metavar="JSON", default=[],
                        help="--stage effect or claim: the answers of these earlier runs' options.json (later ones "
                             "win)")
    parser.add_argument("--instances", type=int, default=INSTANCES,
                        help="--stage effect: independent A/B measurements per answer (and as many A/A)")
    parser.add_argument("--strategy", default="random")
    parser.add_argument("--budget", type=int, default=100)
    parser.add_argument("--race-budget", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-ms", type=float, default=2000.0, help="leave out modules slower than this per step")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--modules", nargs="+", metavar="STEM",
                        help="only these of the modules (file stems, e.g. xla_resnet50_keras_jax)")
    args = parser.parse_args()
    out = Path(args.out)
    stem = "options-quick" if args.quick else "options"
    previous = out / f"{stem}.json"
    data = json.loads(previous.read_text()) if previous.exists() and args.stage != "all" else {}
    data.pop("provenance", None)
    modules = MODULES[:3] if args.quick else MODULES
    if args.modules:
        unknown = set(args.modules) - {Path(m).stem for m in MODULES}
        if unknown:
            parser.error(f"not a module of this bench: {', '.join(sorted(unknown))}")
        modules = [m for m in MODULES if Path(m).stem in args.modules]
    if args.stage in ("effect", "claim") and not args.sources and not data.get("search"):
        parser.error(f"--stage {args.stage} needs answers: --from an earlier run's options.json, or a search in --out")
    if args.instances < 3:
        parser.error(f"--instances must be at least 3 (a t interval over them), not {args.instances}")
    sources = [json.loads(Path(f).read_text()) for f in args.sources]
    import jax

    data.update(command=COMMAND, jax=jax.__version__, strategy=args.strategy, budget=args.budget, seed=args.seed)
    with tempfile.TemporaryDirectory(prefix="autotune-bench-options-") as tmp:
        tmp = Path(tmp)
        # the effect and claim stages time the answers of modules already searched: no probe of every step
        timed = step_times(tmp, modules) if args.stage not in ("effect", "claim") else {}
        if timed:
            data["step_ms"] = {Path(p).stem: ms for p, ms in timed.items()}
        runnable = [p for p in modules if timed.get(p, 0.0) <= args.max_ms]
        for stage, run in (("search", lambda: search_stage(tmp, modules, timed, args)),
                           ("aa", lambda: aa_stage(tmp, runnable, args.quick)),
                           ("race", lambda: race_stage(tmp, args)),
                           ("hook", lambda: hook_experiment(tmp, quick=args.quick)),
                           ("effect", lambda: effect_of(tmp, sources or [data], args.instances)),
                           ("claim", lambda: claims_of(tmp, sources or [data]))):
            if args.stage in ("all", stage):
                before, t0 = load_now(), time.perf_counter()
                data[stage] = run()
                data.setdefault("stages", {})[stage] = {"seconds": time.perf_counter() - t0, "load_before": before,
                                                        "load_after": load_now()}
    if data.get("effect"):
        data["effect_from"] = [rel(Path(f)) for f in args.sources] or ["this run's search"]
        searched = merged_rows(sources or [data])
        data["effect_summary"] = effect_summary(data["effect"], sum(not r.get("skipped") for r in searched))
    if data.get("claim"):
        data["claim_from"] = [rel(Path(f)) for f in args.sources] or ["this run's search"]
        data["claim_summary"] = claim_summary(data["claim"])
    aa = data.get("aa") or []
    data["aa_false_wins"], data["aa_trials"] = sum(r["win"] for r in aa), len(aa)
    data["aa_upper"] = binomial_upper(data["aa_false_wins"], len(aa)) if aa else None
    write(out, stem, data, markdown(data, rel), Provenance.now(), plot=plot(data))
    log(f"wrote {out / (stem + '.md')}")


if __name__ == "__main__":
    main()
