"""Continuation tokens of ``GET /api/instances``: signed by the app and bound to the filter they page.

The ledger's own token names the next row of its index; handed out as is, a caller could forge one
(start anywhere in the index) or reuse it with another filter and get a page that answers neither.
The API therefore hands out ``<payload>.<mac>``: the payload carries the ledger's token and a digest
of the filter, the MAC is an HMAC-SHA256 over it. A token that does not verify, or whose filter
digest differs from the request's filter, is a 400 ``invalid-continuation``.

The key is the app setting ``CONTINUATION_TOKEN_KEY`` when set; otherwise a random key the ledger
makes once and keeps in its index table (``StepLedger.list_token_key``), so every instance and
process of the app signs and verifies with the same key, with no secret to configure.
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


def configured_key(env: Mapping[str, str] | None = None) -> bytes | None:
    """The key from ``CONTINUATION_TOKEN_KEY``, or ``None`` (then the ledger's stored key is used)."""
    value = (os.environ if env is None else env).get(KEY_SETTING)
    return hashlib.sha256(_CONTEXT + value.encode()).digest() if value else None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


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
    try:
        data = json.loads(_unb64(payload))
    except ValueError:
        raise _invalid("the token is not one this API issued") from None
    if not isinstance(data, dict) or not isinstance(data.get("t"), str):
        raise _invalid("the token is not one this API issued")
    if data.get("f") != filter_digest(filters):
        raise _invalid("the token belongs to a list with other filters")
    return data["t"]
