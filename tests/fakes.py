"""Fault injection for tests: make one AWS operation answer the way the real service does
when it refuses, throttles or breaks, on top of moto."""

from __future__ import annotations

from typing import Any

from botocore.awsrequest import AWSResponse

from hyperpod_debugger.aws.clients import AwsClients


def inject_error(
    clients: AwsClients,
    service: str,
    operation: str,
    code: str,
    *,
    status: int = 400,
    message: str = "injected",
    region: str | None = None,
) -> None:
    """Every call of ``operation`` on that client fails with ``code`` (no retries are involved:
    the answer stands for the state after the SDK's retries gave up)."""
    client = clients.client(service, region)

    def handler(model: Any, **_: Any) -> Any:
        if model.name != operation:
            return None
        http = AWSResponse("https://injected", status, {}, None)
        return http, {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}

    client.meta.events.register(f"before-call.{client.meta.service_model.service_id.hyphenize()}.{operation}", handler)


def inject_response(clients: AwsClients, service: str, operation: str, body: dict[str, Any]) -> None:
    """``operation`` answers 200 with ``body`` (e.g. a page missing its result list)."""
    client = clients.client(service)

    def handler(model: Any, **_: Any) -> Any:
        if model.name != operation:
            return None
        return AWSResponse("https://injected", 200, {}, None), body

    client.meta.events.register(f"before-call.{client.meta.service_model.service_id.hyphenize()}.{operation}", handler)
