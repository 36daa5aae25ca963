"""`courier tokens mint`: a short-lived token minted offline with the server's own secret.

For an operator handing a browser or a voice client a token without starting a request
with the key: the same issuer, secret and scope rules as `POST /v1/tokens`, so the server
accepts the token exactly as if it had minted it.
"""

from __future__ import annotations

import argparse
import json
import sys

from app.config import ConfigError, load_settings
from app.security.minted_tokens import TokenRefused


def mint(args: argparse.Namespace) -> int:
    from app.main import build_authenticator

    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"courier: {exc}", file=sys.stderr)
        return 2
    auth = build_authenticator(settings)
    if auth.tokens is None:
        print(
            "courier: tokens are not enabled (set COURIER_TOKENS_ENABLED=1 and "
            "COURIER_TOKEN_SECRET)",
            file=sys.stderr,
        )
        return 2
    principal = next((p for p in auth.principals() if p.name == args.key), None)
    if principal is None:
        names = ", ".join(sorted(p.name for p in auth.principals() if p.name))
        print(f"courier: no key named {args.key!r} (configured: {names})", file=sys.stderr)
        return 2
    try:
        minted = auth.tokens.mint(
            principal, scopes=args.scope or None, ttl_s=args.ttl, session_id=args.session
        )
    except TokenRefused as exc:
        print(f"courier: {exc}", file=sys.stderr)
        return 2
    if args.json:
        payload = {
            "token": minted.token,
            "expires_at": minted.expires_at,
            "scopes": list(minted.scopes),
            "session_id": minted.session_id,
        }
        print(json.dumps(payload))
    else:
        print(minted.token)
    return 0
