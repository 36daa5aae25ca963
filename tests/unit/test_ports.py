"""app/ops/ports.py: a port handed out as free on this machine reaches its listener (the
cases that need a network namespace of their own are in tests/e2e/test_ports.py)."""

from __future__ import annotations

from app.ops import ports


def test_free_port_on_this_machine_reaches_a_listener() -> None:
    port = ports.free_port()
    with ports.listen("127.0.0.1", port, backlog=1) as sock:
        assert ports._reaches(sock)
