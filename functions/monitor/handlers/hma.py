"""HMA detection records from a cluster log group's subscription filter → each node's record kept for its
cluster's window (one triage for the window, ``logic.windows``), or, without a window queue, one scoped
triage per node.

A payload that cannot be read is kept (with the reason) and counted rather than raised: the retry Lambda
would make carries the same bytes. A log event of a readable payload that cannot be read is reported (logged
with its reason, counted, kept in the unprocessed-events queue when it can be) and the payload's other events
are triaged as if it were not there. A failed triage does raise, so the retry redoes only the nodes whose
idempotency record did not complete. Without a window queue, nodes past ``LOG_MAX_NODES`` are deferred to
the sweep.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit

from functions.monitor import hma_logs
from functions.monitor.logic import signals
from functions.monitor.runtime import keep_unprocessed, reject, with_env
from functions.monitor.signal_run import coalesced, signal_runner
from functions.shared.env import MonitorEnv, monitor_env
from functions.shared.observability import logger, metrics, tracer
from functions.shared.odd_input import without_surrogates

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


@with_env(monitor_env)
@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    env = monitor_env()
    metrics.add_metric(name="LogPayloadsReceived", unit=MetricUnit.Count, value=1)
    event = without_surrogates(event)  # a lone surrogate cannot be logged or kept: shown as U+FFFD
    partition = hma_logs.partition_of(getattr(context, "invoked_function_arn", None))
    try:
        batch = hma_logs.read_subscription(event, region=env.AWS_REGION, partition=partition)
    except hma_logs.LogPayloadError as exc:
        errors = [{"at": "payload", "error": str(exc)}]
        rejected = reject(
            event,
            errors,
            queue_url=env.UNPROCESSED_QUEUE_URL,
            region=env.AWS_REGION,
            kind="log payload",
            metric="LogPayloadsRejected",
        )
        return {**rejected, "error": str(exc)}
    if batch is None:
        logger.info("log subscription control message ignored")
        return {"status": "ignored", "reason": "control message"}
    where: dict[str, Any] = {"cluster": batch.cluster.name, "cluster_arn": batch.cluster_arn}
    if not env.allows(batch.cluster.name, batch.cluster_arn):
        logger.warning("log payload of a cluster outside CLUSTER_ALLOWLIST skipped", extra=where)
        return {"status": "skipped", **where, "reason": "not in CLUSTER_ALLOWLIST"}
    bad = {"bad_events": _report_bad_events(batch, env)} if batch.bad_events else {}
    if batch.unattributed:
        logger.warning(
            "HMA detections on a stream naming no instance id",
            count=batch.unattributed,
            log_stream=ascii(batch.log_stream[:200]),
        )
    if not batch.signals:
        logger.info("log payload holds nothing to triage", extra={"reason": batch.dropped, **where})
    hand_over = coalesced(env)
    if hand_over is not None:
        kept = [hand_over(signal) for signal in batch.signals]
        metrics.add_metric(name="HmaDetections", unit=MetricUnit.Count, value=batch.detections)
        return {
            "status": "queued",
            **where,
            "nodes": [{"node": k["node"], "event_id": k["event_id"], "window": k.get("window")} for k in kept],
            **({"dropped": batch.dropped} if batch.dropped else {}),
            **bad,
        }
    result = signals.triage_nodes(batch.signals, signal_runner(env, context), limit=env.LOG_MAX_NODES)
    if result.deferred:
        logger.warning("nodes deferred to the sweep", deferred=result.deferred, limit=env.LOG_MAX_NODES)
        metrics.add_metric(name="LogNodesDeferred", unit=MetricUnit.Count, value=len(result.deferred))
    metrics.add_metric(name="HmaDetections", unit=MetricUnit.Count, value=batch.detections)
    return {
        "status": "processed",
        **where,
        "nodes": result.nodes,
        "deferred": result.deferred,
        "transitions": dict(result.transitions),
        **({"dropped": batch.dropped} if batch.dropped else {}),
        **bad,
    }


def _report_bad_events(batch: hma_logs.HmaBatch, env: MonitorEnv) -> list[dict[str, Any]]:
    """Log, count and keep (best effort: the reasons are logged either way) the payload's log events that
    cannot be read; what the response says of them."""
    summaries = [bad.summary() for bad in batch.bad_events]
    metrics.add_metric(name="LogEventsRejected", unit=MetricUnit.Count, value=len(summaries))
    logger.error(
        "log events that cannot be read: the payload's other events are still triaged",
        cluster_arn=batch.cluster_arn,
        log_stream=ascii(batch.log_stream[:200]),
        bad_events=summaries[:20],
        count=len(summaries),
    )
    content = {
        "logGroup": batch.cluster.log_group,
        "logStream": batch.log_stream,
        "logEvents": [bad.event for bad in batch.bad_events],
    }
    errors = [{"at": f"logEvents.{bad.index}", "error": bad.reason} for bad in batch.bad_events]
    try:
        keep_unprocessed(env.UNPROCESSED_QUEUE_URL, env.AWS_REGION, content, kind="log event", errors=errors)
    except RuntimeError as exc:
        logger.error("log events that cannot be read were not kept", error=str(exc), count=len(summaries))
    return summaries
