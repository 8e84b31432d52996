# Two commands matter: `make run` (the embedded service) and `make test` (everything CI runs).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
HASH   := $(shell cat pyproject.toml | cksum | cut -d' ' -f1)
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/gpuq

.PHONY: run test install install-dev lint labs clean

# The service alone (make run), or with the test and lint tools (make test).
install: $(VENV)/.runtime-$(HASH)
install-dev: $(VENV)/.dev-$(HASH)

$(VENV)/.runtime-$(HASH): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	rm -f $(VENV)/.runtime-*
	touch $@

$(VENV)/.dev-$(HASH): $(VENV)/.runtime-$(HASH)
	$(BIN)/pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.dev-*
	touch $@

## The embedded default: SQLite, local backend, scheduler loop; no Docker, Redis or PostgreSQL.
run: install
	deploy/run-embedded

## Every check CI runs, against the real PostgreSQL, Redis, Slurm lab and Chromium.
test: install-dev labs lint
	# On the server's own `postgres` database, which always exists (pytest creates test_gpuq).
	DATABASE_URL=$(dir $(TEST_DATABASE_URL))postgres SECRET_KEY=ci-only $(BIN)/python manage.py makemigrations --check --dry-run
	DATABASE_URL=$(TEST_DATABASE_URL) $(BIN)/pytest

lint: install-dev
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

## Labs the tests talk to: a real Slurm cluster + sshd on localhost, Debian's Chromium.
labs:
	deploy/slurm-lab/lab up
	deploy/browser-lab up

clean:
	rm -rf $(VENV) var
