"""Bearer authentication: API keys (plain or SHA-256-hashed) and short-lived tokens.

Each key is a principal with a name, scopes, and optional limits. Keys are compared in
constant time against every configured key, so timing does not reveal which one (or
whether a prefix) matched. A hashed key is compared by the digest of what was presented:
the config file then holds no secret a reader could replay.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING

from pydantic import SecretStr

from app.security.principal import (
    ALL_SCOPES,
    APPROVALS,
    CHAT,
    METRICS,
    SESSIONS_READ,
    Principal,
)

if TYPE_CHECKING:
    from app.config import KeyConfig
    from app.security.minted_tokens import TokenIssuer

DEFAULT_KEY_SCOPES = frozenset({CHAT, SESSIONS_READ, APPROVALS})
"""COURIER_API_KEY: a single-key deployment, whose one user is also its approver."""


def fingerprint(key: str) -> str:
    return fingerprint_of_digest(hashlib.sha256(key.encode()).hexdigest())


def fingerprint_of_digest(hex_digest: str) -> str:
    """The same owner for a key given plain or as its SHA-256: switching the config file
    to hashes must not orphan every session the key created."""
    return "key_" + hex_digest.lower()[:16]


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2 and token.startswith("eyJ")


class Authenticator:
    def __init__(
        self,
        api_key: SecretStr,
        *,
        admin_key: SecretStr | None = None,
        metrics_key: SecretStr | None = None,
        keys: Sequence[KeyConfig] = (),
        tokens: TokenIssuer | None = None,
    ) -> None:
        self._plain: list[tuple[bytes, Principal]] = []
        self._hashed: list[tuple[bytes, Principal]] = []
        self.tokens = tokens
        for secret, name, scopes in (
            (api_key, "default", DEFAULT_KEY_SCOPES),
            (admin_key, "admin", ALL_SCOPES),
            (metrics_key, "metrics", frozenset({METRICS})),
        ):
            if secret is not None and secret.get_secret_value():
                raw = secret.get_secret_value()
                self._plain.append((raw.encode(), Principal(fingerprint(raw), scopes, name)))
        for key in keys:
            if key.key is not None:
                raw = key.key.get_secret_value()
                digest = hashlib.sha256(raw.encode()).hexdigest()
                self._plain.append((raw.encode(), _principal(key, digest)))
            else:
                assert key.key_sha256 is not None
                digest = key.key_sha256.lower()
                self._hashed.append((digest.encode(), _principal(key, digest)))
        self._by_owner = {p.owner: p for _, p in (*self._plain, *self._hashed)}

    def principals(self) -> Iterable[Principal]:
        return self._by_owner.values()

    def by_owner(self, owner: str) -> Principal | None:
        return self._by_owner.get(owner)

    def authenticate(self, authorization: str | None) -> Principal | None:
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        # Only ASCII blanks are trimmed: str.strip() would also eat a non-breaking space,
        # letting a credential that is not the key compare equal.
        token = token.strip(" \t")
        if scheme.lower() != "bearer" or not token:
            return None
        presented = token.encode()
        digest = hashlib.sha256(presented).hexdigest().encode()
        found: Principal | None = None
        # Compare against every key so timing does not reveal which one matched.
        for key, principal in self._plain:
            if hmac.compare_digest(presented, key):
                found = principal
        for key, principal in self._hashed:
            if hmac.compare_digest(digest, key):
                found = principal
        if found is None and self.tokens is not None and looks_like_jwt(token):
            found = self.tokens.verify(token, self.by_owner)
        return found


def _principal(key: KeyConfig, digest: str) -> Principal:
    return Principal(
        owner=fingerprint_of_digest(digest),
        scopes=frozenset(key.scopes),
        name=key.name,
        requests_per_minute=key.requests_per_minute,
        max_concurrent_turns=key.max_concurrent_turns,
        spend_cap_usd=key.spend_cap_usd,
        spend_cap_daily_usd=key.spend_cap_daily_usd,
    )


def key_spend_caps(keys: Sequence[KeyConfig]) -> dict[str, tuple[Decimal | None, Decimal | None]]:
    """Owner fingerprint -> (total, rolling 24 h) spend caps of each `[[keys]]` entry."""
    caps: dict[str, tuple[Decimal | None, Decimal | None]] = {}
    for key in keys:
        if key.key is not None:
            digest = hashlib.sha256(key.key.get_secret_value().encode()).hexdigest()
        else:
            assert key.key_sha256 is not None
            digest = key.key_sha256
        caps[fingerprint_of_digest(digest)] = (key.spend_cap_usd, key.spend_cap_daily_usd)
    return caps
