"""HTTP responses whose header block is parsed as headers only, so a ``$batch`` answer's
``multipart/mixed`` type no longer makes ``email`` compile a pattern for its boundary (new in every
answer, never cached; docs/capacity.md). :class:`HeadersOnlyResponse` is ``http.client``'s own
``begin`` with ``parse_headers`` looked up where it passes ``headersonly``: the same headers, status,
length and framing (what the skipped search records, ``urllib3`` ignores). Only the storage clients'
connections use it; no module is patched. ``tests/storage/test_http_headers.py`` holds it to the
standard parse.
"""

from __future__ import annotations

import email.parser
import http.client
import types
from typing import Any

from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool


def parse_headers_only(fp: Any, _class: type = http.client.HTTPMessage) -> http.client.HTTPMessage:
    """``http.client.parse_headers`` with ``headersonly``: the header block is all there is."""
    raw = b"".join(http.client._read_headers(fp))  # type: ignore[attr-defined]
    return email.parser.Parser(_class=_class).parsestr(raw.decode("iso-8859-1"), headersonly=True)


_stdlib_begin = http.client.HTTPResponse.begin


class HeadersOnlyResponse(http.client.HTTPResponse):
    """``http.client.HTTPResponse`` reading its header block with :func:`parse_headers_only`."""

    begin = types.FunctionType(
        _stdlib_begin.__code__,
        {**vars(http.client), "parse_headers": parse_headers_only},
        _stdlib_begin.__name__,
        _stdlib_begin.__defaults__,
        _stdlib_begin.__closure__,
    )


def _headers_only_pool(pool: type, connection: type) -> type:
    """``pool`` whose connections read responses with :class:`HeadersOnlyResponse`."""
    reading = type(connection.__name__, (connection,), {"response_class": HeadersOnlyResponse})
    return type(pool.__name__, (pool,), {"ConnectionCls": reading})


_POOLS = {
    "http": _headers_only_pool(HTTPConnectionPool, HTTPConnection),
    "https": _headers_only_pool(HTTPSConnectionPool, HTTPSConnection),
}


def headers_only_pools(pool_manager: Any) -> None:
    """Make ``pool_manager`` (a ``urllib3.PoolManager``) open connections that read responses with
    :class:`HeadersOnlyResponse`; pools it already holds keep theirs."""
    pool_manager.pool_classes_by_scheme = dict(_POOLS)
