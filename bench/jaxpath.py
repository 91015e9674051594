"""The jax path as a user takes it, timed by jax in the program's own process: results/jaxpath.md.

Three parts, each against plain ``jax.jit`` on the same machine, side by side:

1. **``autotune.jax.tune``** on the zoo's GPT-2 training step (the configuration of
   examples/gpt2_train_step.hlo) and on examples/jax_tune.py's MLP step (where an options-only win exists
   on this CPU, so that jax times a stored win, not only a kept default): one call tunes it by measured time into a fresh store; then, in this
   process, the function compiled with its store entry (``autotune.jax.compile``: options alone through
   jax's public ``compiler_options``) and compiled plain are timed interleaved by ``time.perf_counter``
   around ``block_until_ready`` (``options_parts.hook.jax_ratio``: calibrated samples, ratio of medians
   and its 95% bootstrap interval), with a plain-against-plain control, and their outputs compared.
2. **``autotune capture`` / ``tune`` / ``exec``** on an unmodified script running the zoo's CNN (ResNet)
   training step: captured, its most-time module tuned into a second store, then the script run plain and
   under ``autotune exec``, alternating, each run timing its own steps; the ratio of the pooled step times
   (the interval is over steps, so it leaves out run-to-run variance: said in the report) and the outputs.
3. **An A/A of the hook**: an empty store under ``autotune.jax.use()``: compile time (alternating compiles,
   jax's caches cleared between) and step time against plain jit, 1.00 within noise expected.

    python bench/jaxpath.py            # budget 12 per tune, greedy over compiler options
    python bench/jaxpath.py --quick    # budget 6, fewer rounds and steps
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import RESULTS, ROOT, Provenance, log, max_rel_diff, write

from options_parts.hook import CONFIG as GPT2_CONFIG, _arrays, jax_ratio

#: The CNN step: big enough that a step is a few milliseconds here, small enough to tune quickly.
CNN_CONFIG = dict(stages=2, blocks=1, width=16, image=32, batch=8)
BUDGET, QUICK_BUDGET = 12, 6
#: The search: ``make demo``'s timed step (greedy over XLA's compiler options: on ResNet-50 the first option
#: it descends already pays), so that a small budget can find an options-only answer (jax's public path).
STRATEGY, SPACE = "greedy", "options"
STEPS, QUICK_STEPS = 200, 60  # steps each run of the script times
RUNS, QUICK_RUNS = 3, 2  # runs of the script, plain and under exec each

PROGRAM = """
import json, sys, time
import jax, numpy as np
from autotune.zoo import ResNetConfig, program

cfg = ResNetConfig(**json.loads(sys.argv[1]))
prog = program("resnet", "train", cfg)
rng = np.random.default_rng(0)
def draw(s):
    if np.issubdtype(s.dtype, np.integer):
        return jax.numpy.asarray(rng.integers(0, 4, s.shape), s.dtype)
    return jax.numpy.asarray(rng.standard_normal(s.shape).astype(np.float32), s.dtype)
args = jax.tree_util.tree_map(draw, prog.args)
step = jax.jit(prog.fn)
t0 = time.perf_counter()
out = jax.block_until_ready(step(*args))
first = time.perf_counter() - t0
samples = []
for _ in range(int(sys.argv[2])):
    t0 = time.perf_counter()
    jax.block_until_ready(step(*args))
    samples.append(time.perf_counter() - t0)
leaves = [np.asarray(x, np.float64) for x in jax.tree_util.tree_leaves(out)]
print("RESULT " + json.dumps({"first": first, "samples": samples, "sums": [float(x.sum()) for x in leaves]}))
"""


def _gpt2_step():
    """(name, fn, arrays): the zoo's GPT-2 training step (examples/gpt2_train_step.hlo's configuration)."""
    from autotune.zoo import GPT2Config, program

    prog = program("gpt2", "train", GPT2Config(**GPT2_CONFIG))
    return f"GPT-2 train step `{prog.name}`", prog.fn, _arrays(prog.args)


def _example_step():
    """(name, fn, arrays): examples/jax_tune.py's plain-jax MLP training step, as the example runs it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("jax_tune_example", ROOT / "examples" / "jax_tune.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return "MLP train step of `examples/jax_tune.py`", example.train_step, list(example.arrays())


#: The programs ``autotune.jax.tune`` is timed on: a zoo step, and the example's step (where an options-only
#: win exists on this CPU: a timing of a stored *win* by jax, not only of a kept default).
TUNE_PROGRAMS = {"gpt2": _gpt2_step, "example": _example_step}


def part_tune(tmp: Path, budget: int, rounds: int, which: str = "gpt2") -> dict:
    import jax

    import autotune.jax as aj
    from autotune.core.store import Store

    name, fn, args = TUNE_PROGRAMS[which]()
    store = Store(tmp / f"store-tune-{which}")
    t0 = time.perf_counter()
    tuned = aj.tune(fn, *args, budget=budget, strategy=STRATEGY, space=SPACE, store=store,
                    cache=tmp / "cache.db", workers=1, progress=False)
    seconds = time.perf_counter() - t0
    log("tune: " + tuned.describe().replace("\n", " | "))
    again = aj.tune(fn, *args, budget=budget, store=store, cache=tmp / "cache.db", workers=1, progress=False)
    plain = jax.jit(fn).lower(*args).compile()
    control = jax.jit(fn).lower(*args).compile()
    compiled, via = aj.compile(fn, *args, store=store, cache=tmp / "cache.db")
    measured = jax_ratio(plain, compiled, args, rounds=rounds)
    aa = jax_ratio(plain, control, args, rounds=rounds)
    m = tuned.record.metrics
    tool = {k: m.get(k) for k in ("ratio", "ratio_low", "ratio_high")}
    return {"module": name, "budget": budget, "seconds": seconds, "describe": tuned.describe(),
            "keeps_default": tuned.keeps_default, "options": tuned.compiler_options, "sequence": list(tuned.sequence),
            "validation": tuned.validation, "tool": tool, "second_call_from_store": again.from_store,
            "applied_via": via, "jax": measured, "jax_control": aa,
            "max_rel_diff": max_rel_diff(plain(*args), compiled(*args))}


def _script_run(script: Path, cfg: dict, steps: int, env: dict, wrap: list[str]) -> dict:
    cmd = wrap + [sys.executable, str(script), json.dumps(cfg), str(steps)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    data = json.loads(line[len("RESULT "):])
    data["said"] = [ln for ln in proc.stderr.splitlines() if ln.startswith("autotune")]
    return data


def part_script(tmp: Path, budget: int, steps: int, runs: int) -> dict:
    import numpy as np

    from autotune.core import stats

    script = tmp / "train_cnn.py"
    script.write_text(PROGRAM)
    autotune = [sys.executable, "-m", "autotune.cli"]
    env = dict(os.environ, AUTOTUNE_STORE=str(tmp / "store-script"), AUTOTUNE_DB=str(tmp / "cache.db"),
               AUTOTUNE_WORKERS="1", JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    t0 = time.perf_counter()
    captured = _script_run(script, CNN_CONFIG, 5, env, autotune + ["capture", "-o", str(tmp / "cap"), "--"])
    capture_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    proc = subprocess.run(autotune + ["tune", str(tmp / "cap"), "--top", "1", "--budget", str(budget),
                                      "--strategy", STRATEGY, "--space", SPACE, "--json"], capture_output=True, text=True, env=env,
                          timeout=1200)
    if proc.returncode != 0:
        raise RuntimeError(f"autotune tune exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    tune_s = time.perf_counter() - t0
    tuned = json.loads(proc.stdout)["modules"]
    log(f"capture/tune: {tuned[0]['answer'] if tuned else 'nothing'}")
    plain, hooked = [], []
    for _ in range(runs):  # alternating processes: plain, exec, plain, exec, ...
        plain.append(_script_run(script, CNN_CONFIG, steps, env, []))
        hooked.append(_script_run(script, CNN_CONFIG, steps, env, autotune + ["exec", "--"]))
    a = [s for r in plain for s in r["samples"]]
    b = [s for r in hooked for s in r["samples"]]
    cmp = stats.time_ratio(a, b)
    per_run = [float(np.median(h["samples"]) / np.median(p["samples"])) for p, h in zip(plain, hooked)]
    sums_p, sums_h = np.asarray(plain[0]["sums"]), np.asarray(hooked[0]["sums"])
    entry = Path(tuned[0]["entry"]) if tuned else None
    record = json.loads(entry.read_text()) if entry and entry.is_file() else {}
    m = record.get("metrics", {})
    return {"config": CNN_CONFIG, "budget": budget, "capture_seconds": capture_s, "tune_seconds": tune_s,
            "captured_said": captured["said"], "tuned": tuned, "exec_said": hooked[0]["said"],
            "options": record.get("compiler_options", {}), "sequence": record.get("sequence", []),
            "tool": {k: m.get(k) for k in ("ratio", "ratio_low", "ratio_high")}, "decision": m.get("decision"),
            "jax": {"ratio": cmp.ratio, "low": cmp.low, "high": cmp.high, "plain_ms": 1e3 * cmp.a.median,
                    "hooked_ms": 1e3 * cmp.b.median, "steps": len(a), "runs": runs, "per_run": per_run},
            "first_call_s": {"plain": [r["first"] for r in plain], "exec": [r["first"] for r in hooked]},
            "max_rel_diff_sums": float(np.max(np.abs(sums_p - sums_h) / (np.abs(sums_p) + 1e-30)))}


def part_aa(tmp: Path, rounds: int, compiles: int) -> dict:
    import jax
    import numpy as np

    import autotune.jax as aj
    from autotune.core import stats
    from autotune.zoo import GPT2Config, program

    prog = program("gpt2", "train", GPT2Config(**GPT2_CONFIG))
    args = _arrays(prog.args)
    empty = tmp / "store-empty"
    plain_c, hooked_c = [], []
    for i in range(compiles):  # alternating, jax's caches cleared: each a full trace + lower + compile
        for kind in (("plain", "hooked") if i % 2 == 0 else ("hooked", "plain")):
            jax.clear_caches()
            t0 = time.perf_counter()
            if kind == "plain":
                jax.block_until_ready(jax.jit(prog.fn)(*args))
                plain_c.append(time.perf_counter() - t0)
            else:
                with aj.use(store=empty, clear_caches=False) as st:
                    jax.block_until_ready(jax.jit(prog.fn)(*args))
                hooked_c.append(time.perf_counter() - t0)
    compile_cmp = stats.time_ratio(plain_c, hooked_c)
    plain = jax.jit(prog.fn).lower(*args).compile()
    with aj.use(store=empty) as st:
        hooked = jax.jit(prog.fn).lower(*args).compile()
    step = jax_ratio(plain, hooked, args, rounds=rounds)
    return {"compile": {"ratio": compile_cmp.ratio, "low": compile_cmp.low, "high": compile_cmp.high,
                        "plain_s": float(np.median(plain_c)), "hooked_s": float(np.median(hooked_c)),
                        "compiles": compiles},
            "step": step, "passed_through": st.passed_through, "seen": len(st.seen)}


def _r(d: dict) -> str:
    if not d or d.get("ratio") is None:
        return "-"
    lo, hi = d.get("low", d.get("ratio_low")), d.get("high", d.get("ratio_high"))
    return f"{d['ratio']:.3f} [{lo:.3f}, {hi:.3f}]"


def _tool(d: dict, kept: bool) -> str:
    """The tool's ratio; for a kept default, its best candidate's (which did not win)."""
    return f"best candidate {_r(d)}, not a win" if kept and d.get("ratio") is not None else _r(d)


def markdown(data: dict) -> str:
    tunes, s, aa = data["tunes"], data["script"], data["aa"]
    t = tunes[0]
    lines = ["# The jax path: tune a function or a script, timed by jax in the program's process", "",
             f"Search: `--objective runtime --strategy {STRATEGY} --space {SPACE}`, budget {t['budget']} per tune{' (--quick)' if data['quick'] else ''}; "
             f"{data['rounds']} interleaved rounds per jax timing; the script {s['jax']['runs']} runs each way.", "",
             "| path | program | answer | tool's ratio | jax's ratio (same process) | plain-vs-plain control | same outputs |",
             "|---|---|---|---|---|---|---|"]

    def answer(keeps, options, sequence):
        if keeps:
            return "keep XLA's default"
        return ", ".join(f"{k}={v}" for k, v in sorted(options.items())) + (f" + {len(sequence)} passes" if sequence else "")

    for t in tunes:
        lines.append(f"| `autotune.jax.tune` (applied via {t['applied_via'] or 'nothing: plain compile'}) | {t['module']} | "
                     f"{answer(t['keeps_default'], t['options'], t['sequence'])} | {_tool(t['tool'], t['keeps_default'])} | "
                     f"{_r(t['jax'])} | {_r(t['jax_control'])} | max rel diff {t['max_rel_diff']:.1e} |")
    keeps = s.get("decision") == "keep-default" or not (s["options"] or s["sequence"])
    lines.append(f"| capture / tune / exec | CNN train step {s['config']} | "
                 f"{answer(keeps, s['options'], s['sequence'])} | {_tool(s['tool'], keeps)} | {_r(s['jax'])} (steps pooled "
                 f"over runs; per run {', '.join(f'{x:.3f}' for x in s['jax']['per_run'])}) | - | "
                 f"max rel diff of output sums {s['max_rel_diff_sums']:.1e} |")
    lines += ["", "## A/A: the hook with an empty store", "",
              f"- compile time (trace + lower + compile, {aa['compile']['compiles']} each, alternating): "
              f"{aa['compile']['hooked_s']:.3f} s vs {aa['compile']['plain_s']:.3f} s plain, ratio {_r(aa['compile'])}",
              f"- step time: ratio {_r(aa['step'])} ({aa['step']['hooked_ms']:.3f} ms vs {aa['step']['plain_ms']:.3f} ms)",
              f"- the hook passed {aa['passed_through']} compile(s) straight through (an empty store: no fingerprint taken)",
              "", "## Reading it", ""]
    for part, d in [(f"tune, {x['module']}", x) for x in tunes] + [("script", s)]:
        tool, jx = d["tool"], d["jax"]
        kept = d.get("keeps_default") if part != "script" else keeps
        if kept:
            lines.append(f"- {part}: the answer keeps XLA's default, so the program compiled the same executable "
                         f"both ways: jax's {jx['ratio']:.3f} is this machine's noise between the two (an A/A), "
                         "not an effect of the answer")
        elif tool.get("ratio") is None or tool.get("ratio_low") is None:
            lines.append(f"- {part}: no confirmed claim to compare")
        elif tool["ratio_low"] <= jx["ratio"] <= tool["ratio_high"]:
            lines.append(f"- {part}: jax's ratio lies inside the tool's interval")
        else:
            off = jx["ratio"] - (tool["ratio_low"] if jx["ratio"] < tool["ratio_low"] else tool["ratio_high"])
            lines.append(f"- {part}: jax's ratio lies {abs(off):.3f} {'below' if off < 0 else 'above'} the tool's "
                         "interval (the tool times the module in its worker; jax times dispatch and the whole "
                         "step in the program, on a machine shared with other work)")
    if data.get("load"):
        lines += ["", f"Load average (1 min) at the start and end: {data['load'][0]:.1f} -> {data['load'][1]:.1f} on "
                  f"{os.cpu_count()} cores (the machine was shared with other work: the control rows show the noise "
                  "that left)."]
    if data.get("note"):
        lines += ["", data["note"]]
    lines += ["", f"Seconds: tune {', '.join(str(round(x['seconds'])) for x in tunes)}, capture {s['capture_seconds']:.0f}, tune DIR {s['tune_seconds']:.0f}.",
              "The script's interval pools steps across runs and leaves out run-to-run variance; the per-run ratios show it."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="budget 6, fewer rounds and steps")
    ap.add_argument("--out", type=Path, default=RESULTS)
    opts = ap.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # no CUDA plugin probing in this process
    prov = Provenance.now(target="cpu")
    budget = QUICK_BUDGET if opts.quick else BUDGET
    rounds = 20 if opts.quick else 40
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="jaxpath-") as tmp:
        tmp = Path(tmp)
        tunes = []
        for which in TUNE_PROGRAMS:
            log(f"part 1: autotune.jax.tune on {which}")
            tunes.append(part_tune(tmp, budget, rounds, which))
        log("part 2: capture / tune / exec on the CNN script")
        script = part_script(tmp, budget, QUICK_STEPS if opts.quick else STEPS, QUICK_RUNS if opts.quick else RUNS)
        log("part 3: the hook's A/A with an empty store")
        aa = part_aa(tmp, rounds, 4 if opts.quick else 8)
    load.append(os.getloadavg()[0])
    data = {"quick": opts.quick, "rounds": rounds, "tunes": tunes, "script": script, "aa": aa, "load": load}
    path = write(opts.out, "jaxpath", data, markdown(data), prov)
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
