"""One run specification: the settings of a tuning run, their defaults and their checks.

Every entry point (``autotune run``, ``compare``, ``train``, the Python API, the benchmarks) builds a
``RunSpec``; a bad value is one ``BadInput`` line, raised before any compile, whichever way it came in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from autotune.errors import BadInput
from autotune.core.limits import validate_seconds
from autotune.core import objectives
from autotune.core.options import SPACES, CompilerOptions

DEFAULT_STRATEGY = "random"
DEFAULT_BUDGET = 200
DEFAULT_OBJECTIVE = "final-ops"
DEFAULT_MAX_LENGTH = 16


def check_budget(budget) -> int:
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise BadInput(f"--budget must be a positive number of evaluations, not {budget}")
    return budget


def check_max_length(max_length) -> int:
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise BadInput(f"--max-length must be at least 1, not {max_length}")
    return max_length


def check_time_limit(time_limit) -> float | None:
    if time_limit is None:
        return None
    if not isinstance(time_limit, (int, float)) or not math.isfinite(time_limit) or time_limit <= 0:
        raise BadInput(f"--time-limit must be a positive number of seconds, not {time_limit}")
    return float(time_limit)


@dataclass(frozen=True)
class RunSpec:
    """What to run: strategy and its options, objective, budget (evaluations, cache hits included),
    seed, longest sequence, optional time limit, whether to validate and prune the best."""

    strategy: str = DEFAULT_STRATEGY
    budget: int = DEFAULT_BUDGET
    objective: str = DEFAULT_OBJECTIVE
    seed: int = 0
    max_length: int = DEFAULT_MAX_LENGTH
    time_limit: float | None = None
    options: dict = field(default_factory=dict)
    validate: bool = True
    prune: bool = True
    #: Longest one execution of validation may take (None: ``limits.validate_seconds()``'s default).
    validate_seconds: float | None = None
    #: Search a surrogate with large constants lifted to parameters (single modules; see ``tuner``).
    surrogate: bool = True
    #: The objective's own settings (runtime: ``min_effect``, ``rounds``); single runs (a fleet refuses them).
    objective_options: dict = field(default_factory=dict)
    #: Fleets: accept a sequence that makes some member worse than its default.
    allow_regressions: bool = False
    #: What is searched (``core/options.py``): ``passes``, ``options`` or ``both``; None: ``both`` for an
    #: objective that can judge compiler options (runtime), else ``passes``.
    space: str | None = None
    #: Compiler options fixed for the whole run (``--compiler-option NAME=VALUE``): every candidate has them.
    compiler_options: dict = field(default_factory=dict)
    #: Also search options that change numerics by design (fast math and its relatives).
    numerics_options: bool = False
    #: Per-site decisions searched beside the options (``pipelines/xla/sites.py``): at most this many sites,
    #: the hottest first; 0: none. None: ``DEFAULT_SITES`` where the backend decides per site and options
    #: are searched (they are options named ``site:...``, judged by measured time as options are).
    sites: int | None = None
    #: A measured objective searching options screens every single option value first (``core/screen.py``;
    #: ``--no-screen``: the strategy alone).
    screen: bool = True

    def __post_init__(self):
        check_budget(self.budget)
        check_max_length(self.max_length)
        object.__setattr__(self, "time_limit", check_time_limit(self.time_limit))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise BadInput(f"--seed must be an integer, not {self.seed!r}")
        object.__setattr__(self, "options", dict(self.options or {}))
        object.__setattr__(self, "objective_options", dict(self.objective_options or {}))
        if self.validate_seconds is not None:
            object.__setattr__(self, "validate_seconds", validate_seconds(self.validate_seconds))
        if self.sites is not None and (isinstance(self.sites, bool) or not isinstance(self.sites, int) or self.sites < 0):
            raise BadInput(f"--sites must be a whole number >= 0, not {self.sites!r}")
        if self.space is not None and self.space not in SPACES:
            raise BadInput(f"--space must be one of {', '.join(SPACES)}, not {self.space!r}")
        object.__setattr__(self, "compiler_options", CompilerOptions.of(self.compiler_options).as_dict())

    def searched(self) -> str:
        """The space this run searches (``space``, or its default for the objective); ``BadInput`` in one
        line when compiler options are asked of an objective that cannot judge them: an instruction count
        cannot see a library call, only a measured time can."""
        judges = getattr(objectives.get(self.objective), "judges_options", False)
        space = self.space or ("both" if judges else "passes")
        if not judges and (space != "passes" or self.compiler_options):
            asked = f"--space {space}" if space != "passes" else "--compiler-option"
            raise BadInput(f"{asked}: compiler options are judged only by measured time (an instruction count cannot "
                           f"see a library call); use --objective runtime, not {self.objective}")
        return space

    def make_objective(self):
        """The objective, with its settings (``BadInput`` for a setting it does not take)."""
        obj = objectives.get(self.objective)
        if not self.objective_options:
            return obj
        if obj.deterministic:
            raise BadInput(f"--min-effect/--confirm-rounds/--no-race apply to measured objectives (runtime), not {self.objective}")
        try:
            return objectives.get(self.objective, **self.objective_options)
        except TypeError:
            raise BadInput(f"objective '{self.objective}' takes no --min-effect/--confirm-rounds/--no-race") from None
