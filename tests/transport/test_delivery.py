"""settle_failure / pump decisions, on a recording transport (the contract suite runs them on real queues)."""

from __future__ import annotations

import pytest

from workflow_core.transport import (
    LockLostError,
    ReceivedMessage,
    Settlement,
    Transport,
    pump,
    settle_failure,
)
from workflow_core.transport.base import MAX_DELIVERY_REASON, MAX_DESCRIPTION_CHARS


class Recorder(Transport):
    """Hands out given messages and records settlements; ``lose_lock`` makes settling fail."""

    def __init__(self, messages, lose_lock: bool = False):
        self.messages, self.calls, self.lose_lock = list(messages), [], lose_lock

    def ensure_queues(self, *queues): ...

    def send(self, queue, message): ...

    def receive(self, queue, *, max_messages=1, lock_seconds=30.0, wait_seconds=0.0):
        batch, self.messages = self.messages[:max_messages], self.messages[max_messages:]
        return batch

    def _record(self, *call):
        if self.lose_lock:
            raise LockLostError("gone")
        self.calls.append(call)

    def complete(self, message):
        self._record("complete", message.message_id)

    def abandon(self, message):
        self._record("abandon", message.message_id)

    def dead_letter(self, message, reason, description=""):
        self._record("dead_letter", message.message_id, reason, description)

    def renew_lock(self, message, lock_seconds=30.0): ...

    def receive_dead_letters(self, queue, *, max_messages=10, lock_seconds=30.0, wait_seconds=0.0):
        return []


def _msg(message_id="m", delivery_count=1):
    return ReceivedMessage(body={}, message_id=message_id, delivery_count=delivery_count, queue="q")


@pytest.mark.parametrize(
    ("delivery_count", "expected"),
    [
        (1, Settlement.ABANDONED),
        (4, Settlement.ABANDONED),
        (5, Settlement.DEAD_LETTERED),
        (9, Settlement.DEAD_LETTERED),
    ],
)
def test_settle_failure_dead_letters_from_the_last_allowed_delivery(delivery_count, expected):
    t = Recorder([])
    assert settle_failure(t, _msg(delivery_count=delivery_count), 5, description="boom") is expected
    if expected is Settlement.DEAD_LETTERED:
        assert t.calls == [("dead_letter", "m", MAX_DELIVERY_REASON, "boom")]
    else:
        assert t.calls == [("abandon", "m")]


def test_settle_failure_rejects_a_nonsense_limit():
    with pytest.raises(ValueError, match="max_delivery_count"):
        settle_failure(Recorder([]), _msg(), 0)


def test_pump_settles_each_message_by_its_handler_outcome():
    t = Recorder([_msg("ok"), _msg("bad"), _msg("last", delivery_count=3)])

    def handler(message):
        if message.message_id != "ok":
            raise KeyError(message.message_id)

    deliveries = pump(t, "q", handler, max_delivery_count=3, max_messages=10)

    assert [(d.message.message_id, d.settlement) for d in deliveries] == [
        ("ok", Settlement.COMPLETED),
        ("bad", Settlement.ABANDONED),
        ("last", Settlement.DEAD_LETTERED),
    ]
    assert deliveries[0].error is None and isinstance(deliveries[1].error, KeyError)
    assert t.calls[-1] == ("dead_letter", "last", MAX_DELIVERY_REASON, "KeyError: 'last'")


def test_pump_truncates_long_error_descriptions():
    t = Recorder([_msg(delivery_count=2)])
    pump(t, "q", lambda m: (_ for _ in ()).throw(ValueError("x" * 5000)), max_delivery_count=2)
    assert len(t.calls[0][3]) == MAX_DESCRIPTION_CHARS


def test_pump_reports_lock_lost_instead_of_raising():
    t = Recorder([_msg("a"), _msg("b")], lose_lock=True)
    deliveries = pump(t, "q", lambda m: None, max_delivery_count=3, max_messages=2)
    assert [d.settlement for d in deliveries] == [Settlement.LOCK_LOST, Settlement.LOCK_LOST]
    assert all(isinstance(d.error, LockLostError) for d in deliveries)
