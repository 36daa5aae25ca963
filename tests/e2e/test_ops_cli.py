"""The operator commands: `courier doctor` on a good setup and on each failure it names, and
`courier sessions|usage|keys` against a store a real server wrote."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.ops import doctor
from app.security.auth import fingerprint
from app.tools.sandbox import process as sandbox
from app.tools.sandbox.process import SandboxProfile, SandboxStatus
from tests.support.server import API_KEY, Server, ServerFactory, sim_env
from tests.support.sim import Simulator

STRONG_KEY = "sk-courier-" + "Zq8vW2xL0pR7tYb3nM5kD9hJ4fG6sA1cE"


def courier(
    *args: str, env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env={**clean, **env},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def good_env(sim: Simulator, tmp_path: Path) -> dict[str, str]:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    return sim_env(sim.base_url, COURIER_API_KEY=STRONG_KEY, COURIER_DATA_DIR=str(data))


@pytest.fixture
def env_in_process(
    good_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    # Tests here set more names straight in os.environ (COURIER_TERMINAL_BACKEND=local):
    # left behind, every server a later module starts inherited them.
    saved = dict(os.environ)
    for key in [k for k in os.environ if k.startswith("COURIER_")]:
        monkeypatch.delenv(key)
    for key, value in good_env.items():
        monkeypatch.setenv(key, value)
    yield good_env
    os.environ.clear()
    os.environ.update(saved)


def failures() -> list[doctor.Finding]:
    findings, status = doctor.run()
    failed = [f for f in findings if f.level == "fail"]
    assert status == (1 if failed else 0)
    return failed


# -- doctor ----------------------------------------------------------------------------------


def test_doctor_passes_a_good_setup(good_env: dict[str, str]) -> None:
    result = courier("doctor", env=good_env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no problems found" in result.stdout
    for check in ("api key", "bind", "sandbox", "data dir", "disk", "upstream courier", "price"):
        assert f"ok    {check}" in result.stdout, check
    assert STRONG_KEY not in result.stdout


def test_doctor_refuses_a_weak_key(good_env: dict[str, str]) -> None:
    result = courier("doctor", env={**good_env, "COURIER_API_KEY": "short"})
    assert result.returncode == 1
    assert "FAIL  config: COURIER_API_KEY is 5 characters" in result.stdout
    assert "1 problem(s) to fix" in result.stdout


def test_doctor_fails_a_key_that_is_a_repeated_pattern(good_env: dict[str, str]) -> None:
    result = courier("doctor", "--skip-upstream", env={**good_env, "COURIER_API_KEY": "abcd" * 4})
    assert result.returncode == 1, result.stdout
    assert "FAIL  config: COURIER_API_KEY is a short pattern repeated" in result.stdout


def test_doctor_fails_a_setup_with_no_upstream(good_env: dict[str, str]) -> None:
    env = {k: v for k, v in good_env.items() if not k.startswith("COURIER_UPSTREAM_")}
    result = courier("doctor", "--skip-upstream", env=env)
    assert result.returncode == 1, result.stdout
    assert "FAIL  upstream: neither COURIER_UPSTREAM_API_KEY nor" in result.stdout


def test_doctor_warns_on_a_valid_but_guessable_key(env_in_process: dict[str, str]) -> None:
    os.environ["COURIER_API_KEY"] = "abcdefghijklmnopq"
    findings, status = doctor.run()
    assert status == 0
    assert [f.level for f in findings if f.check == "api key"] == ["warn"]


def test_doctor_fails_an_exposed_host_exec_bind(env_in_process: dict[str, str]) -> None:
    os.environ.update(
        COURIER_HOST="0.0.0.0",
        COURIER_TERMINAL_BACKEND="local",
        COURIER_ALLOW_EXPOSED_HOST_EXEC="1",
    )
    [failed] = failures()
    assert failed.check == "bind" and "remote code execution" in failed.message


def test_doctor_warns_on_a_public_bind_without_tls(
    env_in_process: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    os.environ["COURIER_HOST"] = "0.0.0.0"
    monkeypatch.setattr(doctor, "in_container", lambda: False)
    findings, status = doctor.run()
    assert status == 0
    assert [f.level for f in findings if f.check == "bind"] == ["warn"]


def test_doctor_fails_when_the_sandbox_cannot_start(
    env_in_process: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        doctor, "sandbox_status", lambda: SandboxStatus(None, "bwrap exited 1: No permissions")
    )
    [failed] = failures()
    assert failed.check == "sandbox" and "No permissions" in failed.message


def test_doctor_names_what_a_reduced_sandbox_lacks(
    env_in_process: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    reduced = SandboxProfile(hostname=False, fresh_proc=False, disable_userns=False)
    monkeypatch.setattr(doctor, "sandbox_status", lambda: SandboxStatus(reduced, ""))
    findings, status = doctor.run()
    assert status == 0
    [warned] = [f for f in findings if f.check == "sandbox"]
    assert warned.level == "warn" and "unmask=ALL" in warned.message


def test_doctor_fails_a_world_writable_data_dir(env_in_process: dict[str, str]) -> None:
    Path(env_in_process["COURIER_DATA_DIR"]).chmod(0o777)
    [failed] = failures()
    assert failed.check == "data dir" and "world-writable" in failed.message


def test_doctor_fails_a_data_dir_that_cannot_be_written(
    env_in_process: dict[str, str], tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    os.environ["COURIER_DATA_DIR"] = str(blocker / "data")  # under a file: never creatable
    [failed] = failures()
    assert failed.check == "data dir"


def test_doctor_fails_when_the_disk_is_nearly_full(
    env_in_process: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        doctor.shutil, "disk_usage", lambda _p: type("U", (), {"free": 50 * 1024 * 1024})()
    )
    [failed] = failures()
    assert failed.check == "disk" and "0.0 GiB free" in failed.message


def test_doctor_fails_an_unreachable_upstream(env_in_process: dict[str, str]) -> None:
    os.environ["COURIER_UPSTREAM_BASE_URL"] = "http://127.0.0.1:9/v1"  # discard port: closed
    [failed] = failures()
    assert failed.check == "upstream courier" and "unreachable" in failed.message


def test_doctor_fails_an_upstream_that_refuses_the_key(
    env_in_process: dict[str, str], sim: Simulator
) -> None:
    sim.configure(required_key="the-real-upstream-key")
    [failed] = failures()
    assert failed.check == "upstream courier" and "refuses the upstream key" in failed.message


def test_doctor_fails_a_model_without_a_known_price(env_in_process: dict[str, str]) -> None:
    os.environ["COURIER_UPSTREAM_MODEL"] = "mystery-model-that-no-table-lists"
    [failed] = failures()
    assert failed.check == "price courier" and "no known price" in failed.message


def test_doctor_can_skip_the_upstream(good_env: dict[str, str]) -> None:
    env = {**good_env, "COURIER_UPSTREAM_BASE_URL": "http://127.0.0.1:9/v1"}
    assert courier("doctor", env=env).returncode == 1
    assert courier("doctor", "--skip-upstream", env=env).returncode == 0


# -- sessions, usage, keys -------------------------------------------------------------------


@pytest.fixture(scope="module")
def seeded(module_servers: ServerFactory, simulator: Simulator) -> Server:
    """A store with one session holding a tool call and its result, written by the server.
    It indexes no message for search in the background: `sessions search` must catch up."""
    srv = module_servers(COURIER_SEARCH_INDEX_INTERVAL_S="0")
    simulator.reset()
    simulator.script(
        [
            {"reply": {"tool_calls": [{"name": "write_file", "arguments": {
                "path": "notes.txt", "content": "pelican facts"}}]}},
            {"reply": {"text": "Saved the pelican notes."}},
        ]
    )  # fmt: skip
    r = httpx.post(
        f"{srv.base_url}/v1/chat/completions",
        headers=srv.headers(),
        json={"model": "courier", "messages": [{"role": "user", "content": "note the pelicans"}]},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    srv.session_id = r.headers["x-session-id"]  # type: ignore[attr-defined]
    return srv


def run_records(seeded: Server, *args: str) -> subprocess.CompletedProcess[str]:
    return courier(*args, "--data-dir", str(seeded.data_dir), env={})


def test_sessions_list_shows_the_session_with_its_cost(seeded: Server) -> None:
    sid = seeded.session_id  # type: ignore[attr-defined]
    result = run_records(seeded, "sessions", "list", "--json")
    [row] = json.loads(result.stdout)
    assert row["id"] == sid and row["title"] == "note the pelicans"
    assert row["turns"] == 1 and float(row["cost_usd"]) > 0
    text = run_records(seeded, "sessions", "list").stdout
    assert sid in text and "note the pelicans" in text


def test_sessions_show_and_export_every_row(seeded: Server) -> None:
    sid = seeded.session_id  # type: ignore[attr-defined]
    shown = run_records(seeded, "sessions", "show", sid)
    assert "-> calls write_file" in shown.stdout and "Saved the pelican notes." in shown.stdout
    lines = [
        json.loads(line)
        for line in run_records(seeded, "sessions", "export", sid).stdout.splitlines()
    ]
    assert lines[0]["type"] == "session" and lines[0]["id"] == sid
    roles = [m["role"] for m in lines[1:]]
    assert roles[-4:] == ["user", "assistant", "tool", "assistant"]
    assert all(m["state"] == "live" for m in lines[1:])
    missing = run_records(seeded, "sessions", "show", "sess_nope")
    assert missing.returncode == 1 and "no session sess_nope" in missing.stderr


def test_sessions_search_finds_text_and_treats_syntax_as_text(seeded: Server) -> None:
    hits = json.loads(run_records(seeded, "sessions", "search", "pelican", "--json").stdout)
    assert {h["session_id"] for h in hits} == {seeded.session_id}  # type: ignore[attr-defined]
    hostile = run_records(seeded, "sessions", "search", 'pelican" OR "x* NEAR(')
    assert hostile.returncode == 0 and "no matches" in hostile.stdout


def test_usage_groups_spend_by_day_key_and_profile(seeded: Server) -> None:
    [row] = json.loads(run_records(seeded, "usage", "--json").stdout)
    assert row["owner"] == fingerprint(API_KEY) and row["profile"] == "courier"
    assert row["calls"] == 2 and float(row["cost_usd"]) > 0
    assert "total" in run_records(seeded, "usage").stdout


def test_a_wrong_data_dir_is_named_not_created(tmp_path: Path) -> None:
    result = courier("sessions", "list", "--data-dir", str(tmp_path / "nope"), env={})
    assert result.returncode == 1 and "no database at" in result.stderr
    assert not (tmp_path / "nope").exists()


def test_keys_hash_reads_stdin_and_prints_digest_and_owner() -> None:
    result = courier("keys", "hash", env={}, stdin=STRONG_KEY + "\n")
    digest = hashlib.sha256(STRONG_KEY.encode()).hexdigest()
    assert result.stdout.splitlines()[0] == f'key_sha256 = "{digest}"'
    assert fingerprint(STRONG_KEY) in result.stdout and STRONG_KEY not in result.stdout
    assert courier("keys", "hash", env={}, stdin="").returncode == 2


def test_sandbox_module_exposes_the_status_the_doctor_reads() -> None:
    assert sandbox.sandbox_status().profile is not None  # this host runs the full sandbox


TOKEN_SECRET = "a-token-secret-of-at-least-32-bytes-0123"


def test_tokens_mint_makes_a_token_the_server_accepts(servers: ServerFactory) -> None:
    srv = servers(COURIER_TOKENS_ENABLED="1", COURIER_TOKEN_SECRET=TOKEN_SECRET)
    cli_env = {**srv.env, "COURIER_DATA_DIR": str(srv.data_dir)}
    minted = courier("tokens", "mint", "--ttl", "60", "--json", env=cli_env)
    assert minted.returncode == 0, minted.stderr
    token = json.loads(minted.stdout)
    assert token["scopes"] == ["chat"]
    ok = httpx.get(
        f"{srv.base_url}/v1/models", headers={"Authorization": f"Bearer {token['token']}"}
    )
    assert ok.status_code == 200
    # Refusals name the reason and exit 2: a scope the key lacks, an unknown key, too long.
    for args, says in (
        (("--scope", "admin"), "lacks"),
        (("--key", "nobody"), "no key named"),
        (("--ttl", "86400"), "ttl_s"),
    ):
        refused = courier("tokens", "mint", *args, env=cli_env)
        assert refused.returncode == 2 and says in refused.stderr, refused.stderr


def test_tokens_mint_says_when_tokens_are_off(good_env: dict[str, str]) -> None:
    result = courier("tokens", "mint", env=good_env)
    assert result.returncode == 2 and "not enabled" in result.stderr
