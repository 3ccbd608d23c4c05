"""Bearer-token check for /v1/*: case-insensitive scheme, constant-time key comparison.

RFC 9110 §11.1 makes the auth scheme case-insensitive (``bearer`` is as valid as ``Bearer``), and
``hmac.compare_digest`` takes the same time wherever the first differing byte is, so response
timing says nothing about how much of a guessed key was right. The key itself never leaves this
module: not in logs, errors, ``/info`` or ``--help``.
"""

from __future__ import annotations

import hmac


def authorized(header: str | None, api_key: str) -> bool:
    """True when ``header`` (the Authorization value) is ``Bearer <api_key>``, scheme in any case."""
    if not header:
        return False
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(token.strip().encode("utf-8", "surrogateescape"), api_key.encode("utf-8", "surrogateescape"))

