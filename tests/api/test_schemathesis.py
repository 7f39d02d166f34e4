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

from tests.api.support import principal_headers

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
    _attack(http_app.url, operation, mode, EXAMPLES_PER_OPERATION)


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: f"{op.method.upper()} {op.path}")
def test_with_platform_auth_a_reader_gets_documented_answers_too(http_app, operation, monkeypatch):
    # As deployed with App Service Authentication: the platform's principal, here a reader, whose
    # actions are 403 and whose reads go through.
    monkeypatch.setenv("WEBSITE_INSTANCE_ID", "schemathesis")
    monkeypatch.setenv("WEBSITE_AUTH_ENABLED", "true")
    reader = principal_headers("reader@contoso.example", roles=("Workflows.Read",))
    _attack(http_app.url, operation, GenerationMode.POSITIVE, EXAMPLES_PER_OPERATION // 4, reader)


def _attack(base_url, operation, mode, examples, headers=None):
    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def attack(case):
        case.call_and_validate(base_url=base_url, checks=CHECKS, headers=headers, timeout=30)

    attack()
