# Two commands on a fresh machine (Python 3.11 + pip + make): `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
EXAMPLE ?= examples/gpt2_train_step.hlo
DEMO_DB ?= .autotune/demo.db
DEMO_STRATEGY ?= nevergrad
DEMO_BUDGET ?= 150

.PHONY: demo test install clean bench suite results

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

## demo: set up, then tune the bundled GPT-2-style training step and print the result.
demo: $(STAMP)
	$(BIN)/autotune baseline $(EXAMPLE) --db $(DEMO_DB)
	$(BIN)/autotune run --strategy $(DEMO_STRATEGY) --budget $(DEMO_BUDGET) $(EXAMPLE) --db $(DEMO_DB) --out out/demo

## test: set up with test extras, then run the whole test suite.
test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/perf.py

clean:
	rm -rf $(VENV) .autotune out .pytest_cache
