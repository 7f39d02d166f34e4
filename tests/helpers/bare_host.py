"""What ``devtools.http_server.AppHttpServer`` needs of the durable host (its lock, and ``call``), for
tests that serve a few routes on a real socket without a durable host behind them."""

from __future__ import annotations

import threading


class BareHost:
    def __init__(self) -> None:
        self._lock = threading.Lock()

    def call(self, function, req, **kwargs):
        return function(req)
