# agentworker — one Makefile for people and CI.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo demo-fleet test lint typecheck bench chaos check clean help redis-check flower

help:  ## List the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

$(STAMP): pyproject.toml
	@test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip >/dev/null
	@$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)  ## Run the offline demo: one order-support turn, printed as it happens
	@$(PY) -m agentworker.demo

test: $(STAMP) redis-check  ## Run the test suite (unit, contract, e2e; not chaos or bench)
	@$(PY) -m pytest

redis-check:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "redis-server is missing; the Redis and end-to-end tests start their own."; \
	  echo "Install it: apt-get install redis-server (Debian/Ubuntu), brew install redis (macOS)."; \
	  exit 1; }


lint: $(STAMP)  ## ruff
	@$(VENV)/bin/ruff check .

typecheck: $(STAMP)  ## mypy (strict) on runner_core and stores
	@$(VENV)/bin/mypy

check: lint typecheck test  ## Everything CI cares about

demo-fleet: $(STAMP) redis-check  ## Two Celery workers + beat on a local Redis run 50 turns
	@$(PY) -m agentworker.fleet

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
	@$(PY) -m benchmarks.redis_bench
	@$(PY) -m benchmarks.fleet_bench

chaos: $(STAMP) redis-check  ## Slow crash and soak tests (SIGKILL storms on a real fleet)
	@$(PY) -m pytest -m chaos tests/chaos

clean:  ## Remove the venv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
