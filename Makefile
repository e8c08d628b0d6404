# Everything builds .venv from nothing: a fresh machine needs only Python 3.11 and make.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo bench chaos lint typecheck clean phoenix agent-clis

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,otlp,otlp-grpc]'
	touch $(STAMP)

# Every gate, each with its reason in pyproject.toml: lint, format, the import layers, generated
# dashboards current, mypy --strict (src, tests, benchmarks), then the tests with a coverage floor,
# on two workers (they mostly wait on real processes and grace windows; tested with two).
test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks dashboards examples
	$(BIN)/ruff format --check src tests benchmarks dashboards examples
	$(BIN)/lint-imports
	$(BIN)/python -m dashboards.generate --check
	$(BIN)/mypy
	$(BIN)/python -m pytest -n auto --maxprocesses 2 --cov --cov-report=term --durations=15

demo: $(STAMP)
	$(BIN)/turnwatch demo --grace 2

bench: $(STAMP)
	$(BIN)/python -m benchmarks

# The chaos test at full size: 100 stops, each with a SIGKILL at a random moment, a fresh seed
# (printed in any failure; TURNWATCH_CHAOS_SEED=<seed> replays it).
chaos: $(STAMP)
	TURNWATCH_CHAOS_RUNS=100 TURNWATCH_CHAOS_SEED=$${TURNWATCH_CHAOS_SEED:-$$(date +%s)} \
		$(BIN)/python -m pytest tests/watchdog/test_chaos.py --timeout 1200 -p no:cacheprovider

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks dashboards examples
	$(BIN)/ruff format --check src tests benchmarks dashboards examples
	$(BIN)/lint-imports
	$(BIN)/python -m dashboards.generate --check

# Arize Phoenix, the real OTLP backend the trace tests export to, in a virtual environment of its
# own under ~/.cache/turnwatch (about 850 MB, kept between runs); without it those tests skip.
phoenix:
	$(PYTHON) -m tests.exporters.phoenix

# The real agent CLIs the watchdog's tests drive offline (Gemini CLI, Claude Code and Codex, from
# npm, about 760 MB, into .cache/agent-clis; versions as in tests/watchdog/agent_clis.py); without
# them those tests skip.
agent-clis:
	npm install --no-audit --no-fund --prefix .cache/agent-clis \
	  @google/gemini-cli@0.61.0 @anthropic-ai/claude-code@2.1.197 @openai/codex@0.171.0

typecheck: $(STAMP)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache .coverage .coverage.*
