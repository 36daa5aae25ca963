"""deploy/, read by the tools that will read it: `systemd-analyze verify` on the unit and
`nginx -t` on the proxy config (the structural checks are in tests/unit/)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

DEPLOY = REPO / "deploy"


def test_the_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    # verify insists the ExecStart binary exists: point it at this checkout's courier.
    courier = Path(sys.executable).with_name("courier")
    assert courier.exists(), "run `make install`"
    text = (DEPLOY / "courier.service").read_text()
    unit = tmp_path / "courier.service"
    unit.write_text(text.replace("/opt/courier/venv/bin/courier", str(courier)))
    result = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    # verify exits 0 on unknown keys and typos, printing them: any output is a finding.
    lines = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        # Not about the unit: this machine's own units and its non-systemd PID 1.
        if str(unit) in line or "courier.service" in line
    ]
    assert result.returncode == 0 and not lines, result.stdout + result.stderr


def test_nginx_accepts_the_config(tmp_path: Path) -> None:
    nginx = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
    openssl = shutil.which("openssl")
    if nginx is None or openssl is None:
        pytest.skip("nginx or openssl is not installed (Debian packages nginx-light, openssl)")
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=courier.test", "-keyout", str(tmp_path / "key.pem"),
         "-out", str(tmp_path / "cert.pem")],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    text = (DEPLOY / "nginx.conf").read_text()
    text = text.replace("/etc/ssl/courier/fullchain.pem", str(tmp_path / "cert.pem"))
    text = text.replace("/etc/ssl/courier/privkey.pem", str(tmp_path / "key.pem"))
    text = text.replace("/var/log/nginx/", f"{tmp_path}/").replace("/run/", f"{tmp_path}/")
    conf = tmp_path / "nginx.conf"
    conf.write_text(text)
    result = subprocess.run(
        [nginx, "-t", "-c", str(conf), "-p", str(tmp_path), "-e", str(tmp_path / "err.log")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "test is successful" in result.stderr
