"""The alert groups: a cluster's pending incident transitions → at most one message per channel in the outbox
(:func:`functions.monitor.logic.alert_groups.flush`), and, once a day, the summary of what is open
(:func:`functions.monitor.logic.alert_groups.daily_summary`).

Triggers: the alert-group queue (SQS, each message delayed until its group is due) and a daily EventBridge
schedule. A flush message that cannot be read is kept in the unprocessed queue and not retried, and so is a
record without a message id (no partial response could name it); an empty batch is an empty response.
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.monitor.adapters import DeliveryLedger, SqsOutbox, keep_unprocessed
from functions.monitor.alert_store import AlertGroupQueue, TableAlertGroups
from functions.monitor.logic import alert_groups, alerts, outbox
from functions.monitor.runtime import deadline, now, with_env
from functions.shared.clients import bookkeeping_clients, clients
from functions.shared.env import AlertsEnv, alerts_env
from functions.shared.events import batch_records, without_surrogates
from functions.shared.observability import logger, metrics, tracer
from hyperpod_debugger.aws.incident_store import IncidentStore
from hyperpod_debugger.notify import alerts as words
from hyperpod_debugger.notify.policy import Batch

_processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


def render(batch: Batch, *, runbook_base_url: str | None) -> alerts.Message:
    """One batch in its channel's form."""
    if batch.channel == "slack":
        return alerts.Message(words.slack(batch, runbook_base_url=runbook_base_url), "", "")
    if batch.channel == "chatbot":
        from hyperpod_debugger.notify.chatbot import chatbot  # only where a chat topic is configured

        body = json.dumps(chatbot(batch, runbook_base_url=runbook_base_url), ensure_ascii=False)
        return alerts.Message({}, words.subject(batch), body)
    subject, body = words.email(batch, runbook_base_url=runbook_base_url)
    return alerts.Message({}, subject, body)


class _Run:
    """The ports one invocation shares."""

    def __init__(self, env: AlertsEnv, context: LambdaContext) -> None:
        aws = clients(env.AWS_REGION)
        self.env = env
        self.groups = TableAlertGroups(aws, env.FINDINGS_TABLE)
        self.queue = AlertGroupQueue(aws, env.ALERT_GROUP_QUEUE_URL)
        self.store = IncidentStore(aws, env.FINDINGS_TABLE)
        self.outbox = SqsOutbox(aws, env.OUTBOX_QUEUE_URL)
        self.ledger: outbox.Ledger = outbox.NoLedger()
        if env.IDEMPOTENCY_TABLE:
            self.ledger = DeliveryLedger(
                bookkeeping_clients(env.AWS_REGION), env.IDEMPOTENCY_TABLE, deadline=deadline(context)
            )

    def set_aside(self, content: Any, reason: str) -> bool:
        errors = [{"at": "alert", "error": reason}]
        metrics.add_metric(name="AlertsSetAside", unit=MetricUnit.Count, value=1)
        logger.error("alert set aside with its content", reason=reason)
        return keep_unprocessed(
            self.env.UNPROCESSED_QUEUE_URL, self.env.AWS_REGION, content, kind="alert", errors=errors
        )

    def render(self, batch: Batch) -> alerts.Message:
        return render(batch, runbook_base_url=self.env.RUNBOOK_BASE_URL)

    def flush(self, body: dict[str, Any]) -> alert_groups.FlushResult:
        return alert_groups.flush(
            body,
            groups=self.groups,
            store=self.store,
            queue=self.queue,
            policy=self.env.policy,
            channels=self.env.channels,
            render=self.render,
            outbox_port=self.outbox,
            ledger=self.ledger,
            set_aside=self.set_aside,
            now=now(),
            wait_s=self.env.ALERT_GROUP_WAIT_S,
            interval_s=self.env.ALERT_GROUP_INTERVAL_S,
            unreadable=lambda: dict(self.store.unreadable_items),
        )

    def daily(self) -> dict[str, Any]:
        return alert_groups.daily_summary(
            groups=self.groups,
            store=self.store,
            policy=self.env.policy,
            channels=self.env.channels,
            render=self.render,
            outbox_port=self.outbox,
            ledger=self.ledger,
            set_aside=self.set_aside,
            now=now(),
        )


@with_env(alerts_env)
@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    run = _Run(alerts_env(), context)
    event = without_surrogates(event)  # a lone surrogate cannot be logged or kept: shown as U+FFFD
    if isinstance(event, dict) and event.get("detail-type") == "Scheduled Event":
        summary = run.daily()
        metrics.add_metric(name="DailySummaries", unit=MetricUnit.Count, value=summary["queued"])
        logger.info("daily summary queued", **summary)
        return summary

    def record_handler(record: SQSRecord) -> None:
        try:
            body = json.loads(record.body)
            if not isinstance(body, dict):
                raise ValueError("the body is not a JSON object")
            alert_groups.message_of(body)
        except (ValueError, TypeError) as exc:  # TypeError: a body that is not a string
            run.set_aside(record.raw_event, f"alert-group message that cannot be read: {exc}")
            return
        result = run.flush(body)
        for batch in result.batches:
            metrics.add_metric(name=f"AlertMessages{batch.kind.title()}", unit=MetricUnit.Count, value=1)
        logger.info("alert group flushed", **result.summary())

    batch = batch_records(event)
    for raw, reason in batch.set_aside:
        run.set_aside(raw, f"alert-group record that cannot be named: {reason}")
    if not batch.records:  # nothing a partial response could name (Powertools refuses an empty batch)
        logger.info("alert-group batch holds no record to flush", set_aside=len(batch.set_aside))
        return {"batchItemFailures": []}
    response = process_partial_response(
        event={"Records": batch.records}, record_handler=record_handler, processor=_processor, context=context
    )
    return dict(response)
