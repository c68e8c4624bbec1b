# Two commands do all set-up on a fresh machine with Python 3.11: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.docs-installed

.PHONY: demo test test-deploy bench lint format clean prism fuzz docs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml setup.py $(wildcard beam_dpsketch/*/*/*.c beam_dpsketch/*.c) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,bench,eval,yaml]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/beam-dpsketch demo --out reports/demo

# Prism, Beam's portable runner in Go, for tests/engines: `go install` once into
# ~/.cache/beam-dpsketch (about 1.5 min cold, a no-op later). Without Go the Prism tests skip.
prism:
	@bash scripts/prism.sh

test: $(STAMP) $(if $(shell command -v go),prism)
	$(BIN)/python -m pytest

# The package reaches workers that do not share this environment (tests/deploy): build the sdist
# and the wheel, build without a C compiler, and run a DP pipeline on the portable runner and on
# Prism whose SDK workers live in another venv and get the package only through Beam's staging.
# Needs Go (Beam's boot program, scripts/beam-boot.sh) and caches a worker venv
# (scripts/worker-venv.sh) in ~/.cache/beam-dpsketch. --setup_file needs `build` and
# setuptools >= 77 in the submitting environment, installed here.
DEPLOY_STAMP := $(VENV)/.deploy-installed

$(DEPLOY_STAMP): pyproject.toml | $(STAMP)
	$(BIN)/python -m pip install --quiet build 'setuptools>=77' wheel
	touch $(DEPLOY_STAMP)

test-deploy: $(STAMP) $(DEPLOY_STAMP)
	BEAM_DPSKETCH_DEPLOY_TESTS=1 $(BIN)/python -m pytest tests/deploy

# The API reference (HTML in docs/_build/html) from the numpy docstrings, after the check that
# every link inside the repository resolves. Nitpicky with warnings as errors: a reference that
# does not resolve fails the build.
$(DOCS_STAMP): docs/requirements.txt | $(STAMP)
	$(BIN)/python -m pip install --quiet -r docs/requirements.txt
	touch $(DOCS_STAMP)

docs: $(STAMP) $(DOCS_STAMP)
	$(BIN)/python docs/check_links.py
	$(BIN)/sphinx-build -b html -n -W --keep-going -q docs/api docs/_build/html

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
	rm -rf $(VENV) build *.egg-info .pytest_cache docs/_build docs/api/generated
