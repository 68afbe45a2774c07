"""The courier: the outbox (SQS FIFO) → Slack, SNS and the findings' EventBridge bus, one attempt per message
per invocation, each Slack webhook at its pace shared by every concurrent courier
(:class:`functions.monitor.logic.outbox.Courier` decides; this wires it to the queue, the channels and the
shared lanes in the idempotency table).

A record without a message id (no partial response could name it) is set aside: logged and counted, never
delivered or reported; an empty batch is an empty response."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.monitor.adapters import AwsCourierPorts, DeliveryLedger, SharedLanes
from functions.monitor.logic import outbox
from functions.monitor.runtime import deadline, with_env
from functions.shared.clients import bookkeeping_clients, clients
from functions.shared.env import courier_env
from functions.shared.events import batch_records, without_surrogates
from functions.shared.metric_names import FINDING_EVENTS_PUT
from functions.shared.observability import logger, metrics, tracer

_processor = SqsFifoPartialProcessor(skip_group_on_error=True)
_processor.raise_on_entire_batch_failure = False  # the queue retries the same messages either way
#: What one delivery attempt may take beyond the Slack timeout (the SNS call, the ledger), in seconds.
SEND_MARGIN_S = 3.0
#: The courier's clock (epoch seconds) and how it waits for a Slack slot; a simulation puts its own here
#: (bench/courier_bench.py, the pacing tests).
clock: Callable[[], float] = time.time
sleep: Callable[[float], None] = time.sleep


def _readable(record: dict[str, Any]) -> dict[str, Any]:
    """The record with attributes the FIFO processor can read (it groups records by ``MessageGroupId``): an
    attribute of the wrong type reads as absent."""
    given = record.get("attributes")
    attributes = {k: v for k, v in given.items() if isinstance(v, str)} if isinstance(given, dict) else {}
    return record if attributes == given else {**record, "attributes": attributes}


def _record(raw: SQSRecord) -> outbox.OutboxRecord:
    """The record as the courier reads it; a field of the wrong type reads as absent (a body that is not a
    string is then not an outbox message, and goes to the dead-letter queue with that reason)."""
    event = raw.raw_event
    given = event.get("attributes")
    attributes: dict[str, Any] = given if isinstance(given, dict) else {}
    body, group, handle = event.get("body"), attributes.get("MessageGroupId"), event.get("receiptHandle")
    try:
        count = max(int(str(attributes.get("ApproximateReceiveCount") or "1")), 1)
    except ValueError:
        count = 1
    return outbox.OutboxRecord(
        message_id=raw.message_id,
        body=body if isinstance(body, str) else "",
        receipt_handle=handle if isinstance(handle, str) else "",
        group=group if isinstance(group, str) else "",
        receive_count=count,
    )


@with_env(courier_env)
@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    env = courier_env()
    batch = batch_records(without_surrogates(event))
    for _, reason in batch.set_aside:
        metrics.add_metric(name="OutboxRecordsSetAside", unit=MetricUnit.Count, value=1)
        logger.error("outbox record set aside: it cannot be delivered or reported", reason=reason)
    if not batch.records:  # nothing a partial response could name (Powertools refuses an empty batch)
        logger.info("outbox batch holds no record to deliver", set_aside=len(batch.set_aside))
        return {"batchItemFailures": []}
    records = [_readable(r) for r in batch.records]
    ledger: outbox.Ledger = outbox.NoLedger()
    lanes: outbox.Lanes = outbox.LocalLanes()
    if env.IDEMPOTENCY_TABLE:
        bookkeeping = bookkeeping_clients(env.AWS_REGION)
        ledger = DeliveryLedger(bookkeeping, env.IDEMPOTENCY_TABLE, deadline=deadline(context))
        ledger.load([f"sent#{outbox.message_id_of(r.get('body'))}" for r in records])
        # the lanes are worth asking until no send fits any more (a slot is checked against the time left)
        lanes = SharedLanes(bookkeeping, env.IDEMPOTENCY_TABLE, deadline=deadline(context, margin_s=SEND_MARGIN_S))
    ports = AwsCourierPorts(
        clients(env.AWS_REGION),
        secret_name=env.SLACK_SECRET_NAME,
        topic_arn=env.ALERT_TOPIC_ARN,
        slack_timeout=env.SLACK_TIMEOUT_S,
        outbox_url=env.OUTBOX_QUEUE_URL,
        dlq_url=env.OUTBOX_DLQ_URL,
        remaining_ms=context.get_remaining_time_in_millis,
        clock=clock,
        sleep=sleep,
        chat_topic_arn=env.CHATBOT_TOPIC_ARN,
    )
    courier = outbox.Courier(
        ports,
        ledger,
        needed_s=env.SLACK_TIMEOUT_S + SEND_MARGIN_S,
        base=env.RETRY_BASE_S,
        cap=env.RETRY_CAP_S,
        lanes=lanes,
        paces={**outbox.PACES, "slack": outbox.Pace(interval_s=env.SLACK_PACE_S, burst=env.SLACK_BURST)},
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
    if isinstance(lanes, SharedLanes) and lanes.errors:
        logger.warning("shared Slack pace unavailable: paced by this invocation alone", errors=lanes.errors[:5])
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
    for item, delay in courier.paced:
        logger.info("notification waits for its Slack slot", delivery=item.key, channel=item.channel, seconds=delay)
    if courier.paced:
        metrics.add_metric(name="NotificationsPaced", unit=MetricUnit.Count, value=len(courier.paced))
    for channel, seconds in courier.waited.items():
        logger.info("waited for slots", channel=channel, seconds=round(seconds, 3))
    for key, reason in courier.dead:
        metrics.add_metric(name="OutboxDeadLettered", unit=MetricUnit.Count, value=1)
        logger.error("message moved to the dead-letter queue", delivery=key, reason=reason)
