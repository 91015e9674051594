# Two commands on a fresh machine (Python 3.11 + pip + make): `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
EXAMPLE ?= examples/llm_decode_step.hlo
DEMO_DB ?= .autotune/demo.db
DEMO_STRATEGY ?= nevergrad
DEMO_BUDGET ?= 150

RECORD_MODEL ?= tests/data/real/xla_dlrm_train_step.hlo
RECORD ?= examples/xla_dlrm_train_step.tuned.json

.PHONY: demo test install clean bench paper tune-record check-record

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,gpu]'
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

## demo: set up, then tune the bundled LLM decode step (the llm family: scan over layers, GQA, rotary,
## KV cache) and print the result: XLA's default is beaten and the win is checked by execution; then
## the same step tuned for an H100 (XLA's GPU pipeline, compiled without a GPU: another answer); then
## the DLRM training step (a third-party module), where a better ordering exists too.
demo: $(STAMP)
	$(BIN)/autotune baseline $(EXAMPLE) --db $(DEMO_DB)
	$(BIN)/autotune run --strategy $(DEMO_STRATEGY) --budget $(DEMO_BUDGET) $(EXAMPLE) --db $(DEMO_DB) --out out/demo
	$(BIN)/autotune run --target h100 --strategy $(DEMO_STRATEGY) --budget $(DEMO_BUDGET) $(EXAMPLE) --db $(DEMO_DB) --out out/demo-h100
	$(BIN)/autotune run --strategy $(DEMO_STRATEGY) --budget $(DEMO_BUDGET) $(RECORD_MODEL) --db $(DEMO_DB) --out out/demo-dlrm

## test: set up with test extras, then run the whole test suite.
test: $(STAMP)
	$(BIN)/python -m pytest -q

## tune-record: tune RECORD_MODEL once and write its tuning record (then commit the record).
tune-record: $(STAMP)
	mkdir -p out
	$(BIN)/autotune run --strategy optuna --budget 200 $(RECORD_MODEL) --db $(DEMO_DB) --json > out/record-run.json
	$(BIN)/autotune export $$($(BIN)/python -c "import json; print(json.load(open('out/record-run.json'))['run_id'])") \
		-o $(RECORD) --db $(DEMO_DB)

## check-record: the CI gate; exits 1 if the committed record no longer holds with the installed XLA.
check-record: $(STAMP)
	$(BIN)/autotune check $(RECORD_MODEL) --record $(RECORD) --max-regression 1 --db $(DEMO_DB)

## bench: engine speed -> results/perf.md, exhaustive depth-3 search -> results/exhaustive.md;
## paper: the 2023 protocol at the committed scale, all four families (~73 min on 2 shared cores) -> results/README.md
PAPER_FLAGS ?= --quick --test-modules 48 --train-modules 96 --budget 100 --timesteps 10000
bench: $(STAMP)
	$(BIN)/python bench/perf.py
	$(BIN)/python bench/exhaustive.py

paper: $(STAMP)
	$(BIN)/python bench/paper.py $(PAPER_FLAGS)

clean:
	rm -rf $(VENV) .autotune out .pytest_cache
