"""The bounded JSON reader every queue reader uses: each hostile shape is one ``MalformedJson``."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workflow_core.transport import bounded_json
from workflow_core.transport.bounded_json import MalformedJson
from workflow_core.transport.envelope import MALFORMED_KEY, body_from_text, read_envelope

HOSTILE = {
    "3000-deep object": '{"a":' * 3000 + "1" + "}" * 3000,
    "3000-deep list": "[" * 3000 + "]" * 3000,
    "65-deep": "[" * 65 + "]" * 65,
    "duplicate key": '{"a": 1, "a": 2}',
    "lone surrogate": '{"a": "\\ud800"}',
    "lone surrogate key": '{"\\udfff": 1}',
    "lone surrogate in list": '{"a": ["x", "\\udc00"]}',
    "huge integer": '{"a": ' + "9" * 5000 + "}",
    "huge float": '{"a": 1e999}',
    "NaN": '{"a": NaN}',
    "Infinity": "[Infinity]",
    "too long": '"' + "x" * (bounded_json.MAX_CHARS + 1) + '"',
}


@pytest.mark.parametrize("text", list(HOSTILE.values()), ids=list(HOSTILE))
def test_each_hostile_shape_is_malformed_with_a_reason(text):
    with pytest.raises(MalformedJson) as caught:
        bounded_json.loads(text)
    assert str(caught.value) and len(str(caught.value)) < 300
    body = body_from_text(text)  # on 10caf32: RecursionError for the deep ones, a silent last-wins for dupes
    assert MALFORMED_KEY in body or set(body) == {"text"}
    assert read_envelope(text).is_envelope is False


def test_invalid_utf8_bytes_are_malformed():
    with pytest.raises(MalformedJson, match="not UTF-8"):
        bounded_json.loads(b'{"a": "\xff"}')


def test_depth_counts_only_structure_not_brackets_in_strings():
    text = json.dumps({"a": "[[[[{{{{" * 100, "b": [[1]]})
    assert bounded_json.loads(text)["b"] == [[1]]


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.text(max_size=20),
        lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
        max_leaves=30,
    )
)
def test_ordinary_json_reads_as_the_standard_library_does(value):
    text = json.dumps(value)
    try:
        expected = json.loads(text)
        json.dumps(expected).encode("utf-8")
    except UnicodeEncodeError:  # a generated lone surrogate: refused, as it must be
        with pytest.raises(MalformedJson):
            bounded_json.loads(text)
        return
    assert bounded_json.loads(text) == expected


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200))
def test_anything_at_all_parses_or_is_malformed(data):
    with contextlib.suppress(MalformedJson):
        bounded_json.loads(data)


def _reference_depth_within(text: str, limit: int) -> bool:
    """The scan character by character that ``depth_within`` does in C."""
    depth, in_string, escaped = 0, False, False
    for char in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return False
        elif char in "]}":
            depth -= 1
    return True


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet='[]{}"\\ax,:', max_size=300), st.integers(0, 8))
def test_the_depth_bound_is_the_character_scans(text, limit):
    assert bounded_json.depth_within(text, limit) == _reference_depth_within(text, limit)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": "\\\\ud800"}', {"a": "\\ud800"}),  # an escaped backslash, then the letters: no surrogate
        ('{"a": "\\ud83d\\ude00"}', {"a": "\U0001f600"}),  # a pair is one character
        ('{"a": "\\uD7FF\\uE000"}', {"a": "\ud7ff\ue000"}),  # either side of the surrogate range
    ],
)
def test_text_that_only_looks_like_a_surrogate_is_read(text, expected):
    assert bounded_json.loads(text) == expected
