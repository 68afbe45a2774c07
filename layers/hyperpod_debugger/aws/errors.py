"""Translate botocore failures into domain failures, once, at the adapter boundary.

Decisions are made on the service's error *code* and on exception types, never on
message substrings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ReadTimeoutError,
)
from botocore.parsers import ResponseParserError

if TYPE_CHECKING:
    from hyperpod_debugger.domain.observations import ApiFailure

DENIED_CODES = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "UnauthorizedOperation",
        "UnauthorizedAccess",
        "AuthorizationError",
        "AuthorizationErrorException",
        "NotAuthorized",
    }
)
THROTTLED_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "SlowDown",
    }
)
NOT_FOUND_CODES = frozenset(
    {
        "ResourceNotFound",
        "ResourceNotFoundException",
        "NoSuchResource",
        "NoSuchResourceException",
        "InvalidGroup.NotFound",
        "InvalidSubnetID.NotFound",
        "InvalidVpcID.NotFound",
        "InvalidInstanceType",
    }
)
CREDENTIAL_CODES = frozenset(
    {
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "SignatureDoesNotMatch",
        "InvalidSignatureException",
        "AuthFailure",
        "MissingAuthenticationToken",
    }
)


class ApiCallError(Exception):
    """An API call failed in a way the run survives; ``failure`` says how."""

    def __init__(self, failure: ApiFailure) -> None:
        super().__init__(failure.describe())
        self.failure = failure


class CredentialsError(Exception):
    """No usable credentials: missing, expired or rejected. Fatal for the run."""


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def translate(exc: Exception, action: str) -> ApiFailure:
    """Map an SDK exception to an :class:`ApiFailure`, or raise :class:`CredentialsError`."""
    # Imported where a call failed: every function builds clients (which read the codes above), and the
    # observations module is the triage's, not theirs.
    from hyperpod_debugger.domain.observations import ApiFailure

    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        raise CredentialsError(str(exc)) from exc
    if isinstance(exc, ClientError):
        code = error_code(exc)
        message = str(exc.response.get("Error", {}).get("Message", "")) or str(exc)
        if code in CREDENTIAL_CODES:
            raise CredentialsError(f"{code}: {message}") from exc
        if code in DENIED_CODES:
            return ApiFailure(action, "denied", message, code)
        if code in THROTTLED_CODES:
            return ApiFailure(action, "throttled", message, code)
        if code in NOT_FOUND_CODES:
            return ApiFailure(action, "not_found", message, code)
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return ApiFailure(action, "error", f"{code or 'HTTP ' + str(status)}: {message}", code or None)
    if isinstance(exc, ConnectTimeoutError | ReadTimeoutError):
        return ApiFailure(action, "timeout", str(exc))
    if isinstance(exc, EndpointConnectionError):
        return ApiFailure(action, "endpoint", str(exc))
    if isinstance(exc, NoRegionError):
        return ApiFailure(action, "error", str(exc))
    if isinstance(exc, BotoCoreError):
        return ApiFailure(action, "error", str(exc))
    raise exc


def call(client: Any, action: str, method: str, **params: Any) -> dict[str, Any]:
    """Call ``client.<method>(**params)``; failures come out as :class:`ApiCallError`."""
    fn: Callable[..., dict[str, Any]] = getattr(client, method)
    try:
        response = fn(**params)
    except ResponseParserError as exc:
        raise ApiCallError(_malformed(action, str(exc))) from exc
    except (ClientError, BotoCoreError) as exc:
        raise ApiCallError(translate(exc, action)) from exc
    if not isinstance(response, dict):
        raise ApiCallError(_malformed(action, f"expected an object, got {type(response).__name__}"))
    return response


def _malformed(action: str, message: str) -> ApiFailure:
    from hyperpod_debugger.domain.observations import ApiFailure  # where a call failed (see translate)

    return ApiFailure(action, "malformed", message)
