"""The harness's pumps skip polls known to come back empty, in busy loop iterations only."""

from __future__ import annotations

from collections import Counter

from devtools.harness import PatternHarness
from workflow_core.transport import OutgoingMessage


def _count_polls(h: PatternHarness) -> Counter[str]:
    polls: Counter[str] = Counter()
    real = h.transport.real
    receive, receive_dead = real.receive, real.receive_dead_letters

    def counted_receive(queue, **kwargs):
        got = receive(queue, **kwargs)
        polls[f"{h._queue_kind(queue)}:{'full' if got else 'empty'}"] += 1
        return got

    def counted_dead(queue, **kwargs):
        got = receive_dead(queue, **kwargs)
        polls[f"dead:{'full' if got else 'empty'}"] += 1
        return got

    real.receive, real.receive_dead_letters = counted_receive, counted_dead
    return polls


def test_a_workflow_runs_with_fewer_empty_polls_than_loop_iterations(azurite):
    with PatternHarness(azurite, watchdog_every=None) as h:
        polls = _count_polls(h)
        iterations = Counter()
        h.host.add_pump(lambda: iterations.update(["it"]) and 0, "count")
        iid = h.start_workflow("provision-tenant", {"tenant_id": "polls", "admin_email": "a@x.net"})
        status = h.run_until_complete(iid)
        assert status.runtime_status.value == "Completed"
        assert h.double_effects() == {}
        # without skipping, every pump polls in every iteration
        assert polls["dead:empty"] < iterations["it"]
        assert polls["work:empty"] < iterations["it"]
        # the last iteration (the idle check) polled every queue
        assert polls["dead:empty"] >= 1


def test_a_message_that_bypasses_the_harness_transport_is_still_handled_before_the_loop_idles(azurite):
    """A send the harness does not see (another process, a test's own client) lands in a queue its
    pump knows as empty, during a busy iteration: the pump skips it there, but the idle check polls
    every queue, so the message is handled within the same run."""
    with PatternHarness(azurite, watchdog_every=None) as h:
        polls = _count_polls(h)
        calls = Counter()

        def send_around_the_harness() -> int:
            calls["n"] += 1
            if calls["n"] == 1:
                return 1  # busy, but the pumps after it have not polled in this run yet
            if calls["n"] == 2:  # the results queue is known empty now
                h.transport.real.send(
                    h.settings.result_queue, OutgoingMessage(body={"not": "a result"}, message_id="bypass-1")
                )
                return 1
            return 0

        h.host._pumps.insert(0, ("bypass", send_around_the_harness))  # before the agent pumps
        h.host.run_until_idle()
        assert calls["n"] >= 3
        assert polls["results:full"] == 1  # received (and settled) before run_until_idle returned
        assert polls["results:empty"] + polls["results:full"] < calls["n"]  # skipped at least once
        assert h.transport.real.receive(h.settings.result_queue, max_messages=1, lock_seconds=1) == []
