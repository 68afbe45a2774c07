"""The window queue (SQS, each message delayed until its window is due) → one triage per window of events.

Each message names one cluster's window (:mod:`functions.monitor.logic.windows`). A message that is not a
window message is kept, with the reason, in the unprocessed-events queue and not retried; a window whose
triage fails is reported as a batch item failure, so SQS retries it (its events stay kept) and, after the
queue's receive limit, keeps the message in the unprocessed-events queue. A record without a message id (no
partial response could name it) is set aside, logged and counted; an empty batch is an empty response.
"""

from __future__ import annotations

import json
from functools import partial
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

from functions.monitor.logic import windows
from functions.monitor.runtime import keep_unprocessed, now, reject, with_env
from functions.monitor.signal_run import window_runner
from functions.monitor.window_store import TableWindows
from functions.shared.clients import clients
from functions.shared.env import MonitorEnv, monitor_env
from functions.shared.observability import logger, metrics, tracer
from functions.shared.odd_input import batch_records, without_surrogates

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext

_processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


def window_of(record: SQSRecord) -> windows.Window:
    """The window a message names. Raises ``ValueError`` (``TypeError``: a body that is not a string) for one
    that cannot be read."""
    body = json.loads(record.body)
    return windows.Window.from_message(body if isinstance(body, dict) else {})


def _keep_unreadable(env: MonitorEnv, unreadable: list[dict[str, Any]]) -> None:
    for item in unreadable:
        errors = [{"at": "kept event", "error": item["error"]}]
        keep_unprocessed(env.UNPROCESSED_QUEUE_URL, env.AWS_REGION, item["record"], kind="kept event", errors=errors)
    logger.error("kept events that cannot be read: moved to the unprocessed queue", count=len(unreadable))


def _run(env: MonitorEnv, context: LambdaContext, record: SQSRecord) -> dict[str, Any]:
    """The record handler: one window's triage (a message that is not a window message is kept aside, not
    retried; a triage that fails raises, and SQS retries the window)."""
    try:
        window = window_of(record)
    except (ValueError, TypeError) as exc:
        errors = [{"at": "body", "error": str(exc)[:300]}]
        return reject(
            {"id": record.message_id, "body": record.body},
            errors,
            queue_url=env.UNPROCESSED_QUEUE_URL,
            region=env.AWS_REGION,
            kind="window message",
            metric="WindowMessagesRejected",
        )
    result = windows.run_window(
        window,
        windows=TableWindows(clients(env.AWS_REGION), env.FINDINGS_TABLE),
        run=window_runner(env, context),
        keep_unreadable=partial(_keep_unreadable, env),
        now=now(),  # the claim's time: the cluster's next window is due a cooldown after it
    )
    metrics.add_metric(name="WindowsRun", unit=MetricUnit.Count, value=1)
    logger.info("window done", **{k: v for k, v in result.items() if k != "transitions"})
    return result


@with_env(monitor_env)
@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    env = monitor_env()
    batch = batch_records(without_surrogates(event))
    for raw, reason in batch.set_aside:
        reject(
            raw,
            [{"at": "record", "error": reason}],
            queue_url=env.UNPROCESSED_QUEUE_URL,
            region=env.AWS_REGION,
            kind="window record",
            metric="WindowMessagesRejected",
        )
    if not batch.records:  # nothing a partial response could name (Powertools refuses an empty batch)
        logger.info("window batch holds no record to run", set_aside=len(batch.set_aside))
        return {"batchItemFailures": []}
    response = process_partial_response(
        event={"Records": batch.records},
        record_handler=partial(_run, env, context),
        processor=_processor,
        context=context,
    )
    for failure in response.get("batchItemFailures", []):
        logger.error("window failed: SQS retries it, its events stay kept", message_id=failure["itemIdentifier"])
    return dict(response)  # only batchItemFailures: what the event source mapping reads
