"""`COURIER_TRUSTED_PROXIES` entries read strictly (kept out of app/config.py, which is at
its size budget)."""

from __future__ import annotations

import ipaddress
from ipaddress import IPv4Network, IPv6Network


def trusted_network(entry: str) -> IPv4Network | IPv6Network:
    """One `COURIER_TRUSTED_PROXIES` entry as a network, or a ValueError naming the mistake.

    Strict on purpose: `10.0.0.1/24` (host bits set) is refused rather than widened to the
    /24 a typo may not have meant, and a /0 is refused outright, since trusting every
    address lets any client write the address the per-IP limit counts."""
    text = entry.strip()
    try:
        network = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise ValueError(f"trusted proxy {text!r} is not an IP address or network: {exc}") from None
    if network.prefixlen == 0:
        raise ValueError(
            f"trusted proxy {text!r} trusts every address, so any client could choose the "
            "address it is counted as; name the proxy's own addresses"
        )
    return network
