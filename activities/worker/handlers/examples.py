"""The example agents the shipped workflows use, each acting on a simulated remote service.

Every forward agent makes one remote effect keyed by the step's idempotency key (retries never
double it) and returns the service's answer; every compensator undoes it ("nothing to undo" is a
success). Inputs are read leniently: the workflow definitions decide what to pass.
"""

from __future__ import annotations

import functools
import hashlib
import uuid
from collections.abc import Callable
from typing import Any

from activities.worker.handlers.base import StepContext, agent


def _short_id(prefix: str, ctx: StepContext) -> str:
    """A stable id derived from the idempotency key (same on every attempt)."""
    return f"{prefix}-{hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()[:10]}"


Build = Callable[[StepContext], dict[str, Any]]


def effect(name: str, service: str, undo: str | None = None) -> Callable[[Build], Build]:
    """Register agent ``name``: the dict it builds is ``service``'s effect, made once per idempotency
    key; ``undo`` names its compensator, which undoes it ("nothing to undo" is a success too)."""

    def register(build: Build) -> Build:
        @functools.wraps(build)
        def handler(ctx: StepContext) -> dict[str, Any]:
            return ctx.effects.apply(service, ctx.idempotency_key, build(ctx))

        if undo is not None:
            agent(undo)(lambda ctx: {"service": service, **ctx.effects.undo(service, ctx.idempotency_key)})
        return agent(name)(handler)

    return register


@effect("storage.create", "storage", undo="storage.delete")
def storage_create(ctx: StepContext) -> dict[str, Any]:
    tenant = str(ctx.input.get("tenant_id") or ctx.input.get("name") or ctx.instance_id).lower()
    ctx.heartbeat()  # account creation is slow: tell the ledger this attempt is alive
    account = _short_id("st", ctx).replace("-", "")
    return {
        "account": account,
        "tenant_id": tenant,
        "endpoint": f"https://{account}.blob.core.windows.net",
        "region": ctx.input.get("region", "westeurope"),
        "sku": ctx.input.get("sku", "Standard_LRS"),
    }


@effect("dns.register", "dns", undo="dns.unregister")
def dns_register(ctx: StepContext) -> dict[str, Any]:
    host = str(ctx.input.get("hostname") or ctx.input.get("tenant_id") or ctx.step_id)
    zone = str(ctx.input.get("zone", "example.net"))
    return {
        "fqdn": f"{host.lower()}.{zone}",
        "record_id": str(uuid.uuid4()),
        "target": ctx.input.get("target"),
    }


@effect("email.send_welcome", "email")
def email_send_welcome(ctx: StepContext) -> dict[str, Any]:
    return {
        "message_id": f"<{uuid.uuid4()}@mail.example.net>",
        "to": ctx.input.get("to") or ctx.input.get("email"),
        "template": "welcome",
        "hostname": ctx.input.get("hostname"),
    }


@effect("inventory.reserve", "inventory", undo="inventory.release")
def inventory_reserve(ctx: StepContext) -> dict[str, Any]:
    items = ctx.input.get("items")
    if items is None and "sku" in ctx.input:
        items = [{"sku": ctx.input["sku"], "quantity": ctx.input.get("quantity", 1)}]
    return {"reservation_id": str(uuid.uuid4()), "order_id": ctx.input.get("order_id"), "items": items or []}


@effect("payments.charge", "payments", undo="payments.refund")
def payments_charge(ctx: StepContext) -> dict[str, Any]:
    amount = ctx.input.get("amount", 0)
    if isinstance(amount, int | float) and amount < 0:
        raise ValueError(f"cannot charge a negative amount ({amount})")
    return {
        "payment_id": f"pay_{uuid.uuid4().hex[:16]}",
        "order_id": ctx.input.get("order_id"),
        "amount": amount,
        "currency": ctx.input.get("currency", "EUR"),
    }


@effect("shipping.create_shipment", "shipping", undo="shipping.cancel_shipment")
def shipping_create_shipment(ctx: StepContext) -> dict[str, Any]:
    ctx.heartbeat()  # carrier booking is slow: tell the ledger this attempt is alive
    return {
        "shipment_id": _short_id("shp", ctx),
        "order_id": ctx.input.get("order_id"),
        "tracking_number": f"TRK{uuid.uuid4().hex[:12].upper()}",
        "address": ctx.input.get("address"),
    }
