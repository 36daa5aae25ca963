"""Standard Webhooks signatures (https://www.standardwebhooks.com), the scheme OpenAI's
webhooks use: `webhook-id`, `webhook-timestamp` (unix seconds) and `webhook-signature` =
`v1,` + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")), the key being the base64
after the secret's `whsec_` prefix.

Twenty lines rather than a runtime dependency; the tests check them against the reference
library (`standardwebhooks`) and the openai SDK's verifier. Both refuse a timestamp older
than five minutes, so every attempt (a retry too) is signed afresh, with the same id.
"""

from __future__ import annotations

import base64
import hashlib
import hmac


def signed_headers(secret: str, *, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": "v1," + base64.b64encode(digest).decode("ascii"),
    }
