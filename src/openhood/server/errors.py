"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}`` with the right status.

One exception type (``APIError``) carries everything a response needs, so handlers just raise
and the app turns it into JSON in one place. Messages name the offending field and index and
never quote request text (it would leak into client logs and ours).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

import orjson
from starlette.responses import Response

if TYPE_CHECKING:
    from fastapi import FastAPI, Request


class ClientGone(Exception):
    """The client closed the connection before the response: nothing to answer, nothing broke."""


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def json_response(content: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """orjson-encoded JSON (numpy float32 arrays serialize natively, without a Python list detour)."""
    body = orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def error_response(error: APIError) -> Response:
    return json_response(error.body(), error.status, error.headers)


def bad_request(message: str, *, code: str = "invalid_input", param: str | None = "input") -> APIError:
    return APIError(400, message, code=code, param=param)


def unauthorized() -> APIError:
    return APIError(
        401,
        "missing or invalid API key: send 'Authorization: Bearer <key>'",
        type="authentication_error",
        code="invalid_api_key",
        headers={"WWW-Authenticate": "Bearer"},
    )


def _shutting_down(message: str, code: str) -> APIError:
    """503 that tells the client (and its load balancer) to go elsewhere: retry soon, close."""
    return APIError(
        503, message, type="service_unavailable", code=code, headers={"Retry-After": "1", "Connection": "close"}
    )


def draining() -> APIError:
    return _shutting_down(
        "the server is shutting down and takes no new requests; retry on another instance", "draining"
    )


def drain_deadline() -> APIError:
    """A request still waiting when the grace period ran out: retryable elsewhere, never a bare 500."""
    return _shutting_down(
        "the server's shutdown grace period ran out before this request was served; retry on another instance",
        "drain_deadline",
    )


class CountsRejections(Protocol):
    def rejected(self, reason: str) -> None: ...


@contextmanager
def admission(metrics: CountsRejections) -> Iterator[None]:
    """Around a scheduler's ``submit``: a full queue → 429 + ``Retry-After``, a request more than
    the whole queue may hold → 413 ``request_too_large``, a stopping scheduler → 503 ``draining``;
    each refusal counted on the model's ``metrics``."""
    from openhood.scheduler import QueueFullError, RequestTooLargeError, SchedulerStoppedError

    try:
        yield
    except RequestTooLargeError as exc:
        metrics.rejected("too_large")
        raise APIError(413, str(exc), code="request_too_large", param="input") from None
    except QueueFullError as exc:
        metrics.rejected("queue_full")
        raise APIError(
            429,
            str(exc) + "; retry later",
            type="rate_limit_error",
            code="queue_full",
            param=None,
            headers={"Retry-After": str(exc.retry_after_s)},
        ) from None
    except SchedulerStoppedError:
        metrics.rejected("draining")
        raise draining() from None


def install_error_handlers(app: FastAPI, on_client_gone: Callable[[], None] | None = None) -> None:
    """Every error leaves the app in OpenAI's shape: APIError, unknown routes/methods, and bugs."""
    import logging

    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.responses import Response

    log = logging.getLogger("openhood.server")

    @app.exception_handler(APIError)
    async def api_error_handler(request: Request, exc: APIError) -> Response:
        record = getattr(request.state, "record", None)
        if record is not None:
            record.fields["error"] = exc.code  # the code only: messages may name limits, never text
        return error_response(exc)

    @app.exception_handler(ClientGone)
    async def client_gone_handler(request: Request, exc: ClientGone) -> Response:
        # The client closed the connection: its choice, not our failure — no 500, no traceback.
        record = getattr(request.state, "record", None)
        if record is not None:
            record.fields["disconnected"] = True
        if on_client_gone is not None:
            on_client_gone()
        return Response(status_code=499)  # nginx's "client closed request"; nobody reads it

    @app.exception_handler(StarletteHTTPException)
    async def http_error_handler(request: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return error_response(APIError(exc.status_code, str(exc.detail), code=code, param=None))

    @app.exception_handler(Exception)
    async def unexpected_error_handler(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error in %s", request.url.path)
        return error_response(
            APIError(500, "internal server error", type="server_error", code="internal_error", param=None)
        )
