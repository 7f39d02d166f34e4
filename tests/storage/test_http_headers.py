"""HeadersOnlyResponse reads a response's head as http.client does (status, headers, framing, what
urllib3 checks), without email's search for parts; the storage clients' connections use it."""

from __future__ import annotations

import http.client
import io
import re
import uuid
from email import errors
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from urllib3.util.response import assert_header_parsing

from workflow_core import storage_clients
from workflow_core.settings import StorageConnection
from workflow_core.storage_clients import HeadersOnlyResponse

BATCH_ANSWER = (
    b"HTTP/1.1 202 Accepted\r\n"
    b"Content-Type: multipart/mixed; boundary=batchresponse_%s\r\n"
    b"Transfer-Encoding: chunked\r\nx-ms-version: 2019-02-02\r\nConnection: keep-alive\r\n\r\n"
    b"0\r\n\r\n"
)


def _both(raw: bytes, method: str = "GET"):
    """(stdlib response, ours), each having read ``raw``'s head; a reader's error is its result."""
    out = []
    for cls in (http.client.HTTPResponse, HeadersOnlyResponse):
        sock = SimpleNamespace(makefile=lambda *_: io.BytesIO(raw))
        response = cls(sock, method=method)  # type: ignore[arg-type]
        try:
            response.begin()
        except Exception as error:
            out.append((type(error), str(error)))
        else:
            out.append(response)
    return out


# What email records when it searches the (empty) body of a multipart head for parts: the only
# difference allowed (urllib3 ignores the first two; the third made it log a warning, no more).
_PART_SEARCH = (
    errors.StartBoundaryNotFoundDefect,
    errors.MultipartInvariantViolationDefect,
    errors.NoBoundaryInMultipartDefect,
)


def _urllib3_verdict(message: http.client.HTTPMessage) -> str:
    message.defects = [d for d in message.defects if not isinstance(d, _PART_SEARCH)]
    try:
        assert_header_parsing(message)
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return "ok"


def _same(raw: bytes, method: str = "GET") -> None:
    theirs, ours = _both(raw, method)
    if isinstance(theirs, tuple):
        assert ours == theirs
        return
    assert isinstance(ours, HeadersOnlyResponse)
    for name in ("status", "reason", "version", "length", "chunked", "will_close"):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert ours.headers.items() == theirs.headers.items()
    assert ours.read() == theirs.read()
    assert _urllib3_verdict(ours.headers) == _urllib3_verdict(theirs.headers)


def test_begin_still_reads_the_head_through_parse_headers():
    """What the class relies on: the stdlib's ``begin`` looks ``parse_headers`` up by name."""
    assert "parse_headers" in http.client.HTTPResponse.begin.__code__.co_names
    assert HeadersOnlyResponse.begin.__code__ is http.client.HTTPResponse.begin.__code__


@pytest.mark.parametrize(
    "raw",
    [
        BATCH_ANSWER % uuid.uuid4().hex.encode(),
        b'HTTP/1.1 202 Accepted\r\nContent-Type: multipart/mixed; boundary="a b"\r\n'
        b"Content-Length: 3\r\n\r\nabc",
        b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nETag: W/"x"\r\n\r\n{}',
        b"HTTP/1.1 204 No Content\r\nContent-Type: multipart/mixed\r\nConnection: close\r\n\r\n",
        b"HTTP/1.0 200 OK\r\nContent-Length: -5\r\nX-Folded: a\r\n b\r\n\r\nbody",
        b"HTTP/1.1 200 OK\r\nContent-Type: multipart/mixed; boundary=x\r\nBroken header line\r\nA: b\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n: no name\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
        b"HTTP/2 200 OK\r\n\r\n",
        b"garbage\r\n\r\n",
    ],
)
def test_the_same_head_as_http_client(raw):
    _same(raw)


_NAME = st.from_regex(re.compile(r"[A-Za-z][A-Za-z0-9-]{0,12}"), fullmatch=True)
_VALUE = st.text(st.characters(min_codepoint=32, max_codepoint=255), max_size=40)
_LINE = st.one_of(
    st.tuples(_NAME, _VALUE).map(lambda nv: f"{nv[0]}: {nv[1]}"),
    st.just("Content-Type: multipart/mixed; boundary=b"),
    st.just(" folded continuation"),
    st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=20),
)


@given(st.lists(_LINE, max_size=8), st.sampled_from(["GET", "HEAD", "POST"]))
def test_the_same_head_for_any_header_block(lines, method):
    head = "".join(f"{line}\r\n" for line in lines).encode("latin-1")
    _same(b"HTTP/1.1 200 OK\r\n" + head + b"\r\nrest", method)


def test_the_storage_clients_read_answers_with_it(azurite, unique_name, monkeypatch):
    read: list[int] = []
    begin = HeadersOnlyResponse.begin

    def counted(self):
        begin(self)
        read.append(self.status)

    monkeypatch.setattr(HeadersOnlyResponse, "begin", counted)
    storage = StorageConnection(connection_string=azurite.connection_string)
    client = storage_clients.table_client(storage, unique_name("heads"))
    client.create_table()
    assert client.submit_transaction([("upsert", {"PartitionKey": "p", "RowKey": "r"})])[0]["etag"]
    assert client.get_entity("p", "r")["RowKey"] == "r"
    client.delete_table()
    client.close()
    assert read == [201, 202, 200, 204]
