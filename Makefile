# Two commands on a fresh machine: `make demo` and `make test`.
# The venv's interpreter: Debian's own CPython 3.11 where the machine has it with its venv
# module, the build the container image runs (Dockerfile); else python3.11 from PATH. A
# build from source such as pyenv's lacks profile-guided and link-time optimisation and
# costs Courier about a tenth more CPU per request (benchmarks/interpreter.py).
# `make PY=/path/to/python3.11` picks another.
PY ?= $(shell for p in /usr/bin/python3.11 python3.11; do \
	"$$p" -c 'import ensurepip, venv' >/dev/null 2>&1 && { echo "$$p"; exit 0; }; \
	done; echo python3.11)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint typecheck test-all test-unit test-e2e test-tools clean clean-images lock soak soak-kill node-deps browser-deps image-test browser-test pg-deps test-pg

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
	$(BIN)/python -m app.ops.demo

lint: install
	$(BIN)/ruff check app tests $(wildcard benchmarks)
	$(BIN)/ruff format --check app tests $(wildcard benchmarks)

typecheck: install
	$(BIN)/mypy

# Two tiers (tests/README.md): tests/unit runs in-process, with no server, simulator,
# browser, container or subprocess (its conftest refuses one), in under 2 minutes;
# tests/e2e runs the real servers, clients, browser, container and processes.
test-unit: install pg-deps
	$(BIN)/python -m pytest -q tests/unit

test-e2e: install node-deps browser-deps test-tools
	$(BIN)/python -m pytest -q tests/e2e

# Both tiers in one pytest run, the fast one first: one collection and one simulator
# process, where two runs would pay each twice.
test-all: install node-deps browser-deps test-tools pg-deps
	COURIER_REQUIRE_POSTGRES=1 $(BIN)/python -m pytest -q tests/unit tests/e2e

# The store's tests on PostgreSQL run against a throwaway cluster of Debian's own server
# (tests/support/postgres.py: initdb in /tmp, a loopback port, removed afterwards). Installed
# here when missing, as root with apt; the package's own `main` cluster is not used, and
# policy-rc.d (exit 101, only while installing, only if the machine has none) keeps apt from
# starting it in a container without an init system. Without it those tests skip, except
# under `make test`, where COURIER_REQUIRE_POSTGRES=1 makes them fail.
pg-deps:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing postgresql for the store's tests on PostgreSQL"; \
	    policy=""; if [ ! -e /usr/sbin/policy-rc.d ]; then \
	      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && \
	      chmod 755 /usr/sbin/policy-rc.d && policy=1; fi; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq --no-install-recommends postgresql >/dev/null; }; rc=$$?; \
	    [ -z "$$policy" ] || rm -f /usr/sbin/policy-rc.d; \
	    [ $$rc -eq 0 ] || echo "apt-get could not install postgresql: the store's PostgreSQL tests will skip"; \
	  else echo "no PostgreSQL server (apt-get install postgresql): the store's PostgreSQL tests will skip"; fi; }

# The tests that run on PostgreSQL alone.
test-pg: install pg-deps
	COURIER_REQUIRE_POSTGRES=1 $(BIN)/python -m pytest -q tests -k postgres

# tests/e2e/test_ports.py stands up, in a network namespace of its own, the DNAT rule podman writes
# for a published port: iptables and ip (iproute2); tests/e2e/test_deploy_files.py checks the
# shipped nginx config with `nginx -t` (nginx-light, openssl). Installed when missing, else
# those cases skip.
test-tools:
	@missing=""; command -v iptables >/dev/null 2>&1 || missing=" iptables"; \
	command -v ip >/dev/null 2>&1 || missing="$$missing iproute2"; \
	{ command -v nginx || test -x /usr/sbin/nginx; } >/dev/null 2>&1 || missing="$$missing nginx-light"; \
	command -v openssl >/dev/null 2>&1 || missing="$$missing openssl"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing$$missing for tests/e2e/test_ports.py and tests/e2e/test_deploy_files.py"; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq --no-install-recommends $$missing >/dev/null; } \
	    || echo "apt-get could not install$$missing: the cases that need them will skip"; \
	  else echo "$$missing not found: the cases that need them will skip"; fi; \
	fi

# kill -9 soak (issue 13): 20 kills, each a server restart; prints its counts, exits 1 on
# a lost row, an unrepaired transcript, a held lease or a replay that differs.
soak-kill: install
	$(BIN)/python benchmarks/soak_kill.py --kills 20

# The JavaScript client tests (Vercel AI SDK) need node and their npm packages. Without
# node they skip with that reason, so a machine without it still runs everything else.
NODE_DIR := tests/node
node-deps:
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
	  if [ ! -d $(NODE_DIR)/node_modules ] || \
	     [ $(NODE_DIR)/package-lock.json -nt $(NODE_DIR)/node_modules ]; then \
	    echo "installing the npm clients for tests/node"; \
	    (cd $(NODE_DIR) && npm ci --no-audit --no-fund --loglevel=error) && \
	      touch $(NODE_DIR)/node_modules; \
	  fi; \
	else \
	  echo "node/npm not found: the JavaScript client tests (openai Node SDK, Vercel AI SDK) will skip; install nodejs and npm to run them"; \
	fi

# The container image is tested where podman can be installed (it says NOT RUN where it
# cannot); the kill -9 soak runs with 20 kills.
test: lint typecheck test-all soak-kill image-test

# Builds the image from a clean export of HEAD and checks it in podman (deploy/image-test.sh
# says why each setup step exists). Installs podman, runc, debootstrap and podman-compose when
# missing. Part of `test`: measured here at 65 s with the base and dependency layers cached,
# 2.5 min after a source change, 7.8 min from nothing on a busy 2-core machine. Exit 3 from the
# script means podman cannot be set up here: said plainly, and not a failure. It reads its own
# containers configuration, never /etc/containers, and keeps podman's storage (about 1.1 GB)
# in /var/cache/courier-image-test and its run state in /run/courier-image-test.
image-test: install
	@deploy/image-test.sh || { rc=$$?; if [ $$rc -eq 3 ]; then \
	  echo "image-test: NOT RUN: the container image was not tested on this machine"; \
	else exit $$rc; fi; }

# Removes what image-test leaves: every image, container, volume and network in its podman
# storage, the debootstrapped base, and the two directories (the packages it installed stay).
clean-images:
	deploy/image-test.sh --clean

# The console in Debian's chromium (headless, via Playwright); screenshots land in
# test-output/console/. Installs chromium when missing.
# Without chromium the console's browser tests skip (and say so); `make test` installs it
# where it can, so CI runs them.
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium for the console tests"; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null; } \
	    || echo "apt-get could not install chromium: the console's browser tests will skip"; \
	  else echo "no chromium: the console's browser tests will skip (apt-get install chromium)"; fi; }

browser-test: install browser-deps
	$(BIN)/python -m pytest -q tests/e2e/browser

# A bounded soak (a few hundred mixed, concurrent turns with tools and hostile bodies):
# prints 5xx count, escapes, lost rows, descriptor and RSS growth. Not part of `make test`.
soak: install
	$(BIN)/python benchmarks/soak.py

# Two locks: everything for development, and the runtime subset the container image installs,
# constrained to the same versions so the image runs exactly what the tests ran. uv is pinned
# in the test extra, so `make install` brings it and this works from a fresh clone; uv keeps
# the versions already in the lock files unless pyproject.toml asks for others.
lock: install
	$(BIN)/uv pip compile pyproject.toml --extra test --generate-hashes --python-version 3.11 -o requirements.lock
	$(BIN)/uv pip compile pyproject.toml --generate-hashes --python-version 3.11 -c requirements.lock -o requirements-runtime.lock

clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache $(NODE_DIR)/node_modules
