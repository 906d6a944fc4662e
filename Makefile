# gpupool — `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

# Tests run against the real PostgreSQL and Redis (override to point elsewhere).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/gpupool
TEST_REDIS_URL ?= redis://127.0.0.1:6379
TEST_ENV := DATABASE_URL=$(TEST_DATABASE_URL) CELERY_BROKER_URL=$(TEST_REDIS_URL)/0 \
	CACHE_URL=$(TEST_REDIS_URL)/1 GPUPOOL_VAR_DIR=$(CURDIR)/var/test
PYTEST_ARGS ?= -n 2

.PHONY: help system-packages venv demo demo-sso test soak fuzz lint format bench lock clean

help: ## Show this help
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

# The `gpupool` CLI (cli/) goes in last, editable, from this checkout: its dependencies are
# already pinned above, and wheel (pinned too) builds it without reaching an index.
# python-ldap (LDAP sign-in) has no wheels: it builds against OpenLDAP's and SASL's headers,
# which a fresh Debian machine gets here (as root, or through sudo) before the install.
LDAP_HEADERS := /usr/include/ldap.h /usr/include/sasl/sasl.h
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

system-packages: ## Install the Debian packages the virtualenv builds against (LDAP headers)
	@if ! ls $(LDAP_HEADERS) >/dev/null 2>&1; then \
		echo "installing libldap2-dev and libsasl2-dev (python-ldap builds against them)"; \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq libldap2-dev libsasl2-dev >/dev/null; \
	fi

$(STAMP): requirements.txt requirements-dev.txt cli/pyproject.toml
	@$(MAKE) --no-print-directory system-packages
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --require-hashes \
		-r requirements.txt -r requirements-dev.txt
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
		-e ./cli
	touch $(STAMP)

venv: $(STAMP) ## Create the virtualenv, install the pinned dependencies and the gpupool CLI

# The demo needs the portal's own dependencies only (requirements.txt): no test tools, linters
# or the CLI's build. A full install (make venv / make test) covers it too.
$(DEMO_STAMP): requirements.txt
	@$(MAKE) --no-print-directory system-packages
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	if [ -f $(STAMP) ] && [ $(STAMP) -nt requirements.txt ]; then :; else \
		$(BIN)/python -m pip install -q --disable-pip-version-check --require-hashes \
			-r requirements.txt; fi
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP) ## Run the portal with demo data on embedded defaults (SQLite, no Redis); port 8000 (DEMO_PORT=… make demo)
	$(BIN)/python manage.py migrate --no-input -v0
	$(BIN)/python manage.py seed_demo
	$(BIN)/python manage.py seed_demo_history
	$(BIN)/python manage.py run_demo

# The test OpenID provider (panva/oidc-provider under Node) for the sign-in tests and demo-sso.
IDP := tests/identity/idp
$(IDP)/node_modules/.installed: $(IDP)/package-lock.json
	npm ci --prefix $(IDP) --no-audit --no-fund --silent
	touch $@

demo-sso: $(DEMO_STAMP) $(IDP)/node_modules/.installed ## The demo plus a test OpenID provider: "Sign in with Demo SSO"
	$(BIN)/python manage.py migrate --no-input -v0
	$(BIN)/python manage.py seed_demo
	$(BIN)/python manage.py seed_demo_history
	$(BIN)/python manage.py seed_demo_sso
	$(BIN)/python manage.py run_demo --sso

test: $(STAMP) $(IDP)/node_modules/.installed lint ## Run linters and the whole test suite against PostgreSQL and Redis
	$(TEST_ENV) $(BIN)/pytest $(PYTEST_ARGS) $(ARGS)

soak: $(STAMP) ## The books stress (50 rounds), then the fault suite's full tier, printing figures
	GPUPOOL_SOAK_ROUNDS=$${GPUPOOL_SOAK_ROUNDS:-50} $(TEST_ENV) $(BIN)/pytest -p no:xdist -q -s \
		tests/clusters/test_books_soak.py $(ARGS)
	$(BIN)/python -m tests.soak.run --tier $${GPUPOOL_SOAK_TIER:-full} $(SOAK_ARGS)

fuzz: $(STAMP) ## schemathesis over every API operation, long: 200 cases each, 40-step chains, a new seed
	GPUPOOL_FUZZ_EXAMPLES=$${GPUPOOL_FUZZ_EXAMPLES:-200} GPUPOOL_FUZZ_STEPS=$${GPUPOOL_FUZZ_STEPS:-40} \
		GPUPOOL_FUZZ_SEED=$${GPUPOOL_FUZZ_SEED:-$$RANDOM$$RANDOM} $(TEST_ENV) $(BIN)/pytest $(PYTEST_ARGS) \
		-q tests/portal/test_api_schema.py $(ARGS)

lint: $(STAMP) ## ruff, import contracts, mypy on the pure cores and the CLI, migrations up to date
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
