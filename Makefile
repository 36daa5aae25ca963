# Two commands on a fresh machine: `make demo` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint typecheck unit soak clean lock

# The terminal tool runs commands under bubblewrap: without `bwrap` the tool is not offered
# and its sandbox tests fail, so a fresh Debian machine gets it here. A no-op once present.
install: $(STAMP)
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing bubblewrap (bwrap) for the terminal sandbox"; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null; } \
	    || { echo "apt-get could not install bubblewrap; install it and re-run"; exit 1; }; \
	  else \
	    echo "courier needs bwrap (Debian/Ubuntu package bubblewrap) for the terminal sandbox;"; \
	    echo "install it as root, e.g. 'sudo apt-get install bubblewrap', then re-run"; \
	    exit 1; \
	  fi; }

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

# kill -9 soak (issue 13): 20 kills, each a server restart; prints its counts, exits 1 on
# a lost row, an unrepaired transcript, a held lease or a replay that differs.
soak: install
	$(BIN)/python benchmarks/soak_kill.py --kills 20

test: lint typecheck unit soak

lock:
	$(BIN)/uv pip compile pyproject.toml --extra test --generate-hashes --python-version 3.11 -o requirements.lock

clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache
