"""The Azurite launcher every test, demo and benchmark uses: its ports must not collide.

Once, under a loaded suite, two of its three services were handed the same free port and the demo's
Azurite died with EADDRINUSE; a port can also be taken by another process between being picked and
Azurite binding it. These tests make both happen on purpose.
"""

from __future__ import annotations

import socket
import tempfile

import pytest

from devtools.azurite import Azurite, AzuriteExited


def _occupy(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


def test_picked_ports_are_three_distinct_ports():
    for _ in range(50):
        ports = Azurite()._ports
        assert len(set(ports)) == 3, ports


def test_a_picked_port_taken_before_start_is_replaced_and_azurite_starts():
    azurite = Azurite()
    taken = azurite.queue_port
    with _occupy(taken):
        try:
            azurite.start()
            assert taken not in azurite._ports
            assert len(set(azurite._ports)) == 3
        finally:
            azurite.close()


def test_a_restart_keeps_its_ports():
    with Azurite() as azurite:
        before = azurite._ports
        azurite.restart()
        assert azurite._ports == before


def test_ports_a_caller_chose_are_never_replaced():
    ports = Azurite()._ports
    chosen = Azurite(blob_port=ports[0], queue_port=ports[1], table_port=ports[2])
    with _occupy(chosen.blob_port):
        try:
            with pytest.raises(AzuriteExited, match="exited with code"):
                chosen.start()
            assert chosen._ports == ports
        finally:
            chosen.close()


def test_an_azurite_leaves_no_folder_behind_started_or_not(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for _ in range(3):
        Azurite()  # built, never started (a demo pointed at a running Azurite does this)
    assert list(tmp_path.iterdir()) == []
    with Azurite() as azurite:
        assert azurite.location is not None and azurite.location.parent == tmp_path
        assert (azurite.location / "azurite.log").exists()
    assert list(tmp_path.iterdir()) == []
