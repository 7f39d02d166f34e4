"""The message contract as JSON Schema files, for agents written in any language.

    .venv/bin/python -m devtools.contract_schemas            # (re)write docs/schemas/
    .venv/bin/python -m devtools.contract_schemas --check    # exit 1 when a committed file is stale

The schemas are generated from the pydantic models the app itself validates every message with;
``tests/transport/test_message_schemas.py`` keeps the committed files equal to the models.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_DIR = ROOT / "docs" / "schemas"
DIALECT = "https://json-schema.org/draft/2020-12/schema"
# The contract's version, in each schema's $id: raised with any change an agent written against the
# previous schemas would not accept (a new required field, a narrower pattern).
CONTRACT_VERSION = 3

BLOB_REFERENCE = {
    "type": "object",
    "description": "A value too large to travel inline, stored in the payload container (PAYLOAD_CONTAINER) "
    "under its SHA-256: never sent to a message-only pool (its work fails instead). An agent that cannot "
    "read the container must refuse such work, never succeed without it.",
    "properties": {
        "$blob": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
        "size": {"type": "integer", "minimum": 0, "description": "bytes of the stored JSON"},
    },
    "required": ["$blob", "size"],
    "additionalProperties": False,
}
INLINE_OBJECT = {
    "type": "object",
    "description": "A JSON object carried inline: any object that is not a BlobReference.",
    "not": {"$ref": "#/$defs/BlobReference"},
}
INLINE_OR_BLOB = [{"$ref": "#/$defs/InlineObject"}, {"$ref": "#/$defs/BlobReference"}]
COMPENSATE_INPUT = {
    "type": "object",
    "description": "The input of a compensate message: the step's input and its recorded output (null "
    "when it recorded none).",
    "properties": {
        "input": {"oneOf": INLINE_OR_BLOB},
        "output": {"oneOf": [*INLINE_OR_BLOB, {"type": "null"}]},
    },
    "required": ["input", "output"],
    "additionalProperties": False,
}
INPUT_DESCRIPTION = (
    "kind 'work': the step's input as the definition maps it, inline or (never on a message-only pool) "
    "a BlobReference. kind 'compensate': a CompensateInput, or the whole of it as one BlobReference."
)


def _as_sent(schema: dict[str, Any]) -> dict[str, Any]:
    """The work message schema with the shapes of its input: an inline object or a blob reference,
    and for ``kind: compensate`` the ``{input, output}`` pair (``if``/``then`` on ``kind``)."""
    schema["properties"]["input"] = {"description": INPUT_DESCRIPTION, "oneOf": INLINE_OR_BLOB}
    schema.setdefault("$defs", {}).update(
        BlobReference=BLOB_REFERENCE, InlineObject=INLINE_OBJECT, CompensateInput=COMPENSATE_INPUT
    )
    pair = [{"$ref": "#/$defs/CompensateInput"}, {"$ref": "#/$defs/BlobReference"}]
    schema["if"] = {"properties": {"kind": {"const": "compensate"}}, "required": ["kind"]}
    schema["then"] = {"properties": {"input": {"oneOf": pair}}}
    return schema


def schemas() -> dict[str, dict[str, Any]]:
    """File name -> schema, for each message the app sends."""
    from workflow_core.contracts import AttemptStatus, Heartbeat, ResultMessage, WorkMessage

    found = {}
    for name, model, queue in (
        ("work-message", WorkMessage, "the work queue (WORK_QUEUE_NAME), read by agents"),
        ("result-message", ResultMessage, "the result queue (RESULT_QUEUE_NAME), written by agents"),
        ("heartbeat-message", Heartbeat, "the result queue (RESULT_QUEUE_NAME), from message-only agents"),
        (
            "attempt-status",
            AttemptStatus,
            "an agent's answer queue (a heartbeat's answer_queue, <RESULT_QUEUE_NAME>-answers-...), "
            "written by the app",
        ),
    ):
        schema = model.model_json_schema()
        if model is WorkMessage:
            schema = _as_sent(schema)
        found[f"{name}.schema.json"] = {
            "$schema": DIALECT,
            "$id": f"urn:sas:schema:{name}:v{CONTRACT_VERSION}",
            "description": f"Body of a message on {queue}. {schema.pop('description', '')}".strip(),
            **schema,
        }
    return found


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.contract_schemas", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed schema differs")
    parser.add_argument("directory", nargs="?", type=Path, default=SCHEMA_DIR)
    args = parser.parse_args(argv)
    stale = []
    for name, schema in schemas().items():
        path = args.directory / name
        text = render(schema)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    if stale:
        print(f"stale: {', '.join(stale)}; run python -m devtools.contract_schemas", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
