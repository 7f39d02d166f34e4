"""The demo's HTTP front end when a browser hangs up: no traceback, and the server keeps serving."""

from __future__ import annotations

import socket
import struct
import time
import urllib.request

import azure.functions as func

from devtools.http_server import AppHttpServer, Route, _compile
from tests.helpers.bare_host import BareHost


def slow_answer(req: func.HttpRequest) -> func.HttpResponse:
    time.sleep(0.3)  # the client hangs up meanwhile
    return func.HttpResponse(b"x" * 1_000_000, status_code=200)


def test_a_client_that_hangs_up_mid_answer_prints_no_traceback(capfd):
    route = Route("slow", frozenset({"GET"}), _compile("/api/slow"), "/api/slow", False, slow_answer)
    server = AppHttpServer(BareHost(), [route]).start()
    try:
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", server.port))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
            s.sendall(b"GET /api/slow HTTP/1.1\r\nHost: x\r\n\r\n")
            s.close()
        half = socket.create_connection(("127.0.0.1", server.port))
        half.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        half.sendall(b"GET /api/sl")  # hangs up mid-request
        half.close()
        time.sleep(1.0)
        with urllib.request.urlopen(f"{server.url}/api/slow", timeout=10) as answer:  # still serving
            assert answer.status == 200 and len(answer.read()) == 1_000_000
    finally:
        server.close()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred" not in err, err
