"""Optuna: a sequence as a fixed set of hyper-parameters, searched with optuna's ask/tell API.

Encoding. A trial suggests ``length`` (categorical over ``1..max_length``) and one parameter per
slot ``p0 .. p{max_length-1}``; the sequence is the first ``length`` slots. *Every* slot is
suggested in every trial, used or not, so the search space is static: that is what lets
multivariate TPE model all parameters jointly (a conditional space would make it fall back to
independent sampling for the conditional slots), and what the numeric samplers need.

The slot parameters come in two kinds (option ``encoding``):

* ``categorical`` (default for tpe, random, gp, nsga2, nsga3): ``length`` and every slot are
  categoricals (the slots over the action names). Pass names are nominal: no order among them
  means anything, and these samplers all handle categoricals natively.
* ``integer`` (default for cmaes and qmc): ``length`` is an int in ``1..max_length`` and each slot
  an int index into the action list. CMA-ES and QMC only model numeric dimensions; with
  categoricals optuna hands every parameter to their independent (random) sampler and they
  degenerate to random search. Integer indices give them a relaxation to work on.

Duplicates. Many trials decode to the same sequence (unused slots differ, or the sampler
converges). A sequence already scored is told its known cost at once without spending budget;
``ask`` keeps asking (up to ``max_retries`` optuna trials per wanted candidate) until it has
fresh sequences, and only falls back to re-evaluating known ones (cache hits) when the sampler
has nothing new to offer, so a run always spends its budget.

Compiler options (``SearchSpace.options``, ``--space options|both``): one more categorical per option,
its choices None (XLA's default) and the values the installed compiler accepts, suggested in every
trial beside the slots, so TPE models options and passes jointly.

Options: ``sampler`` (tpe | random | cmaes | qmc | gp | nsga2 | nsga3; default tpe),
``storage`` (an optuna storage URL such as ``sqlite:///study.db``: several processes or
machines given the same storage and ``study_name`` share one search), ``study_name`` (default:
a fresh name; an existing study of that name is continued), ``batch_size`` (trials asked per
round and evaluated in parallel, default 4; TPE's constant liar keeps a batch diverse),
``n_startup_trials`` (random trials before the model-based samplers start, default 10),
``encoding`` (categorical | integer), ``max_retries`` (default 20).

Runs are deterministic under the seed with the default in-memory storage. A shared storage
makes the search depend on what the other participants have told it (that is the point); note
that ``autotune run --resume`` replays a strategy from its start, so a resumed run on a
persistent study tells the replayed trials to it a second time.
"""

from __future__ import annotations

import importlib.util
import warnings

import optuna

from autotune.errors import BadInput, UnknownName
from autotune.core.options import CompilerOptions
from autotune.version import install_line
from autotune.strategy import ArchiveAskTell, BudgetExhausted, Evaluate, SearchSpace, finite, positive_int

SAMPLERS = ("tpe", "random", "cmaes", "qmc", "gp", "nsga2", "nsga3")
ENCODINGS = ("categorical", "integer")
_NUMERIC_SAMPLERS = ("cmaes", "qmc")


class OptunaSearch(ArchiveAskTell):
    name = "optuna"
    description = "optuna ask/tell over length + per-slot categoricals (TPE; --sampler tpe|random|cmaes|qmc|gp|nsga2|nsga3)"
    options_by = "optuna's sampler, one categorical per option beside the slots"

    def __init__(self, sampler: str = "tpe", storage: str | None = None, study_name: str | None = None,
                 batch_size: int = 4, n_startup_trials: int = 10, encoding: str | None = None,
                 max_retries: int = 20, **rest):
        super().__init__(**rest)
        sampler = str(sampler).lower()
        if sampler not in SAMPLERS:
            exc = UnknownName("optuna sampler", sampler, SAMPLERS)
            exc.args = (f"{exc.args[0]} (choose one of: {', '.join(SAMPLERS)})",)
            raise exc
        if sampler == "cmaes":
            try:
                import cmaes  # noqa: F401  optuna's CmaEsSampler needs it
            except ImportError:
                raise BadInput("optuna sampler 'cmaes' needs the 'cmaes' package (pip install cmaes)") from None
        if sampler == "gp" and importlib.util.find_spec("torch") is None:
            # optuna's GPSampler fits its Gaussian process with torch, which only xla-autotune[train] brings.
            raise BadInput("optuna sampler 'gp' needs torch (optuna's GPSampler fits with it): "
                           + install_line("train"))
        if encoding is None:
            encoding = "integer" if sampler in _NUMERIC_SAMPLERS else "categorical"
        if encoding not in ENCODINGS:
            raise UnknownName("optuna encoding", str(encoding), ENCODINGS)
        if storage is not None and not isinstance(storage, str):
            raise BadInput(f"optuna: storage must be a storage URL, not {storage!r}")
        self.sampler_name = sampler
        self.storage = storage
        self.study_name = None if study_name is None else str(study_name)
        self.batch_size = positive_int(self.name, "batch_size", batch_size)
        self.n_startup_trials = positive_int(self.name, "n_startup_trials", n_startup_trials)
        self.max_retries = positive_int(self.name, "max_retries", max_retries)
        self.encoding = encoding

    # ---- the optuna side ------------------------------------------------------------------------
    def _sampler(self, seed: int) -> optuna.samplers.BaseSampler:
        n0 = self.n_startup_trials
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            if self.sampler_name == "tpe":
                return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=n0,
                                                  constant_liar=True)
            if self.sampler_name == "random":
                return optuna.samplers.RandomSampler(seed=seed)
            if self.sampler_name == "cmaes":
                return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=n0, warn_independent_sampling=False)
            if self.sampler_name == "qmc":
                return optuna.samplers.QMCSampler(seed=seed, scramble=True, warn_independent_sampling=False,
                                                  warn_asynchronous_seeding=False)
            if self.sampler_name == "gp":
                return optuna.samplers.GPSampler(seed=seed, n_startup_trials=n0, deterministic_objective=True,
                                                 warn_independent_sampling=False)
            if self.sampler_name == "nsga2":
                return optuna.samplers.NSGAIISampler(seed=seed)
            return optuna.samplers.NSGAIIISampler(seed=seed)

    def setup(self, space: SearchSpace, seed: int, budget: int) -> None:
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # no per-trial log lines
        self.space = space
        self.lengths = list(range(max(1, space.min_length), space.max_length + 1))
        try:
            self.study = optuna.create_study(
                storage=self.storage, sampler=self._sampler(seed), study_name=self.study_name,
                direction="minimize", load_if_exists=self.study_name is not None,
            )
        except Exception as exc:  # a malformed URL, a missing driver, an unreachable server ...
            raise BadInput(f"optuna: cannot open study storage {self.storage!r}: "
                           f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None

    def warm_up(self, start) -> None:
        """The warm start's option set as the first trial (``study.enqueue_trial``: its options fixed, the
        slots sampled), so the sampler learns the order under it and models from there."""
        if self.space.options and start.options:
            chosen = start.options.as_dict()
            self.study.enqueue_trial({f"option:{d.name}": chosen.get(d.name) for d in self.space.options})

    def _suggest(self, trial: optuna.Trial) -> tuple[str, ...]:
        space = self.space
        if not space.passes:  # --space options: the sequence is not searched
            return ()
        if self.encoding == "categorical":
            length = trial.suggest_categorical("length", self.lengths)
            slots = [trial.suggest_categorical(f"p{i}", space.actions) for i in range(space.max_length)]
        else:
            length = trial.suggest_int("length", self.lengths[0], self.lengths[-1])
            slots = [space.actions[trial.suggest_int(f"p{i}", 0, space.n_actions - 1)]
                     for i in range(space.max_length)]
        return tuple(slots[:length])

    # ---- ask/tell --------------------------------------------------------------------------------
    def minimize(self, evaluate: Evaluate, space: SearchSpace, seed: int) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            try:
                super().minimize(evaluate, space, seed)
            except BudgetExhausted:
                self._close(evaluate)
                raise

    def _close(self, evaluate: Evaluate) -> None:
        """Budget spent mid-batch: finish the batch's open trials (a shared study must not keep
        them running): the evaluated prefix with its recorded costs, the rest as failed."""
        scored = {(t.sequence, t.options): t.cost for t in evaluate.history}
        for point, trials in self._open:
            for trial in trials:
                if point in scored:
                    self.study.tell(trial, finite(scored[point], self._failure_cost))
                else:
                    self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        self._open.clear()

    def _internal_ask(self):
        return self.study.ask()

    def _internal_sequence(self, token) -> tuple[str, ...]:
        return self._suggest(token)

    def _internal_options(self, token) -> CompilerOptions:
        """One categorical per compiler option (``SearchSpace.options``): its choices are None (XLA's
        default) and its values, as optuna's samplers model nominal parameters natively."""
        return self.space.options_from({d.name: token.suggest_categorical(f"option:{d.name}", list(d.choices))
                                        for d in self.space.options})

    def _internal_tell(self, token, cost: float) -> None:
        self.study.tell(token, cost)
