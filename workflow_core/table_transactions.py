"""Entity-group transactions without the ``email`` package: a ``TableClient`` with its own $batch
codec (why, and what stays the SDK's: docs/architecture.md, "Transactions through our own $batch codec").

It overrides the SDK's private ``_batch_send``; tests/storage/test_table_transactions_encoding.py fails
if its signature, its source or the SDK versions change. Unlike the SDK, a malformed answer (no
delimiter or boundary, a base64/quoted-printable part) raises ``ValueError``.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from http.client import HTTPResponse, InvalidURL
from types import SimpleNamespace
from typing import Any, NamedTuple
from uuid import uuid4

from azure.core.exceptions import HttpResponseError
from azure.core.pipeline import PipelineContext, PipelineRequest
from azure.core.rest import HttpRequest
from azure.core.rest._http_response_impl import RestHttpClientTransportResponse
from azure.core.tracing.decorator import distributed_trace
from azure.data.tables import RequestTooLargeError, TableClient, TableTransactionError
from azure.data.tables._error import _decode_error, _validate_tablename_error
from azure.data.tables._policies import StorageHeadersPolicy

from workflow_core.table_subrequests import SubRequests

_BODY_METHODS = frozenset({"PATCH", "POST", "PUT"})  # http.client adds "Content-Length: 0" without a body
_URL_CONTROL = re.compile("[\x00-\x20\x7f]")
_METHOD_CONTROL = re.compile("[\x00-\x1f]")
_LEGAL_NAME = re.compile(rb"[^:\s][^:\r\n]*")
_KNOWN_LEGAL_NAMES = frozenset(  # the names sub-requests carry: legal, not matched again
    b"Content-Type Content-Length x-ms-version DataServiceVersion Accept If-Match x-ms-date Date".split()
)
_ILLEGAL_VALUE = re.compile(rb"\n(?![ \t])|\r(?![ \t\n])")
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")
_PART_HEADER = (
    b"Content-Type: application/http\r\nContent-Transfer-Encoding: binary\r\nContent-ID: %d\r\n\r\n"
)


def serialize_request(request: HttpRequest) -> bytes | None:
    """One sub-request as ``application/http``, byte for byte what azure-core's ``http.client``-based
    serializer writes, with its checks; ``None``: a shape left to the SDK (streamed, chunked...)."""
    body = request.content
    if body is not None and not isinstance(body, str | bytes):
        return None
    method, url = request.method, request.url or "/"
    if match := _METHOD_CONTROL.search(method):
        raise ValueError(
            f"method can't contain control characters. {method!r} (found at least {match.group()!r})"
        )
    if match := _URL_CONTROL.search(url):
        raise InvalidURL(f"URL can't contain control characters. {url!r} (found at least {match.group()!r})")
    lines = [f"{method} {url} HTTP/1.1".encode("ascii")]
    headers = list(request.headers.items())  # one pass: a case-insensitive dict's items are slow
    names = {name.lower() for name, _ in headers}
    if "transfer-encoding" in names:
        return None
    if "content-length" not in names:
        if body is not None:
            lines.append(b"Content-Length: %d" % len(body))
        elif method.upper() in _BODY_METHODS:
            lines.append(b"Content-Length: 0")
    for name, value in headers:
        if name in ("Host", "Accept-Encoding"):  # azure-core's serializer drops exactly these spellings
            continue
        raw_name = name.encode("ascii")
        if raw_name not in _KNOWN_LEGAL_NAMES and not _LEGAL_NAME.fullmatch(raw_name):
            raise ValueError(f"Invalid header name {raw_name!r}")
        if not isinstance(value, str | bytes | int):
            return None  # http.client raises TypeError: let the SDK's path do so
        raw = value if isinstance(value, bytes) else str(value).encode("latin-1")
        if _ILLEGAL_VALUE.search(raw):
            raise ValueError(f"Invalid header value {raw!r}")
        lines.append(raw_name + b": " + raw)
    lines.append(b"\r\n")
    body = body.encode("latin-1") if isinstance(body, str) else body
    return b"\r\n".join(lines) + (body or b"")


def encode_transaction(
    requests: Sequence[HttpRequest], batch_boundary: str, changeset_boundary: str
) -> bytes | None:
    """The ``$batch`` body azure-core writes for one changeset of ``requests``."""
    changeset = changeset_boundary.encode("ascii")
    parts = []
    for index, request in enumerate(requests):
        payload = serialize_request(request)
        if payload is None:
            return None
        if not payload.isascii():  # email.generator cannot write it either: same error as the SDK
            payload.decode("ascii", "surrogateescape").encode("ascii")
        breaks = payload.count(b"\r\n")
        if payload.count(b"\r") != breaks or payload.count(b"\n") != breaks:
            payload = _LINE_BREAK.sub(b"\r\n", payload)  # email.generator writes every line break as CRLF
        parts.append(_PART_HEADER % index + payload)
    delimiter = b"\r\n--" + changeset + b"\r\n"
    body = b"--" + changeset + b"\r\n" + delimiter.join(parts) + b"\r\n--" + changeset + b"--\r\n"
    batch = batch_boundary.encode("ascii")
    opening = b"--" + batch + b"\r\nContent-Type: multipart/mixed; boundary=" + changeset + b"\r\n\r\n"
    return opening + body + b"\r\n--" + batch + b"--\r\n"


_PARAMS = re.compile(r'(?:[^;"]|"(?:[^"\\]|\\.)*")+')
_MIME_FIELD = re.compile(rb"([\x21-\x39\x3b-\x7e]*):")
_STATUS = re.compile(rb"HTTP/1\.1 ([2-9]\d\d)(?: [^\r\n]*)?")
_HTTP_FIELD = re.compile(rb"([\x21-\x39\x3b-\x7e]+):[ \t]*([^\r\n]*)")
_UNSUPPORTED_CTE = frozenset({"base64", "quoted-printable", "x-uuencode", "uuencode", "uue", "x-uue"})


def _boundary(content_type: str) -> bytes:
    """The ``boundary`` parameter, unquoted as ``email.message.Message.get_boundary`` does."""
    for param in _PARAMS.findall(content_type.partition(";")[2]):
        name, equals, value = param.partition("=")
        if equals and name.strip().lower() == "boundary":
            value = value.strip()
            if len(value) > 1 and value[0] == value[-1] == '"':
                value = value[1:-1].replace("\\\\", "\\").replace('\\"', '"')
            elif len(value) > 1 and value[0] == "<" and value[-1] == ">":
                value = value[1:-1]
            return value.rstrip().encode("ascii")
    raise ValueError(f"multipart content type without a boundary: {content_type!r}")


def _split(body: bytes, boundary: bytes) -> list[bytes]:
    """The parts of a multipart body. A delimiter is a whole line ``--boundary`` (``--boundary--``
    closes), blanks allowed after it; the line break before it belongs to it; the preamble and
    epilogue are dropped; without a closing delimiter the last part runs to the end."""
    delimiter, size = b"--" + boundary, len(body)
    parts: list[bytes] = []
    start, pos = -1, 0
    while (hit := body.find(delimiter, pos)) >= 0:
        pos = hit + 1
        if hit and body[hit - 1] != 0x0A:
            continue
        end = hit + len(delimiter)
        closing = body.startswith(b"--", end)
        end += 2 if closing else 0
        while end < size and body[end] in b" \t":
            end += 1
        if body.startswith(b"\r\n", end):
            end += 2
        elif body.startswith(b"\n", end):
            end += 1
        elif end != size:
            continue  # "--boundaryX..." is not a delimiter
        if start >= 0:
            parts.append(body[start : max(start, hit - 2 if body[hit - 2 : hit] == b"\r\n" else hit - 1)])
        if closing:
            return parts
        start = pos = end
    if start < 0:
        raise ValueError("multipart response without a delimiter")
    parts.append(body[start:])
    return parts


def _mime_headers(part: bytes) -> tuple[dict[str, str], bytes]:
    """A part's headers (names lower-cased, the first occurrence wins, as ``Message.get``) and payload;
    lines end at CRLF, CR or LF (``bytes.splitlines``, like ``email.feedparser``)."""
    fields: list[list[bytes]] = []
    pos = 0
    for line in part.splitlines(keepends=True):
        if line in (b"\r\n", b"\n", b"\r"):
            pos += len(line)
            break
        if line[:1] in (b" ", b"\t"):  # a folded line continues the header before it
            if fields:
                fields[-1][1] += line
        elif match := _MIME_FIELD.match(line):
            if match.end() > 1:  # ":value" is no header (email drops it)
                fields.append([match[1].lower(), line[match.end() :]])
        else:
            break  # no blank line: the payload starts here
        pos += len(line)
    headers: dict[str, str] = {}
    for name, value in fields:
        headers.setdefault(name.decode("latin-1"), value.decode("latin-1").lstrip(" \t").rstrip("\r\n"))
    return headers, part[pos:]


def sdk_part_response(raw: bytes, request: Any) -> RestHttpClientTransportResponse:
    """The response object azure-core builds for one ``application/http`` part (``http.client``)."""
    socket = SimpleNamespace(makefile=lambda *_: io.BytesIO(raw))  # what http.client reads from
    response = HTTPResponse(socket, method=request.method)  # type: ignore[arg-type]
    response.begin()
    return RestHttpClientTransportResponse(request=request, internal_response=response)


class ResponsePart(NamedTuple):
    """One sub-response: its status and ETag, and what :func:`sdk_part_response` needs for an error."""

    status: int
    etag: str | None
    raw: bytes
    request: Any


def _read_part(raw: bytes, request: Any) -> ResponsePart:
    scanned = _scan(raw)
    if scanned is None:  # not the plain shape: http.client reads it (and raises what it raises)
        response = sdk_part_response(raw, request)
        scanned = response.status_code, response.headers.get("Etag")
    return ResponsePart(*scanned, raw, request)


def _scan(raw: bytes) -> tuple[int, str | None] | None:
    """Status and (last) ETag of a part with CRLF lines, a 1.1 status line >= 200, at most 100 plain
    ``Name: value`` fields within http.client's line limit; ``None`` for anything else."""
    end = raw.find(b"\r\n\r\n")
    lines = raw[:end].split(b"\r\n") if end >= 0 else []
    if not lines or len(lines) > 101 or (status := _STATUS.fullmatch(lines[0])) is None:
        return None
    etag = None
    for line in lines[1:]:
        field = _HTTP_FIELD.fullmatch(line)
        if field is None or len(line) > 65534:
            return None
        if field[1].lower() == b"etag":
            etag = field[2].decode("latin-1")
    return int(status[1]), etag


@dataclass
class _Changeset:
    """Where the SDK would match a part to its changeset request (a part outside the changeset)."""

    requests: Sequence[HttpRequest]
    boundary: str

    @cached_property
    def request(self) -> HttpRequest:
        """Built only for a part outside the changeset, which Azure and Azurite do not send."""
        return HttpRequest("POST", "", headers={"Content-Type": f"multipart/mixed; boundary={self.boundary}"})


def decode_transaction_response(
    content_type: str | None, body: bytes, requests: Sequence[Any], outer_request: Any
) -> list[ResponsePart]:
    """The sub-responses of a ``$batch`` answer, matched to requests as azure-core matches them
    (``requests`` holds leaf requests and :class:`_Changeset` nodes; past the end: the outer request)."""
    if not content_type or not content_type.startswith("multipart/mixed"):
        raise ValueError("You can't get parts if the response is not multipart/mixed")
    out: list[ResponsePart] = []
    _collect(body, _boundary(content_type), requests, outer_request, out)
    return out


def _collect(
    body: bytes, boundary: bytes, requests: Sequence[Any], outer: Any, out: list[ResponsePart]
) -> None:
    for index, part in enumerate(_split(body, boundary)):
        headers, payload = _mime_headers(part)
        kind = headers.get("content-type", "text/plain").partition(";")[0].strip().lower()
        if headers.get("content-transfer-encoding", "").lower() in _UNSUPPORTED_CTE:
            raise ValueError(f"unsupported Content-Transfer-Encoding in a $batch response part: {headers}")
        if kind == "application/http":
            node = requests[index] if index < len(requests) else outer
            out.append(_read_part(payload, node.request if isinstance(node, _Changeset) else node))
        elif kind == "multipart/mixed" and isinstance(requests[index], _Changeset):
            _collect(payload, _boundary(headers["content-type"]), requests[index].requests, outer, out)
        else:
            raise ValueError("Multipart doesn't support part other than application/http for now")


def _too_large(response: Any) -> Exception:
    return _decode_error(
        response, error_message="The transaction request was too large", error_type=RequestTooLargeError
    )


class TransactionTableClient(TableClient):
    """``TableClient`` whose transactions use the codec above, their sub-requests built by
    ``table_subrequests.SubRequests``."""

    @distributed_trace
    def submit_transaction(self, operations: Iterable[Any], **kwargs: Any) -> list[Mapping[str, Any]]:
        """The SDK's ``submit_transaction`` (azure-data-tables 12.7.0) with :class:`SubRequests`."""
        batch = SubRequests(
            config=self._client._config,
            endpoint=f"{self.scheme}://{self._primary_hostname}",
            table_name=self.table_name,
            is_cosmos_endpoint=self._cosmos_endpoint,
        )
        try:
            for operation in operations:
                batch.add_operation(operation)
        except TypeError as exc:
            raise TypeError(
                "The value of 'operations' must be an iterator "
                "of Tuples. Please check documentation for correct Tuple format."
            ) from exc
        try:
            return self._batch_send(self.table_name, *batch.requests, **kwargs)
        except HttpResponseError as ex:
            if ex.status_code == 400 and not batch.requests:
                return []
            raise

    def _batch_send(self, table_name: str, *reqs: HttpRequest, **kwargs: Any) -> list[Mapping[str, Any]]:
        headers_policy = StorageHeadersPolicy()  # what the SDK runs on every sub-request (x-ms-date, Date)
        for sub_request in reqs:
            headers_policy.on_request(PipelineRequest(sub_request, PipelineContext(None)))
        changeset_boundary = f"changeset_{uuid4()}"
        batch_boundary = f"batch_{uuid4()}"
        body = encode_transaction(reqs, batch_boundary, changeset_boundary)
        if body is None:
            return super()._batch_send(table_name, *reqs, **kwargs)
        request = HttpRequest(
            method="POST",
            url=f"{self.scheme}://{self._primary_hostname}/$batch",
            headers={
                "x-ms-version": self.api_version,
                "DataServiceVersion": "3.0",
                "MaxDataServiceVersion": "3.0;NetFx",
                "Content-Type": f"multipart/mixed; boundary={batch_boundary}",
                "Accept": "application/json",
            },
        )
        request.set_bytes_body(body)  # what azure-core's multipart preparation calls: Content-Length
        response = self._client.send_request(request, stream=True, **kwargs)
        if response.status_code == 413:
            raise _too_large(response)
        if response.status_code != 202:
            decoded = _decode_error(response)
            _validate_tablename_error(decoded, table_name)
            raise decoded
        response.read()
        changeset = _Changeset(reqs, changeset_boundary)
        parts = decode_transaction_response(
            response.content_type, response.content, [changeset], response.request
        )
        error_parts = [part for part in parts if not 200 <= part.status < 300]
        if error_parts:
            if error_parts[0].status == 413:
                raise _too_large(response)
            failed = sdk_part_response(error_parts[0].raw, error_parts[0].request)
            decoded = _decode_error(response=failed, error_type=TableTransactionError)
            _validate_tablename_error(decoded, table_name)
            raise decoded
        return [{} if part.etag is None else {"etag": part.etag} for part in parts]
