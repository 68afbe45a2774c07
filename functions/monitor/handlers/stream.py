"""The findings table's DynamoDB stream → finding events in the outbox, and the alert groups of clusters
whose incidents changed armed (their messages follow from the alert-group function).

Each record is read here (:mod:`functions.monitor.stream_records`) and handled by Powertools' batch processor,
the notifier's steps across records taken before the first (:class:`functions.monitor.logic.stream.Notifier`).
A record that cannot be read is kept aside (with the reason) and never fails the batch; nor does one without a
sequence number (no partial response could name it: it is set aside, logged and counted). A record whose
message the outbox refused, or whose cluster's group could not be armed, fails and the stream retries it. The
response only ever names records of the batch, and a batch with nothing to name is an empty response.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

from functions.monitor import fleet_metrics, stream_records, wiring
from functions.monitor.adapters import SqsOutbox
from functions.monitor.alert_store import AlertGroupQueue, TableAlertGroups
from functions.monitor.logic import alert_groups, alerts, stream
from functions.monitor.runtime import now, with_env
from functions.shared.clients import clients
from functions.shared.env import NotifierEnv, notifier_env
from functions.shared.observability import logger, metrics, tracer
from functions.shared.odd_input import without_surrogates

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext


class NotifierBatch(BatchProcessor):
    """Powertools' processor over one batch of read records, the notifier's steps across records taken before
    the first record is handled. A batch whose every record failed is reported as such, not raised: the event
    source retries the same records either way, and an invocation error would only add noise to the Errors
    alarm."""

    def __init__(self, notifier: stream.Notifier, items: dict[str, stream.StreamItem]) -> None:
        super().__init__(event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False)
        self.notifier = notifier
        self.items = items

    def _prepare(self) -> None:
        super()._prepare()
        self.notifier.plan(list(self.items.values()))

    def record_handler(self, record: DynamoDBRecord) -> None:
        """One record's part (raises: the record fails and the stream retries it)."""
        self.notifier.notify(self.items[stream_records.record_id(record.raw_event)])


def _notifier(env: NotifierEnv, context: LambdaContext) -> stream.Notifier:
    aws = clients(env.AWS_REGION)
    groups, flushes = TableAlertGroups(aws, env.FINDINGS_TABLE), AlertGroupQueue(aws, env.ALERT_GROUP_QUEUE_URL)
    return stream.Notifier(
        queue=SqsOutbox(aws, env.OUTBOX_QUEUE_URL),
        ledger=wiring.delivery_ledger(env, context),
        channels=env.channels,
        render=partial(
            alerts.render, region=env.AWS_REGION, runbook_base_url=env.RUNBOOK_BASE_URL, event_bus=env.EVENT_BUS_NAME
        ),
        arm=lambda ref: alert_groups.arm(
            ref,
            groups=groups,
            queue=flushes,
            now=now(),
            wait_s=env.ALERT_GROUP_WAIT_S,
            interval_s=env.ALERT_GROUP_INTERVAL_S,
        ),
        set_aside=wiring.set_aside(env, kind="stream record", at="record"),
        now=now(),
    )


@with_env(notifier_env)
@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    event = without_surrogates(event)  # a lone surrogate cannot be logged or kept: shown as U+FFFD
    records = stream_records.records_of(event)
    metrics.add_metric(name="StreamRecords", unit=MetricUnit.Count, value=len(records))
    read = stream_records.read_records(records)
    notifier = _notifier(notifier_env(), context)
    notifier.keep_unnamed(read.orphans)
    response: dict[str, Any] = {"batchItemFailures": []}  # nothing to name: Powertools refuses an empty batch
    if read.records:
        processor = NotifierBatch(notifier, read.items)
        response = dict(
            process_partial_response(
                event={"Records": list(read.records.values())},
                record_handler=processor.record_handler,
                processor=processor,
                context=context,
            )
        )
    _report(notifier)
    return response


def _report(notifier: stream.Notifier) -> None:
    result = notifier.result
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
    fleet_metrics.emit_resolutions(notifier.resolutions())
    wiring.report_ledger(notifier.ledger)
    logger.info(
        "transitions queued",
        deliveries=result.deliveries,
        failed=len(result.failed),
        unreadable=len(result.unreadable),
    )
