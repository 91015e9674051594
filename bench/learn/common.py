"""The learning benchmark's shared parts: its settings, constants, log and the work directory (``Work``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from autotune.zoo import suite
from harness import ROOT, log, rel  # noqa: F401  (the stages' log and paths)

POLICY = ROOT / "autotune" / "policies" / "llm.zip"
METHODS = ("policy", "roll-out", "imitation", "ppo", "random@evals", "random@steps", "random@4xsteps", "fixed",
           "search")
MAX_LENGTH = 4
#: ``--methods branches``: the policy's roll-out and its next most likely first passes (``-O branches``)
#: within ``--budget BRANCH_BUDGET``: the evaluations one roll-out leaves unused, spent on its 2nd-4th choices.
BRANCHES, BRANCH_BUDGET = 4, 8
BEAM = 3  # width of the demonstrations' beam search
#: PPO fine-tuning lengths tried by model selection (``stage_select``), besides imitation alone.
SELECT_TIMESTEPS = (256, 512, 1536)
#: The reward the policy trains with (``autotune.rl.env``), and the ablation selection also trains.
REWARD = "best"
ABLATION_REWARD = "step"
RANDOM_SEEDS = 5
#: PPO seeds the selected variant is trained with (``stage_select`` ships the one the validation set
#: prefers; ``stage_seeds`` rolls the others out on the test modules for the spread).
SEEDS = (0, 1, 2)
TRAINING_SEEDS = SEEDS[1:]
#: Ensembles measured by ``--stage ensemble``: three disjoint draws of three PPO seeds each, so that
#: "an ensemble of three seeds" is itself measured for luck (seeds 3..8 are trained there if missing).
ENSEMBLE_DRAWS = ((0, 1, 2), (3, 4, 5), (6, 7, 8))
#: The --quick test sample of earlier rounds (the first modules of today's stratified sample): the
#: report says what the policy gets on them, since the sample was enlarged after seeing that figure.
EARLIER_TEST_MODULES = 12
SEARCH_MAX_LENGTH = 8
#: The target whose pipeline judges everything (``--target``; None: the CPU). Set once by ``main``.
TARGET: str | None = None

FULL = {"probe_modules": 12, "train_modules": 120, "val_modules": 36, "timesteps": 4096, "envs": 2, "fleet_modules": 40, "fleet_budget": 114,
        "test_modules": 36, "search_budget": 200}
QUICK = {"probe_modules": 12, "train_modules": 64, "val_modules": 48, "timesteps": 1536, "envs": 2, "fleet_modules": 16, "fleet_budget": 114,
         "test_modules": 24, "search_budget": 40}
HYPERPARAMS = {"n_steps": 32, "batch_size": 32, "n_epochs": 10, "learning_rate": 1e-3, "ent_coef": 0.01,
               "gamma": 0.99}


#: The command that retrains a policy this run writes (its sidecar says so); main() sets it.
RETRAIN = "python bench/learning.py"
#: The families trained on: the single-device ``llm`` family, and with ``--spmd`` its partitioned steps
#: (``llm_spmd``) too (an experiment of issue 31, into its own work directory and policy file).
FAMILIES = ["llm"]


def stratified(entries, n: int) -> list:
    """``n`` entries spread over (kind, scan, moe) strata (and the family, with ``--spmd``), in a fixed
    hash order within each."""
    strata: dict[str, list] = {}
    for e in entries:
        c = e.config
        family = f"{e.family}/" if len(FAMILIES) > 1 else ""
        strata.setdefault(f"{family}{e.kind}/{c['scan']}/{bool(c['experts'])}", []).append(e)
    for key in strata:
        strata[key].sort(key=lambda e: hashlib.sha256(e.name.encode()).hexdigest())
    out = []
    while len(out) < n and any(strata.values()):
        for key in sorted(strata):
            if strata[key] and len(out) < n:
                out.append(strata[key].pop(0))
    return out


class Work:
    """The run's working directory: the suite, one cache per method, and each stage's JSON."""

    def __init__(self, root: Path, params: dict):
        self.root = root
        self.params = params
        root.mkdir(parents=True, exist_ok=True)
        self.suite = root / "suite"

    def seed_policy(self, variant: str, seed: int) -> Path:
        """Where the selection stage keeps ``variant`` trained with PPO seed ``seed``."""
        return self.root / (f"{variant}.zip" if seed == SEEDS[0] else f"{variant}-seed{seed}.zip")

    def db(self, name: str) -> str:
        return str(self.root / f"{name.replace('@', '-')}.db")

    def stage(self, name: str) -> Path:
        return self.root / f"{name}.json"

    def load(self, name: str):
        path = self.stage(name)
        return json.loads(path.read_text()) if path.exists() else None

    def save(self, name: str, data) -> None:
        self.stage(name).write_text(json.dumps(data, indent=2))

    def manifest(self):
        """The llm family, generated when missing or generated from another grid (stages already
        run on the old one are then stale: the caller starts a fresh ``--work``)."""
        if not (self.suite / "manifest.json").exists():
            log(f"generating the {' and '.join(FAMILIES)} families into {self.suite}")
            return suite.generate(self.suite, families=FAMILIES, jobs=2)
        manifest = suite.load_manifest(self.suite)
        if not suite.is_current(manifest, FAMILIES):
            raise SystemExit(f"error: {self.suite} holds another grid of the llm family than this code's; "
                             "start a fresh --work directory (its stages were computed on the old modules)")
        return manifest

    def train_set(self) -> list[Path]:
        m = self.manifest()
        picks = stratified([e for e in m.entries if e.split == "train"], self.params["train_modules"])
        return [self.suite / e.file for e in picks]

    def test_set(self) -> list[Path]:
        m = self.manifest()
        picks = stratified([e for e in m.entries if e.split == "test"], self.params["test_modules"])
        return [self.suite / e.file for e in picks]
