"""Continuation tokens of ``GET /api/instances``: signed by the app and bound to the filter they page.

Handed out as is, the ledger's own token could be forged (start anywhere in the index) or reused
with another filter. The API hands out ``<payload>.<mac>`` instead: the ledger's token and a digest
of the filter, under an HMAC-SHA256; the key is ``CONTINUATION_TOKEN_KEY``, else one the ledger
makes once and keeps (``StepLedger.list_token_key``), so every process shares it (docs/api.md).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from typing import Any

from api.problems import ApiError

KEY_SETTING = "CONTINUATION_TOKEN_KEY"
_CONTEXT = b"sas-continuation-v1"
MAX_TOKEN_CHARS = 2_000


def configured_key() -> bytes | None:
    """The key from ``CONTINUATION_TOKEN_KEY``, or ``None`` (then the ledger's stored key is used)."""
    value = os.environ.get(KEY_SETTING)
    return hashlib.sha256(_CONTEXT + value.encode()).digest() if value else None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def filter_digest(filters: Mapping[str, Any]) -> str:
    """A digest of the filter a page answers (everything but the page size and the token)."""
    bound = {
        k: str(v) for k, v in sorted(filters.items()) if k not in ("limit", "continuation") and v is not None
    }
    return _b64(hashlib.sha256(json.dumps(bound, sort_keys=True).encode()).digest()[:16])


def _mac(payload: str, key: bytes) -> str:
    return _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest())


def sign(ledger_token: str | None, filters: Mapping[str, Any], key: bytes) -> str | None:
    """The token handed to the caller for the ledger's ``ledger_token`` under ``filters``."""
    if ledger_token is None:
        return None
    payload = _b64(json.dumps({"t": ledger_token, "f": filter_digest(filters)}).encode())
    return f"{payload}.{_mac(payload, key)}"


def _invalid(why: str) -> ApiError:
    return ApiError(
        400,
        "invalid continuation token",
        [f"{why}; use the continuation of the previous page, with the same filters, or start over"],
        code="invalid-continuation",
    )


def verify(token: str | None, filters: Mapping[str, Any], key: bytes) -> str | None:
    """The ledger's token inside ``token``, or a 400 problem when it was not issued for ``filters``."""
    if token is None:
        return None
    payload, dot, mac = token.partition(".")
    expected = _mac(payload, key)
    if len(token) > MAX_TOKEN_CHARS or not dot or not hmac.compare_digest(mac.encode(), expected.encode()):
        raise _invalid("the token is not one this API issued (or it was altered)")
    # the MAC holds: sign() made it, so it is base64 of JSON with both fields
    data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    if data["f"] != filter_digest(filters):
        raise _invalid("the token belongs to a list with other filters")
    return data["t"]
