# Two commands do all set-up on a fresh machine with Python 3.11: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench lint format clean prism fuzz

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml setup.py $(wildcard beam_dpsketch/*/*/*.c beam_dpsketch/*.c) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,bench,eval]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/beam-dpsketch demo --out reports/demo

# Prism, Beam's portable runner in Go, for tests/engines: `go install` once into
# ~/.cache/beam-dpsketch (about 1.5 min cold, a no-op later). Without Go the Prism tests skip.
prism:
	@bash scripts/prism.sh

test: $(STAMP) $(if $(shell command -v go),prism)
	$(BIN)/python -m pytest

# The decoder fuzz test at 2 * 10^5 mutations per decoder (CI runs 10^4).
fuzz: $(STAMP)
	DPSKETCH_FUZZ_N=200000 $(BIN)/python -m pytest tests/test_fuzz_decoders.py -q

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
