"""Custom events (:func:`emit_event`): what the alerts and the workbook in ``infra/`` count.

A custom event is a log record on the logger ``sas.events`` carrying the attribute
``microsoft.custom_event.name``, which the Azure Monitor exporter sends to ``customEvents`` (not
``traces``): ``sas.recovery`` (every recovery action), ``sas.instance_stalled`` (the watchdog found an
instance whose scheduler missed its deadline) and ``sas.message_dead_lettered``. docs/operations.md has
the KQL.
"""

from __future__ import annotations

import logging
from typing import Any

from workflow_core.telemetry.instruments import (
    CUSTOM_EVENT_ATTRIBUTE,
    EVENTS_LOGGER_NAME,
    INSTANCE_STALLED_EVENT,
)

events_log = logging.getLogger(EVENTS_LOGGER_NAME)
# Events are information, not warnings: make sure they are created whatever the root logger's level.
events_log.setLevel(logging.INFO)

# Names a ``logging.LogRecord`` already uses: an ``extra`` key among them would raise KeyError.
_RESERVED_LOG_KEYS = frozenset(
    vars(logging.LogRecord("n", logging.INFO, "p", 1, "m", None, None)).keys() | {"message", "asctime"}
)


def log_key(key: str) -> str:
    """``key`` as a log record's ``extra`` key: prefixed when a ``LogRecord`` already uses the name."""
    return f"sas_{key}" if key in _RESERVED_LOG_KEYS else key


def attribute_value(value: Any) -> str | bool | int | float:
    """``value`` as an OpenTelemetry attribute: primitives as they are, anything else as text."""
    if isinstance(value, str | bool | int | float):
        return value
    return str(value)


def emit_event(event_name: str, /, **attributes: Any) -> None:
    """Emit the custom event ``event_name`` (``customEvents`` in Application Insights).

    A log record on the logger ``sas.events`` carrying ``microsoft.custom_event.name``: the Azure Monitor
    exporter sends such a record as an event named after that attribute, with the other attributes as
    ``customDimensions``. ``None`` values are dropped; non-primitive values are sent as text. Keep the
    attributes small: ids, names, outcomes.
    """
    extra: dict[str, Any] = {log_key(k): attribute_value(v) for k, v in attributes.items() if v is not None}
    extra[CUSTOM_EVENT_ATTRIBUTE] = event_name
    events_log.info(event_name, extra=extra)


def record_instance_stalled(instance_id: str, *, workflow: str | None, action: str, **attrs: Any) -> None:
    """The watchdog found an instance whose scheduler missed its deadline and did ``action`` about it
    (resume, compensate, ...): the custom event ``sas.instance_stalled`` the stalled-instances alert
    counts."""
    emit_event(
        INSTANCE_STALLED_EVENT,
        workflow=workflow or "unknown",
        instance_id=instance_id,
        action=action,
        **attrs,
    )
