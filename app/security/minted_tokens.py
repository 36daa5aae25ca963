"""Short-lived tokens for clients that must not hold a long-lived key (browsers, voice).

HS256 JWTs minted with python-jose under a server secret of at least 32 bytes. Verifying
pins the algorithm twice, in the header check and in `algorithms=["HS256"]`: a verifier
that trusts the token's own `alg` accepts `alg: none`, or an RS256 token "signed" with the
secret used as a public key. A header with `crit` is refused: Courier understands no JWS
extension, and a critical one it ignored would be a promise it did not keep. A token never
carries more than its minting key has *now*: scopes are re-checked against the live key on
every use, so removing a key or narrowing its scopes takes effect before its tokens expire.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from jose import JWTError, jwt

from app.security.principal import Principal

ALGORITHM = "HS256"
AUDIENCE = "courier"
ISSUER = "courier"
MAX_TTL_S = 3600
DEFAULT_TTL_S = 900
LEEWAY_S = 5


class TokenRefused(ValueError):
    """The mint request asks for something the minting key may not grant."""


@dataclass(frozen=True, slots=True)
class Minted:
    token: str
    expires_at: int
    scopes: tuple[str, ...]
    session_id: str | None


class TokenIssuer:
    def __init__(self, secret: str, *, clock: Callable[[], float] = time.time) -> None:
        if len(secret.encode()) < 32:
            raise ValueError("the token secret must be at least 32 bytes")
        self._secret = secret
        self._clock = clock

    def mint(
        self,
        principal: Principal,
        *,
        scopes: Sequence[str] | None = None,
        ttl_s: int = DEFAULT_TTL_S,
        session_id: str | None = None,
    ) -> Minted:
        if principal.via_token:
            raise TokenRefused("a token cannot mint tokens; use an API key")
        if not 1 <= ttl_s <= MAX_TTL_S:
            raise TokenRefused(f"ttl_s must be between 1 and {MAX_TTL_S}")
        granted = tuple(sorted(set(scopes))) if scopes is not None else ("chat",)
        if not granted:
            raise TokenRefused("scopes must not be empty")
        if extra := set(granted) - principal.scopes:
            raise TokenRefused(
                f"this key cannot grant scope(s) it lacks: {', '.join(sorted(extra))}"
            )
        now = int(self._clock())
        claims: dict[str, Any] = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": principal.owner,
            "name": principal.name,
            "scopes": list(granted),
            "iat": now,
            "exp": now + ttl_s,
            "jti": secrets.token_urlsafe(12),
        }
        if session_id is not None:
            claims["sid"] = session_id
        token = jwt.encode(claims, self._secret, algorithm=ALGORITHM)
        return Minted(token, now + ttl_s, granted, session_id)

    def verify(self, token: str, lookup: Callable[[str], Principal | None]) -> Principal | None:
        """The principal the token stands for, or None for any flaw at all."""
        try:
            header = jwt.get_unverified_header(token)
            if header.get("alg") != ALGORITHM:
                return None
            # RFC 7515 §4.1.11: a recipient must refuse a token whose `crit` names an
            # extension it does not process, and we process none. python-jose 3.5 never
            # looks at `crit` (mpdavis/python-jose#406), so it would accept the token.
            if "crit" in header:
                return None
            claims = jwt.decode(
                token,
                self._secret,
                algorithms=[ALGORITHM],
                audience=AUDIENCE,
                issuer=ISSUER,
                options={
                    "require_exp": True,
                    "require_iat": True,
                    "require_aud": True,
                    "require_sub": True,
                    "leeway": LEEWAY_S,
                },
            )
        except (JWTError, ValueError, TypeError, KeyError):
            return None
        issued, expires = claims.get("iat"), claims.get("exp")
        if not isinstance(issued, int) or not isinstance(expires, int):
            return None
        if expires - issued > MAX_TTL_S or issued > self._clock() + LEEWAY_S:
            return None
        minter = lookup(str(claims["sub"]))
        scopes = claims.get("scopes")
        if minter is None or not isinstance(scopes, list) or not scopes:
            return None
        if not all(isinstance(s, str) for s in scopes) or not set(scopes) <= minter.scopes:
            return None  # a scope outside the live grant: refuse the whole token
        sid = claims.get("sid")
        if sid is not None and not isinstance(sid, str):
            return None
        return replace(minter, scopes=frozenset(scopes), session_id=sid, via_token=True)
