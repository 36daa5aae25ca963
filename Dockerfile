# Courier as a container: non-root, read-only code, one writable volume at /data.
#
#   docker build -t courier .
#   docker run -d --name courier -p 127.0.0.1:8642:8642 -v courier-data:/data \
#     -e COURIER_API_KEY_FILE=/run/secrets/courier_api_key ... courier
#
# The terminal tool's sandbox (bubblewrap) needs two options beyond a container's defaults;
# without them the tool is not offered and the log says why (docs/operations.md, "The terminal
# sandbox in a container").
ARG BASE=debian:bookworm-slim

# -- build: a venv filled from the hash-pinned runtime lock, then the source -----------------
FROM ${BASE} AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/courier/venv
# The lock alone first: a source change then reuses this (slow) layer instead of
# reinstalling every dependency.
COPY requirements-runtime.lock /tmp/requirements-runtime.lock
# The secrets are optional and absent in an ordinary build; `make image-test` uses them to
# lend this step the host's pip configuration and CA bundle (read-only, never in a layer),
# which a network with a TLS-inspecting proxy or a private index needs.
RUN --mount=type=secret,id=pip_conf,target=/etc/pip.conf \
    --mount=type=secret,id=pip_user_conf,target=/root/.config/pip/pip.conf \
    --mount=type=secret,id=ca_bundle,target=/etc/ssl/certs/ca-certificates.crt \
    /opt/courier/venv/bin/pip install --no-cache-dir --no-compile --require-hashes \
      -r /tmp/requirements-runtime.lock
# The app is copied, not pip-installed: building it as a wheel would fetch setuptools
# unpinned from the index, the one dependency the lock could not vouch for.
COPY app /opt/courier/app
# Compiled now, as root: at run time the code is read-only and every import would
# otherwise recompile in memory on each start.
RUN /opt/courier/venv/bin/python -m compileall -q /opt/courier/app /opt/courier/venv \
 && printf '#!/bin/sh\nexec /opt/courier/venv/bin/python -P -m app.cli "$@"\n' \
      > /opt/courier/courier && chmod 0755 /opt/courier/courier

# -- runtime ----------------------------------------------------------------------------------
FROM ${BASE}
# bubblewrap is the terminal sandbox; util-linux's prlimit caps its process count;
# ca-certificates lets commands the agent runs (curl, git) verify TLS when network is on.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 bubblewrap ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# A fixed uid so a bind-mounted /data can be chowned ahead of time; override with
# --build-arg COURIER_UID=... to match a host account.
ARG COURIER_UID=10001
ARG COURIER_GID=10001
RUN groupadd --system --gid "${COURIER_GID}" courier \
 && useradd --system --uid "${COURIER_UID}" --gid courier --home-dir /data --no-create-home \
      --shell /usr/sbin/nologin courier \
 && install -d -o courier -g courier -m 0700 /data
# Root-owned and not writable by the service user: a tool or an exploit running as
# courier cannot rewrite the code the next restart would load.
COPY --from=build --chown=root:root /opt/courier /opt/courier
RUN chmod -R go-w /opt/courier && ln -s /opt/courier/courier /usr/local/bin/courier
ENV PATH=/opt/courier/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONPATH=/opt/courier \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    COURIER_DATA_DIR=/data \
    COURIER_HOST=0.0.0.0 \
    COURIER_PORT=8642 \
    COURIER_LOG_FORMAT=json \
    COURIER_DRAIN_TIMEOUT_S=5
# The drain is 5 s here, not the 30 s default: `docker stop` sends SIGKILL after 10 s, which
# would land mid-drain. Compose (deploy/docker-compose.yml) sets 30 s with a longer grace.
# 0.0.0.0 is the container's own interface: reachable only through a published port, which
# deploy/docker-compose.yml publishes on 127.0.0.1. No key is baked in: COURIER_API_KEY or
# COURIER_API_KEY_FILE must come from the runtime, and the server refuses to start without.
VOLUME ["/data"]
WORKDIR /opt/courier
USER courier
EXPOSE 8642
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python3", "-c", "import os,sys,urllib.request as u; sys.exit(0 if u.urlopen('http://127.0.0.1:%s/health' % os.environ.get('COURIER_PORT','8642'), timeout=4).status == 200 else 1)"]
# uvicorn drains on SIGTERM for COURIER_DRAIN_TIMEOUT_S (5 s above); `docker stop -t`
# and compose's stop_grace_period must be longer, or the kill lands mid-drain.
STOPSIGNAL SIGTERM
CMD ["courier", "serve"]
