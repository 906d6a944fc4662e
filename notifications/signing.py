"""The webhook signature: HMAC-SHA256 over ``"<timestamp>.<body>"`` (standard library only).

Headers on every webhook request::

    X-Gpupool-Timestamp: 1733331234            (Unix seconds when it was sent)
    X-Gpupool-Signature: v1=<64 hex digits>    (HMAC-SHA256(secret, "1733331234." + body))
    X-Gpupool-Delivery: 8812                   (the same on every try of one delivery)
    Idempotency-Key: 0b6f…                     (a UUID, the same on every try of one delivery)

A receiver recomputes the signature over the raw body, compares in constant time, and refuses
a timestamp older (or newer) than a few minutes: a captured request replayed later fails,
and so does one whose body was changed. :func:`signature_verify` is that check, the one
``docs/notifications.md`` shows to receivers.
"""

from __future__ import annotations

import hashlib
import hmac
import time

TIMESTAMP_HEADER = "X-Gpupool-Timestamp"
SIGNATURE_HEADER = "X-Gpupool-Signature"
DELIVERY_HEADER = "X-Gpupool-Delivery"
# The name of the IETF draft (draft-ietf-httpapi-idempotency-key-header) that our own REST API
# reads on a job submit: a receiver that processes each key once can take every retry.
IDEMPOTENCY_HEADER = "Idempotency-Key"
TOLERANCE_SECONDS = 300


def signature_make(secret: str, timestamp: int, body: bytes) -> str:
    """``v1=<hex>``: HMAC-SHA256 with ``secret`` over ``b"<timestamp>." + body``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


def signature_headers(secret: str, body: bytes, *, now: float | None = None) -> dict[str, str]:
    timestamp = int(time.time() if now is None else now)
    return {
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: signature_make(secret, timestamp, body),
    }


def signature_verify(
    secret: str,
    *,
    timestamp: str | None,
    signature: str | None,
    body: bytes,
    now: float | None = None,
    tolerance: int = TOLERANCE_SECONDS,
) -> bool:
    """True when ``signature`` is ours over ``timestamp`` and ``body`` and the timestamp is
    within ``tolerance`` seconds of ``now`` (a replay of an old request is refused)."""
    if not timestamp or not signature or not timestamp.isdigit():
        return False
    current = time.time() if now is None else now
    if abs(current - int(timestamp)) > tolerance:
        return False
    expected = signature_make(secret, int(timestamp), body)
    return hmac.compare_digest(expected, signature)
