PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run stack test lint fmt bench replay

$(STAMP): requirements.txt requirements-dev.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $(STAMP)

install: $(STAMP)

# The embedded demo on this machine, the one place DEBUG is on. Its keys are generated into
# var/ on first use (controlplane/keys.py); ACCELPLANE_PORT=8140 make run serves another port.
RUN_ENV := DEBUG=$${DEBUG:-true}
run: $(STAMP)
	$(RUN_ENV) $(BIN)/python manage.py migrate --noinput
	$(RUN_ENV) $(BIN)/python manage.py demo
	$(RUN_ENV) $(BIN)/python manage.py collectstatic --noinput -v 0
	$(RUN_ENV) $(BIN)/python -m controlplane.run

# The full stack without Docker: PostgreSQL and Redis from this machine (see .ci/run). DEBUG
# off as in production; the keys are this machine's from var/ unless set; plain HTTP.
STACK_ENV := DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/accelplane} \
	REDIS_URL=$${REDIS_URL:-redis://127.0.0.1:6379/0} \
	SECRET_KEY=$${SECRET_KEY:-$$($(BIN)/python -m controlplane.keys secret-key)} \
	ACCELPLANE_ENCRYPTION_KEY=$${ACCELPLANE_ENCRYPTION_KEY:-$$($(BIN)/python -m controlplane.keys encryption-key)} \
	SECURE_SSL_REDIRECT=false SECURE_COOKIES=false
stack: $(STAMP)
	createdb -h 127.0.0.1 -U postgres accelplane 2>/dev/null || true
	$(STACK_ENV) $(BIN)/python manage.py migrate --noinput
	$(STACK_ENV) $(BIN)/python manage.py demo
	$(STACK_ENV) $(BIN)/python manage.py collectstatic --noinput -v 0
	$(STACK_ENV) $(BIN)/python -m controlplane.run --stack

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

replay: $(STAMP)
	$(BIN)/python manage.py replay scenarios/*.yaml

bench: $(STAMP)
	$(BIN)/python benchmarks/scheduler.py
	$(BIN)/python benchmarks/kueue_baseline.py
	$(BIN)/python benchmarks/kueue_tas.py
	$(BIN)/python benchmarks/deep_queue.py
	$(BIN)/python benchmarks/api_load.py
	$(BIN)/python benchmarks/ws_fanout.py
