# agentworker — one Makefile for people and CI.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
KEEP   ?=
# pytest-xdist workers of `make test` (auto: one per core; 0: no xdist, one process).
WORKERS ?= auto

.PHONY: demo demo-fleet test test-fast test-min wheel-check lint typecheck bench bench-smoke chaos check clean help \
        redis-check python-check flower

help:  ## List the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

# A .venv whose python is gone or older than 3.11 is removed before make looks at it, so
# it is rebuilt rather than reused.
VENV_OK := $(shell test ! -d $(VENV) || $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
             >/dev/null 2>&1 && echo yes)
ifneq ($(VENV_OK),yes)
  $(info $(VENV) is broken or older than Python 3.11: rebuilding it.)
  $(shell rm -rf $(VENV))
endif

# Python >= 3.11 first, with a clear message.
python-check:
	@command -v $(PYTHON) >/dev/null 2>&1 || { \
	  echo "$(PYTHON) not found: agentworker needs Python >= 3.11 (make PYTHON=python3.12)."; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "agentworker needs Python >= 3.11; $(PYTHON) is $$($(PYTHON) -V 2>&1)."; \
	  echo "Install 3.11+ and run: make PYTHON=python3.11 (or python3.12, ...)"; exit 1; }

$(STAMP): pyproject.toml | python-check
	@test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip >/dev/null
	@$(PY) -m pip install -q -e '.[all,dev]'
	@touch $(STAMP)

demo: python-check $(STAMP)  ## Run the offline demo: one order-support turn, printed as it happens
	@$(PY) -m examples.demo

# A module stays on one worker, and the suites that start fleets of processes share one
# group so they run one after another (tests/conftest.py).
test: python-check $(STAMP) redis-check  ## Run the test suite (unit, contract, e2e, a local Redis Cluster; not chaos or bench)
	@$(PY) -m pytest -n $(WORKERS) --dist loadgroup

test-fast: python-check $(STAMP)  ## Core tests, the store contract on the in-memory store, repo checks (under a minute)
	@$(PY) -m pytest -m fast tests/core tests/stores tests/repo

redis-check:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "redis-server is missing; the Redis and end-to-end tests start their own."; \
	  echo "Install it: apt-get install redis-server (Debian/Ubuntu), brew install redis (macOS)."; \
	  exit 1; }

wheel-check: python-check $(STAMP) redis-check  ## Build the wheel, install it in a fresh venv, run a fleet from it
	@$(PY) -m tests.repo.install.wheel_check

test-min: python-check $(STAMP) redis-check  ## The tests (not chaos/bench) at the lowest declared versions
	@$(PY) -m tests.repo.install.min_versions

lint: $(STAMP)  ## ruff
	@$(VENV)/bin/ruff check .

typecheck: $(STAMP)  ## mypy (strict) on runner_core, stores, agentworker, examples and benchmarks
	@$(VENV)/bin/mypy

check: lint typecheck test  ## Everything CI cares about

demo-fleet: python-check $(STAMP) redis-check  ## Two workers + beat on a local Redis run 50 turns (KEEP=1: leave it running)
	@$(PY) -m examples.fleet $(if $(KEEP),--keep)

flower: $(STAMP)  ## Flower on the configured broker (FLOWER_PASSWORD required, FLOWER_USER=ops)
	@test -n "$$FLOWER_PASSWORD" || { \
	  echo "FLOWER_PASSWORD is not set: Flower is never started without basic auth."; exit 1; }
	@case "$${FLOWER_USER:-ops}:$$FLOWER_PASSWORD" in *,*) \
	  echo "FLOWER_USER/FLOWER_PASSWORD must not contain ',' (Flower splits its credentials on it)."; \
	  exit 1;; esac
	@FLOWER_BASIC_AUTH="$${FLOWER_USER:-ops}:$$FLOWER_PASSWORD" \
	  exec $(VENV)/bin/celery -A agentworker flower --port=$${FLOWER_PORT:-5555} --address=$${FLOWER_ADDRESS:-127.0.0.1}

bench: $(STAMP) redis-check  ## Benchmarks (not tests): in-memory, Redis and fleet figures
	@$(PY) -m benchmarks.step_bench
	@$(PY) -m benchmarks.async_bench
	@$(PY) -m benchmarks.tools_bench
	@$(PY) -m benchmarks.mcp_bench
	@$(PY) -m benchmarks.producer_bench
	@$(PY) -m benchmarks.redis_bench
	@$(PY) -m benchmarks.sweep_bench
	@$(PY) -m benchmarks.cluster_bench
	@$(PY) -m benchmarks.fleet_bench

bench-smoke: $(STAMP) redis-check  ## ~20 s of the two step benches: fails on a ratio twice its target
	@$(PY) -m benchmarks.smoke

chaos: $(STAMP) redis-check  ## Slow crash and soak tests (SIGKILL storms on a real fleet)
	@$(PY) -m pytest -m chaos tests/chaos

clean:  ## Remove the venvs and caches
	rm -rf $(VENV) .venv-min .venv-min-mcp .pytest_cache .mypy_cache .ruff_cache build dist
