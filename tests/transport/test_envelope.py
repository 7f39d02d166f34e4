"""The storage-queue envelope: everything a message carries survives the trip through text."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from workflow_core.transport import OutgoingMessage
from workflow_core.transport.envelope import ENVELOPE_FORMAT, body_from_text, read_envelope, write_envelope

json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20)
json_scalars = json_scalars | st.floats(allow_nan=False, allow_infinity=False)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
property_values = st.text(max_size=20) | st.integers(-(2**53), 2**53) | st.booleans()
property_values = property_values | st.floats(allow_nan=False, allow_infinity=False)
messages = st.builds(
    OutgoingMessage,
    body=st.dictionaries(st.text(max_size=8), json_values, max_size=5),
    message_id=st.text(min_size=1, max_size=40),
    correlation_id=st.none() | st.text(max_size=40),
    subject=st.none() | st.text(max_size=40),
    application_properties=st.dictionaries(st.text(min_size=1, max_size=8), property_values, max_size=5),
)


@given(messages)
def test_every_field_survives_write_then_read(message: OutgoingMessage):
    parsed = read_envelope(write_envelope(message))

    assert parsed.is_envelope
    assert parsed.body == message.body
    assert parsed.message_id == message.message_id
    assert parsed.correlation_id == message.correlation_id
    assert parsed.subject == message.subject
    assert parsed.application_properties == message.application_properties
    assert {k: type(v) for k, v in parsed.application_properties.items()} == {
        k: type(v) for k, v in message.application_properties.items()
    }
    assert (parsed.dead_letter_reason, parsed.dead_letter_description) == (None, None)


@given(messages, st.text(max_size=50), st.text(max_size=200))
def test_dead_letter_copy_carries_reason_and_description(message, reason, description):
    parsed = read_envelope(
        write_envelope(message, dead_letter_reason=reason, dead_letter_description=description)
    )
    assert (parsed.dead_letter_reason, parsed.dead_letter_description) == (reason, description)
    assert parsed.body == message.body


@given(st.text(max_size=100))
def test_any_text_reads_without_raising(text: str):
    parsed = read_envelope(text)
    assert isinstance(parsed.body, dict)
    if not parsed.is_envelope:
        assert parsed.message_id is None


def test_non_envelope_json_objects_become_the_body():
    assert read_envelope('{"order": 1}').body == {"order": 1}
    assert not read_envelope('{"order": 1}').is_envelope
    assert read_envelope(json.dumps({"envelope": "something-else/9", "body": {}})).is_envelope is False


def test_body_from_text_shapes():
    assert body_from_text('{"a": 1}') == {"a": 1}
    assert body_from_text("[1]") == {"value": [1]}
    assert body_from_text("null") == {"value": None}
    assert body_from_text("3") == {"value": 3}
    assert body_from_text("nope") == {"text": "nope"}


def test_envelope_format_marker_is_written():
    doc = json.loads(write_envelope(OutgoingMessage(body={}, message_id="m")))
    assert doc["envelope"] == ENVELOPE_FORMAT
