"""The courier: the outbox (SQS FIFO) → Slack, SNS and the findings' EventBridge bus, one attempt per message
per invocation, each Slack webhook at its pace shared by every concurrent courier
(:class:`functions.monitor.logic.outbox.Courier` decides; this wires it to the queue, the channels and the
shared lanes in the idempotency table).

Powertools' FIFO processor hands the courier one record at a time and, once a record of a message group
failed, fails the group's later records without handing them over; :class:`CourierBatch` reads the batch's
ledger keys before the first record and, after the last, gives those records their group's backoff. A record
without a message id (no partial response could name it) is set aside: logged and counted, never delivered or
reported; an empty batch is an empty response."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from functions.monitor import wiring
from functions.monitor.adapters import AwsCourierPorts, SharedLanes
from functions.monitor.logic import outbox
from functions.monitor.runtime import deadline, with_env
from functions.shared.clients import bookkeeping_clients, clients
from functions.shared.env import CourierEnv, courier_env
from functions.shared.metric_names import FINDING_EVENTS_PUT
from functions.shared.observability import logger, metrics, tracer
from functions.shared.odd_input import batch_records, without_surrogates

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

#: What one delivery attempt may take beyond the Slack timeout (the SNS call, the ledger), in seconds.
SEND_MARGIN_S = 3.0
#: The courier's clock (epoch seconds) and how it waits for a Slack slot; a simulation puts its own here
#: (bench/courier_bench.py, the pacing tests).
clock: Callable[[], float] = time.time
sleep: Callable[[float], None] = time.sleep


def outbox_record(raw: SQSRecord) -> outbox.OutboxRecord:
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


class CourierBatch(SqsFifoPartialProcessor):
    """Powertools' FIFO processor (a failed record skips the rest of its message group) around one courier.
    A batch whose every record failed is reported, not raised: the queue retries the same messages either
    way."""

    def __init__(self, courier: outbox.Courier) -> None:
        super().__init__(skip_group_on_error=True)
        self.raise_on_entire_batch_failure = False
        self.courier = courier

    def _prepare(self) -> None:
        super()._prepare()
        # what was sent already, for the whole batch in one read
        self.courier.ledger.load([f"sent#{outbox.message_id_of(r.get('body'))}" for r in self.records])

    def _process_record(self, record: dict[str, Any]) -> Any:
        # the processor groups records by MessageGroupId: an attribute of the wrong type reads as absent
        given = record.get("attributes")
        attributes = {k: v for k, v in given.items() if isinstance(v, str)} if isinstance(given, dict) else {}
        return super()._process_record(record if attributes == given else {**record, "attributes": attributes})

    def _clean(self) -> None:
        failed = {r.message_id for r in self.fail_messages if isinstance(r, SQSRecord)}
        self.courier.hold_back([outbox_record(SQSRecord(r)) for r in self.records], failed)
        super()._clean()

    def record_handler(self, record: SQSRecord) -> None:
        """One message's attempt (raises: it stays in the queue)."""
        self.courier.deliver(outbox_record(record))


def _courier(env: CourierEnv, context: LambdaContext) -> outbox.Courier:
    lanes: outbox.Lanes = outbox.LocalLanes()
    if env.IDEMPOTENCY_TABLE:
        # the lanes are worth asking until no send fits any more (a slot is checked against the time left)
        margin = deadline(context, margin_s=SEND_MARGIN_S)
        lanes = SharedLanes(bookkeeping_clients(env.AWS_REGION), env.IDEMPOTENCY_TABLE, deadline=margin)
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
    return outbox.Courier(
        ports,
        wiring.delivery_ledger(env, context),
        needed_s=env.SLACK_TIMEOUT_S + SEND_MARGIN_S,
        base=env.RETRY_BASE_S,
        cap=env.RETRY_CAP_S,
        lanes=lanes,
        paces={**outbox.PACES, "slack": outbox.Pace(interval_s=env.SLACK_PACE_S, burst=env.SLACK_BURST)},
    )


@with_env(courier_env)
@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    batch = batch_records(without_surrogates(event))
    for _, reason in batch.set_aside:
        metrics.add_metric(name="OutboxRecordsSetAside", unit=MetricUnit.Count, value=1)
        logger.error("outbox record set aside: it cannot be delivered or reported", reason=reason)
    if not batch.records:  # nothing a partial response could name (Powertools refuses an empty batch)
        logger.info("outbox batch holds no record to deliver", set_aside=len(batch.set_aside))
        return {"batchItemFailures": []}
    processor = CourierBatch(_courier(courier_env(), context))
    response = process_partial_response(
        event={"Records": batch.records}, record_handler=processor.record_handler, processor=processor, context=context
    )
    _report(processor.courier)
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
    wiring.report_ledger(courier.ledger)
    if isinstance(courier.lanes, SharedLanes) and courier.lanes.errors:
        logger.warning("shared Slack pace unavailable: paced by this invocation alone", errors=courier.lanes.errors[:5])
