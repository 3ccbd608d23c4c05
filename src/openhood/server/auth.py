"""Bearer-token auth for ``/v1/*``: one shared key (``--api-key`` / ``OPENHOOD_API_KEY``).

Compared in constant time so response timing does not reveal how much of a guess was right.
The trade-off: one key for every caller (no per-client keys or scopes); put a gateway in front
for more.
"""

from __future__ import annotations

import hmac


def authorized(headers: dict[str, str], api_key: str | None) -> bool:
    """True when no key is configured or the request carries ``Authorization: Bearer <key>``."""
    if not api_key:
        return True
    return hmac.compare_digest(headers.get("authorization", "").encode(), f"Bearer {api_key}".encode())
