"""What the loop tells a pump: whether its iteration already did work, and which run of the loop it is."""

from __future__ import annotations

from devtools.durable_host import DurableTestHost


def chain(ctx):
    first = yield ctx.call_activity("echo", 1)
    second = yield ctx.call_activity("echo", 2)
    return [first, second]


def test_a_pump_sees_whether_its_iteration_did_work_and_each_run_is_a_new_serial():
    seen: list[tuple[int, bool]] = []
    host = DurableTestHost(orchestrators={"chain": chain}, activities={"echo": lambda n: n})

    def pump() -> int:
        seen.append((host.run_serial, host.iteration_busy))
        return 0

    host.add_pump(pump)
    iid = host.start_new("chain")
    assert host.run_until_complete(iid).output == [1, 2]
    first_run = host.run_serial
    # iterations that ran an episode or an activity were busy; the last one, which found nothing
    # to do (so the loop stopped), was not
    assert [busy for _, busy in seen].count(True) >= 3
    assert seen[-1] == (first_run, False)
    assert not host.iteration_busy  # only meaningful inside a pump call

    host.run_until_idle()
    assert host.run_serial == first_run + 1
    assert seen[-1] == (first_run + 1, False)
