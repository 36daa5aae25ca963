"""Bearer-key authentication, compared in constant time, with scopes per key."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from pydantic import SecretStr

Scope = str
CHAT: Scope = "chat"
METRICS: Scope = "metrics"
ADMIN: Scope = "admin"


@dataclass(frozen=True, slots=True)
class Principal:
    owner: str
    """A stable fingerprint of the key, stored as the session owner; never the key itself."""
    scopes: frozenset[Scope] = frozenset({CHAT})

    @property
    def admin(self) -> bool:
        return ADMIN in self.scopes


def fingerprint(key: str) -> str:
    return "key_" + hashlib.sha256(key.encode()).hexdigest()[:16]


class Authenticator:
    def __init__(
        self,
        api_key: SecretStr,
        *,
        admin_key: SecretStr | None = None,
        metrics_key: SecretStr | None = None,
    ) -> None:
        self._keys: list[tuple[bytes, Principal]] = []
        for secret, scopes in (
            (api_key, {CHAT}),
            (admin_key, {CHAT, METRICS, ADMIN}),
            (metrics_key, {METRICS}),
        ):
            if secret is not None:
                raw = secret.get_secret_value()
                self._keys.append((raw.encode(), Principal(fingerprint(raw), frozenset(scopes))))

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
        found: Principal | None = None
        # Compare against every key so timing does not reveal which one matched.
        for key, principal in self._keys:
            if hmac.compare_digest(presented, key):
                found = principal
        return found
