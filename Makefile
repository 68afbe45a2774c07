# The two set-up commands from the README: `make demo` and `make test`. Each creates the
# virtual environment when it is missing and installs the project into it.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo mcp-demo test unit integration e2e bench lint schema iam-policy clean synth layer

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The core with its extras, and the simulator (its own distribution under sim/, never in the layer).
$(STAMP): pyproject.toml sim/pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]' -e ./sim
	touch $(STAMP)

# The demo needs the core and the simulator only: not CDK, the linters or the test tools.
DEMO_STAMP := $(VENV)/.demo-installed
$(DEMO_STAMP): pyproject.toml sim/pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e . -e ./sim
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	PYTHONUNBUFFERED=1 $(BIN)/python -m hyperpod_debugger.cli demo

# An agent-style session against `hyperpod-debugger mcp` on the simulated account (the SDK's own client).
MCP_STAMP := $(VENV)/.mcp-installed
$(MCP_STAMP): pyproject.toml sim/pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[mcp]' -e ./sim
	touch $(MCP_STAMP)

mcp-demo: $(MCP_STAMP)
	PYTHONUNBUFFERED=1 $(BIN)/python -m hyperpod_sim.agent_demo

# The gates, then the whole suite (CONTRIBUTING.md lists them).
SOURCES := layers sim tests bench functions infra

test: $(STAMP)
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

integration: $(STAMP)
	$(BIN)/python -m pytest -q tests/integration

e2e: $(STAMP)
	$(BIN)/python -m pytest -q tests/e2e

# Every benchmark runs and prints its figures; the exit status is non-zero at the end if any missed.
bench: $(STAMP)
	$(BIN)/python bench/run_all.py

lint: $(STAMP)
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)
	$(BIN)/mypy

schema: $(STAMP)
	$(BIN)/hyperpod-debugger schema > references/triage-report.schema.json
	$(BIN)/hyperpod-debugger schema --finding-event > references/finding-event.schema.json

iam-policy: $(STAMP)
	$(BIN)/hyperpod-debugger iam-policy

# The Lambda layer, built offline without Docker (infra/layer.py): the core package plus its runtime
# dependencies as cp312 / manylinux2014_aarch64 wheels (the functions run on ARM64), into build/layer/python.
LAYER_DIR   := build/layer
LAYER_STAMP := $(LAYER_DIR)/.built
# The layer is rebuilt whenever the core package or the project's dependencies change.
LAYER_SRC   := pyproject.toml $(shell find layers/hyperpod_debugger -type f \( -name '*.py' -o -name '*.sh' \) 2>/dev/null)

layer: $(STAMP)
	$(BIN)/python -m infra.layer $(LAYER_DIR)
	touch $(LAYER_STAMP)

$(LAYER_STAMP): $(LAYER_SRC) | $(STAMP)
	$(MAKE) layer

# Synthesize the CDK app into cdk.out without the CDK CLI, Docker or AWS credentials.
synth: $(STAMP) $(LAYER_STAMP)
	JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 CDK_OUTDIR=cdk.out $(BIN)/python -m infra.app

clean:
	rm -rf $(VENV) build *.egg-info layers/*.egg-info .pytest_cache
