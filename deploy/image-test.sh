#!/usr/bin/env bash
# Build the container image from a clean export of HEAD and test it with podman, on a machine
# where no registry image can be pulled. What each step is for:
#   - podman runs as root with runc: crun fails on hosts with hybrid cgroups (like this one);
#   - a containers configuration of this run's own (CONTAINERS_CONF, CONTAINERS_STORAGE_CONF),
#     never the machine's /etc/containers: `default_ulimits = []`, since podman's default
#     nofile ulimit is refused inside some sandboxes, and podman's storage, volumes and
#     networks under $CACHE, so everything the test leaves is in one place `--clean` empties;
#   - debian:bookworm-slim is debootstrapped here and imported under that name, cached in
#     $CACHE so later runs skip the minute it takes;
#   - the pip step borrows the host's pip configuration and CA bundle as build secrets
#     (read-only, never in a layer): this network inspects TLS, elsewhere nobody needs them.
# Exit 0: image built and every check in tests/e2e/image/ passed. Exit 3: podman cannot be set up.
# `deploy/image-test.sh --clean` (make clean-images) removes what runs left: $CACHE and $RUN.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${COURIER_IMAGE_TEST_CACHE:-/var/cache/courier-image-test}
# podman's run state (mounts, locks) where the machine keeps its own, under /run, which a
# reboot empties; apart from the machine's, so neither podman takes the other's for its own.
RUN=${COURIER_IMAGE_TEST_RUN:-/run/courier-image-test}
# One tag per checkout: two checkouts testing at once must not run each other's image.
IMAGE=${COURIER_IMAGE:-localhost/courier:it-$(printf %s "$REPO" | sha1sum | cut -c1-8)}
PODMAN=(podman --runtime runc)

say() { printf 'image-test: %s\n' "$*"; }
cannot() { say "SKIPPED: $*"; exit 3; }

# Every podman below, and those tests/e2e/image and podman-compose start, read these two files
# and nothing in /etc/containers or /usr/share/containers: the machine's setup stays as it
# was, and a podman the operator runs by hand never sees the test's images.
conf_dir=$(mktemp -d /tmp/courier-image-conf.XXXXXX)
context=""
trap 'rm -rf "$conf_dir" ${context:+"$context"}' EXIT
cat >"$conf_dir/containers.conf" <<CONF
[containers]
default_ulimits = []

[engine]
tmp_dir = "$RUN/libpod"

[network]
network_config_dir = "$CACHE/networks"
CONF
cat >"$conf_dir/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$CACHE/storage"
runroot = "$RUN/storage"
CONF
export CONTAINERS_CONF="$conf_dir/containers.conf"
export CONTAINERS_STORAGE_CONF="$conf_dir/storage.conf"

if [ "${1:-}" = "--clean" ]; then
  # `system reset` unmounts and deletes every container, image, volume and network of this
  # storage (never the machine's own); the directories go after it, or alone without podman.
  if command -v podman >/dev/null 2>&1 && [ -d "$CACHE/storage" ]; then
    "${PODMAN[@]}" system reset --force >/dev/null 2>&1 \
      || say "podman system reset failed; removing the directories"
  fi
  # CNI keeps its address bookkeeping in /var/lib/cni/networks/<network> whatever the
  # configuration says; the compose test's networks are ours by name.
  rm -rf "$CACHE" "$RUN" /var/lib/cni/networks/courier-it-*
  say "removed $CACHE and $RUN"
  exit 0
fi

# -- tools ---------------------------------------------------------------------------------
missing=()
for tool in podman runc debootstrap podman-compose; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    cannot "needs ${missing[*]} (Debian: apt-get install ${missing[*]}) and root"
  fi
  say "installing ${missing[*]}"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } \
    || cannot "apt-get could not install ${missing[*]}"
fi
[ "$(id -u)" -eq 0 ] || cannot "runs rootful podman, so it needs root"

mkdir -p "$CACHE/networks" "$RUN"
"${PODMAN[@]}" info >/dev/null 2>&1 || cannot "podman is installed but does not run here: $("${PODMAN[@]}" info 2>&1 | tail -1)"

# -- base image ----------------------------------------------------------------------------
mkdir -p "$CACHE"
# Serialised: two checkouts debootstrapping into one cache directory would corrupt it.
exec 9>"$CACHE/lock"
flock 9
if ! "${PODMAN[@]}" image exists debian:bookworm-slim; then
  if [ ! -s "$CACHE/bookworm-minbase.tar" ]; then
    say "debootstrapping bookworm into $CACHE (about a minute, once)"
    rm -rf "$CACHE/rootfs"
    debootstrap --variant=minbase bookworm "$CACHE/rootfs" http://deb.debian.org/debian \
      >"$CACHE/debootstrap.log" 2>&1 || { tail -5 "$CACHE/debootstrap.log"; exit 1; }
    tar -C "$CACHE/rootfs" -cf "$CACHE/bookworm-minbase.tar.tmp" .
    mv "$CACHE/bookworm-minbase.tar.tmp" "$CACHE/bookworm-minbase.tar"
    rm -rf "$CACHE/rootfs"
  fi
  "${PODMAN[@]}" import -q "$CACHE/bookworm-minbase.tar" debian:bookworm-slim >/dev/null
  say "imported the cached base as debian:bookworm-slim"
fi
flock -u 9

# -- build from a clean export of HEAD -----------------------------------------------------
context=$(mktemp -d /tmp/courier-image-context.XXXXXX)
git -C "$REPO" archive HEAD | tar -x -C "$context"
if ! git -C "$REPO" diff --quiet HEAD -- Dockerfile app requirements-runtime.lock; then
  say "note: building the committed HEAD; uncommitted changes are not in the image"
fi
secrets=()
for pair in pip_conf:/etc/pip.conf pip_user_conf:"$HOME/.config/pip/pip.conf" \
            ca_bundle:/etc/ssl/certs/ca-certificates.crt; do
  [ -r "${pair#*:}" ] && secrets+=(--secret "id=${pair%%:*},src=${pair#*:}")
done
say "building $IMAGE"
# --format docker: the OCI format has no HEALTHCHECK, and podman would drop it.
"${PODMAN[@]}" build -q --format docker --pull=never "${secrets[@]}" -t "$IMAGE" "$context" >/dev/null

# -- checks --------------------------------------------------------------------------------
# Test containers an interrupted or older run left behind still publish their ports (DNAT
# rules): a later server bound to one of those ports never sees a connection. Older than an
# hour only, since another checkout's run may be going now; Courier before the simulator it
# shares a network with (sorted: -courier < -sim), or podman refuses the simulator.
now=$(date +%s)
while read -r name created; do
  if [ -n "$name" ] && [ $((now - created)) -gt 3600 ]; then
    "${PODMAN[@]}" rm -f -t 0 "$name" >/dev/null 2>&1 && say "removed $name, left by an earlier run"
  fi
done < <("${PODMAN[@]}" ps -a --filter name=^courier-it- --format '{{.Names}} {{.Created.Unix}}' | sort)
say "running tests/e2e/image against $IMAGE"
COURIER_IMAGE="$IMAGE" "$REPO/.venv/bin/python" -m pytest -q -p no:cacheprovider \
  "$REPO/tests/e2e/image"
