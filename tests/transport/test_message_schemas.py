"""The message contract for agents in any language: docs/schemas/*.schema.json are the models the app
validates with (kept equal by ``devtools.contract_schemas --check``), every message a whole workflow
run sends validates against them (work, compensation, success and failure replies), and they refuse
what the app refuses."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from jsonschema import Draft202012Validator, FormatChecker

from activities.worker.handlers import faults
from devtools import contract_schemas
from devtools.faulty_transport import FaultyTransport
from tests.faults.test_large_payloads import large_dns  # noqa: F401  (the fixture)
from tests.faults.test_large_payloads import start as start_large
from tests.helpers.fault_matrix import start_provisioning
from workflow_core.payloads import is_reference


def validator(name: str) -> Draft202012Validator:
    schema = json.loads((contract_schemas.SCHEMA_DIR / f"{name}.schema.json").read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=FormatChecker())


def test_the_committed_schemas_are_the_models_the_app_validates_with(capsys):
    assert contract_schemas.main(["--check"]) == 0, capsys.readouterr().err


def test_a_stale_schema_is_caught(tmp_path, capsys):
    for name, schema in contract_schemas.schemas().items():
        (tmp_path / name).write_text(contract_schemas.render({**schema, "title": "edited"}), encoding="utf-8")
    assert contract_schemas.main(["--check", str(tmp_path)]) == 1
    stale = (
        "stale: work-message.schema.json, result-message.schema.json, heartbeat-message.schema.json, "
        "attempt-status.schema.json"
    )
    assert stale in capsys.readouterr().err


@pytest.fixture
def sent(monkeypatch):
    """Every message body the app sends, by queue kind (``work``, ``results``)."""
    bodies: list[tuple[str, dict]] = []
    real = FaultyTransport.send

    def send(self, queue, message):
        bodies.append((self._queue_kind(queue), json.loads(message.body_bytes())))
        return real(self, queue, message)

    monkeypatch.setattr(FaultyTransport, "send", send)
    return bodies


def test_every_message_a_workflow_run_sends_validates(harness, sent):
    from activities.worker.handlers import faults

    faults.inject("email.send_welcome", faults.Fail())  # the last step fails for good: compensation
    iid = start_provisioning(harness)
    harness.run_until_complete(iid)

    work, results = validator("work-message"), validator("result-message")
    kinds = {(queue, body.get("kind"), body.get("outcome")) for queue, body in sent}
    assert {("work", "work", None), ("work", "compensate", None)} <= kinds, kinds
    assert {("results", "work", "succeeded"), ("results", "work", "failed")} <= kinds, kinds
    assert ("results", "compensate", "succeeded") in kinds, kinds
    for queue, body in sent:
        errors = [e.message for e in (work if queue == "work" else results).iter_errors(body)]
        assert errors == [], (queue, body, errors)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("step_id", "a/b"),  # a character Table Storage keys forbid
        ("instance_id", ""),
        ("instance_id", "x" * 201),
        ("attempt", 0),
        ("kind", "other"),
        ("surprise", True),  # no field the app does not know
    ],
)
def test_the_schema_refuses_what_the_app_refuses(field, value):
    from pydantic import ValidationError

    from workflow_core.contracts import WorkMessage

    body = _work_body()
    assert list(validator("work-message").iter_errors(body)) == []
    bad = {**body, field: value}
    assert list(validator("work-message").iter_errors(bad)) != []
    with pytest.raises(ValidationError):
        WorkMessage.model_validate(bad)


def _work_body() -> dict:
    return {
        "kind": "work",
        "instance_id": "wf-1",
        "orchestration_id": "wf-1",
        "workflow": "provision-tenant",
        "step_id": "create_storage",
        "agent": "storage.create",
        "attempt": 1,
        "deadline": "2030-06-01T12:00:00+00:00",
        "expires_at": "2030-06-01T12:00:30+00:00",
        "input": {},
        "reply_token": "a" * 64,
        "idempotency_key": "wf-1:create_storage",
    }


@pytest.mark.parametrize("field", ["reply_token", "idempotency_key", "expires_at"])
def test_what_every_work_message_carries_is_required_and_never_null(field):
    body = _work_body()
    assert list(validator("work-message").iter_errors({**body, field: None})) != []
    assert list(validator("work-message").iter_errors({k: v for k, v in body.items() if k != field})) != []


REF = {"$blob": "sha256:" + "0" * 64, "size": 12}


@pytest.mark.parametrize(
    ("kind", "value", "valid"),
    [
        ("work", {"tenant": "x"}, True),
        ("work", REF, True),
        ("work", {"input": {}, "output": None}, True),  # a work input may look like anything inline
        ("compensate", {"input": {"tenant": "x"}, "output": None}, True),
        ("compensate", {"input": REF, "output": REF}, True),
        ("compensate", REF, True),  # the whole pair by one reference
        ("compensate", {"tenant": "x"}, False),  # not the {input, output} pair
        ("compensate", {"input": {}, "output": {}, "extra": 1}, False),
        ("compensate", {"input": {}}, False),
    ],
)
def test_the_input_shapes_are_schema_not_prose(kind, value, valid):
    """``input`` is ``oneOf`` an inline object and a ``BlobReference``; ``if kind == compensate``
    it is the ``{input, output}`` pair (each inline or a reference) or one reference."""
    body = {**_work_body(), "kind": kind, "input": value}
    assert (list(validator("work-message").iter_errors(body)) == []) is valid


def test_messages_carrying_blob_references_validate(harness, sent, large_dns):  # noqa: F811
    """A real run whose input, an output and a compensation's pair travel by reference."""
    faults.inject("email.send_welcome", faults.Fail())
    iid = start_large(harness)
    harness.run_until(
        lambda: harness.ledger.get_instance(iid).status.value == "Compensated", timedelta(hours=2)
    )
    work = validator("work-message")
    inputs = [(body["kind"], body.get("input")) for queue, body in sent if queue == "work"]
    assert any(kind == "work" and is_reference(value) for kind, value in inputs), inputs
    assert any(
        kind == "compensate" and (is_reference(value) or is_reference(value.get("output")))
        for kind, value in inputs
    ), inputs
    for queue, body in sent:
        if queue == "work":
            assert [e.message for e in work.iter_errors(body)] == [], body["kind"]
