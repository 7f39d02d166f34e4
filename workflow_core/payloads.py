"""Payloads larger than a ledger property: stored once in Blob Storage, passed around by reference
(the format and its rules: docs/contracts.md, "Payloads: inline or by blob reference").

Writers ask :meth:`PayloadStore.stored` for the form to write, readers ask
:meth:`PayloadStore.resolve`; nothing else knows.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from workflow_core.ledger.entities import encode_json
from workflow_core.ledger.model import MAX_TEXT

REFERENCE_KEY = "$blob"
SIZE_KEY = "size"
_DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")
INLINE_PAYLOAD_CHARS = MAX_TEXT
# The largest payload any component accepts; the ``MAX_PAYLOAD_BYTES`` setting may only lower it.
PAYLOAD_CEILING_BYTES = 1_048_576
_CACHE_ENTRIES = 8  # resolved payloads kept per process (one step's input and output, a few steps)


class PayloadTooLarge(Exception):
    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(
            f"{what} is {size:,} bytes as JSON; at most {limit:,} bytes are allowed (MAX_PAYLOAD_BYTES)"
        )
        self.size, self.limit = size, limit


class PayloadMissing(Exception):
    """A reference whose blob is gone (deleted by the lifecycle rule) or holds other content."""


def canonical_json(value: Any) -> bytes:
    """The bytes a payload is measured, hashed and stored as: compact, sorted keys, UTF-8."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return text.encode("utf-8")


def is_reference(value: Any) -> bool:
    if not isinstance(value, dict) or set(value) != {REFERENCE_KEY, SIZE_KEY}:
        return False
    digest, size = value[REFERENCE_KEY], value[SIZE_KEY]
    named = isinstance(digest, str) and _DIGEST.match(digest) is not None
    return named and isinstance(size, int) and size >= 0


def reference_to(data: bytes) -> dict[str, Any]:
    return {REFERENCE_KEY: f"sha256:{hashlib.sha256(data).hexdigest()}", SIZE_KEY: len(data)}


def as_stored(value: Any) -> Any:
    """What :meth:`PayloadStore.stored` writes for ``value``, without I/O."""
    if value is None or is_reference(value) or len(encode_json(value)) <= INLINE_PAYLOAD_CHARS:
        return value
    return reference_to(canonical_json(value))


def bounded_payload(value: Any) -> Any:
    """A payload in a contract: at most ``PAYLOAD_CEILING_BYTES`` of JSON (pydantic validator)."""
    if value is not None and (size := len(canonical_json(value))) > PAYLOAD_CEILING_BYTES:
        raise ValueError(f"is {size} bytes as JSON; a payload holds at most {PAYLOAD_CEILING_BYTES}")
    return value


def message_payload(value: Any) -> Any:
    """A work message's input: a reference, or a value that fits inline (what a dispatch sends)."""
    if not is_reference(value) and (size := len(encode_json(value))) > INLINE_PAYLOAD_CHARS:
        raise ValueError(
            f"is {size} characters as JSON inline; at most {INLINE_PAYLOAD_CHARS} "
            "(larger ones go by blob reference)"
        )
    return value


def blob_name(reference: dict[str, Any]) -> str:
    return "sha256/" + reference[REFERENCE_KEY].split(":", 1)[1]


class PayloadStore:
    """``container``: a ``ContainerClient``, or a callable making one when first needed (so a process
    whose payloads all stay inline never opens a blob connection)."""

    def __init__(self, container: Any | Callable[[], Any], *, max_bytes: int = PAYLOAD_CEILING_BYTES) -> None:
        self._container = container
        self._made: Any = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self.max_bytes = max_bytes

    @property
    def container(self) -> Any:
        with self._lock:
            if self._made is None:
                self._made = self._container() if callable(self._container) else self._container
            return self._made

    def check_size(self, value: Any, what: str) -> int:
        size = len(canonical_json(value))
        if size > self.max_bytes:
            raise PayloadTooLarge(what, size, self.max_bytes)
        return size

    def stored(self, value: Any) -> Any:
        """``value`` as the ledger and messages carry it (a reference: to a blob that now exists)."""
        kept = as_stored(value)
        if kept is value:
            return value
        from azure.core.exceptions import ResourceExistsError
        from azure.storage.blob import ContentSettings

        name, data = blob_name(kept), canonical_json(value)
        settings = ContentSettings(content_type="application/json")
        try:  # If-None-Match: * (overwrite=False): content-addressed, so an existing blob holds these bytes
            self.container.upload_blob(name, data, overwrite=False, content_settings=settings)
        except ResourceExistsError:
            # Success; move its Last-Modified to now, so the lifecycle rule counts from this writer.
            self.container.get_blob_client(name).set_http_headers(content_settings=settings)
        return kept

    def resolve(self, value: Any) -> Any:
        """The value a reference stands for, checked against its digest and size."""
        if not is_reference(value):
            return value
        digest = value[REFERENCE_KEY]
        with self._lock:
            if digest in self._cache:
                self._cache.move_to_end(digest)
                return copy.deepcopy(self._cache[digest])  # a copy: callers may edit it
        from azure.core.exceptions import ResourceNotFoundError

        try:
            data = self.container.download_blob(blob_name(value)).readall()
        except ResourceNotFoundError:
            raise PayloadMissing(
                f"payload {digest} ({value[SIZE_KEY]:,} bytes) is not in the payload container: "
                "deleted by its lifecycle rule, or never written"
            ) from None
        if reference_to(data) != value:
            raise PayloadMissing(f"payload blob {blob_name(value)} does not hold the content {digest} names")
        resolved = json.loads(data.decode("utf-8"))
        with self._lock:
            self._cache[digest] = copy.deepcopy(resolved)
            while len(self._cache) > _CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return resolved

    def resolve_input(self, value: Any, kind: str = "work") -> Any:
        """A compensation's input is ``{"input", "output"}``, each of which may be a reference."""
        value = self.resolve(value)
        if kind == "compensate" and isinstance(value, dict):
            value = {k: self.resolve(v) if k in ("input", "output") else v for k, v in value.items()}
        return value

    def close(self) -> None:
        if self._made is not None and hasattr(self._made, "close"):
            self._made.close()
