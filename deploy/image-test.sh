#!/usr/bin/env bash
# Build the container image from a clean export of HEAD and test it with podman, on a machine
# where no registry image can be pulled. What each step is for:
#   - podman runs as root with runc: crun fails on hosts with hybrid cgroups (like this one);
#   - `default_ulimits = []`: podman's default nofile ulimit is refused inside some sandboxes;
#   - debian:bookworm-slim is debootstrapped here and imported under that name, cached in
#     $CACHE so later runs skip the minute it takes;
#   - the pip step borrows the host's pip configuration and CA bundle as build secrets
#     (read-only, never in a layer): this network inspects TLS, elsewhere nobody needs them.
# Exit 0: image built and every check in tests/e2e/image/ passed. Exit 3: podman cannot be set up.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${COURIER_IMAGE_TEST_CACHE:-/var/cache/courier-image-test}
# One tag per checkout: two checkouts testing at once must not run each other's image.
IMAGE=${COURIER_IMAGE:-localhost/courier:it-$(printf %s "$REPO" | sha1sum | cut -c1-8)}
PODMAN=(podman --runtime runc)

say() { printf 'image-test: %s\n' "$*"; }
cannot() { say "SKIPPED: $*"; exit 3; }

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

conf=/etc/containers/containers.conf
if ! grep -qs '^default_ulimits *= *\[\]' "$conf"; then
  if grep -qs '^\[containers\]' "$conf"; then
    sed -i '/^\[containers\]/a default_ulimits = []' "$conf"
  else
    mkdir -p /etc/containers && printf '[containers]\ndefault_ulimits = []\n' >> "$conf"
  fi
  say "set default_ulimits = [] in $conf"
fi
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
trap 'rm -rf "$context"' EXIT
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
