"""The $batch decoder of workflow_core.table_transactions against azure-core's ``HttpResponse.parts()``.

No network: answers in Azure's and Azurite's layout and odd ones (LF line breaks, quoted boundary,
preamble and epilogue, folded headers, bad status lines...), fixed and generated. The codec must
read the same statuses, ETags and matched requests, raise the same exception types, and let the
SDK's ``_decode_error`` make the same error of a failing part.
"""

from __future__ import annotations

import pytest
from azure.data.tables import TableTransactionError
from azure.data.tables._base_client import extract_batch_part_metadata
from azure.data.tables._error import _decode_error
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.storage.support import CHANGESET, sdk_multipart, sub_requests
from workflow_core.table_transactions import _Changeset, decode_transaction_response, sdk_part_response

ETAG = "W/\"datetime'2026-01-02T03%3A04%3A05.1234567Z'\""
KEY = {"PartitionKey": "p", "RowKey": "r"}

# ---- decoding ------------------------------------------------------------------------------------

OK_204 = f"HTTP/1.1 204 No Content\r\nDataServiceVersion: 3.0;\r\nETag: {ETAG}\r\n\r\n".encode()
CREATED = f"HTTP/1.1 201 Created\r\nPreference-Applied: return-no-content\r\nETag: {ETAG}\r\n\r\n".encode()
DELETED = b"HTTP/1.1 204 No Content\r\nDataServiceVersion: 1.0;\r\n\r\n"
NOT_FOUND = (
    b"HTTP/1.1 404 Not Found\r\nContent-ID: 2\r\nDataServiceVersion: 3.0;\r\n"
    b"Content-Type: application/json;odata=minimalmetadata;charset=utf-8\r\n\r\n"
    b'{"odata.error":{"code":"ResourceNotFound","message":{"lang":"en-US","value":'
    b'"1:The specified resource does not exist.\\nRequestId:0\\nTime:2026-01-02T03:04:05.000Z"}}}'
)
PART = b"Content-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n"


def answer(payloads, eol=b"\r\n", batch=b"batchresponse_1", changeset=b"changesetresponse_2", quote=False):
    """A $batch answer: one changeset holding ``payloads`` (Azurite's and Azure's layout)."""
    boundary = b'"' + changeset + b'"' if quote else changeset
    inner = b"".join(b"--" + changeset + b"\r\n" + PART + p + b"\r\n" for p in payloads)
    inner += b"--" + changeset + b"--\r\n"
    body = b"--" + batch + b"\r\nContent-Type: multipart/mixed; boundary=" + boundary + b"\r\n\r\n" + inner
    body += b"--" + batch + b"--\r\n"
    return f"multipart/mixed; boundary={batch.decode()}", body.replace(b"\r\n", eol)


def compare(content_type: str, body: bytes, reqs) -> list:
    """Decode with the SDK and with the codec; assert the same parts; return the SDK's."""
    outer, changeset = sdk_multipart(reqs)
    head = f"HTTP/1.1 202 Accepted\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    response = sdk_part_response(head.encode() + body, outer)
    response.read()
    try:
        sdk = list(response.parts())
    except Exception as error:
        with pytest.raises(type(error)):
            decode_transaction_response(content_type, body, [_Changeset(reqs, CHANGESET)], outer)
        return []
    ours = decode_transaction_response(content_type, body, [_Changeset(reqs, CHANGESET)], outer)
    assert [p.status for p in ours] == [p.status_code for p in sdk]
    assert [extract_batch_part_metadata(p) for p in sdk] == [
        {} if p.etag is None else {"etag": p.etag} for p in ours
    ]
    for mine, theirs in zip(ours, sdk, strict=True):
        if theirs.request is changeset:
            assert mine.request.method == "POST" and mine.request.headers["Content-Type"].endswith(CHANGESET)
        else:
            assert mine.request is theirs.request
        if not 200 <= theirs.status_code < 300:
            a, b = (
                _decode_error(response=r, error_type=TableTransactionError)
                for r in (theirs, sdk_part_response(mine.raw, mine.request))
            )
            assert (type(a), a.status_code, a.error_code, a.message, a.index) == (
                type(b),
                b.status_code,
                b.error_code,
                b.message,
                b.index,
            )
            assert (
                dict(a.response.headers) == dict(b.response.headers)
                and a.response.text() == b.response.text()
            )
    return sdk


THREE = [("upsert", {**KEY, "RowKey": str(i)}) for i in range(3)]
ANSWERS = {
    "Azurite's success": answer([CREATED, OK_204, DELETED]),
    "an error part": answer([NOT_FOUND]),
    "LF line breaks": answer([CREATED, OK_204, DELETED], eol=b"\n"),
    "quoted boundary": answer([OK_204], quote=True),
    "lower-case etag, twice": answer([b"HTTP/1.1 200 OK\r\netag: a\r\nETag: b\r\n\r\n"]),
    "HTTP/1.0 and blanks": answer([b"HTTP/1.0  201 Created\r\nETag:   x  \r\n\r\n"]),
    "folded header": answer([b"HTTP/1.1 204 No Content\r\nX-A: 1\r\n  2\r\nETag: e\r\n\r\n"]),
    "bad status line (Azurite, 101 operations)": answer(
        [b"changesetresponse_2\r\nHTTP/1.1 400 Bad Request\r\n\r\n"]
    ),
    "preamble, padding, epilogue": (
        "multipart/mixed; charset=x; boundary=B",
        b"preamble\r\n--B  \r\nContent-Type: multipart/mixed; boundary=C\r\n\r\n--C\r\n"
        + PART
        + OK_204
        + b"\r\n--C--\r\n--B--\t\r\nepilogue --B\r\n",
    ),
    "folded changeset header, part headers in other cases": (
        "multipart/mixed; boundary=B",
        b"--B\r\nContent-Type: multipart/mixed;\r\n boundary=C\r\n\r\n--C\r\n"
        + b"content-type: Application/HTTP\r\nCONTENT-TRANSFER-ENCODING: Binary\r\nContent-ID: 1\r\n\r\n"
        + OK_204
        + b"\r\n--C--\r\n--B--\r\n",
    ),
    "no closing delimiter": ("multipart/mixed; boundary=B", b"--B\r\n" + PART + OK_204),
    "a part outside the changeset": (
        "multipart/mixed; boundary=B",
        b"--B\r\n" + PART + NOT_FOUND + b"\r\n--B--",
    ),
    "a part of another type": (
        "multipart/mixed; boundary=B",
        b"--B\r\nContent-Type: text/plain\r\n\r\nx\r\n--B--",
    ),
    "not multipart": ("application/json", b"{}"),
    "hundred parts": answer([OK_204] * 100),
}


REFUSED = {"bad status line (Azurite, 101 operations)", "a part of another type", "not multipart"}


@pytest.mark.parametrize("name", ANSWERS)
def test_answers_are_read_as_azure_core_reads_them(name):
    parts = compare(
        *ANSWERS[name], sub_requests([("upsert", {**KEY, "RowKey": f"{i:03d}"}) for i in range(100)])
    )
    assert (parts == []) == (name in REFUSED)  # both refuse it with the same exception type, or both read it


def test_the_failing_operation_is_reported_as_the_sdk_reports_it():
    sdk = compare(*answer([NOT_FOUND]), sub_requests(THREE))
    error = _decode_error(response=sdk[0], error_type=TableTransactionError)
    assert (error.status_code, error.error_code, error.index) == (404, "ResourceNotFound", 1)


_LATIN1_TEXT = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f"), max_size=40
)
_PART = st.tuples(
    st.sampled_from([200, 201, 204, 404, 409, 412, 413]),
    st.sampled_from(["ETag", "etag", "Etag", None]),
    _LATIN1_TEXT,
    st.lists(
        st.tuples(st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,15}", fullmatch=True), _LATIN1_TEXT), max_size=4
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(_PART, min_size=1, max_size=6), lf=st.booleans(), quote=st.booleans())
def test_generated_answers_are_read_as_azure_core_reads_them(parts, lf, quote):
    payloads = []
    for status, etag_name, etag, extra in parts:
        lines = [f"HTTP/1.1 {status} Reason"] + [f"{n}: {v}" for n, v in extra]
        lines += [f"{etag_name}: {etag}"] if etag_name else []
        payloads.append(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    compare(*answer(payloads, eol=b"\n" if lf else b"\r\n", quote=quote), sub_requests(THREE))
