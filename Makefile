# The two set-up commands from the README: `make demo` and `make test`. Each creates the
# virtual environment when it is missing and installs the project into it.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The Lambda layer (arm64, what deploys) and the same lock built for this machine (the rehearsal runs it).
LAYER_DIR        := build/layer
LAYER_STAMP      := $(LAYER_DIR)/.built
LAYER_HOST_DIR   := build/layer-x86_64
LAYER_HOST_STAMP := $(LAYER_HOST_DIR)/.built
# Python 3.12 bytecode beside the functions' sources, which their asset ships.
FUNCTIONS_STAMP  := build/functions-bytecode.stamp

.PHONY: demo mcp-demo test unit integration e2e rehearse bench lint schema iam-policy clean synth layer

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The core with its extras, and the simulator (its own distribution under sim/, never in the layer), at the
# exact versions of requirements/dev-constraints.txt (`make constraints` regenerates it); a change reinstalls.
CONSTRAINTS := requirements/dev-constraints.txt
$(STAMP): pyproject.toml sim/pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e '.[dev]' -e ./sim
	touch $(STAMP)

# The demo needs the core and the simulator only: not CDK, the linters or the test tools.
DEMO_STAMP := $(VENV)/.demo-installed
$(DEMO_STAMP): pyproject.toml sim/pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e . -e ./sim
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	PYTHONUNBUFFERED=1 $(BIN)/python -m hyperpod_debugger.cli demo

# An agent-style session against `hyperpod-debugger mcp` on the simulated account (the SDK's own client).
MCP_STAMP := $(VENV)/.mcp-installed
$(MCP_STAMP): pyproject.toml sim/pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e '.[mcp]' -e ./sim
	touch $(MCP_STAMP)

mcp-demo: $(MCP_STAMP)
	PYTHONUNBUFFERED=1 $(BIN)/python -m hyperpod_sim.agent_demo

# The gates, then the whole suite on every core (pytest-xdist; a module's tests share one worker, so a
# module-scoped fixture such as a synthesized template is built once), naming the slowest tests at the end.
SOURCES := layers sim tests bench functions infra

# The rehearsal tier (tests/rehearsal) needs the layer and its host build; `make test` runs it with the rest.
test: $(STAMP) node_modules/.installed $(LAYER_STAMP) $(LAYER_HOST_STAMP) $(FUNCTIONS_STAMP)
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n auto --dist loadscope --durations=15

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

integration: $(STAMP)
	$(BIN)/python -m pytest -q tests/integration

e2e: $(STAMP)
	$(BIN)/python -m pytest -q tests/e2e

# The synthesized stack run as AWS runs it, on the simulated account (tests/rehearsal/conftest.py).
rehearse: $(STAMP) $(LAYER_STAMP) $(LAYER_HOST_STAMP) $(FUNCTIONS_STAMP)
	$(BIN)/python -m pytest -q tests/rehearsal

# Every benchmark runs and prints its figures; the exit status is non-zero at the end if any missed.
bench: $(STAMP) $(LAYER_HOST_STAMP) $(FUNCTIONS_STAMP)
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

# The Lambda layer, built offline without Docker (infra/layer.py) from layers/requirements.lock only: the core
# package plus its locked runtime dependencies as cp312 / manylinux2014_aarch64 wheels (the functions run on
# ARM64), into build/layer/python; checked against the lock (build/layer/MANIFEST.txt) and for ARM64 (ELF headers).
# The layer is rebuilt whenever the core package, the lock or the recipe change.
LAYER_SRC   := pyproject.toml layers/requirements.lock infra/layer.py \
               $(shell find layers/hyperpod_debugger -type f \( -name '*.py' -o -name '*.sh' \) 2>/dev/null)

layer: $(STAMP)
	$(BIN)/python -m infra.layer $(LAYER_DIR)
	touch $(LAYER_STAMP)

$(LAYER_STAMP): $(LAYER_SRC) | $(STAMP)
	$(MAKE) layer

# The same lock built for this machine (x86_64), into build/layer-x86_64/python: same versions, importable here.
# Both layers carry bytecode written by Python 3.12 (the runtime's version; `LAYER_PYTHON` names one if
# `python3.12` is not on the PATH or under pyenv): Lambda cannot write it, so without it every cold start compiles.

layer-host: $(STAMP)
	$(BIN)/python -m infra.layer --platform x86_64 $(LAYER_HOST_DIR)
	touch $(LAYER_HOST_STAMP)

$(LAYER_HOST_STAMP): $(LAYER_SRC) | $(STAMP)
	$(MAKE) layer-host

# Bytecode beside the functions' sources (python3.12, checked against each source): their asset ships it.
$(FUNCTIONS_STAMP): $(shell find functions -type f -name '*.py' 2>/dev/null) infra/layer.py | $(STAMP)
	$(BIN)/python -m infra.layer functions
	mkdir -p build && touch $@

functions-bytecode: $(FUNCTIONS_STAMP)

# Re-resolve layers/requirements.lock (PyPI needed) after changing a runtime dependency in pyproject.toml.
lock: | $(BIN)/python
	$(BIN)/python -m infra.layer lock

# Re-resolve requirements/dev-constraints.txt (PyPI needed) in a throwaway venv, unconstrained, after changing a
# dependency in pyproject.toml or sim/pyproject.toml; the next `make test` installs the new pins.
CONSTRAINTS_VENV := build/constraints-venv
constraints:
	rm -rf $(CONSTRAINTS_VENV)
	mkdir -p $(dir $(CONSTRAINTS))
	$(PYTHON) -m venv $(CONSTRAINTS_VENV)
	$(CONSTRAINTS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(CONSTRAINTS_VENV)/bin/python -m pip install --quiet -e '.[dev]' -e ./sim
	{ echo '# Exact versions of everything `make test` installs (pip install -e ".[dev]" -e ./sim), used as'; \
	  echo '# `pip install -c` by the Makefile. Do not edit by hand; regenerate (PyPI needed): make constraints'; \
	  $(CONSTRAINTS_VENV)/bin/python -m pip freeze --exclude-editable --exclude hyperpod-debugger --exclude hyperpod-sim; \
	} > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)
	rm -rf $(CONSTRAINTS_VENV)

.PHONY: layer-host lock constraints functions-bytecode

# Synthesize the CDK app into cdk.out without the CDK CLI, Docker or AWS credentials; prints the layer's manifest.
synth: $(STAMP) $(LAYER_STAMP) $(FUNCTIONS_STAMP)
	cat $(LAYER_DIR)/MANIFEST.txt
	JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 CDK_OUTDIR=cdk.out $(BIN)/python -m infra.app

# The AWS CDK CLI, pinned in package.json and package-lock.json: `npx cdk` runs this copy, whose cloud-assembly
# schema matches the aws-cdk-lib the venv installs (the README's deploy; tests/infrastructure/test_settings.py).
node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

# What `npx cdk deploy` needs: the venv cdk.json's app runs in, the Lambda layer, the CDK CLI.
.PHONY: deploy-ready
deploy-ready: $(STAMP) $(LAYER_STAMP) $(FUNCTIONS_STAMP) node_modules/.installed

clean:
	rm -rf $(VENV) build *.egg-info layers/*.egg-info .pytest_cache node_modules
