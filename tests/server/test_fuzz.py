"""Finding 11: a bounded property-based fuzz run (schemathesis) against the real server's own
OpenAPI schema, loopback only: no 500s, every response matches the documented schema, and the
server is still ready afterwards."""

from __future__ import annotations

import httpx
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from .conftest import API_KEY

MAX_EXAMPLES = 40  # per operation: enough to hit odd types, unicode and sizes; seconds on 2 cores


def test_api_fuzz(server):
    assert server.url.startswith("http://127.0.0.1:")  # loopback only
    schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert any(op.path == "/v1/embeddings" and op.method.upper() == "POST" for op in operations)
    for operation in operations:

        @settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
        @given(case=operation.as_strategy())
        def check(case):
            case.call_and_validate(
                headers={"Authorization": f"Bearer {API_KEY}"},
                checks=[not_a_server_error, response_schema_conformance, content_type_conformance],
                timeout=60,
            )

        check()


def test_ready_after_fuzz(server):
    assert httpx.get(server.url + "/health/ready", timeout=30).status_code == 200
