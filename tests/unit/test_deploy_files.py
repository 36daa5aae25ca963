"""deploy/: the systemd unit, the nginx config, the compose file and the Dockerfile, checked
against the settings they must agree with (the tools that read them run in tests/e2e/)."""

from __future__ import annotations

import re
import tomllib

import yaml

from app.config import Settings, trusted_network
from tests.support.paths import REPO

DEPLOY = REPO / "deploy"
DRAIN = Settings.model_fields["drain_timeout_s"].default


def unit_settings(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def test_the_unit_has_the_hardening_and_agrees_with_the_drain() -> None:
    s = unit_settings((DEPLOY / "courier.service").read_text())
    for key, value in {
        "DynamicUser": "yes",
        "StateDirectory": "courier",
        "ProtectSystem": "strict",
        "NoNewPrivileges": "yes",
        "PrivateTmp": "yes",
        "Restart": "on-failure",
        "KillSignal": "SIGTERM",
    }.items():
        assert s[key] == [value], key
    drain = int(next(v for v in s["Environment"] if v.startswith("COURIER_DRAIN")).split("=")[1])
    assert int(s["TimeoutStopSec"][0]) > 2 * drain
    assert "COURIER_HOST=127.0.0.1" in s["Environment"]
    # nginx reaches it over loopback: its forwarded client is what the per-IP limit counts.
    trusted = next(v for v in s["Environment"] if v.startswith("COURIER_TRUSTED_PROXIES="))
    networks = [trusted_network(e) for e in trusted.partition("=")[2].split(",")]
    assert {str(n) for n in networks} == {"127.0.0.1/32", "::1/128"}
    # Two descriptors a stream: the default turn cap's streams must fit.
    assert int(s["LimitNOFILE"][0]) > 2 * Settings.model_fields["max_concurrent_turns"].default
    # The sandbox needs namespaces: these would silently switch the terminal tool off.
    assert "RestrictNamespaces" not in s and "SystemCallFilter" not in s


def test_nginx_streams_and_outwaits_the_keepalive() -> None:
    text = (DEPLOY / "nginx.conf").read_text()
    assert re.search(r"^\s*proxy_buffering off;", text, re.M)
    read = int(re.search(r"proxy_read_timeout (\d+)s;", text).group(1))  # type: ignore[union-attr]
    assert read > 10 * Settings.model_fields["keepalive_s"].default
    body = re.search(r"client_max_body_size (\d+)m;", text).group(1)  # type: ignore[union-attr]
    assert int(body) * 1024 * 1024 == Settings.model_fields["max_body_bytes"].default
    for directive in (
        "client_header_timeout",
        "client_body_timeout",
        "large_client_header_buffers",
    ):
        assert directive in text


def test_compose_publishes_on_loopback_only_and_uses_secrets() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    service = compose["services"]["courier"]
    assert service["ports"] == ["127.0.0.1:${COURIER_PUBLISH_PORT:-8642}:8642"]
    assert service["volumes"] == ["courier-data:/data"] and "courier-data" in compose["volumes"]
    assert service["restart"] == "unless-stopped"
    assert "healthcheck" in service and service["read_only"] is True
    env = service["environment"]
    assert env["COURIER_API_KEY_FILE"] == "/run/secrets/courier_api_key"
    # Published ports arrive from the fixed network's gateway: that is the trusted proxy.
    (network,) = service["networks"]
    (ipam,) = compose["networks"][network]["ipam"]["config"]
    assert env["COURIER_TRUSTED_PROXIES"] == ipam["gateway"]
    assert not [k for k in env if k.endswith("API_KEY")], "a key in the environment"
    assert set(service["secrets"]) <= set(compose["secrets"])
    grace = int(service["stop_grace_period"].removesuffix("s"))
    assert grace > 2 * int(env["COURIER_DRAIN_TIMEOUT_S"]) and grace > 2 * DRAIN


def test_the_dockerfile_bakes_no_secret_and_agrees_with_the_drain() -> None:
    text = (DEPLOY.parent / "Dockerfile").read_text()
    assert "STOPSIGNAL SIGTERM" in text and "HEALTHCHECK" in text
    assert not re.search(r"^(ENV|ARG)\b.*API_KEY", text, re.M)
    assert re.search(r"^USER courier$", text, re.M)
    # docker stop waits 10 s by default before SIGKILL: the image's drain must fit well
    # inside, although the setting's own default (30 s) does not.
    baked = re.search(r"COURIER_DRAIN_TIMEOUT_S=(\d+)", text)
    assert baked is not None, "the image must set a drain that fits docker stop's 10 s"
    assert int(baked.group(1)) * 2 <= 10 < DRAIN


def test_the_runtime_lock_pins_what_the_full_lock_pins() -> None:
    def pins(name: str) -> dict[str, str]:
        text = (DEPLOY.parent / name).read_text()
        return dict(re.findall(r"^([a-z0-9_.-]+)==(\S+)", text, re.M))

    runtime, full = pins("requirements-runtime.lock"), pins("requirements.lock")
    assert runtime and all(full.get(name) == version for name, version in runtime.items())
    assert "pytest" not in runtime and "fastapi" in runtime
    # Every runtime dependency is in the image's lock at its pinned version: a dependency
    # added to pyproject without `make lock` would otherwise build an image that cannot
    # import the app (which is how this test came to exist).
    project = tomllib.loads((DEPLOY.parent / "pyproject.toml").read_text())["project"]
    for spec in project["dependencies"]:
        name, _, version = spec.partition("==")
        assert runtime.get(name.lower().replace("_", "-")) == version, f"{spec}: run `make lock`"
