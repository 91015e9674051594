# Two commands on a fresh machine (Python 3.11 + pip + make): `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The reproducible environment of the quick start and CI: exact versions in a constraints file, one per
# Python (pyproject.toml declares ranges, as a library does). Regenerate with `make lock`.
CONSTRAINTS ?= constraints/py3.11.txt
EXTRAS ?= test,gpu,train,ray,dev
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml $(CONSTRAINTS) | cksum | cut -d' ' -f1)
EXAMPLE ?= examples/llm_decode_step.hlo
DEMO_DB ?= .autotune/demo.db
DEMO_STRATEGY ?= nevergrad
DEMO_BUDGET ?= 150

RECORD_MODEL ?= tests/data/real/xla_dlrm_train_step.hlo
## The demo's last step: XLA's compiler options searched by measured time on a real ResNet-50 (a 80-100 ms
## step on this CPU), greedy: the first option it descends (YNNPACK's fusion type) already pays there.
DEMO_TIMED_MODEL ?= tests/data/real/xla_resnet50_keras_jax.hlo
DEMO_TIMED_BUDGET ?= 6
RECORD ?= examples/xla_dlrm_train_step.tuned.json

# The newest-jax leg (CI's last three): Python 3.12 (jax >= 0.11 needs it; the machine image has it under
# pyenv), the newest jax CI has tested, no torch and no ray: what a JAX project on a current jax installs.
# `make test-py3.13` runs the same leg on Python 3.13, the top of the supported range, and `make test-jax0.11`
# on Python 3.12 with the newest jax 0.11 (its own constraints and venv): CI runs all three, so every jax
# minor version in the supported range is exercised.
NEWEST_PY ?= 3.12
PYTHON_NEWEST ?= $(shell for p in $(HOME)/.pyenv/versions/$(NEWEST_PY)*/bin/python $$(command -v python$(NEWEST_PY)); do \
	"$$p" -c 'import sys; sys.exit(sys.version_info[:2] != tuple(map(int, "$(NEWEST_PY)".split("."))))' 2>/dev/null \
	&& { echo $$p; break; }; done)
VENV_NEWEST ?= .venv-newest
CONSTRAINTS_NEWEST ?= constraints/py3.12-newest.txt
# The leg's name in its database and output folders (the two Python 3.12 legs must not share them).
LEG ?= $(NEWEST_PY)
STAMP_NEWEST := $(VENV_NEWEST)/.installed-$(shell cat pyproject.toml $(CONSTRAINTS_NEWEST) | cksum | cut -d' ' -f1)
# What that leg runs: the version module, torch-free policies, the GPU target deviceless, the JAX hook, compiler
# options searched by measured time (each XLA's own catalogue),
# the gym environment, records, strategies and the CLI; the whole suite runs on the first leg.
NEWEST_TESTS ?= tests/test_versions.py tests/test_policy_forward.py tests/test_gpu_target.py tests/test_jax_hook.py \
	tests/test_env.py tests/test_records.py tests/test_strategies.py tests/test_bad_input.py tests/test_cli_misc.py \
	tests/test_gpu_tools.py tests/test_options.py tests/test_jax_path.py tests/test_sites.py tests/test_loops.py tests/test_profile.py

.PHONY: demo test test-newest test-py3.13 test-jax0.11 lint release-check install install-newest lock clean bench paper tune-record check-record

# Bytecode: pip byte-compiles every file it installs, one at a time (42 of the 67 s the install took here, torch's
# thousands of files the most), though a test process imports a fraction of them. So the venvs are installed
# with --no-compile, and Python writes the bytecode of what is imported, once, when first imported. That needs
# PYTHONDONTWRITEBYTECODE unset for this Makefile's commands: where it is set (this machine image sets it), every
# process would compile what it imports again (jax, torch, ray and the rest: 5.3 -> 12.2 s to import once).
unexport PYTHONDONTWRITEBYTECODE

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -c $(CONSTRAINTS) -e '.[$(EXTRAS)]'
	rm -f $(VENV)/.installed-* && touch $@

$(STAMP_NEWEST): pyproject.toml $(CONSTRAINTS_NEWEST)
	@test -n "$(PYTHON_NEWEST)" || { echo "make: no Python $(NEWEST_PY) found (set PYTHON_NEWEST=/path/to/python$(NEWEST_PY))"; exit 2; }
	test -x $(VENV_NEWEST)/bin/python || $(PYTHON_NEWEST) -m venv $(VENV_NEWEST)
	$(VENV_NEWEST)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_NEWEST)/bin/python -m pip install --quiet --no-compile -c $(CONSTRAINTS_NEWEST) -e '.[test,gpu]'
	rm -f $(VENV_NEWEST)/.installed-* && touch $@

install-newest: $(STAMP_NEWEST)

install: $(STAMP)

## demo: set up, then tune the bundled LLM decode step (the llm family: scan over layers, GQA, rotary,
## KV cache) and print the result: XLA's default is beaten and the win is checked by execution; then
## the same step tuned for an H100 (XLA's GPU pipeline, compiled without a GPU: another answer); then
## the DLRM training step (a third-party module), where a better ordering exists too; last, a real
## ResNet-50 made faster by XLA's own compiler options, measured on this CPU (claim, interval, level).
demo: $(STAMP)
	$(BIN)/autotune baseline $(EXAMPLE) --db $(DEMO_DB)
	$(BIN)/autotune run --strategy $(DEMO_STRATEGY) --budget $(DEMO_BUDGET) $(EXAMPLE) --db $(DEMO_DB) --out out/demo
	$(BIN)/autotune run --target h100 --strategy $(DEMO_STRATEGY) --budget $(DEMO_BUDGET) $(EXAMPLE) --db $(DEMO_DB) --out out/demo-h100
	$(BIN)/autotune run --strategy $(DEMO_STRATEGY) --budget $(DEMO_BUDGET) $(RECORD_MODEL) --db $(DEMO_DB) --out out/demo-dlrm
	$(BIN)/autotune run --objective runtime --space options --strategy greedy --budget $(DEMO_TIMED_BUDGET) \
		$(DEMO_TIMED_MODEL) --db $(DEMO_DB) --out out/demo-timed

## test: set up with test extras, then run the whole test suite, two pytest processes on the two cores
## (pytest-xdist; PYTEST_WORKERS=0 for one process). The CLI runs of the suite take one compiler worker each
## (tests/conftest.py: AUTOTUNE_WORKERS=1 under xdist), and the files holding the longest tests (marked slow)
## run first, so that none starts last. From a fresh clone alone on the 2-core machine, setup included: 733
## tests in 12.8 min at fe31e35 (pytest 11.7 min), 14.3 min at 4a28687 (pytest 13.2 min) and 15.1 min at
## 16d69e5 (pytest 13.8 min): the same tests took up to 1.7x longer from run to run; 726 in 14.3 min at e9a4b13;
## 736 in 13.6 min at 16a59bf (pytest 12.2 min, the machine otherwise idle); 739 in 11.9 min at da9557d (pytest
## 10.6 min) and 11.5 min at be3353c (pytest 10.4 min), after byte-compiling the package first and shorter confirmations in
## the tests whose subject is a rule or a wording; 744 in 14.4 min at 0cb12a0 (pytest 13.0 min) and 12.4 min at
## bef6f1b (pytest 11.2 min): around the 12-minute goal, not under it on every run; 13.9 and 13.8 min at 1d668ad
## (pytest 12.6); 12.5 min at 3c267ee (pytest 11.1), 12.7 at 1ad02b9 (pytest 11.2, load up to 4.3) and 12.2 at
## 482b8b4 (pytest 10.8), after
## pinning ml_dtypes 0.6.0 (0.7.0's extension costs every jax process 0.55-0.8 s to import on Python 3.11);
## 747 in 11.2 min at 915d2b2 (pytest 10.4) after installing with --no-compile; 750 in 13.2 min at 8157ef5
## (pytest 12.6, load 1.7-2.8) after runtime claims became 4-12 independent measurements each; 12.0 min at d451bb6 and 13.9 at d771860 (load 2.2-2.7).
PYTEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --durations=30

## test-newest: the newest jax on Python 3.12 (NEWEST_PY) without torch: the quick start's commands, then NEWEST_TESTS.
test-newest: $(STAMP_NEWEST)
	$(VENV_NEWEST)/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is not None)" \
		|| { echo "make: torch is installed in $(VENV_NEWEST); this leg proves the core runs without it"; exit 1; }
	$(VENV_NEWEST)/bin/autotune --version
	$(VENV_NEWEST)/bin/autotune baseline $(EXAMPLE) --db .autotune/newest-$(LEG).db
	$(VENV_NEWEST)/bin/autotune run --strategy ppo --budget 4 $(EXAMPLE) --db .autotune/newest-$(LEG).db \
		--out out/newest-$(LEG)-ppo
	$(VENV_NEWEST)/bin/python -m pytest -q $(NEWEST_TESTS)

## test-py3.13: the newest-jax leg on Python 3.13 (the same constraints: they hold there too).
test-py3.13:
	$(MAKE) test-newest NEWEST_PY=3.13 VENV_NEWEST=.venv-py3.13

## test-jax0.11: the same leg on Python 3.12 with jax 0.11.2, the newest 0.11 (the GPU machines' jax).
test-jax0.11:
	$(MAKE) test-newest NEWEST_PY=3.12 LEG=jax0.11 VENV_NEWEST=.venv-jax0.11 CONSTRAINTS_NEWEST=constraints/py3.12-jax0.11.txt

## lint: ruff's default rules over the code and the tests (the dev extra; CI's first leg runs it).
lint: $(STAMP)
	$(BIN)/ruff check autotune strategies pipelines bench tests release

## release-check: is the name free on the package index (one line; said, not failed, when the index cannot
## be reached), then build the sdist and the wheel, twine check both, install the wheel by name into a
## fresh venv and run the quick start from outside the repository (tests/test_install.py).
release-check: $(STAMP)
	$(BIN)/python release/check_name.py
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_install.py

## lock: regenerate the constraints file of this Python from the installed venv (after changing pyproject).
lock: $(STAMP)
	$(BIN)/python -m pip freeze --all --exclude-editable | grep -v -E '^(xla-autotune|pip)==' | sed 's/+cpu$$//' > $(CONSTRAINTS)

## tune-record: tune RECORD_MODEL once and write its tuning record (then commit the record).
tune-record: $(STAMP)
	mkdir -p out
	$(BIN)/autotune run --strategy optuna --budget 200 $(RECORD_MODEL) --db $(DEMO_DB) --json > out/record-run.json
	$(BIN)/autotune export $$($(BIN)/python -c "import json; print(json.load(open('out/record-run.json'))['run_id'])") \
		-o $(RECORD) --db $(DEMO_DB)

## check-record: the CI gate; exits 1 if the committed record no longer holds with the installed XLA.
check-record: $(STAMP)
	$(BIN)/autotune check $(RECORD_MODEL) --record $(RECORD) --db $(DEMO_DB)

## bench: engine speed -> results/perf.md, exhaustive depth-3 search -> results/exhaustive.md;
## paper: the 2023 protocol at the committed scale, all four families (~73 min on 2 shared cores) -> results/README.md
PAPER_FLAGS ?= --quick --test-modules 48 --train-modules 96 --budget 100 --timesteps 10000
bench: $(STAMP)
	$(BIN)/python bench/perf.py
	$(BIN)/python bench/experiments/exhaustive.py

paper: $(STAMP)
	$(BIN)/python bench/paper.py $(PAPER_FLAGS)

clean:
	rm -rf $(VENV) $(VENV_NEWEST) .venv-py3.13 .venv-jax0.11 .autotune out .pytest_cache
