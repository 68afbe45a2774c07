"""What every entry point shares: the environment check, the clock, keeping and rejecting input no retry can
fix, and the invocation's deadline. Light on purpose: every function imports it (the triage lives in
``signal_run``, the channels in ``adapters``)."""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import BotoCoreError, ClientError

from functions.shared.observability import logger, metrics
from hyperpod_debugger.aws.clients import AwsClients

if TYPE_CHECKING:
    from pydantic import ValidationError

F = TypeVar("F", bound=Callable[..., Any])


def with_env(getter: Callable[[], Any]) -> Callable[[F], F]:
    """Validate the function's environment before anything else runs (a bad deploy fails loudly)."""

    def wrap(handler: F) -> F:
        @functools.wraps(handler)
        def checked(event: Any, context: Any) -> Any:
            getter()
            return handler(event, context)

        return checked  # type: ignore[return-value]

    return wrap


def _wall_clock() -> datetime:
    return datetime.now(UTC)


#: Where every handler reads the time. The simulator swaps it (:func:`use_clock`) to run hours of a monitor's
#: life on a simulated clock; nothing else does.
_clock: Callable[[], datetime] = _wall_clock


def now() -> datetime:
    return _clock()


@contextlib.contextmanager
def use_clock(clock: Callable[[], datetime]) -> Iterator[None]:
    """Every handler reads ``clock()`` as the time within the block (the simulator's clock)."""
    global _clock
    saved, _clock = _clock, clock
    try:
        yield
    finally:
        _clock = saved


def deadline(context: Any, margin_s: float = 10.0) -> float | None:
    """A monotonic time a little before the invocation's end, or None when the context cannot say."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return None
    return time.monotonic() + max(remaining() / 1000 - margin_s, 0.0)


def validation_errors(exc: ValidationError) -> list[dict[str, str]]:
    # No input values: an event may carry tags or messages we do not want copied into logs.
    return [{"at": ".".join(str(p) for p in err["loc"]), "error": err["msg"]} for err in exc.errors()[:10]]


#: SQS's message size limit; an event larger than this (EventBridge allows 256 KiB) is cut, and says so.
MAX_KEPT_BYTES = 256 * 1024 - 2048


def _kept_body(event: Any) -> str:
    """The input as the unprocessed-events queue keeps it: JSON in ASCII (so every character SQS accepts, a
    lone surrogate or a U+FFFF included, arrives as its ``\\u`` escape), cut to one SQS message."""
    try:
        body = json.dumps(event, default=str)
    except (TypeError, ValueError, RecursionError):
        try:
            body = ascii(event)
        except RecursionError:
            body = f"<{type(event).__name__} nested too deeply to keep>"
    if len(body) > MAX_KEPT_BYTES:
        body = body[:MAX_KEPT_BYTES] + "\n[cut: the input was larger than one SQS message]"
    return body


def keep_unprocessed(
    queue_url: str | None, region: str, event: Any, *, kind: str, errors: Sequence[dict[str, str]]
) -> bool:
    """Put an input the monitor could not process (the raw event, verbatim) on the unprocessed-events
    queue, with why in its message attributes. False when no queue is configured.

    Raises ``RuntimeError`` when the queue refuses it: the caller lets the invocation fail, so
    Lambda's retries and its on-failure destination keep the event instead.
    """
    if not queue_url:
        return False
    reason = "; ".join(f"{e.get('at', '?')}: {e.get('error', '?')}" for e in errors)[:1000] or "unknown"
    detail_type = event.get("detail-type") if isinstance(event, dict) else None
    attributes = {
        "kind": {"DataType": "String", "StringValue": kind},
        "reason": {"DataType": "String", "StringValue": reason},
    }
    if isinstance(detail_type, str) and detail_type:
        attributes["detail_type"] = {"DataType": "String", "StringValue": detail_type[:256]}
    try:
        AwsClients(region).client("sqs").send_message(
            QueueUrl=queue_url, MessageBody=_kept_body(event), MessageAttributes=attributes
        )
    except (ClientError, BotoCoreError) as exc:
        raise RuntimeError(f"the unprocessed-events queue refused the {kind} ({type(exc).__name__})") from None
    return True


def reject(
    event: Any,
    errors: list[dict[str, str]],
    *,
    queue_url: str | None,
    region: str,
    kind: str,
    metric: str = "EventsRejected",
) -> dict[str, Any]:
    """An input that no retry can fix: logged with its id, counted, and kept in the unprocessed-events
    queue with the reason (raises when it cannot be kept, so Lambda's retries and on-failure
    destination keep it instead)."""
    detail_type = event.get("detail-type") if isinstance(event, dict) else None
    event_id = event.get("id") if isinstance(event, dict) else None
    kept = keep_unprocessed(queue_url, region, event, kind=kind, errors=errors)
    logger.error(
        f"{kind} rejected: kept for inspection" if kept else f"{kind} rejected (no queue to keep it in)",
        event_id=event_id,
        detail_type=detail_type,
        errors=errors,
    )
    metrics.add_metric(name=metric, unit=MetricUnit.Count, value=1)
    return {"status": "rejected", "event_id": event_id, "detail_type": detail_type, "errors": errors, "kept": kept}


__all__ = ["deadline", "keep_unprocessed", "now", "reject", "use_clock", "validation_errors", "with_env"]
