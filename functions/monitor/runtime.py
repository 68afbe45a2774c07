"""What every entry point shares: the environment check, the clock, rejecting input no retry can fix,
the idempotent run of one triage signal, and the invocation's deadline."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import ValidationError

from functions.monitor.adapters import idempotency_store, keep_unprocessed
from functions.monitor.logic import signals
from functions.monitor.logic.sweep import kinds
from functions.shared.clients import clients
from functions.shared.env import MonitorEnv
from functions.shared.observability import logger, metrics
from hyperpod_debugger.aws.store import FindingStore
from hyperpod_debugger.triage import run_triage

F = TypeVar("F", bound=Callable[..., Any])


def with_env(getter: Callable[[], Any]) -> Callable[[F], F]:
    """Validate the function's environment before anything else runs (a bad deploy fails loudly)."""

    def wrap(handler: F) -> F:
        @functools.wraps(handler)
        def checked(event: Any, context: Any) -> Any:
            getter()
            return handler(event, context)

        return checked  # type: ignore[return-value]

    return wrap


def now() -> datetime:
    return datetime.now(UTC)


def deadline(context: Any, margin_s: float = 10.0) -> float | None:
    """A monotonic time a little before the invocation's end, or None when the context cannot say."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return None
    return time.monotonic() + max(remaining() / 1000 - margin_s, 0.0)


def validation_errors(exc: ValidationError) -> list[dict[str, str]]:
    # No input values: an event may carry tags or messages we do not want copied into logs.
    return [{"at": ".".join(str(p) for p in err["loc"]), "error": err["msg"]} for err in exc.errors()[:10]]


def reject(
    event: Any,
    errors: list[dict[str, str]],
    *,
    queue_url: str | None,
    region: str,
    kind: str,
    metric: str = "EventsRejected",
) -> dict[str, Any]:
    """An input that no retry can fix: logged with its id, counted, and kept in the unprocessed-events
    queue with the reason (raises when it cannot be kept, so Lambda's retries and on-failure
    destination keep it instead)."""
    detail_type = event.get("detail-type") if isinstance(event, dict) else None
    event_id = event.get("id") if isinstance(event, dict) else None
    kept = keep_unprocessed(queue_url, region, event, kind=kind, errors=errors)
    logger.error(
        f"{kind} rejected: kept for inspection" if kept else f"{kind} rejected (no queue to keep it in)",
        event_id=event_id,
        detail_type=detail_type,
        errors=errors,
    )
    metrics.add_metric(name=metric, unit=MetricUnit.Count, value=1)
    return {"status": "rejected", "event_id": event_id, "detail_type": detail_type, "errors": errors, "kept": kept}


def _run_signal(event: dict[str, Any], signal: signals.ClusterSignal, env: MonitorEnv) -> dict[str, Any]:
    transitions = signals.handle_cluster_event(
        signal,
        triage=lambda req: run_triage(req, clients(req.region)),
        store=FindingStore(clients(env.AWS_REGION), env.FINDINGS_TABLE),
        now=now(),
        probe=env.PROBE_ENABLED,
        probe_timeout=env.PROBE_TIMEOUT_S,
        documents=env.session_documents,
    )
    counted = kinds(transitions)
    metrics.add_metric(name="FindingTransitions", unit=MetricUnit.Count, value=sum(1 for t in transitions if t.notify))
    logger.info("triage applied", cluster_arn=signal.cluster_arn, node=signal.node, transitions=counted)
    return {
        "status": "processed",
        "event_id": signal.event_id,
        "cluster_arn": signal.cluster_arn,
        "node": signal.node,
        "transitions": counted,
    }


def signal_runner(env: MonitorEnv, context: LambdaContext) -> Callable[[signals.ClusterSignal], dict[str, Any]]:
    """Run one signal's triage into the store, once per ``signal.event_id`` (a repeat returns the first
    run's result from the idempotency table)."""
    config = IdempotencyConfig(event_key_jmespath="id", expires_after_seconds=env.IDEMPOTENCY_TTL_S)
    config.register_lambda_context(context)
    run = idempotent_function(
        _run_signal,
        data_keyword_argument="event",
        persistence_store=idempotency_store(env.IDEMPOTENCY_TABLE, env.AWS_REGION),
        config=config,
    )

    def once(signal: signals.ClusterSignal) -> dict[str, Any]:
        logger.info(
            "triage started",
            event_id=signal.event_id,
            cluster_arn=signal.cluster_arn,
            node=signal.node,
            reason=signal.reason,
            notes=list(signal.notes) or None,
        )
        return run(event={"id": signal.event_id}, signal=signal, env=env)

    return once


__all__ = ["deadline", "now", "reject", "signal_runner", "validation_errors", "with_env"]
