"""The findings table's DynamoDB stream → the outbox: each transition rendered for Slack and email.

A record that cannot be read is kept aside (with the reason) and never fails the batch; a record whose
message the outbox refused fails, with the later records of its cluster, and the stream retries it.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.monitor.adapters import DeliveryLedger, SqsOutbox, keep_unprocessed
from functions.monitor.logic import alerts, outbox
from functions.monitor.runtime import deadline, now, with_env
from functions.shared.clients import bookkeeping_clients, clients
from functions.shared.env import NotifierEnv, notifier_env
from functions.shared.observability import logger, metrics, tracer
from hyperpod_debugger.aws.store import from_item, plain

# A batch whose every record failed is reported as such, not raised: the event source retries the same
# records either way, and an invocation error would only add noise to the Errors alarm.
_processor = BatchProcessor(event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False)


def _keep_unreadable(env: NotifierEnv, read: alerts.StreamRead) -> set[str]:
    """Keep damaged records in the unprocessed queue; the ids that could not be kept (those fail and are
    retried by the stream, so nothing is lost either way)."""
    failed: set[str] = set()
    items = [(read.records[rid], reason, rid) for rid, reason in read.unreadable.items()]
    items += [(raw, reason, "") for raw, reason in read.orphans]
    for raw, reason, rid in items:
        metrics.add_metric(name="StreamRecordsUnreadable", unit=MetricUnit.Count, value=1)
        errors = [{"at": "record", "error": reason}]
        try:
            kept = keep_unprocessed(env.UNPROCESSED_QUEUE_URL, env.AWS_REGION, raw, kind="stream record", errors=errors)
        except RuntimeError as exc:
            logger.error("stream record unreadable and not kept", record=rid or None, reason=reason, error=str(exc))
            if rid:
                failed.add(rid)
            continue
        message = "stream record unreadable: kept for inspection" if kept else "stream record unreadable"
        logger.error(message, record=rid or None, reason=reason)
    return failed


@with_env(notifier_env)
@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    env = notifier_env()
    raw_records = event.get("Records") if isinstance(event, dict) else None
    records = list(raw_records) if isinstance(raw_records, list) else []
    metrics.add_metric(name="StreamRecords", unit=MetricUnit.Count, value=len(records))
    read = alerts.read_records(records, decode=plain, from_item=from_item)
    failed = _keep_unreadable(env, read)
    deliveries = alerts.plan_deliveries(
        read.changes, digest_threshold=env.DIGEST_THRESHOLD, breaker_threshold=env.BREAKER_THRESHOLD
    )
    ledger: outbox.Ledger = outbox.NoLedger()
    if env.IDEMPOTENCY_TABLE:
        ledger = DeliveryLedger(bookkeeping_clients(env.AWS_REGION), env.IDEMPOTENCY_TABLE, deadline=deadline(context))
        ledger.load(outbox.queued_ids(deliveries, env.channels))
    queued = outbox.queue_transitions(
        deliveries,
        outbox=SqsOutbox(clients(env.AWS_REGION), env.OUTBOX_QUEUE_URL),
        ledger=ledger,
        channels=env.channels,
        render=lambda d: alerts.render(d, region=env.AWS_REGION, runbook_base_url=env.RUNBOOK_BASE_URL),
        now=now(),
    )
    failed |= queued.failed
    for key, error in queued.refused:
        metrics.add_metric(name="OutboxPutFailures", unit=MetricUnit.Count, value=1)
        logger.warning("outbox refused a message: its cluster's later records wait", delivery=key, error=error)
    metrics.add_metric(name="OutboxMessages", unit=MetricUnit.Count, value=queued.queued)

    def record_handler(record: DynamoDBRecord) -> None:
        rid = alerts.record_id(record.raw_event)
        if rid in failed:
            raise RuntimeError(f"stream record {rid} was not queued; the stream retries it")

    response = process_partial_response(
        event={"Records": list(read.records.values())},
        record_handler=record_handler,
        processor=_processor,
        context=context,
    )
    if isinstance(ledger, DeliveryLedger) and ledger.errors:
        # Not fatal: at worst a retried record is queued again (the outbox's deduplication still holds).
        logger.warning("delivery ledger unavailable", errors=ledger.errors[:5])
    logger.info("transitions queued", deliveries=len(deliveries), failed=len(failed), unreadable=len(read.unreadable))
    return response
