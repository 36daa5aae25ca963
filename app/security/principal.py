"""Who is asking, and what they may do: a principal and its scopes.

Apart from `auth.py`, which turns a bearer credential into a principal: a minted token
(`minted_tokens.py`) is made from a principal and verified back into one, and `auth.py`
calls on it, so the record both share stands on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

Scope = str
CHAT: Scope = "chat"
SESSIONS_READ: Scope = "sessions:read"
APPROVALS: Scope = "approvals"
METRICS: Scope = "metrics"
ADMIN: Scope = "admin"
ALL_SCOPES = frozenset({CHAT, SESSIONS_READ, APPROVALS, METRICS, ADMIN})


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
