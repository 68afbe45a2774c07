"""boto3 clients with one retry/timeout policy and a per-operation call counter.

Only modules under ``hyperpod_debugger.aws`` import boto3. Clients are built lazily, per run,
never at import time, so tests and the demo can point them at moto through
``AWS_ENDPOINT_URL`` (which boto3 honours by itself).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import boto3
from botocore.config import Config

from hyperpod_debugger import __version__
from hyperpod_debugger.aws.errors import THROTTLED_CODES

#: boto3 service name -> IAM action prefix. Service Quotas is the odd one: the IAM prefix is
#: ``servicequotas`` while the SDK service is ``service-quotas``.
IAM_PREFIX: dict[str, str] = {
    "sagemaker": "sagemaker",
    "ec2": "ec2",
    "eks": "eks",
    "logs": "logs",
    "service-quotas": "servicequotas",
    "sts": "sts",
    "ssm": "ssm",
}


def iam_action(service: str, operation: str) -> str:
    return f"{IAM_PREFIX.get(service, service)}:{operation}"


class AwsClients:
    """A cache of configured clients for one region, counting every logical API call.

    ``max_attempts`` covers throttling: botocore's *adaptive* mode retries throttled calls
    with backoff and also rate-limits the client so a 20,000-node listing slows down instead
    of failing.
    """

    def __init__(
        self,
        region: str,
        *,
        session: boto3.session.Session | None = None,
        max_attempts: int = 8,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
    ) -> None:
        self.region = region
        self._session = session or boto3.session.Session(region_name=region)
        self._config = Config(
            region_name=region,
            retries={"mode": "adaptive", "max_attempts": max_attempts},
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            user_agent_extra=f"hyperpod-debugger/{__version__}",
        )
        self._clients: dict[tuple[str, str], Any] = {}
        self.calls: Counter[str] = Counter()
        #: throttled answers per IAM action, each HTTP attempt counted (botocore's own retries included)
        self.throttles: Counter[str] = Counter()

    @classmethod
    def for_profile(cls, region: str, profile: str | None, **options: Any) -> AwsClients:
        """Clients whose credentials come from a named profile (``--profile``), like the AWS CLI's."""
        session = boto3.session.Session(profile_name=profile, region_name=region) if profile else None
        return cls(region, session=session, **options)

    def client(self, service: str, region: str | None = None) -> Any:
        key = (service, region or self.region)
        if key not in self._clients:
            config = self._config.merge(Config(region_name=key[1]))
            client = self._session.client(service, region_name=key[1], config=config)
            client.meta.events.register("before-call", self._count(service))
            client.meta.events.register("needs-retry", self._count_throttle(service))
            self._clients[key] = client
        return self._clients[key]

    def credentials(self) -> Any:
        """The session's botocore credentials (to SigV4-sign the Session Manager websocket upgrade)."""
        return self._session.get_credentials()

    def _count_throttle(self, service: str) -> Any:
        def handler(response: Any = None, operation: Any = None, **_: Any) -> None:
            parsed = response[1] if isinstance(response, tuple) and len(response) > 1 else None
            code = parsed.get("Error", {}).get("Code") if isinstance(parsed, dict) else None
            if code in THROTTLED_CODES and operation is not None:
                self.throttles[iam_action(service, operation.name)] += 1

        return handler

    def _count(self, service: str) -> Any:
        def handler(model: Any, **_: Any) -> None:
            self.calls[iam_action(service, model.name)] += 1

        return handler
