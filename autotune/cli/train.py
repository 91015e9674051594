"""``autotune train``: train one pass-ordering policy (PPO, A2C or DQN) over many modules."""

from __future__ import annotations

from pathlib import Path

import click

from autotune.errors import BadInput
from autotune.cli import cli
from autotune.core.spec import DEFAULT_MAX_LENGTH
from autotune.cli.common import check_writable, console, db_option, json_option, load_model, module_paths, parse_options, print_json, workers_option, executor_option


@cli.command()
@click.argument("more", nargs=-1, type=click.Path(), metavar="[MODULES]...")
@click.option("--strategy", "-s", "algo", type=click.Choice(["ppo", "a2c", "dqn"]), default="ppo", show_default=True,
              help="Learning algorithm (stable-baselines3).")
@click.option("--modules", "-m", multiple=True, type=click.Path(),
              help="A directory of .hlo modules or a module file (repeatable; more can follow as arguments).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True,
              help="Policy file to write (.zip; its sidecar is written as <output>.json).")
@click.option("--split", type=click.Choice(["train", "test"]), default=None,
              help="For a suite directory: only the modules of this side of its train/test split.")
@click.option("--timesteps", type=int, default=2048, show_default=True,
              help="Environment steps (each appended pass is one evaluation, cache hits included).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--shaping", is_flag=True, help="Potential-based reward shaping from flops/transcendentals.")
@click.option("--max-length", type=int, default=DEFAULT_MAX_LENGTH, show_default=True, help="Longest pass sequence (episode length).")
@click.option("--objective", default="final-ops", show_default=True,
              help="final-ops | ops | cost | runtime (see `autotune run`).")
@click.option("--option", "-O", "extra", multiple=True, help="Hyperparameter key=value (repeatable), e.g. n_steps=64; reward=best pays each step "
                   "what it lowers the episode's best cost (see autotune.rl.env).")
@click.option("--envs", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Environments stepped in parallel (subprocesses, one compiler worker each, one shared cache); "
                   "PPO/A2C collect n_steps per env per rollout.")
@click.option("--init", "init", default=None, metavar="POLICY",
              help="Start from this policy's weights (a .zip, or the NAME of a shipped policy such as llm) instead "
                   "of a fresh network: fine-tune it on these modules and this XLA. A policy trained on another "
                   "jaxlib is re-laid by pass and opcode name (passes it never saw start unlikely).")
@db_option
@workers_option
@executor_option
@json_option
def train(more, algo, modules, output, split, timesteps, seed, shaping, max_length, objective, extra, envs, init, db,
          workers, as_json) -> None:
    """Train one policy over MODULES, for zero-shot use with `autotune run --strategy ppo --policy`.

    The policy file (.zip) gets a sidecar (<output>.json) recording the pipeline version, the
    observation's feature names and the training set; `--policy` takes such a file or the NAME of
    a policy shipped in autotune/policies/ (`autotune run --strategy ppo MODEL` without --policy
    uses the shipped `llm` policy when there is one).

    \b
    Retraining the shipped policy `llm`: the benchmark that trains it and measures it zero-shot
    (its --help says where it writes the policy; a shipped policy is autotune/policies/NAME.zip
    plus its sidecar NAME.zip.json):
      python bench/learning.py
    or by hand, on the LLM family's train split:
      autotune suite generate --family llm suite/
      autotune train --modules suite/ --split train --envs 2 -O reward=best -o autotune/policies/llm.zip
    (the benchmark also starts PPO from an imitation of beam-search winners and scales the
    best-so-far reward by each module's beam-search gain; by hand, reward=best pays the relative
    reduction of the episode's best state.)

    A committee, which does not hang on one PPO seed's luck: train seeds into one directory
    (`--seed 0 -o mine/seed0.zip`, `--seed 1 -o mine/seed1.zip`, ...), then
    `autotune run --strategy ppo --policy mine/ --budget 12` rolls out each and keeps the best
    (the shipped one is `--policy llm-committee`).
    """
    from autotune.cli.common import engine_choices, open_engine
    from autotune.rl.train import check_training, train_policy, zip_path_of

    if envs > 1 and (engine_choices().get("executor") or "local") != "local":
        raise BadInput("--envs > 1 runs its envs as local subprocesses; it does not combine with --executor ray yet")
    paths = module_paths([*modules, *more], split)
    if not paths:
        raise BadInput("give modules to train on (--modules DIR_OR_FILE ...)")
    options = parse_options(extra)
    check_training(algo, timesteps, max_length, objective, options)
    out = zip_path_of(Path(output))
    check_writable(out)
    start = _initial_policy(init, algo) if init is not None else None
    loaded = [load_model(str(p)) for p in paths]  # BadInput names the bad file
    observer = None
    if not as_json:
        from autotune.reporting.progress import RichObserver

        observer = RichObserver()
    sources = sorted({str(Path(v)) for v in (*modules, *more)})
    training_set = {"sources": sources, "split": split, "files": [p.name for p in paths]}
    # With --envs > 1 every env subprocess opens its own engine (one worker); this one only normalises.
    with open_engine(db, workers=1 if envs > 1 else workers) as ev:
        stats = train_policy(ev, loaded, out, timesteps=timesteps, seed=seed, shaping=shaping, objective=objective,
                             algo=algo, max_length=max_length, observer=observer, options=options, envs=envs,
                             training_set=training_set, init=start)
    if as_json:
        print_json(stats)
        return
    from rich.table import Table

    table = Table(title=f"{algo} policy: {stats['timesteps']} steps, {stats['episodes']} episodes, "
                        f"{stats['seconds']:.1f}s" + (", shaped" if shaping else "")
                        + (f", {envs} envs ({stats['steps_per_second']:.1f} steps/s)" if envs > 1 else ""))
    for col in ("module", "episodes", f"start {objective}", "best found", "best sequence"):
        table.add_column(col, justify="left" if col in ("module", "best sequence") else "right")
    for m in stats["modules"]:
        best = m["best_cost"]
        table.add_row(m["name"], str(m["episodes"]), f"{m['start_cost']:g}" if m["start_cost"] is not None else "-",
                      f"{best:g}" if best is not None else "-", ",".join(m["best_sequence"]) or "(none)")
    console().print(table)
    if stats.get("relaid_note"):
        click.echo(stats["relaid_note"])
    ret = stats["mean_return_last20"]
    click.echo(f"wrote {stats['policy']} and {Path(stats['sidecar']).name}"
               + (f"; mean return of the last 20 episodes {ret:+.4f}" if ret is not None else ""))


def _initial_policy(init: str, algo: str) -> Path:
    """``--init``'s policy file, checked before any worker starts: one policy (not a committee) with
    its sidecar, of the algorithm being trained."""
    from autotune import policies
    from autotune.rl.train import read_sidecar

    path = policies.resolve(init)
    if path.is_dir():
        raise BadInput(f"--init {init}: a committee cannot start a training; name one of its members "
                       f"({', '.join(p.name for p in policies.members(path)) or 'none'})")
    meta = read_sidecar(path)  # BadInput: no such file, no sidecar
    if meta["algo"] != algo:
        raise BadInput(f"--init {init}: a {meta['algo']} policy cannot start a {algo} training (--strategy {meta['algo']})")
    return path
