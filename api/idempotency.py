"""``Idempotency-Key`` for operator actions: a repeat with the same key gets the first answer and
acts once; the key is claimed in the ledger before the action runs. Every operator action must carry
one (428 without): a client that times out and repeats cannot otherwise tell "it acted" from "it did
not", and a step retry is not idempotent by itself (docs/api.md, "Idempotency keys")."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import azure.functions as func

from api.problems import PROBLEM_CONTENT_TYPE, ApiError
from api.responses import call_ledger
from workflow_core.ledger import idempotency
from workflow_core.ledger.idempotency import KEY_PATTERN

HEADER = "Idempotency-Key"


async def once(
    req: func.HttpRequest,
    svc: Any,
    instance_id: str,
    request: str,
    actor: str,
    act: Callable[[], Awaitable[func.HttpResponse]],
) -> func.HttpResponse:
    """Run ``act`` once per key; ``request`` names the action and its target (a key reused for
    another request is a 422)."""
    key = req.headers.get(HEADER)
    if not key:
        raise ApiError(
            428,
            f"an {HEADER} header is required",
            [f"send {HEADER}: <a new random value per action> (repeat it only to repeat the same action)"],
            code="idempotency-key-required",
        )
    if not KEY_PATTERN.fullmatch(key):
        raise ApiError(
            400,
            f"bad {HEADER}",
            [f"{HEADER} is 1-100 characters of A-Z a-z 0-9 . _ : -"],
            code="bad-idempotency-key",
        )
    try:
        stored = await call_ledger(
            svc, lambda _: svc.idempotency_keys.claim_or_replay(instance_id, key, request, actor)
        )
    except idempotency.KeyReused as exc:
        raise ApiError(
            422,
            f"{HEADER} {key!r} was used for another request ({exc.request})",
            ["use a new key for each operator action"],
            code="idempotency-key-reused",
        ) from None
    except idempotency.KeyInProgress:
        raise ApiError(
            409,
            f"the request with {HEADER} {key!r} is still being carried out",
            ["look at the instance's audit trail, then repeat the request with the same key"],
            code="in-progress",
        ) from None
    if stored is not None:
        status = int(stored["status"])
        kind = PROBLEM_CONTENT_TYPE if status >= 400 else "application/json"  # as first answered
        response = func.HttpResponse(stored["body"] or "", status_code=status, mimetype=kind)
        response.headers["Idempotent-Replayed"] = "true"
        return response
    try:
        response = await act()
    except ApiError as exc:
        response = exc.to_response()  # a refusal is an answer too: a repeat gets the same one
    except BaseException:
        await call_ledger(svc, lambda _: svc.idempotency_keys.release(instance_id, key))
        raise
    if response.status_code >= 500 or response.status_code == 404:
        # a 5xx: a retry with the key may act; a 404: no row is left in a partition of no instance
        await call_ledger(svc, lambda _: svc.idempotency_keys.release(instance_id, key))
        return response
    body = response.get_body().decode("utf-8")
    keys = svc.idempotency_keys
    await call_ledger(svc, lambda _: keys.record_answer(instance_id, key, response.status_code, body))
    return response
