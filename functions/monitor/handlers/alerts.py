"""The alert groups: a cluster's pending incident transitions → at most one message per channel in the outbox
(:func:`functions.monitor.logic.alert_groups.flush`), and, once a day, the summary of what is open
(:func:`functions.monitor.logic.alert_groups.daily_summary`).

Triggers: the alert-group queue (SQS, each message delayed until its group is due) and a daily EventBridge
schedule. A flush message that cannot be read is kept in the unprocessed queue and not retried, and so is a
record without a message id (no partial response could name it); an empty batch is an empty response.
"""

from __future__ import annotations

import json
from functools import partial
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

from functions.monitor import wiring
from functions.monitor.adapters import SqsOutbox
from functions.monitor.alert_store import AlertGroupQueue, TableAlertGroups
from functions.monitor.logic import alert_groups, alerts
from functions.monitor.runtime import now, with_env
from functions.shared.clients import clients
from functions.shared.env import AlertsEnv, alerts_env
from functions.shared.observability import logger, metrics, tracer
from functions.shared.odd_input import batch_records, without_surrogates
from hyperpod_debugger.notify import alerts as words
from hyperpod_debugger.store.incidents import IncidentStore

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from functions.monitor.logic.alerts import ClusterRef
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


def _set_aside(env: AlertsEnv, content: Any, reason: str) -> bool:
    metrics.add_metric(name="AlertsSetAside", unit=MetricUnit.Count, value=1)
    logger.error("alert set aside with its content", reason=reason)
    return wiring.set_aside(env, kind="alert", at="alert")(content, reason)


def _ports(env: AlertsEnv, context: LambdaContext) -> alert_groups.AlertPorts:
    aws = clients(env.AWS_REGION)
    return alert_groups.AlertPorts(
        groups=TableAlertGroups(aws, env.FINDINGS_TABLE),
        store=IncidentStore(aws, env.FINDINGS_TABLE),
        policy=env.policy,
        channels=env.channels,
        render=partial(render, runbook_base_url=env.RUNBOOK_BASE_URL),
        outbox_port=SqsOutbox(aws, env.OUTBOX_QUEUE_URL),
        ledger=wiring.delivery_ledger(env, context),
        set_aside=partial(_set_aside, env),
    )


def flush_message(record: SQSRecord) -> tuple[ClusterRef, str]:
    """The cluster and window a flush message names. Raises ``ValueError`` (``TypeError``: a body that is not
    a string) for one that cannot be read."""
    body = json.loads(record.body)
    if not isinstance(body, dict):
        raise ValueError("the body is not a JSON object")
    return alert_groups.message_of(body)


def _flush(env: AlertsEnv, ports: alert_groups.AlertPorts, record: SQSRecord) -> None:
    """The record handler: one flush (a message that cannot be read is set aside, not retried)."""
    try:
        ref, window = flush_message(record)
    except (ValueError, TypeError) as exc:
        ports.set_aside(record.raw_event, f"alert-group message that cannot be read: {exc}")
        return
    queue = AlertGroupQueue(clients(env.AWS_REGION), env.ALERT_GROUP_QUEUE_URL)
    wait_s, interval_s = env.ALERT_GROUP_WAIT_S, env.ALERT_GROUP_INTERVAL_S
    result = alert_groups.flush(ref, window, ports, queue=queue, now=now(), wait_s=wait_s, interval_s=interval_s)
    for batch in result.batches:
        metrics.add_metric(name=f"AlertMessages{batch.kind.title()}", unit=MetricUnit.Count, value=1)
    logger.info("alert group flushed", **result.summary())


@with_env(alerts_env)
@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    env = alerts_env()
    ports = _ports(env, context)
    event = without_surrogates(event)  # a lone surrogate cannot be logged or kept: shown as U+FFFD
    if isinstance(event, dict) and event.get("detail-type") == "Scheduled Event":
        summary = alert_groups.daily_summary(ports, now=now())
        metrics.add_metric(name="DailySummaries", unit=MetricUnit.Count, value=summary["queued"])
        logger.info("daily summary queued", **summary)
        return summary
    batch = batch_records(event)
    for raw, reason in batch.set_aside:
        ports.set_aside(raw, f"alert-group record that cannot be named: {reason}")
    if not batch.records:  # nothing a partial response could name (Powertools refuses an empty batch)
        logger.info("alert-group batch holds no record to flush", set_aside=len(batch.set_aside))
        return {"batchItemFailures": []}
    response = process_partial_response(
        event={"Records": batch.records},
        record_handler=partial(_flush, env, ports),
        processor=_processor,
        context=context,
    )
    return dict(response)
