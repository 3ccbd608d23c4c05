"""Finding 11: a bounded property-based fuzz run (schemathesis) against the real server's own
OpenAPI schema, loopback only: no 500s, every response matches the documented schema, every call
returns within its timeout, and the server is still ready afterwards.

Two servers: the session's ordinary one (``/v1/embeddings`` and the operational routes), and one
serving a generator (SmolLM2, answers capped at 16 tokens and 256 context so fuzzed requests stay
cheap), a digits MLP and EfficientNet-Lite0, for the chat, completions, classify and image
operations. Random data rarely gets past validation on those (a prompt to a model of that name,
64 finite features, a decodable image), so each operation also runs a few hand-made valid
requests through the same checks: the 200 schemas are checked on real answers too.
"""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from .conftest import API_KEY, ServerProcess

MAX_EXAMPLES = 40  # per operation: enough to hit odd types, unicode and sizes; seconds on 2 cores
# Per operation and generation mode on the models server: each valid generation costs up to 16
# decode steps, so those operations get few examples; validation failures cost milliseconds.
MODEL_EXAMPLES = {
    "/v1/chat/completions": 15,
    "/v1/completions": 15,
    "/v1/classify": 30,
    "/v1/images/classify": 20,
    "/v1/images/embeddings": 20,
}
CALL_TIMEOUT_S = 60  # a hang fails the call (requests' timeout) instead of the whole run
AUTH = {"Authorization": f"Bearer {API_KEY}"}
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]
PHOTO = Path(__file__).parents[1] / "fixtures" / "vision" / "photos" / "chelsea.jpg"


def fuzz(operation, mode: GenerationMode, examples: int) -> None:
    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(case=operation.as_strategy(generation_mode=mode))
    def check(case):
        case.call_and_validate(headers=AUTH, checks=CHECKS, timeout=CALL_TIMEOUT_S)

    check()


def test_api_fuzz(server):
    assert server.url.startswith("http://127.0.0.1:")  # loopback only
    schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert any(op.path == "/v1/embeddings" and op.method.upper() == "POST" for op in operations)
    for operation in operations:
        fuzz(operation, GenerationMode.POSITIVE, MAX_EXAMPLES)


def test_ready_after_fuzz(server):
    assert httpx.get(server.url + "/health/ready", timeout=30).status_code == 200


@pytest.fixture(scope="module")
def models_server(tmp_path_factory, smollm2_path, digits_mlp_dir, effnet_dir):
    srv = ServerProcess(
        tmp_path_factory.mktemp("fuzz-models") / "server.log",
        "--api-key",
        API_KEY,
        "--model",
        f"smollm2={smollm2_path}",
        "--model",
        f"digits={digits_mlp_dir}",
        "--model",
        f"effnet={effnet_dir}",
        "--workers",
        "1",
        "--threads",
        "1",
        "--max-inputs-per-request",
        "8",
        "--max-body-bytes",
        str(1 << 18),
        "--gen-max-running",
        "2",
        "--gen-max-tokens",
        "16",
        "--gen-max-context",
        "256",
    )
    yield srv
    assert srv.stop() == 0


def valid_cases(operation) -> list:
    """Hand-made requests the server must answer 200 (checked like the fuzzed ones)."""
    photo = base64.b64encode(PHOTO.read_bytes()).decode()
    bodies = {
        "/v1/chat/completions": [
            {"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "stream": True},
        ],
        "/v1/completions": [
            {"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 4, "temperature": 0},
            {"prompt": ["Once"], "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}},
        ],
        "/v1/classify": [
            {"model": "digits", "input": [[0.0] * 64, [16.0] * 64], "top_k": 3},
            {"input": [[3.0e38] * 64, [-3.0e38] * 64]},  # finite float32 features at the edge of the range
        ],
        "/v1/images/classify": [{"model": "effnet", "images": [photo], "top_k": 2}],
        "/v1/images/embeddings": [{"images": [f"data:image/jpeg;base64,{photo}"]}],
    }[operation.path]
    cases = [operation.Case(body=body, media_type="application/json") for body in bodies]
    if operation.path.startswith("/v1/images/"):
        cases.append(
            operation.Case(body={"images": [PHOTO.read_bytes()], "top_k": 1}, media_type="multipart/form-data")
        )
    return cases


def test_model_routes_fuzz(models_server):
    assert models_server.url.startswith("http://127.0.0.1:")  # loopback only
    schema = schemathesis.openapi.from_url(models_server.url + "/openapi.json")
    operations = {op.path: op for op in (result.ok() for result in schema.get_all_operations())}
    assert set(MODEL_EXAMPLES) <= set(operations)
    for path, examples in MODEL_EXAMPLES.items():
        operation = operations[path]
        for case in valid_cases(operation):
            response = case.call_and_validate(headers=AUTH, checks=CHECKS, timeout=CALL_TIMEOUT_S)
            assert response.status_code == 200, (path, response.text[:500])
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            fuzz(operation, mode, examples)


def test_models_server_ready_after_fuzz(models_server):
    r = httpx.get(models_server.url + "/health/ready", timeout=30)
    assert r.status_code == 200, r.text
