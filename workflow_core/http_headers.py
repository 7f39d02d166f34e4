"""HTTP responses whose header block is parsed as headers only: a ``$batch`` answer without a regular
expression compiled for it.

``http.client`` hands every response's header block to ``email``'s parser as a whole message, and a
``multipart/mixed`` content type makes that parser look for parts in the (empty) body: it compiles a
regular expression for the boundary, which is new in every ``$batch`` answer, so the ``re`` cache
never holds it (≈ 0.9 ms a transaction measured alone, seven times the parse of any other head;
0.3-0.5 ms of a transaction's client CPU; the app makes about 3.7 transactions per step).
:class:`HeadersOnlyResponse` is ``http.client``'s own ``begin`` with its ``parse_headers`` looked
up in a namespace where it parses headers only: the same headers, status, length and framing, and
no parts looked for in a body that is not there. What that search records, ``urllib3`` ignores,
except a multipart type without a boundary, which it only logged. ``tests/storage/test_http_headers.py``
holds it to the standard parse on varied heads and fails if ``begin`` stops calling ``parse_headers``.

Only the storage clients' connections (:func:`headers_only_pools`) use it; no module is patched.
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


class _Connection(HTTPConnection):
    response_class = HeadersOnlyResponse


class _TLSConnection(HTTPSConnection):
    response_class = HeadersOnlyResponse


class _Pool(HTTPConnectionPool):
    ConnectionCls = _Connection


class _TLSPool(HTTPSConnectionPool):
    ConnectionCls = _TLSConnection


def headers_only_pools(pool_manager: Any) -> None:
    """Make ``pool_manager`` (a ``urllib3.PoolManager``) open connections that read responses with
    :class:`HeadersOnlyResponse`; pools it already holds keep theirs."""
    pool_manager.pool_classes_by_scheme = {"http": _Pool, "https": _TLSPool}
