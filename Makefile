# The two set-up commands from the README: `make demo` and `make test`. Each creates the
# virtual environment when it is missing and installs the project into it.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test unit integration e2e bench lint schema iam-policy clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/hyperpod-debugger demo

test: $(STAMP)
	$(BIN)/ruff check layers tests bench
	$(BIN)/python -m pytest -q

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

integration: $(STAMP)
	$(BIN)/python -m pytest -q tests/integration

e2e: $(STAMP)
	$(BIN)/python -m pytest -q tests/e2e

bench: $(STAMP)
	$(BIN)/python bench/triage_bench.py --nodes 20000
	$(BIN)/python bench/probe_bench.py --documents 20000
	$(BIN)/python bench/ssm_bench.py --nodes 300 --rate 50 --delay 0.5

lint: $(STAMP)
	$(BIN)/ruff check layers tests bench

schema: $(STAMP)
	$(BIN)/hyperpod-debugger schema > references/triage-report.schema.json

iam-policy: $(STAMP)
	$(BIN)/hyperpod-debugger iam-policy

clean:
	rm -rf $(VENV) build *.egg-info layers/*.egg-info .pytest_cache
