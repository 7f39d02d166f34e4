"""The scheduler's side of a parked wait (``orchestrators/attempts.py``), replayed: a dispatch held
back with a ``wake`` event parks on it and its timer, and the wake-up ends the park early (the timer
cancelled); a held answer without one (a slot wait, or any history recorded before parking) is the
plain timer it always was."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.orchestrators.world import TENANT_OUTPUTS, LedgerStub, workflow_player
from workflow_core import contracts as c
from workflow_core.workflows import get_workflow

WAKE = "wake:create_storage:1:0123abcd"


class HeldOnce(LedgerStub):
    """The first dispatch of create_storage answers *waiting* (the agent's circuit), parked 60 s."""

    def __init__(self, wake: str | None) -> None:
        super().__init__(get_workflow("provision-tenant"), TENANT_OUTPUTS)
        self.wake, self.held = wake, False

    def dispatch(self, data: Any, player: Any) -> Any:
        answer = super().dispatch(data, player)
        if data["step_id"] != "create_storage" or self.held:
            return answer
        self.held = True
        parked = {"outcome": "waiting", "sent": False, "error": "circuit open", "retry_after": 60.0}
        return {**answer, **parked, **({"wake": self.wake} if self.wake else {})}


@pytest.mark.parametrize("wake", [WAKE, None], ids=["parked", "plain-timer"])
def test_a_held_step_parks_until_its_wake_up_or_its_timer(wake):
    ledger = HeldOnce(wake)
    player = workflow_player(ledger.scenario({WAKE: None}))  # no agent answers a wake-up
    player.raise_event_later(5, WAKE, None)  # the circuit closed 5 s in: the tick raised the wake-up

    final = player.play()

    assert final.output["status"] == "succeeded"
    first, second = [
        a for a in player.activities(c.ACTIVITY_DISPATCH_STEP) if a.input["step_id"] == "create_storage"
    ]
    assert (first.input["attempt"], second.input["attempt"], second.input.get("held")) == (1, 1, True)
    (park,) = [t for t in player.timers() if t.episode == first.episode + 1]
    assert park.fire_at - first.scheduled_at >= timedelta(seconds=60)
    asked_again = second.scheduled_at - first.scheduled_at
    if wake:
        assert asked_again < timedelta(seconds=10) and park.cancelled
    else:
        assert asked_again >= timedelta(seconds=60) and not park.cancelled
