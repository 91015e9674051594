"""The report's Markdown (``learning.md``) and its verdicts."""

from __future__ import annotations

import json
import os
import statistics

from learn.common import ABLATION_REWARD, BRANCHES, BRANCH_BUDGET, ENSEMBLE_DRAWS, MAX_LENGTH, METHODS, RANDOM_SEEDS, REWARD, SEARCH_MAX_LENGTH


def fmt_value(x, fmt="{:.0%}") -> str:
    return "n/a" if x is None else fmt.format(x)


def markdown(data: dict) -> str:
    p, tr, fl, s = data["params"], data["train"], data["fleet"], data["summary"]
    sel = data.get("select") or {}
    lines = [
        "# Zero-shot pass ordering on LLM steps: one policy roll-out against default, random, fixed and search", "",
        f"Made by `{data['command']}` on {os.cpu_count()} shared CPUs with `{data['version']}`"
        + (" (**--quick**: fewer modules, fewer training steps, and a per-module search at budget "
           f"{p['search_budget']} instead of 200 as the ceiling)" if data["quick"] else "") + ". "
        + (f"The same command retrains the shipped policy (`{data.get('policy')}` + sidecar): the shipped one is "
           "the policy of this run" + (" (--quick); `python bench/learning.py` trains at the full scale (120 modules, "
                                       "4096 PPO steps, search budget 200)" if data["quick"] else "")
           if data.get("shipped", True) else
           f"The policy of this run was written to `{data.get('policy')}`, NOT shipped (`autotune/policies/llm.zip` "
           "is another run's, see results/learning.md)") + ". Stages (`--stage train|select|fleet|eval|seeds|report`) can "
        f"run as separate commands; results are kept under `{data.get('work', '.autotune/learning/')}`.", "",
        "## Setup", "",
        f"* **Policy** (trained once, on {len(tr['train_modules'])} modules of the `llm` family's train split, "
        "stratified over kind x scan/unrolled x dense/MoE), in three steps: (1) *demonstrations*: the passes whose "
        f"single application lowers final-ops on {p['probe_modules'] or 'all'} of the modules (all 57 tried: "
        f"`{','.join(tr['candidates'])}`), then per-module beam search (width {tr.get('beam', 1)}) over those up to "
        f"{tr['max_length']} passes, labelled with the shortest sequence reaching the lowest final-ops "
        f"({tr['demo_seconds']:.0f} s, {tr['demo_steps']} compiled steps); (2) *imitation*: a fresh PPO network's "
        f"policy fitted to the {tr['imitation']['samples']} (observation, next pass or STOP) pairs of those winners "
        f"(cross-entropy; {tr['imitation']['train_accuracy']:.0%} fitted) - the `imitation` column; (3) *PPO* from "
        f"those weights, {tr['timesteps']} environment steps ({tr['episodes']} episodes) with {tr['envs']} "
        f"environments in parallel in {tr['learn_seconds']:.0f} s ({tr['steps_per_second']:.1f} steps/s), "
        f"max_length {tr['max_length']}, "
        + ("reward = the best-so-far final-ops reduction over the module's known gain (the beam search's; "
           "`reward=best`, so a return is the fraction of that gain recovered; no shaping), "
           if tr.get("reward") == "best" else
           "reward = final-ops reduction relative to the episode's start (no shaping), ")
        + f"hyperparameters {json.dumps(tr['hyperparameters'])} - the `ppo` column; (4) *selection* on "
        f"{sel.get('modules', '?')} held-out modules of the TRAIN split (never the test split or the shared modules; "
        "expert: the same beam search), pooled fraction of the expert's gain (mean of per-module fractions): "
        + ", ".join(f"{k} {v:.0%} ({(sel.get('mean_fractions') or {}).get(k, float('nan')):.0%})"
                    for k, v in (sel.get("scores") or {}).items())
        + f" - the shipped policy is **{sel.get('chosen', '?')}** (the `policy` column, `autotune/policies/llm.zip`); "
        f"`ppo-N` trained N steps with the reward `{REWARD}`, `ppo-N-{ABLATION_REWARD}` with the reward "
        f"`{ABLATION_REWARD}` (final-ops change relative to the module's size, the ablation). "
        "PPO alone from a fresh network learned nothing in a first try at the same "
        "budget (its deterministic roll-out repeated one pass that changes nothing), hence the imitation start. "
        "Observation: `autotune/rl/observation.py` (opcode histogram of the module and of its loop bodies, CSE "
        "candidates, layout/convert/broadcast chains, cost ratios, the episode's progress (best gain so far, "
        "current detour), action history; every feature named).",
        f"* **Policy**: `autotune run --strategy ppo --budget {MAX_LENGTH} --max-length {MAX_LENGTH} -O finetune=false` "
        "with the shipped policy: ONE deterministic episode (at most 4 evaluations), then the run's answer pruned "
        "as every run prunes it (one backward sweep dropping each pass whose removal does not worsen final-ops; at "
        "most one evaluation per pass, its compiles counted). **roll-out**: the same with `--no-prune`, the bare "
        "episode the issue's goal names. The `imitation` and `ppo` columns are pruned like `policy`.",
        f"* **Fixed sequence**: `greedy` fleet run (budget {fl['budget']} fleet evaluations, max length {MAX_LENGTH}) "
        f"on {len(fl['modules'])} of the policy's training modules: `{','.join(fl['sequence']) or '(none)'}` "
        f"(mean change on them {fl['cost'] - 1:+.2%}; {fl['seconds']:.0f} s).",
        f"* **Search (ceiling)**: `random` at budget {p['search_budget']}, max length {SEARCH_MAX_LENGTH}, per module.",
        "* **random@evals / random@steps**: random search (max length 4) with as many evaluations as the policy's "
        f"roll-out, or until as many compiled steps as the `policy` column (its prune included); mean over "
        f"{RANDOM_SEEDS} seeds, each on its own cold cache. At a handful of steps both get one to three evaluations "
        "and, drawing from the same seeded generator, mostly the same sequences, so the two columns nearly "
        "coincide. **random@4xsteps**: the same with four times the policy's compiled steps (what random search "
        "gets with the budget the goal allows it: the policy should need at most a quarter of random search's "
        "steps for the same result).",
        f"* **Modules**: {s['groups']['test']['modules']} of the test split (stratified; model configurations never "
        "seen in training) and the three LLM steps of `tests/data/real-llm` (zero-shot, never trained on).",
        "* Every method keeps XLA's default when nothing it evaluated beat it, and its best sequence is pruned as "
        "`autotune run` prunes it (all but `roll-out`; random@steps gets the policy's steps, prune included, and "
        "then prunes its own best); each ran on its own cold cache. "
        "Steps: compiles the run made (pass steps + the default pipeline after each new state, the default's own "
        "included). Gain: default final-ops minus the method's. A fraction above 100% means a method beat the "
        "search on that module (the ceiling is a search at a finite budget, not an optimum).",
        "* **Evidence level**: final-ops counted after compiling each sequence and XLA's default pipeline; no "
        "result here is executed (every method runs with validation off, so all are at the `compiled` level; "
        "`autotune run` validates what it returns, e.g. the shipped policy's LLaMA-3 win is `executed-region`). "
        f"One training run per seed, one roll-out per module, one run per method (random: {RANDOM_SEEDS} seeds), "
        "on a shared machine.", "",
        "## Fraction of the ceiling's gain recovered (modules where the search beat the default)", "",
        "| modules | with headroom | " + " | ".join(METHODS) + " |", "|---|---:|" + "---:|" * len(METHODS)]
    for label in ("test", "shared", "all"):
        g = s["groups"][label]
        lines.append(f"| {label} | {g['with_headroom']}/{g['modules']} | "
                     + " | ".join(f"{fmt_value(g[m]['mean_fraction'])} ({fmt_value(g[m]['pooled_fraction'])})" for m in METHODS)
                     + " |")
    lines += ["", "Mean of per-module fractions (in brackets: pooled, total gain over total ceiling gain).", "",
              "## Cost of each method (mean per module)", "",
              "| modules | " + " | ".join(f"{m} steps / s" for m in METHODS) + " | beats default (" + ", ".join(METHODS)
              + ") | worse than default |", "|---|" + "---:|" * len(METHODS) + "---|---|"]
    for label in ("test", "shared", "all"):
        g = s["groups"][label]
        lines.append(f"| {label} | " + " | ".join(
            f"{fmt_value(g[m]['mean_steps'], '{:.1f}')} / {fmt_value(g[m]['mean_seconds'], '{:.1f}')}" for m in METHODS)
            + " | " + ", ".join(str(g[m]["beats_default"]) for m in METHODS)
            + " | " + ", ".join(str(g[m]["worse_than_default"]) for m in METHODS) + " |")
    g = s["groups"]["all"]
    pv = g["policy_vs_fixed"]
    lines += ["", "## Verdict", "", data["verdict"], "",
              f"Policy against the fixed sequence, module by module (all {g['modules']}): better on {pv['better']}, "
              f"the same on {pv['same']}, worse on {pv['worse']}.", ""]
    spread = data.get("seeds") or {}
    if len(spread) > 1:
        lines += ["## Training seeds", "",
                  "The selected variant trained with each PPO seed (the same imitation start; only PPO's own "
                  "randomness differs: a lower bound on the spread a retraining brings, since two trainings of one "
                  "seed in two work directories gave different weights, see `stage_seeds`). The selection stage "
                  "ships the seed with the highest pooled fraction on its held-out train-split modules "
                  "(`validation`, the same roll-outs as the variant selection); each seed is rolled out once on the "
                  "test and shared modules against the same ceiling (`--stage seeds`):", "",
                  "| PPO seed | validation: mean (pooled) | test: mean (pooled) | shared: mean (pooled) | "
                  "steps per module (test) |", "|---|---:|---:|---:|---:|"]
        for seed, groups in sorted(spread.items(), key=lambda kv: int(kv[0])):
            t, sh, v = groups.get("test") or {}, groups.get("shared") or {}, groups.get("validation") or {}
            lines.append(f"| {seed}{' (shipped)' if groups.get('shipped') else ''} | "
                         f"{fmt_value(v.get('mean_fraction'))} ({fmt_value(v.get('pooled_fraction'))}) | "
                         f"{fmt_value(t.get('mean_fraction'))} ({fmt_value(t.get('pooled_fraction'))}) | "
                         f"{fmt_value(sh.get('mean_fraction'))} ({fmt_value(sh.get('pooled_fraction'))}) | "
                         f"{fmt_value(t.get('mean_steps'), '{:.1f}')} |")
        lines.append("")
    ens = data.get("ensembles") or {}
    if any(k.startswith("ensemble") for k in ens):
        lines += ["## Ensembles of seeds", "",
                  "The same variant trained with PPO seeds 0 to 8, each rolled out alone, and three disjoint "
                  "ensembles of three seeds (the mean of the members' action probabilities, then the most likely "
                  "pass: `--policy a.zip,b.zip,c.zip`), each rolled out once, and the same draws as committees "
                  "(`-O ensemble=each --budget 12`: each member's roll-out, the best answer pruned), and each seed "
                  "alone with `-O branches` (its roll-out and its next most likely first passes, each continued), "
                  "on the same modules against the same ceiling (`--stage ensemble`):", "",
                  "| policy | test: mean (pooled) | shared: mean (pooled) | steps per module (test / shared) |",
                  "|---|---:|---:|---:|"]
        b, bb = data.get("branch_params") or (BRANCHES, BRANCH_BUDGET)
        for tag, groups in ens.items():
            t, sh = groups.get("test") or {}, groups.get("shared") or {}
            kind = next((k for k in ("ensemble", "committee", "branches") if tag.startswith(k)), "seed")
            name = (f"seed {tag[len(kind):]}" if kind == "seed" else
                    f"seed {tag[len(kind):]}, `-O branches={b} --budget {bb}`" if kind == "branches" else
                    f"{kind} of seeds " + tag[len(kind):].replace("-", ", "))
            lines.append(f"| {name} | {fmt_value(t.get('mean_fraction'))} ({fmt_value(t.get('pooled_fraction'))}) | "
                         f"{fmt_value(sh.get('mean_fraction'))} ({fmt_value(sh.get('pooled_fraction'))}) | "
                         f"{fmt_value(t.get('mean_steps'), '{:.1f}')} / {fmt_value(sh.get('mean_steps'), '{:.1f}')} |")
        lines += ["", ensemble_verdict(ens), ""]
        val = (data.get("seed_validation") or {}).get("scores") or {}
        if val:
            lines += ["What the benchmark ships instead, a seed chosen on held-out train-split modules, for each draw "
                      "of three seeds (the validation's pooled fraction of the expert's gain, then the chosen seed's "
                      "figures from the table above):", "",
                      "| draw | validation (pooled) of each seed | chosen | test: mean | shared: mean |",
                      "|---|---|---:|---:|---:|"]
            picked = []
            for draw in ENSEMBLE_DRAWS:
                pick = max(draw, key=lambda k: (round(val.get(str(k), 0.0), 6), -k))
                t = (ens.get(f"seed{pick}") or {}).get("test") or {}
                sh = (ens.get(f"seed{pick}") or {}).get("shared") or {}
                picked.append((t.get("mean_fraction"), sh.get("mean_fraction"),
                               max(val.get(str(k), 0.0) for k in draw) - sorted(val.get(str(k), 0.0) for k in draw)[-2]))
                lines.append(f"| {', '.join(map(str, draw))} | " + ", ".join(f"{k}: {fmt_value(val.get(str(k)))}" for k in draw)
                             + f" | {pick} | {fmt_value(t.get('mean_fraction'))} | {fmt_value(sh.get('mean_fraction'))} |")
            tests = [p[0] for p in picked if p[0] is not None]
            shared = [p[1] for p in picked if p[1] is not None]
            close = sum(p[2] < 0.01 for p in picked)
            if tests and shared:
                lines += ["", f"The chosen seeds recover {min(tests):.0%} to {max(tests):.0%} on the test split and "
                              f"{min(shared):.0%} to {max(shared):.0%} on the real LLM steps across the "
                              f"{len(picked)} draws"
                          + (f"; in {close} draw(s) the best validation score leads the next by less than one "
                             "point, so that choice is close to a toss between its seeds" if close else "") + "."]
            lines.append("")
    lines += ["Disclosure: every method's answer was brought under the prune (and the bare episode kept as the "
              "`roll-out` column) after a round in which the policy's DeepSeek-V2 roll-out "
              "(`algsimp,cse,dot_decomposer`, 1092) was seen to be one dropped pass from the search's answer "
              "(1087), which `autotune run` already returned; the prune is what every run and the JAX hook do, "
              "and every column here gets it, the ceiling included.", ""]
    earlier = data.get("earlier_test")
    if earlier:
        lines += [f"Disclosure: in earlier rounds the --quick test sample was the first {earlier['modules']} of the "
                  f"test sample (and the selection set 24 modules); both were doubled after seeing a shipped policy's "
                  f"result on those {earlier['modules']}, to cut the noise of a 12-module mean. On the first "
                  f"{earlier['modules']} of this run's sample (other modules since the family gained latent "
                  f"attention) this run's shipped policy recovers {fmt_value(earlier['mean_fraction'])} "
                  f"({fmt_value(earlier['pooled_fraction'])} pooled).", ""]
    lines += ["## Per module (final-ops; the sequence each method returned)", "",
              "| module | split | default | " + " | ".join(METHODS) + " |", "|---|---|---:|" + "---|" * len(METHODS)]
    for e in s["per_module"]:
        cells = []
        for m in METHODS:
            r = e[m]
            cost = f"{r['cost']:.0f}" if float(r["cost"]).is_integer() else f"{r['cost']:.1f}"
            cells.append(f"{cost} `{','.join(r['sequence']) or '-'}` ({r['steps']:.0f} st)")
        lines.append(f"| {e['module']} | {e['split']} | {e['default']:.0f} | " + " | ".join(cells) + " |")
    lines += ["", "![fraction of the ceiling and compiled steps per method](learning.png)", ""]
    return "\n".join(lines)


def ensemble_verdict(ens: dict) -> str:
    """Single seeds against ensembles: the range and mean of each on the test split and the shared steps."""
    def span(tags, group):
        vals = [(ens[t].get(group) or {}).get("mean_fraction") for t in tags]
        vals = [v for v in vals if v is not None]
        return (f"{min(vals):.0%} to {max(vals):.0%} (mean {statistics.mean(vals):.0%})" if vals else "n/a"), vals

    singles = [t for t in ens if t.startswith("seed")]
    parts = []
    for group, label in (("test", "test split"), ("shared", "real LLM steps")):
        s_text, s_vals = span(singles, group)
        parts.append(f"on the {label}, single seeds {s_text}")
        for kind, plural in (("ensemble", "ensembles"), ("committee", "committees"), ("branches", "single seeds with branches")):
            e_text, e_vals = span([t for t in ens if t.startswith(kind)], group)
            if not e_vals:
                continue
            parts[-1] += f", {plural} {e_text}"
            if s_vals:
                narrower = (max(e_vals) - min(e_vals)) < 0.5 * (max(s_vals) - min(s_vals))
                parts[-1] += " (narrower)" if narrower else " (not narrower)"
    return ("Mean of per-module fractions, " + "; ".join(parts) + ". An ensemble or committee is worth shipping only "
            "where it narrows the spread: one draw of three seeds must not matter as one seed does. A committee "
            "costs one roll-out per member and branches one per branch (the steps column).")


def goals(groups: list[dict], method: str) -> dict[str, bool]:
    """Issue 18's three goals for ``method`` (``policy`` or ``roll-out``), each on every group given.
    random@4xsteps has four times the (pruned) policy's steps, more than four times the bare roll-out's,
    so for ``roll-out`` that check is stricter than the goal."""
    frac = lambda gr, m: gr[m]["mean_fraction"] or 0  # noqa: E731
    return {
        ">= 90% of the ceiling on average": all(frac(gr, method) >= 0.9 for gr in groups),
        "random search at 4x the policy's compiled steps recovers less (the policy needs at most a quarter of its "
        "steps; random@4xsteps is 4x the pruned policy's steps)": all(frac(gr, "random@4xsteps") < frac(gr, method)
                                                                       for gr in groups),
        "at least as good as the best fixed sequence on average": all(frac(gr, method) >= frac(gr, "fixed")
                                                                       for gr in groups),
    }


def verdict(s: dict) -> str:
    g = s["groups"]["all"]
    pol, bare, fix, re = g["policy"], g["roll-out"], g["fixed"], g["random@steps"]
    parts = []
    if pol["mean_fraction"] is None:
        return "No module had headroom under the search: nothing to compare."
    parts.append(f"The policy's single roll-out, pruned as every run's answer is, recovers {pol['mean_fraction']:.0%} "
                 f"of the ceiling's gain on average ({pol['pooled_fraction']:.0%} pooled) at "
                 f"{pol['mean_steps']:.1f} compiled steps per module (the roll-out alone: {bare['mean_fraction']:.0%} "
                 f"({bare['pooled_fraction']:.0%}) at {bare['mean_steps']:.1f}); "
                 f"the fixed sequence {fix['mean_fraction']:.0%} ({fix['pooled_fraction']:.0%}) at "
                 f"{fix['mean_steps']:.1f}; random search at the same compiled steps {re['mean_fraction']:.0%}, at "
                 f"four times them {g['random@4xsteps']['mean_fraction']:.0%} ({g['random@4xsteps']['mean_steps']:.1f} "
                 f"steps); the search itself costs {g['search']['mean_steps']:.0f} steps.")
    if pol["pooled_fraction"] >= fix["pooled_fraction"] and pol["mean_fraction"] >= fix["mean_fraction"]:
        parts.append("The policy is at least as good as the best fixed sequence on average.")
    else:
        parts.append("**The policy does not beat the best fixed sequence** on average: with this training budget "
                     "a learned ordering is not yet worth more than the fleet's one sequence (a finding, reported as "
                     "measured).")
    sel = s.get("select") or {}
    if sel.get("chosen"):
        parts.append(f"The shipped policy is {sel['chosen']} with PPO seed {sel.get('seed', 0)}, both chosen on "
                     "held-out train-split modules "
                     f"({', '.join(f'{k} {v:.0%}' for k, v in sel['scores'].items())} of the expert's gain, "
                     "pooled); "
                     f"`ppo` (fine-tuned, seed 0) recovers {g['ppo']['mean_fraction']:.0%} here.")
    groups = [s["groups"][k] for k in ("test", "shared")]
    for method, label in (("policy", "the policy as `autotune run` returns it (roll-out, then pruned)"),
                          ("roll-out", "the roll-out alone")):
        parts.append(f"Goals of issue 18 for {label}, each on the test split and on the shared modules: "
                     + "; ".join(f"{name}: {'met' if ok else 'NOT met'}" for name, ok in goals(groups, method).items())
                     + ".")
    spread = s.get("seeds") or {}
    if len(spread) > 1:
        shipped = [k for k, v in spread.items() if v.get("shipped")]
        parts.append("Trained with PPO seeds " + ", ".join(str(k) for k in spread)
                     + f" ({', '.join(map(str, shipped)) or '?'} shipped), the same variant "
                     "recovers " + " / ".join(fmt_value((g.get("test") or {}).get("mean_fraction")) for g in spread.values())
                     + " on the test split and "
                     + " / ".join(fmt_value((g.get("shared") or {}).get("mean_fraction")) for g in spread.values())
                     + " on the shared modules (mean of fractions).")
    tr = s.get("train") or {}
    if tr:
        parts.append(f"Training cost, paid once: {tr['demo_steps']} compiled steps for the demonstrations, then "
                     f"{tr.get('evaluations', 0)} PPO evaluations (mostly cache hits), {tr['wall_seconds'] / 60:.1f} "
                     "min in all. Seconds are wall time on a shared 2-core machine whose load changed between "
                     "methods: compare the compiled steps.")
    return " ".join(parts)
