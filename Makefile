# Developer entry points. `make test` is what CI runs (.ci/run).
# The venv is (re)installed only when pyproject.toml changes, tracked by stamp files: one for
# what running needs (`make demo`, `make dev`: the package without extras), one for the
# development toolchain on top of it (`make test`, `make lint`, ...: the `dev` extras).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed
# The real AG-UI client (npm) that tests/test_agui_client.py drives; pinned by its lock file.
JS_STAMP := tests/js/node_modules/.installed
# Packages type-checked with mypy --strict (see [tool.mypy] in pyproject.toml).
PACKAGES := otherone

.PHONY: venv js-deps run-venv demo test lint fmt dev record-histories clean bench bench-serve bench-capacity bench-waiting profile

venv: $(STAMP)

run-venv: $(RUN_STAMP)

$(RUN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e .
	touch $@

$(STAMP): $(RUN_STAMP)
	$(BIN)/python -m pip install -e '.[dev]'
	touch $@

js-deps:
	@if command -v npm >/dev/null; then $(MAKE) --no-print-directory $(JS_STAMP); \
	else echo "npm not found: the @ag-ui/client checks will be skipped"; fi

$(JS_STAMP): tests/js/package.json tests/js/package-lock.json
	npm ci --prefix tests/js --no-audit --no-fund --loglevel=error
	touch $@

demo: run-venv
	$(BIN)/otherone demo

# The JavaScript checks need npm; without it they are skipped locally (and fail in CI).
test: venv js-deps
	$(BIN)/python -m pytest -q
	$(MAKE) --no-print-directory lint

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict -p $(PACKAGES)

fmt: venv
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

dev: run-venv
	$(BIN)/otherone dev

record-histories: venv
	$(BIN)/python -m tests.histories.record

# Benchmarks (bench/, docs/benchmarks.md): our runtime vs the bare Temporal floor and the peers,
# on one in-memory dev server. The peers are installed into their own venv, never ours.
PEERS_VENV := bench/.venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed

# This project goes into the peers' venv too (resolved together with the peers' pins), so that
# bench/paired.py can run every contender in one process (`paired` with the peers).
$(PEERS_STAMP): bench/requirements-peers.txt pyproject.toml
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install -q -r bench/requirements-peers.txt -e .
	touch $@

bench: venv $(PEERS_STAMP)
	$(BIN)/python -m bench.run
	$(BIN)/python -m bench.serve_latency
	$(BIN)/python -m bench.capacity_cost
	$(BIN)/python -m bench.waiting_runs
	$(BIN)/python -m bench.prompt_cache

# What the fleet's capacity permits add per model and tool call, paired on SQLite and
# PostgreSQL, and their two store transactions alone (issue 42; ~2 min).
bench-capacity: venv
	$(BIN)/python -m bench.capacity_cost

# 10,000 runs waiting for a person on one worker: its memory idle, peak, waiting and after,
# and the time to wake them all (issue 46; ~20-40 min on 2 cores).
bench-waiting: venv
	$(BIN)/python -m bench.waiting_runs

# `otherone serve`: stored delta -> SSE client latency on SQLite and PostgreSQL (~1 min).
bench-serve: venv
	$(BIN)/python -m bench.serve_latency

# Where a turn's time goes: store calls per run, heartbeats, the event loop's hottest functions
# (cProfile), on an in-memory dev server (~1 min). Options: .venv/bin/python -m bench.profile -h
profile: venv
	$(BIN)/python -m bench.profile

# Keeps .otherone/ (local dev-server and run data): delete it by hand to reset state.
clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
	find . -name __pycache__ -type d -prune -not -path './.git/*' -exec rm -rf {} +
