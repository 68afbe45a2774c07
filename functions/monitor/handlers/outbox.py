"""The courier: the outbox (SQS FIFO) → Slack, SNS and the findings' EventBridge bus, one attempt per message
per invocation (:class:`functions.monitor.logic.outbox.Courier` decides; this wires it to the queue and the
channels)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.monitor.adapters import AwsCourierPorts, DeliveryLedger
from functions.monitor.logic import outbox
from functions.monitor.runtime import deadline, with_env
from functions.shared.clients import bookkeeping_clients, clients
from functions.shared.env import courier_env
from functions.shared.metric_names import FINDING_EVENTS_PUT
from functions.shared.observability import logger, metrics, tracer

_processor = SqsFifoPartialProcessor(skip_group_on_error=True)
_processor.raise_on_entire_batch_failure = False  # the queue retries the same messages either way
#: What one delivery attempt may take beyond the Slack timeout (the SNS call, the ledger), in seconds.
SEND_MARGIN_S = 3.0


def _record(raw: SQSRecord) -> outbox.OutboxRecord:
    return outbox.OutboxRecord(
        message_id=raw.message_id,
        body=raw.body,
        receipt_handle=raw.receipt_handle,
        group=raw.attributes.message_group_id or "",
        receive_count=int(raw.attributes.approximate_receive_count or 1),
    )


@with_env(courier_env)
@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    env = courier_env()
    raw = event.get("Records") if isinstance(event, dict) else None
    records = [r for r in raw if isinstance(r, dict)] if isinstance(raw, list) else []
    ledger: outbox.Ledger = outbox.NoLedger()
    if env.IDEMPOTENCY_TABLE:
        ledger = DeliveryLedger(bookkeeping_clients(env.AWS_REGION), env.IDEMPOTENCY_TABLE, deadline=deadline(context))
        ledger.load([f"sent#{outbox.message_id_of(r.get('body'))}" for r in records])
    ports = AwsCourierPorts(
        clients(env.AWS_REGION),
        secret_name=env.SLACK_SECRET_NAME,
        topic_arn=env.ALERT_TOPIC_ARN,
        slack_timeout=env.SLACK_TIMEOUT_S,
        outbox_url=env.OUTBOX_QUEUE_URL,
        dlq_url=env.OUTBOX_DLQ_URL,
        remaining_ms=context.get_remaining_time_in_millis,
    )
    courier = outbox.Courier(
        ports,
        ledger,
        needed_s=env.SLACK_TIMEOUT_S + SEND_MARGIN_S,
        base=env.RETRY_BASE_S,
        cap=env.RETRY_CAP_S,
    )
    response = process_partial_response(
        event={"Records": records},
        record_handler=lambda record: courier.deliver(_record(record)),
        processor=_processor,
        context=context,
    )
    failed = {str(f["itemIdentifier"]) for f in response.get("batchItemFailures", [])}
    courier.hold_back([_record(SQSRecord(r)) for r in records], failed)
    _report(courier)
    if isinstance(ledger, DeliveryLedger) and ledger.errors:
        logger.warning("delivery ledger unavailable", errors=ledger.errors[:5])
    return dict(response)


def _report(courier: outbox.Courier) -> None:
    for item in courier.sent:
        if item.channel == "events":
            metrics.add_metric(name=FINDING_EVENTS_PUT, unit=MetricUnit.Count, value=len(item.events))
            logger.info("finding events put", delivery=item.key, events=len(item.events))
            continue
        metrics.add_metric(name=f"Notifications{item.kind.title()}", unit=MetricUnit.Count, value=1)
        logger.info(
            "notification sent", delivery=item.key, kind=item.kind, channel=item.channel, records=len(item.records)
        )
    for item, error in courier.failures:
        metrics.add_metric(name="NotificationFailures", unit=MetricUnit.Count, value=1)
        logger.warning("notification failed: retried later", delivery=item.key, channel=item.channel, error=error)
    for key, reason in courier.dead:
        metrics.add_metric(name="OutboxDeadLettered", unit=MetricUnit.Count, value=1)
        logger.error("message moved to the dead-letter queue", delivery=key, reason=reason)
