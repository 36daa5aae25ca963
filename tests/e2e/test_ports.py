"""app/ops/ports.py: a port handed out as free is one whose connections reach its listener.

Each case runs in a network namespace of its own (`unshare -rn`), where a DNAT rule stands in
for a container runtime's published port (podman's CNI writes exactly such rules) and the
namespace's ephemeral range is cut to four ports, so the kernel must offer the taken ones.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from typing import Any

import pytest

RANGE = (40000, 40003)
TAKEN = "40000:40002"  # three of the four: only 40003 is really free
ELSEWHERE = "127.0.0.1:40009"  # nothing listens there: a mapping whose container is gone


def _netns_works() -> bool:
    """A user and network namespace with a NAT table in it can be made here."""
    if not (shutil.which("unshare") and shutil.which("iptables") and shutil.which("ip")):
        return False
    probe = subprocess.run(
        ["unshare", "-rn", "iptables", "-t", "nat", "-S", "OUTPUT"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    return probe.returncode == 0


needs_netns = pytest.mark.skipif(
    not _netns_works(),
    reason="needs unshare -rn, ip and iptables with NAT (make test installs iptables)",
)


def _in_netns(body: str, taken: str = TAKEN) -> dict[str, Any]:
    setup = (
        "ip link set lo up && "
        f"echo '{RANGE[0]} {RANGE[1]}' > /proc/sys/net/ipv4/ip_local_port_range && "
        f"iptables -t nat -A OUTPUT -d 127.0.0.1/32 -p tcp --dport {taken} "
        f"-j DNAT --to-destination {ELSEWHERE} && "
        f'exec "{sys.executable}" -c "$0"'
    )
    program = "import json, os, socket\nfrom app.ops import ports\n" + textwrap.dedent(body)
    done = subprocess.run(
        ["unshare", "-rn", "sh", "-c", setup, program],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@needs_netns
def test_a_published_port_is_never_handed_out() -> None:
    result = _in_netns(
        """
        def refused(port):
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", port)) != 0

        # The bare way: bind to port 0 and take what the kernel says is free.
        bare = []
        for _ in range(12):
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", 0))
                s.listen()
                bare.append(refused(s.getsockname()[1]))
        fds = len(os.listdir("/proc/self/fd"))
        sock = ports.listen("127.0.0.1", 0, backlog=8)
        port = sock.getsockname()[1]
        reached = not refused(port)
        sock.close()
        print(json.dumps({
            "bare_refused": sum(bare), "port": port, "reached": reached,
            "fds_left": len(os.listdir("/proc/self/fd")) - fds,
            "free_ports": sorted({ports.free_port() for _ in range(5)}),
        }))
        """
    )
    assert result["bare_refused"] > 0  # the machine state this module exists for
    assert result["port"] == RANGE[1]
    assert result["reached"]
    assert result["fds_left"] == 0  # the refused candidates were closed
    assert result["free_ports"] == [RANGE[1]]


@needs_netns
def test_no_reachable_port_is_an_error_that_says_so() -> None:
    result = _in_netns(
        """
        try:
            ports.listen("127.0.0.1", 0)
            print(json.dumps({"error": None}))
        except OSError as exc:
            print(json.dumps({"error": str(exc)}))
        """,
        taken=f"{RANGE[0]}:{RANGE[1]}",
    )
    assert result["error"] is not None
    assert "reached its own listener" in result["error"]


@needs_netns
def test_a_chosen_port_is_bound_as_asked() -> None:
    # An operator's port is theirs to pick: no probing, no substitute.
    result = _in_netns(
        """
        with ports.listen("127.0.0.1", 40001) as sock:
            print(json.dumps({"port": sock.getsockname()[1]}))
        """
    )
    assert result["port"] == 40001
