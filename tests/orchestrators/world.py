"""A stand-in for the activities and agents around the orchestrators, for replay tests.

``LedgerStub`` answers every activity per docs/contracts.md and records what it was asked, so a
test can script only what matters to it (a check that says ``extended``, an agent that stays
silent) and assert on the calls the orchestrators made.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from orchestrators import blueprint
from tests.durable_history import (
    ActivityFailed,
    OrchestrationPlayer,
    Reply,
    Scenario,
    blueprint_handler,
    parse_event_name,
)
from workflow_core import contracts as c
from workflow_core.workflows import WorkflowDefinition, get_workflow

WORKFLOW = blueprint_handler(blueprint, c.WORKFLOW_ORCHESTRATOR)
COMPENSATION = blueprint_handler(blueprint, c.COMPENSATION_ORCHESTRATOR)
STEP = blueprint_handler(blueprint, c.STEP_ORCHESTRATOR)
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)

TENANT_INPUT = {"tenant_id": "tenant1", "admin_email": "admin@tenant1.example"}
TENANT_OUTPUTS = {
    "create_storage": {"account": "sttenant1"},
    "register_dns": {"fqdn": "tenant1.example.net"},
    "send_welcome": {"message_id": "m-1"},
}


class LedgerStub:
    """Answers the scheduler's activities; scripted answers per (step, attempt) override defaults."""

    def __init__(self, definition: WorkflowDefinition, outputs: dict[str, Any] | None = None) -> None:
        self.definition = definition
        self.outputs = dict(outputs or {})
        self.checks: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
        # scripted verify_result answers per (kind, step, attempt); default: what the agent replied
        self.verdicts: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
        self.failing: dict[str, list[str]] = defaultdict(list)  # activity -> queued failure reasons
        self.plan_override: list[dict[str, Any]] | None = None
        # scripted dispatch outcomes per (kind, step, attempt); default "dispatched"
        self.dispatch_outcomes: dict[tuple[str, str, int], str] = {}
        self.calls: list[tuple[str, Any]] = []
        self.plans: list[list[str]] = []

    # scripting
    def check(self, step_id: str, attempt: int, answer: dict[str, Any], kind: str = "work") -> LedgerStub:
        self.checks[(kind, step_id, attempt)].append(answer)
        return self

    def verdict(self, step_id: str, attempt: int, answer: dict[str, Any], kind: str = "work") -> LedgerStub:
        self.verdicts[(kind, step_id, attempt)].append(answer)
        return self

    # responders
    def _record(self, name: str, data: Any) -> None:
        self.calls.append((name, data))
        if self.failing[name]:
            raise ActivityFailed(self.failing[name].pop(0))

    def create_steps(self, data: Any, player: OrchestrationPlayer) -> Any:
        self._record(c.ACTIVITY_CREATE_STEPS, data)
        return {"created": len(self.definition.steps)}

    def dispatch(self, data: Any, player: OrchestrationPlayer) -> Any:
        """Shaped like the dispatch activities' ``DispatchOutcome``."""
        c.StepDispatch.model_validate(data)  # the scheduler must send the contract's shape
        kind = data["kind"]
        self._record(c.ACTIVITY_DISPATCH_STEP if kind == "work" else c.ACTIVITY_DISPATCH_COMPENSATION, data)
        outcome = self.dispatch_outcomes.get((kind, data["step_id"], data["attempt"]), "dispatched")
        return {
            "instance_id": data["instance_id"],
            "step_id": data["step_id"],
            "kind": kind,
            "attempt": data["attempt"],
            "outcome": outcome,
            "status": "Dispatched" if kind == "work" else "Compensating",
            "message_id": f"{data['instance_id']}:{data['step_id']}:{data['attempt']}",
            "sent": outcome == "dispatched",
            "deadline": data["deadline"],
        }

    def _check(self, kind: str, name: str, data: Any) -> Any:
        self._record(name, data)
        scripted = self.checks.get((kind, data["step_id"], data["attempt"]))
        return scripted.pop(0) if scripted else {"state": "timed_out"}

    def check_step(self, data: Any, player: OrchestrationPlayer) -> Any:
        return self._check("work", c.ACTIVITY_CHECK_STEP, data)

    def check_compensation(self, data: Any, player: OrchestrationPlayer) -> Any:
        return self._check("compensate", c.ACTIVITY_CHECK_COMPENSATION, data)

    def verify(self, data: Any, player: OrchestrationPlayer) -> Any:
        """The ledger's outcome of the attempt: scripted, else what the scenario's agent replied (the
        worker records before it replies); an agent reply that is no outcome was never recorded."""
        self._record(c.ACTIVITY_VERIFY_RESULT, data)
        kind, step_id, attempt = data["kind"], data["step_id"], data["attempt"]
        scripted = self.verdicts.get((kind, step_id, attempt))
        if scripted:
            return scripted.pop(0)
        reply = player.scenario.reply_for(c.result_event_name(step_id, attempt, kind))
        if reply is None or reply.outcome not in ("succeeded", "failed"):
            return {"state": "unconfirmed"}
        if reply.outcome == "succeeded":
            return {"state": "succeeded", "output": reply.output or {}}
        return {"state": "failed", "error": reply.error}

    def schedule_retry(self, data: Any, player: OrchestrationPlayer) -> Any:
        self._record(c.ACTIVITY_SCHEDULE_RETRY, data)
        return {"status": "Retrying"}

    def give_up(self, data: Any, player: OrchestrationPlayer) -> Any:
        self._record(c.ACTIVITY_GIVE_UP_STEP, data)
        return {"status": "TimedOut"}

    def finish_compensation(self, data: Any, player: OrchestrationPlayer) -> Any:
        self._record(c.ACTIVITY_FINISH_COMPENSATION, data)
        return {"status": "CompensationFailed"}

    def settle(self, data: Any, player: OrchestrationPlayer) -> Any:
        self._record(c.ACTIVITY_SETTLE_INSTANCE, data)
        return {"instance_id": data["instance_id"], "status": data["outcome"], "changed": True}

    def plan(self, data: Any, player: OrchestrationPlayer) -> Any:
        """Per the contract: succeeded steps in reverse completion order, the given-up step first
        when it has a compensator. For a sequential workflow the succeeded steps are the ones
        dispatched before the given-up step, in dispatch order."""
        self._record(c.ACTIVITY_PLAN_COMPENSATION, data)
        if self.plan_override is not None:
            entries = self.plan_override
        else:
            given_up = [d["step_id"] for n, d in self.calls if n == c.ACTIVITY_GIVE_UP_STEP]
            completed: list[str] = []
            for name, d in self.calls:
                if name == c.ACTIVITY_DISPATCH_STEP and d["step_id"] not in completed + given_up:
                    completed.append(d["step_id"])
            order = given_up[-1:] + list(reversed(completed))
            entries = [
                self._entry(step_id) for step_id in order if self.definition.step(step_id).compensation
            ]
        self.plans.append([e["step_id"] for e in entries])
        return {"steps": entries}

    def _entry(self, step_id: str) -> dict[str, Any]:
        step = self.definition.step(step_id)
        assert step.compensation is not None
        return {
            "step_id": step_id,
            "compensator": step.compensation.agent,
            "input": {"from": step_id},
            "output": self.outputs.get(step_id),
            "deadline_seconds": step.compensation.deadline_seconds,
            "retry": step.compensation.retry.model_dump(),
        }

    # views
    def called(self, name: str) -> list[Any]:
        return [d for n, d in self.calls if n == name]

    def names(self) -> list[str]:
        return [n for n, _ in self.calls]

    def scenario(self, replies: dict[str, Reply | None] | None = None, default_reply: Any = None) -> Scenario:
        def default(name: str) -> Reply | None:
            kind, step_id, _ = parse_event_name(name)
            return Reply.succeed(self.outputs.get(step_id, {}) if kind == "work" else {"undone": step_id})

        return Scenario(
            activities={
                c.ACTIVITY_CREATE_STEPS: self.create_steps,
                c.ACTIVITY_DISPATCH_STEP: self.dispatch,
                c.ACTIVITY_DISPATCH_COMPENSATION: self.dispatch,
                c.ACTIVITY_CHECK_STEP: self.check_step,
                c.ACTIVITY_CHECK_COMPENSATION: self.check_compensation,
                c.ACTIVITY_VERIFY_RESULT: self.verify,
                c.ACTIVITY_SCHEDULE_RETRY: self.schedule_retry,
                c.ACTIVITY_GIVE_UP_STEP: self.give_up,
                c.ACTIVITY_PLAN_COMPENSATION: self.plan,
                c.ACTIVITY_FINISH_COMPENSATION: self.finish_compensation,
                c.ACTIVITY_SETTLE_INSTANCE: self.settle,
            },
            replies=replies,
            default_reply=default_reply or default,
            sub_orchestrators={c.COMPENSATION_ORCHESTRATOR: COMPENSATION, c.STEP_ORCHESTRATOR: STEP},
        )


def tenant_world(**replies: Reply | None) -> tuple[LedgerStub, Scenario]:
    """provision-tenant with plausible agent outputs; ``replies`` keyed like ``result_create_storage_1``."""
    ledger = LedgerStub(get_workflow("provision-tenant"), TENANT_OUTPUTS)
    scripted = {_event_name(key): reply for key, reply in replies.items()}
    return ledger, ledger.scenario(scripted)


def _event_name(key: str) -> str:
    """``result_create_storage_1`` -> ``result:create_storage:1`` (keyword-friendly spelling)."""
    prefix, _, rest = key.partition("_")
    step_id, _, attempt = rest.rpartition("_")
    return f"{'result' if prefix == 'result' else 'compensation-result'}:{step_id}:{attempt}"


def pinned(workflow: str | Any, data: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A ``workflow_orchestrator`` input pinned, as every start and resume is, to ``workflow`` (a
    shipped workflow's name, or a definition) as it is now."""
    from workflow_core.workflows.store import canonical_data, version_of

    definition = get_workflow(workflow) if isinstance(workflow, str) else workflow
    return {
        "workflow": definition.name,
        "input": dict(data or {}),
        "version": version_of(definition),
        "definition": canonical_data(definition),
        **extra,
    }


def start_input(workflow: str = "provision-tenant", data: dict[str, Any] | None = None) -> dict[str, Any]:
    return pinned(workflow, TENANT_INPUT if data is None else data)


def workflow_player(
    scenario: Scenario, input_: dict[str, Any] | None = None, **kwargs: Any
) -> OrchestrationPlayer:
    kwargs.setdefault("start", T0)
    kwargs.setdefault("name", c.WORKFLOW_ORCHESTRATOR)
    return OrchestrationPlayer(WORKFLOW, input_ or start_input(), scenario, **kwargs)
