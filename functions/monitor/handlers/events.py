"""EventBridge (HyperPod's three detail-types) → the event kept for its cluster's window (or a scoped triage).

With a window queue (the stack's default), the event is kept for its cluster's window and the window
function runs one triage for every event of the window (``logic.windows``): an urgent event on a quiet
cluster opens a window due in seconds (the leading edge), any other waits for the cluster's window or
cooldown; without a queue, the event is triaged at once. Idempotent on the EventBridge event id (SageMaker
may send one change twice). An event no retry can fix is kept, with the reason, in the unprocessed-events
queue (a lone surrogate in it shown as U+FFFD). Only a failed triage, or an unprocessed-events queue that
refuses the event, raises: Lambda retries the event, then hands it to its on-failure destination.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from pydantic import ValidationError

from functions.monitor.logic import signals
from functions.monitor.runtime import reject, validation_errors, with_env
from functions.monitor.signal_run import coalesced, signal_runner
from functions.shared.env import monitor_env
from functions.shared.events import parse_hyperpod_event
from functions.shared.observability import logger, metrics, tracer
from functions.shared.odd_input import without_surrogates

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


@with_env(monitor_env)
@logger.inject_lambda_context(correlation_id_path="id", log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    env = monitor_env()
    metrics.add_metric(name="EventsReceived", unit=MetricUnit.Count, value=1)
    event = without_surrogates(event)  # a lone surrogate cannot be logged, stored or kept: shown as U+FFFD
    try:
        parsed = parse_hyperpod_event(event)
        signal = signals.signal_of(parsed)
    except ValidationError as exc:
        errors = validation_errors(exc)
    except signals.UnusableEvent as exc:
        errors = [{"at": "detail", "error": str(exc)}]
    else:
        if signal is None:
            logger.info("cluster event ignored: informational", event_id=parsed.id, detail_type=parsed.detail_type)
            return {"status": "ignored", "event_id": parsed.id}
        hand_over = coalesced(env)
        if hand_over is not None:
            return hand_over(signal)
        return signal_runner(env, context)(signal)
    return reject(event, errors, queue_url=env.UNPROCESSED_QUEUE_URL, region=env.AWS_REGION, kind="event")
