"""results/realscale.md from its JSON."""

from __future__ import annotations




#: The parts of a step that are the engine's own work (not XLA's import or pipeline).
ENGINE_PARTS = ("parse_ms", "fingerprint_ms", "metrics_ms", "cost_analysis_ms", "transfer_ms")

PART_COLUMNS = (("import_ms", "XLA import floor"), ("pipeline_floor_ms", "HLO-pipeline floor (all passes off)"),
                ("capture_cse_ms", "capture, cse"), ("hlo_to_mlir_ms", "HLO->MLIR"), ("parse_ms", "parse"),
                ("fingerprint_ms", "fingerprint"), ("metrics_ms", "metrics"), ("cost_analysis_ms", "cost analysis"),
                ("transfer_ms", "transfer"))


def _parts_table(rows: dict) -> list[str]:
    lines = ["| module | instructions | " + " | ".join(t for _, t in PART_COLUMNS) + " |",
             "|---|---:|" + "---:|" * len(PART_COLUMNS)]
    for name, m in rows.items():
        p = m["parts"]
        lines.append(f"| {name} | {p['instructions']} | " + " | ".join(f"{p[k]:.1f}" for k, _ in PART_COLUMNS) + " |")
    return lines


def _timing_table(rows: dict) -> list[str]:
    lines = ["| module | instructions | proto (MiB) | load (ms) | normalise (ms) | uncached step median / p90 (ms) "
             "| in-worker part (ms) | cache hit (ms) |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, m in rows.items():
        lines.append(f"| {name} | {m['instructions']} | {m['proto_bytes'] / 2**20:.2f} | {m['load_ms']:.0f} "
                     f"| {m['normalise_ms']:.0f} | {m['uncached_ms']['median']:.1f} / {m['uncached_ms']['p90']:.1f} "
                     f"| {m['worker_step_ms']['median']:.1f} | {m['cache_hit_ms']['median']:.3f} |")
    return lines


def render(r: dict) -> str:
    c = r["constants"]
    lines = ["# Real-scale tuning cost", "",
             f"Made by `{r['command']}` on {r['machine']['cpus']} CPUs, Python {r['machine']['python']}, "
             f"{r['machine']['platform']} ({r['seconds']:.0f} s). Medians over repetitions; every figure is in "
             "`realscale.json`. Nothing here executes a module: these modules cannot run on this machine.", "",
             "## (a) Weights baked in as constants vs the same weights as parameters", "",
             "`bench/realscale_models.py: embedded_weights`: `jnp.tanh(table[ids] @ matrix).sum(-1)` with a "
             "bf16[56945,50] table and a bf16[50,128] matrix, lowered once closing over the arrays (printed "
             "with all constants) and once taking them as parameters.", "",
             *_timing_table({k: c[k] for k in ("parameters", "constants")}), "",
             f"**Uncached step, constants / parameters: {c['step_ratio']:.2f}x** (goal <= 1.5x). "
             f"XLA's own import of the module alone is {c['import_floor_ratio']:.1f}x "
             f"({c['constants']['parts']['import_ms']:.1f} ms vs {c['parameters']['parts']['import_ms']:.1f} ms): "
             "MLIR -> HLO converts every constant element into a literal on every compile, and jaxlib 0.10.2 "
             "offers no other way in; XLA's pipeline with every pass disabled costs "
             f"{c['constants']['parts']['pipeline_floor_ms']:.1f} ms vs {c['parameters']['parts']['pipeline_floor_ms']:.1f} ms. "
             "The engine's own work per step (parsing the captured module, fingerprint, metrics, cost analysis, "
             f"transfer) is {c['engine_ms']['constants']:.1f} ms with constants and {c['engine_ms']['parameters']:.1f} ms "
             "with parameters (table below; before this change the fingerprint alone printed all the data, "
             "`results/realscale-before-after.md`). Measured against XLA's own pipeline floor, an uncached step "
             f"costs {c['constants']['uncached_ms']['median'] / c['constants']['parts']['pipeline_floor_ms']:.2f}x "
             f"that floor with constants and "
             f"{c['parameters']['uncached_ms']['median'] / c['parameters']['parts']['pipeline_floor_ms']:.2f}x with "
             "parameters: the 1.5x goal holds for everything above XLA, and cannot hold for the total while "
             "XLA's import alone differs by the factor above.", "",
             *_parts_table({k: c[k] for k in ("parameters", "constants")}), "",
             "## (b) Step cost against instruction count (LLaMA-like training steps from abstract shapes)", "",
             "`bench/realscale_models.py: llama_train_step(layers)`: RMSNorm, causal attention, SwiGLU MLP, "
             "cross-entropy, gradients and an SGD update, batch 8 x 4096 tokens, d_model 4096, layers unrolled; "
             "lowered from `jax.ShapeDtypeStruct`s (its inputs need tens of GiB; nothing is allocated).", "",
             *_timing_table(r["scale"]), "", "Where the time of one step goes (in-process, warm client, ms):", "",
             *_parts_table(r["scale"]), ""]
    sizes = list(r["scale"])
    if sizes:
        first, last = r["scale"][sizes[0]], r["scale"][sizes[-1]]
        growth = (last["uncached_ms"]["median"] / first["uncached_ms"]["median"]) / (
            last["instructions"] / first["instructions"])
        def frac(m, keys):
            p = m["parts"]
            total = p["capture_cse_ms"] + p["hlo_to_mlir_ms"] + sum(p[k] for k in ENGINE_PARTS)
            return sum(p[k] for k in keys) / total

        def span(keys):
            v = [frac(m, keys) for m in r["scale"].values()]
            return f"{min(v):.0%}-{max(v):.0%}"

        lines += [f"From {first['instructions']} to {last['instructions']} instructions the uncached step grows "
                  f"{growth:.2f}x as fast as the instruction count (1.0 = linear). Of one changed step measured "
                  "in-process (capture compile with cse + HLO->MLIR + the engine's parts), XLA's import alone is "
                  f"{span(['import_ms'])} at these sizes, the whole capture compile {span(['capture_cse_ms'])}, "
                  f"HLO->MLIR of the result {span(['hlo_to_mlir_ms'])}, and the engine's own work (parse, "
                  f"fingerprint, metrics, cost analysis, transfer) {span(list(ENGINE_PARTS))}.", ""]
    if r.get("real_llms"):
        lines += ["## (c) The three LLM modules of tests/data/real-llm", "", *_timing_table(r["real_llms"]), "",
                  *_parts_table(r["real_llms"]), ""]
    if r.get("cli"):
        lines += ["## (d) Every module through the CLI (no execution)", "",
                  "`autotune baseline MODEL` and `autotune run --strategy random --budget 20 --no-validate MODEL` "
                  "(2 workers, one shared cache). `llama_train_2l_abstract` is a 2-layer step from abstract shapes; "
                  "`llama_train_1l_scores_2tib` has batch 1024, so its attention scores are f32[1024,32,4096,4096] "
                  "(2 TiB for one array).", "",
                  "| module | baseline exit | s | run exit | s | input -> default -> best (final-ops) | validation level | note |",
                  "|---|---:|---:|---:|---:|---|---|---|"]
        for row in r["cli"]:
            note = row.get("baseline_error") or row.get("run_error") or ""
            counts = (f"{row.get('input_instructions')} -> {row.get('default_cost'):.0f} -> {row.get('best_cost'):.0f}"
                      if row.get("default_cost") is not None and row.get("best_cost") is not None else "")
            lines.append(f"| {row['module']} | {row['baseline_rc']} | {row['baseline_s']} | {row['run_rc']} "
                         f"| {row['run_s']} | {counts} | {row.get('validation_level') or ''} | {note} |")
        lines.append("")
    return "\n".join(lines) + "\n"
