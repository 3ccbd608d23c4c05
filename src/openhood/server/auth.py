"""Bearer-token auth for ``/v1/*``: one shared key (``--api-key`` / ``OPENHOOD_API_KEY``).

The scheme is case-insensitive (RFC 9110 §11.1: ``bearer`` is as valid as ``Bearer``), and the
key is compared with ``hmac.compare_digest`` so response timing does not reveal how much of a
guess was right. The key never leaves this module's callers: not in logs, errors, ``/info`` or
``--help``. The trade-off: one key for every caller (no per-client keys or scopes); put a gateway
in front for more.
"""

from __future__ import annotations

import hmac


def authorized(headers: dict[str, str], api_key: str | None) -> bool:
    """True when no key is configured or the request carries ``Authorization: Bearer <key>``."""
    if not api_key:
        return True
    scheme, _, token = headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(
        token.strip().encode("utf-8", "surrogateescape"), api_key.encode("utf-8", "surrogateescape")
    )
