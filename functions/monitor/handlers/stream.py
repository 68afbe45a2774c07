"""The findings table's DynamoDB stream → finding events in the outbox, and the alert groups of clusters
whose incidents changed armed (their messages follow from the alert-group function).

A record that cannot be read is kept aside (with the reason) and never fails the batch; nor does one without a
sequence number (no partial response could name it: it is set aside, logged and counted). A record whose
message the outbox refused, or whose cluster's group could not be armed, fails and the stream retries it. The
response only ever names records of the batch, and a batch with nothing to name is an empty response.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.monitor import fleet_metrics
from functions.monitor.adapters import DeliveryLedger, SqsOutbox, keep_unprocessed
from functions.monitor.alert_store import AlertGroupQueue, TableAlertGroups
from functions.monitor.logic import alert_groups, alerts, outbox, stream
from functions.monitor.runtime import deadline, now, with_env
from functions.shared.clients import bookkeeping_clients, clients
from functions.shared.env import notifier_env
from functions.shared.events import without_surrogates
from functions.shared.observability import logger, metrics, tracer
from hyperpod_debugger.aws.store import from_item

# A batch whose every record failed is reported as such, not raised: the event source retries the same
# records either way, and an invocation error would only add noise to the Errors alarm.
_processor = BatchProcessor(event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False)


@with_env(notifier_env)
@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    env = notifier_env()
    event = without_surrogates(event)  # a lone surrogate cannot be logged or kept: shown as U+FFFD
    raw_records = event.get("Records") if isinstance(event, dict) else None
    records = list(raw_records) if isinstance(raw_records, list) else []
    metrics.add_metric(name="StreamRecords", unit=MetricUnit.Count, value=len(records))
    ledger: outbox.Ledger = outbox.NoLedger()
    if env.IDEMPOTENCY_TABLE:
        ledger = DeliveryLedger(bookkeeping_clients(env.AWS_REGION), env.IDEMPOTENCY_TABLE, deadline=deadline(context))

    def set_aside(raw: Any, reason: str) -> bool:
        errors = [{"at": "record", "error": reason}]
        return keep_unprocessed(env.UNPROCESSED_QUEUE_URL, env.AWS_REGION, raw, kind="stream record", errors=errors)

    aws = clients(env.AWS_REGION)
    groups, flushes = TableAlertGroups(aws, env.FINDINGS_TABLE), AlertGroupQueue(aws, env.ALERT_GROUP_QUEUE_URL)
    result = stream.notify(
        records,
        from_item=from_item,
        set_aside=set_aside,
        queue=SqsOutbox(aws, env.OUTBOX_QUEUE_URL),
        ledger=ledger,
        channels=env.channels,
        render=lambda d: alerts.render(
            d, region=env.AWS_REGION, runbook_base_url=env.RUNBOOK_BASE_URL, event_bus=env.EVENT_BUS_NAME
        ),
        now=now(),
        arm=lambda ref: alert_groups.arm(
            ref,
            groups=groups,
            queue=flushes,
            now=now(),
            wait_s=env.ALERT_GROUP_WAIT_S,
            interval_s=env.ALERT_GROUP_INTERVAL_S,
        ),
    )
    _report(result, ledger)
    if not result.records:  # nothing a partial response could name (Powertools refuses an empty batch)
        return {"batchItemFailures": []}

    def record_handler(record: DynamoDBRecord) -> None:
        rid = alerts.record_id(record.raw_event)
        if rid in result.failed:
            raise RuntimeError(f"stream record {rid} was not queued; the stream retries it")

    response = process_partial_response(
        event={"Records": result.records}, record_handler=record_handler, processor=_processor, context=context
    )
    return dict(response)


def _report(result: stream.NotifyResult, ledger: outbox.Ledger) -> None:
    for item in result.unreadable:
        metrics.add_metric(name="StreamRecordsUnreadable", unit=MetricUnit.Count, value=1)
        record = item.record_id or None
        if item.error:
            logger.error("stream record unreadable and not kept", record=record, reason=item.reason, error=item.error)
        elif item.kept:
            logger.error("stream record unreadable: kept for inspection", record=record, reason=item.reason)
        else:
            logger.error("stream record unreadable", record=record, reason=item.reason)
    for key, error in result.refused:
        metrics.add_metric(name="OutboxPutFailures", unit=MetricUnit.Count, value=1)
        logger.warning("outbox refused a message: its cluster's later records wait", delivery=key, error=error)
    metrics.add_metric(name="OutboxMessages", unit=MetricUnit.Count, value=result.queued)
    for cluster, error in result.arm_errors:
        metrics.add_metric(name="AlertGroupArmFailures", unit=MetricUnit.Count, value=1)
        logger.warning("alert group not armed: its records are retried", cluster_arn=cluster, error=error)
    for cluster, armed in result.armed.items():
        logger.info("alert group", cluster_arn=cluster, **armed)
    fleet_metrics.emit_resolutions(result.resolutions)
    if isinstance(ledger, DeliveryLedger) and ledger.errors:
        # Not fatal: at worst a retried record is queued again (the outbox's deduplication still holds).
        logger.warning("delivery ledger unavailable", errors=ledger.errors[:5])
    logger.info(
        "transitions queued",
        deliveries=result.deliveries,
        failed=len(result.failed),
        unreadable=len(result.unreadable),
    )
