# Two commands on a fresh machine: `make demo` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint typecheck unit clean lock

install: $(STAMP)

# The stamp depends on the lock and the project file, so a re-run after a dependency
# change reinstalls, and a re-run without one does nothing.
$(STAMP): requirements.lock pyproject.toml
	@command -v $(PY) >/dev/null 2>&1 || { echo "courier needs $(PY) on PATH"; exit 1; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q --require-hashes -r requirements.lock
	$(BIN)/python -m pip install -q --no-deps -e .
	@touch $(STAMP)

demo: install
	$(BIN)/python -m app.demo

lint: install
	$(BIN)/ruff check app tests $(wildcard benchmarks)
	$(BIN)/ruff format --check app tests $(wildcard benchmarks)

typecheck: install
	$(BIN)/mypy

unit: install
	$(BIN)/python -m pytest -q

test: lint typecheck unit

lock:
	$(BIN)/uv pip compile pyproject.toml --extra test --generate-hashes --python-version 3.11 -o requirements.lock

clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache
