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
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from pydantic import SecretStr

if TYPE_CHECKING:
    from app.config import KeyConfig
    from app.security.minted_tokens import TokenIssuer

Scope = str
CHAT: Scope = "chat"
SESSIONS_READ: Scope = "sessions:read"
APPROVALS: Scope = "approvals"
METRICS: Scope = "metrics"
ADMIN: Scope = "admin"
ALL_SCOPES = frozenset({CHAT, SESSIONS_READ, APPROVALS, METRICS, ADMIN})

DEFAULT_KEY_SCOPES = frozenset({CHAT, SESSIONS_READ, APPROVALS})
"""COURIER_API_KEY: a single-key deployment, whose one user is also its approver."""


@dataclass(frozen=True, slots=True)
class Principal:
    owner: str
    """A stable fingerprint of the key, stored as the session owner; never the key itself."""
    scopes: frozenset[Scope] = frozenset({CHAT})
    name: str = ""
    """The key's configured name (`default`, `admin`, or a `[[keys]]` name)."""
    requests_per_minute: int | None = None
    max_concurrent_turns: int | None = None
    spend_cap_usd: Decimal | None = None
    spend_cap_daily_usd: Decimal | None = None
    session_id: str | None = None
    """A token bound to one session may use only that session."""
    via_token: bool = False

    @property
    def admin(self) -> bool:
        return ADMIN in self.scopes

    @property
    def label(self) -> str:
        return self.name or self.owner

    def reaches(self, session_id: str | None) -> bool:
        """The binding: a token bound to one session reaches only that one (and nothing
        that belongs to no session); a key, or an unbound token, reaches every session."""
        return self.session_id is None or self.session_id == session_id

    def may_see(self, *, session_id: str, owner: str, retracted: bool = False) -> bool:
        """The session rule, for every route that names a session: within the binding, the
        owner's or the admin's; a retracted session is gone for its owner, not the admin."""
        if not self.reaches(session_id):
            return False
        return self.admin or (owner == self.owner and not retracted)

    @property
    def replay_scope(self) -> str:
        """Whose earlier requests an Idempotency-Key or a retry of this principal may find.
        A key's requests share one scope; a bound token's are its session's alone, so it
        cannot replay another session's request into that session's answer (nor overwrite
        that session's record of the key)."""
        return self.owner if self.session_id is None else f"{self.owner}/{self.session_id}"


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
