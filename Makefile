PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test lint fmt bench replay

$(STAMP): requirements.txt requirements-dev.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py demo
	$(BIN)/python manage.py collectstatic --noinput -v 0
	$(BIN)/python -m controlplane.run

test: $(STAMP)
	$(BIN)/pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(BIN)/lint-imports
	$(BIN)/python manage.py check
	$(BIN)/python manage.py makemigrations --check --dry-run

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/python benchmarks/scheduler.py
	$(BIN)/python benchmarks/kueue_baseline.py
	$(BIN)/python benchmarks/kueue_tas.py
