"""Property-based attack on the whole HTTP API from its own contract: schemathesis generates requests
for every operation in ``docs/openapi.yaml`` (valid ones and ones that break the schema) and sends
them to the app on a real socket (the in-process server, ``http_app``).

Every answer must be no 500, and must conform to the document: a status it declares, the declared
content type, and a body that matches the declared schema. Requests come in both of schemathesis'
modes: valid per the document, and breaking it (wrong types, missing required parts), which the app
must refuse with a declared 4xx. A few dozen examples per operation keep this to about half a
minute; ``derandomize`` makes a failure reproduce on the next run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode, checks

OPENAPI = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
EXAMPLES_PER_OPERATION = 40
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.response_headers_conformance,
]
SCHEMA = schemathesis.openapi.from_path(str(OPENAPI))
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]


# Every operation in both modes, except the negative mode of the console's route: its only parameter
# is any string, so no request can break the document.
CASES = [
    pytest.param(op, mode, id=f"{op.method.upper()} {op.path} {mode.value}")
    for op in OPERATIONS
    for mode in GenerationMode
    if not (mode is GenerationMode.NEGATIVE and op.path == "/api/console/{path}")
]


@pytest.mark.parametrize(("operation", "mode"), CASES)
def test_every_generated_request_gets_a_conforming_answer_and_never_a_500(http_app, operation, mode):
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def attack(case):
        case.call_and_validate(base_url=http_app.url, checks=CHECKS, timeout=30)

    attack()
