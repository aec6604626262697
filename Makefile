# Two front doors: `make bench` (the main job) and `make test` (the tests).
# Both create and reuse .venv/ themselves. SGLang itself never goes into .venv: each
# release gets its own environment under .cache/ (see docs/environments.md).

PYTHON ?= python3.11
VENV   := .venv
STAMP  := $(VENV)/.dpbench-installed

.PHONY: bench test test-deps lint clean-results

$(STAMP): pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

bench: $(STAMP)
	$(VENV)/bin/dpbench bench

# What the tests need beyond .venv: the SGLang release environments they run, with the
# simulated-forward server's extras, two built at once
# (built once, cached in .cache/) and Debian's Chromium for the dashboard's browser tests.
# Chromium installs (as root) while the environments build: apt waits on the network and
# the disk, pip and compileall on the CPU.
ENVS := $(VENV)/bin/dpbench env create --server --jobs 2 0.5.16 0.5.17 0.5.23
test-deps: $(STAMP)
	@if command -v chromium >/dev/null 2>&1; then $(ENVS); \
	elif [ "$$(id -u)" != 0 ]; then echo "browser tests need Debian's chromium: sudo apt-get install chromium"; $(ENVS); \
	else \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } & apt=$$!; \
	  $(ENVS) || { wait $$apt; exit 1; }; \
	  wait $$apt || { echo "apt-get could not install chromium"; exit 1; }; \
	fi

# Four workers on two cores: the simulated-forward server tests spend most of their time
# waiting on the simulated clock (the suite used ~54 % of two cores with three workers).
# Whole files per worker (a file's shared server starts once), the slowest files first
# (tests/conftest.py; xdist's own order, most tests first, left the servers to the end).
# Tests marked quiet hold a real-clock run against a reference: beside busy workers the run
# measures the machine, so they run after the parallel suite, alone (tests/test_server_virtual_vs_real.py).
test: test-deps
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/python -m pytest -n 4 --dist loadfile --no-loadscope-reorder --durations=40 -m 'not quiet'
	$(VENV)/bin/python -m pytest -m quiet --durations=5

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

clean-results:
	rm -rf results/* dashboard/site dashboard/html && touch results/.gitkeep
