# gpupool — `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Tests run against the real PostgreSQL and Redis (override to point elsewhere).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/gpupool
TEST_REDIS_URL ?= redis://127.0.0.1:6379
TEST_ENV := DATABASE_URL=$(TEST_DATABASE_URL) CELERY_BROKER_URL=$(TEST_REDIS_URL)/0 \
	CACHE_URL=$(TEST_REDIS_URL)/1 GPUPOOL_VAR_DIR=$(CURDIR)/var/test
PYTEST_ARGS ?= -n 2

.PHONY: help venv demo test soak lint format bench lock clean

help: ## Show this help
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --require-hashes \
		-r requirements.txt -r requirements-dev.txt
	touch $(STAMP)

venv: $(STAMP) ## Create the virtualenv and install the pinned dependencies

demo: $(STAMP) ## Run the portal with demo data on embedded defaults (SQLite, no Redis)
	$(BIN)/python manage.py migrate --no-input -v0
	$(BIN)/python manage.py seed_demo
	$(BIN)/python manage.py run_demo

test: $(STAMP) lint ## Run linters and the whole test suite against PostgreSQL and Redis
	$(TEST_ENV) $(BIN)/pytest $(PYTEST_ARGS) $(ARGS)

soak: $(STAMP) ## The books-match-the-cluster stress, 50 rounds, printing each round's figures
	GPUPOOL_SOAK_ROUNDS=$${GPUPOOL_SOAK_ROUNDS:-50} $(TEST_ENV) $(BIN)/pytest -p no:xdist -q -s \
		tests/clusters/test_books_soak.py $(ARGS)

lint: $(STAMP) ## ruff, import contracts, mypy on the pure cores, migrations up to date
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy
	$(BIN)/python manage.py makemigrations --check --dry-run -v0

format: $(STAMP) ## Apply ruff's fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP) ## Run the benchmarks and print their figures
	$(TEST_ENV) $(BIN)/python bench/run_all.py $(ARGS)

lock: $(STAMP) ## Re-resolve requirements*.in into hash-pinned requirements*.txt
	$(BIN)/python -m pip install -q pip-tools
	$(BIN)/pip-compile -q --strip-extras --generate-hashes -o requirements.txt requirements.in
	$(BIN)/pip-compile -q --strip-extras --generate-hashes -o requirements-dev.txt requirements-dev.in
	sed -i '/^--extra-index-url file:/d; /^--find-links \//d' requirements.txt requirements-dev.txt

clean: ## Remove the virtualenv and local state (demo database, broker folders)
	rm -rf $(VENV) var staticfiles
