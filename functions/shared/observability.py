"""The one place the Powertools logger, tracer and metrics are created.

The logger and metrics are created at import (cheap, and nothing here builds a boto3 client or reads our
own settings). The tracer is built on the first invocation instead: building Powertools' ``Tracer`` imports
the X-Ray SDK and patches botocore, a third of a second of CPU that no import needs, and it disables
itself outside Lambda (and with ``POWERTOOLS_TRACE_DISABLED``) either way.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from aws_lambda_powertools import Logger, Metrics

from hyperpod_debugger.domain.redact import install_log_redaction

if TYPE_CHECKING:
    from aws_lambda_powertools import Tracer

SERVICE = "hyperpod-monitor"
NAMESPACE = "HyperPodDebugger"

F = TypeVar("F", bound=Callable[..., Any])


class LazyTracer:
    """Powertools' tracer, built when a handler first runs rather than when its module is imported."""

    def __init__(self, service: str) -> None:
        self._service = service
        self._tracer: Tracer | None = None

    @property
    def built(self) -> bool:
        return self._tracer is not None

    @property
    def real(self) -> Tracer:
        if self._tracer is None:
            from aws_lambda_powertools import Tracer

            self._tracer = Tracer(service=self._service)
        return self._tracer

    def capture_lambda_handler(self, capture_response: bool = True) -> Callable[[F], F]:
        """Powertools' ``capture_lambda_handler``, applied on the first invocation."""

        def decorate(handler: F) -> F:
            traced: Callable[..., Any] | None = None

            @functools.wraps(handler)
            def run(event: Any, context: Any) -> Any:
                nonlocal traced
                if traced is None:
                    traced = self.real.capture_lambda_handler(handler, capture_response=capture_response)
                return traced(event, context)

            return run  # type: ignore[return-value]

        return decorate

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


logger = Logger(service=SERVICE)
# Every record any logger writes (ours, botocore's DEBUG bodies, urllib3's request lines) is redacted.
install_log_redaction(logging.getLogger(logger.name))
tracer = LazyTracer(SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)

__all__ = ["NAMESPACE", "SERVICE", "LazyTracer", "logger", "metrics", "tracer"]
