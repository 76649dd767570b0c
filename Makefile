# chunksel: `make bench` runs the main job (quick profile), `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export CHUNKSEL_DATA ?= $(abspath ../shared/data)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install test test-servers bench bench-full bench-large lint models

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -e '.[all,dev]'
	touch $@

install: $(BIN)/.installed

models: install
	$(BIN)/chunksel fetch-models

test: install models
	$(BIN)/python -m pytest -q -rs -m "not slow" --durations=15
	PYTHON=$(PYTHON) bash .ci/test-transformers4.sh
	PYTHON=$(PYTHON) bash .ci/test-numpy-only.sh

# the servers tier: transformers serve (needs transformers[serving]; TSERVE_PYTHON may name
# another interpreter that has it) and llama.cpp's server (LLAMACPP_PYTHON, a Python with
# llama-cpp-python[server]; skipped when unset) on 127.0.0.1, serving SmolLM2
TSERVE_PYTHON ?= $(BIN)/python
LLAMACPP_PYTHON ?=
test-servers: install models
	CHUNKSEL_TEST_SERVERS=1 CHUNKSEL_TSERVE_PYTHON=$(TSERVE_PYTHON) CHUNKSEL_LLAMACPP_PYTHON=$(LLAMACPP_PYTHON) \
		$(BIN)/python -m pytest -q -m servers tests/servers

lint: install
	$(BIN)/ruff check src tests benchmarks

bench: install models
	$(BIN)/chunksel bench --profile quick --threads 1 --jobs 2

bench-full: install models
	$(BIN)/chunksel bench --profile full --threads 1 --jobs 2 --out reports/full

bench-large: install models
	$(BIN)/chunksel bench --profile large --threads 1 --jobs 2 --out reports/large
