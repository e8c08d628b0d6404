# Everything builds .venv from nothing: a fresh machine needs only Python 3.11 and make.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo bench lint typecheck clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,otlp]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks dashboards
	$(BIN)/python -m dashboards.generate --check
	$(BIN)/mypy
	$(BIN)/python -m pytest

demo: $(STAMP)
	$(BIN)/turnwatch demo --grace 2

bench: $(STAMP)
	$(BIN)/python -m benchmarks

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks dashboards
	$(BIN)/python -m dashboards.generate --check
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
