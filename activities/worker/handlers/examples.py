"""The example agents the shipped workflows use, each acting on a simulated remote service.

Every forward agent makes one remote effect keyed by the step's idempotency key (so retries and
duplicate deliveries never double it) and returns the service's answer as the step output; every
compensator undoes that effect, treating "nothing to undo" as success. Inputs are read leniently
(``ctx.input.get(...)`` with defaults): the workflow definitions decide what to pass.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from typing import Any

from activities.worker.handlers.base import StepContext, agent


def _short_id(prefix: str, ctx: StepContext) -> str:
    """A stable id derived from the idempotency key (same on every attempt)."""
    return f"{prefix}-{hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()[:10]}"


def _undoer(service: str) -> Callable[[StepContext], dict[str, Any]]:
    """The compensator of ``service``'s effect: undo it; "nothing to undo" is a success too."""

    def undo(ctx: StepContext) -> dict[str, Any]:
        return {"service": service, **ctx.effects.undo(service, ctx.idempotency_key)}

    return undo


@agent("storage.create")
def storage_create(ctx: StepContext) -> dict[str, Any]:
    tenant = str(ctx.input.get("tenant_id") or ctx.input.get("name") or ctx.instance_id).lower()
    ctx.heartbeat()  # account creation is slow: tell the ledger this attempt is alive
    account = _short_id("st", ctx).replace("-", "")
    result = {
        "account": account,
        "tenant_id": tenant,
        "endpoint": f"https://{account}.blob.core.windows.net",
        "region": ctx.input.get("region", "westeurope"),
        "sku": ctx.input.get("sku", "Standard_LRS"),
    }
    return ctx.effects.apply("storage", ctx.idempotency_key, result)


@agent("dns.register")
def dns_register(ctx: StepContext) -> dict[str, Any]:
    host = str(ctx.input.get("hostname") or ctx.input.get("tenant_id") or ctx.step_id)
    zone = str(ctx.input.get("zone", "example.net"))
    result = {
        "fqdn": f"{host.lower()}.{zone}",
        "record_id": str(uuid.uuid4()),
        "target": ctx.input.get("target"),
    }
    return ctx.effects.apply("dns", ctx.idempotency_key, result)


@agent("email.send_welcome")
def email_send_welcome(ctx: StepContext) -> dict[str, Any]:
    result = {
        "message_id": f"<{uuid.uuid4()}@mail.example.net>",
        "to": ctx.input.get("to") or ctx.input.get("email"),
        "template": "welcome",
        "hostname": ctx.input.get("hostname"),
    }
    return ctx.effects.apply("email", ctx.idempotency_key, result)


@agent("inventory.reserve")
def inventory_reserve(ctx: StepContext) -> dict[str, Any]:
    items = ctx.input.get("items")
    if items is None and "sku" in ctx.input:
        items = [{"sku": ctx.input["sku"], "quantity": ctx.input.get("quantity", 1)}]
    result = {
        "reservation_id": str(uuid.uuid4()),
        "order_id": ctx.input.get("order_id"),
        "items": items or [],
    }
    return ctx.effects.apply("inventory", ctx.idempotency_key, result)


@agent("payments.charge")
def payments_charge(ctx: StepContext) -> dict[str, Any]:
    amount = ctx.input.get("amount", 0)
    if isinstance(amount, int | float) and amount < 0:
        raise ValueError(f"cannot charge a negative amount ({amount})")
    result = {
        "payment_id": f"pay_{uuid.uuid4().hex[:16]}",
        "order_id": ctx.input.get("order_id"),
        "amount": amount,
        "currency": ctx.input.get("currency", "EUR"),
    }
    return ctx.effects.apply("payments", ctx.idempotency_key, result)


@agent("shipping.create_shipment")
def shipping_create_shipment(ctx: StepContext) -> dict[str, Any]:
    ctx.heartbeat()  # carrier booking is slow: tell the ledger this attempt is alive
    result = {
        "shipment_id": _short_id("shp", ctx),
        "order_id": ctx.input.get("order_id"),
        "tracking_number": f"TRK{uuid.uuid4().hex[:12].upper()}",
        "address": ctx.input.get("address"),
    }
    return ctx.effects.apply("shipping", ctx.idempotency_key, result)


for _service, _compensator in {
    "storage": "storage.delete",
    "dns": "dns.unregister",
    "inventory": "inventory.release",
    "payments": "payments.refund",
    "shipping": "shipping.cancel_shipment",
}.items():
    agent(_compensator)(_undoer(_service))
