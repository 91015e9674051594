"""bench/learning.py's stages, one module each (the entry point and its command line stay there).

``common`` (settings, ``Work``), ``train``, ``selection`` (select, fleet), ``evaluate``, ``seeds``
(seeds, ensemble, committee), ``markdown`` and ``report``. The experiments built on the benchmark
(bench/experiments/) use the names below; the target being learned for is ``common.TARGET``.
"""

import harness  # noqa: F401  (puts the repository and bench/ on the path before autotune is imported)
from learn import common
from learn.common import (BRANCH_BUDGET, BRANCHES, ENSEMBLE_DRAWS, FAMILIES, FULL, HYPERPARAMS, MAX_LENGTH, QUICK,
                          ROOT, SEEDS, Work, log, rel)
from learn.evaluate import branches_tag, eval_groups, evaluate_modules, file_digest, tuned_row
from learn.selection import held_out_rows, validation_scores
from learn.train import (beam_search, demonstration_data, demonstration_env, fine_tune, fractions, pruned,
                         random_until_steps, rollout)

__all__ = ["BRANCH_BUDGET", "BRANCHES", "ENSEMBLE_DRAWS", "FAMILIES", "FULL", "HYPERPARAMS", "MAX_LENGTH", "QUICK",
           "ROOT", "SEEDS", "Work", "beam_search", "branches_tag", "common", "demonstration_data", "demonstration_env",
           "eval_groups", "evaluate_modules", "file_digest", "fine_tune", "fractions", "held_out_rows", "log", "pruned",
           "random_until_steps", "rel", "rollout", "tuned_row", "validation_scores"]
