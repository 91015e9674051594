"""bench/paper.py's settings: the two presets (quick, full) and what a run may override."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


SEARCH = ("random", "greedy", "optuna", "nevergrad", "ppo")
POLICIES = (  # (label, algorithm, shaping)
    ("ppo-zero-shot", "ppo", False),
    ("ppo-shaped-zero-shot", "ppo", True),
    ("a2c-zero-shot", "a2c", False),
    ("dqn-zero-shot", "dqn", False),
)


@dataclass(frozen=True)
class Settings:
    preset: str = "quick"
    suite: str = ".autotune/paper/suite"
    work: str = ".autotune/paper"  # policies and other artefacts not committed
    results: str = "results"
    db: str | None = None
    workers: int | None = None
    limit: int | None = None  # passed to suite generation
    families: tuple[str, ...] | None = None
    test_modules: int | None = 12
    train_modules: int | None = 24
    max_instructions: int = 1000
    budget: int = 50
    seeds: tuple[int, ...] = (0,)
    max_length: int = 16
    timesteps: int = 3000
    time_limit: float | None = None
    validate: bool = True
    ops_objective: bool = True
    strategies: tuple[str, ...] = SEARCH
    policies: tuple[str, ...] = tuple(p[0] for p in POLICIES)
    seed: int = 0


PRESETS = {
    # < 30 min on 2 cores (8.4 min measured: cold cache, suite generation included): 12 test and 24
    # training modules of <= 1000 instructions, budget 50, 3000 training steps per policy, raw-ops search too.
    "quick": Settings(),
    # The full protocol: every module of the suite (both sides), 3 seeds, budget 200, long training.
    "full": Settings(preset="full", test_modules=None, train_modules=None, max_instructions=20_000, budget=200,
                     seeds=(0, 1, 2), max_length=16, timesteps=20_000),
}


def overridden(settings: dict) -> bool:
    """Whether a run's recorded settings differ from its preset's in what changes the numbers."""
    preset = dataclasses.asdict(PRESETS[settings["preset"]])
    keys = ("test_modules", "train_modules", "max_instructions", "budget", "seeds", "max_length", "timesteps",
            "strategies", "policies")
    return any(list(preset[k]) != list(settings[k]) if isinstance(preset[k], tuple) else preset[k] != settings[k]
               for k in keys if k in settings)
