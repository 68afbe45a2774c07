"""The one place the Powertools logger, tracer and metrics are created.

Creating them here at import is safe in tests: the tracer disables itself outside Lambda (and with
``POWERTOOLS_TRACE_DISABLED``), and nothing here builds a boto3 client or reads our own settings.
"""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer

SERVICE = "hyperpod-monitor"
NAMESPACE = "HyperPodDebugger"

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)

__all__ = ["NAMESPACE", "SERVICE", "logger", "metrics", "tracer"]
