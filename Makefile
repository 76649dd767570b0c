# chunksel: `make bench` runs the main job (quick profile), `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export CHUNKSEL_DATA ?= $(abspath ../shared/data)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install test test-defaults test-servers bench bench-full bench-large lint models pretrained zeroshot

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
	PYTHON=$(PYTHON) bash .ci/test-wheel.sh

# every registered selector fitted with its defaults, the minutes-long ones included (SRAS's
# 25 PPO epochs, the LLM selectors on the local SmolLM2); `make test` runs the others
test-defaults: install models
	$(BIN)/python -m pytest -q -rs tests/integration/test_defaults.py

# the servers tier, against real servers on 127.0.0.1 serving SmolLM2: SERVERS names them
# (default transformers). `transformers serve` needs transformers[serving]: the first run
# installs the `servers` extra into $(VENV) (once; TSERVE_PYTHON may name another Python
# that has it). llama.cpp's server is opt-in, SERVERS="transformers llama.cpp":
# llama-cpp-python builds llama.cpp from source, which takes many minutes on two cores, so
# the first such run makes $(LLAMACPP_VENV) once (LLAMACPP_PYTHON may name a Python that
# already has llama-cpp-python[server]). A server asked for that cannot start fails.
SERVERS ?= transformers
TSERVE_PYTHON ?= $(BIN)/python
LLAMACPP_VENV ?= .venv-llamacpp
LLAMACPP_PYTHON ?= $(abspath $(LLAMACPP_VENV))/bin/python
# portable CPU kernels: the native build died on its first request on a VM (docs/llm-servers.md)
LLAMACPP_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF \
	-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
SERVERS_SETUP := $(if $(filter $(BIN)/python,$(TSERVE_PYTHON)),$(VENV)/.servers-installed) \
	$(if $(and $(filter llama.cpp,$(SERVERS)),$(filter $(abspath $(LLAMACPP_VENV))/bin/python,$(LLAMACPP_PYTHON))),$(LLAMACPP_VENV)/.installed)

$(VENV)/.servers-installed: $(BIN)/.installed
	$(BIN)/pip install -e '.[servers]'
	touch $@

$(LLAMACPP_VENV)/.installed:
	$(PYTHON) -m venv $(LLAMACPP_VENV)
	$(LLAMACPP_VENV)/bin/pip install --upgrade pip
	CMAKE_ARGS="$(LLAMACPP_CMAKE_ARGS)" $(LLAMACPP_VENV)/bin/pip install 'llama-cpp-python[server]>=0.3.36,<0.4'
	touch $@

test-servers: install models $(SERVERS_SETUP)
	CHUNKSEL_TEST_SERVERS=1 CHUNKSEL_SERVERS="$(SERVERS)" CHUNKSEL_TSERVE_PYTHON=$(TSERVE_PYTHON) \
		CHUNKSEL_LLAMACPP_PYTHON=$(if $(filter llama.cpp,$(SERVERS)),$(LLAMACPP_PYTHON)) \
		$(BIN)/python -m pytest -q -rs -m servers tests/servers

lint: install
	$(BIN)/ruff check src tests benchmarks

bench: install models
	$(BIN)/chunksel bench --profile quick --threads 1 --jobs 2

# rebuild the shipped pretrained selectors (src/chunksel/pretrained/models) from the shared data
pretrained: install models
	$(BIN)/python -m chunksel.study.pretrain

# the zero-shot report (reports/zeroshot/): the pretrained models on unseen collections, then
# their cold latency (benchmarks/results/pretrained_latency.json) rendered into it
zeroshot: install models
	$(BIN)/python -m chunksel.study.zeroshot --out reports/zeroshot
	$(BIN)/python benchmarks/pretrained_latency.py
	$(BIN)/python -m chunksel.study.zeroshot_report reports/zeroshot

bench-full: install models
	$(BIN)/chunksel bench --profile full --threads 1 --jobs 2 --out reports/full

bench-large: install models
	$(BIN)/chunksel bench --profile large --threads 1 --jobs 2 --out reports/large
