"""CloudWatch Logs reads for the cluster's log group: lifecycle-script and HMA streams."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from hyperpod_debugger.aws.errors import ApiCallError, call
from hyperpod_debugger.aws.paginate import pages
from hyperpod_debugger.domain.observations import LogEvent

if TYPE_CHECKING:
    from hyperpod_debugger.aws.clients import AwsClients

SERVICE = "logs"
LIFECYCLE_PREFIX = "LifecycleConfig/"
HMA_PREFIX = "SagemakerHealthMonitoringAgent/"
HMA_MARKER = "HealthMonitoringAgentDetectionEvent"
#: Terms that mark a lifecycle-script line worth reading; the check classifies the lines itself.
LIFECYCLE_ERROR_PATTERN = (
    '?ERROR ?Error ?error ?AccessDenied ?Forbidden ?timeout ?Traceback ?"command not found" '
    '?"bad interpreter" ?"No such file" ?"exit code" ?failed ?Failed ?KeyError ?"non-zero exit status" '
    '?"Unable to locate" ?"Could not connect" ?"exit 1"'
)
#: Bounds on one sweep so a noisy group cannot make a run unbounded.
MAX_EVENT_PAGES = 100
MAX_LIFECYCLE_STREAMS = 25


def _millis(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def _event(stream: str, raw: dict) -> LogEvent:
    return LogEvent(
        stream=stream,
        timestamp=datetime.fromtimestamp(int(raw.get("timestamp", 0)) / 1000, tz=UTC),
        message=str(raw.get("message", "")),
    )


def log_group_exists(clients: AwsClients, group: str) -> bool:
    for page in pages(
        clients.client(SERVICE),
        "logs:DescribeLogGroups",
        "describe_log_groups",
        "logGroups",
        token_in="nextToken",
        token_out="nextToken",
        logGroupNamePrefix=group,
    ):
        if any(g.get("logGroupName") == group for g in page):
            return True
    return False


def filter_events(
    clients: AwsClients, group: str, stream_prefix: str, pattern: str, start: datetime, end: datetime
) -> list[LogEvent]:
    events: list[LogEvent] = []
    for page in pages(
        clients.client(SERVICE),
        "logs:FilterLogEvents",
        "filter_log_events",
        "events",
        token_in="nextToken",
        token_out="nextToken",
        max_pages=MAX_EVENT_PAGES,
        logGroupName=group,
        logStreamNamePrefix=stream_prefix,
        filterPattern=pattern,
        startTime=_millis(start),
        endTime=_millis(end),
    ):
        events.extend(_event(str(e.get("logStreamName", "")), e) for e in page)
    return events


def tail_stream(clients: AwsClients, group: str, stream: str, limit: int = 200) -> list[LogEvent]:
    """The last ``limit`` events of one stream; a stream that does not exist yields nothing."""
    try:
        raw = call(
            clients.client(SERVICE),
            "logs:GetLogEvents",
            "get_log_events",
            logGroupName=group,
            logStreamName=stream,
            limit=limit,
            startFromHead=False,
        )
    except ApiCallError as exc:
        if exc.failure.kind == "not_found":
            return []
        raise
    return [_event(stream, e) for e in raw.get("events") or ()]


def lifecycle_events(
    clients: AwsClients,
    group: str,
    suspects: Iterable[tuple[str, str]],
    start: datetime,
    end: datetime,
) -> list[LogEvent]:
    """Error-looking lines of every LifecycleConfig stream in the window, plus the tail of the
    streams of nodes already known to be failing (``suspects``: (group, instance id))."""
    events = filter_events(clients, group, LIFECYCLE_PREFIX, LIFECYCLE_ERROR_PATTERN, start, end)
    seen = {(e.stream, e.timestamp, e.message) for e in events}
    for ig, instance_id in list(dict.fromkeys(suspects))[:MAX_LIFECYCLE_STREAMS]:
        for event in tail_stream(clients, group, f"{LIFECYCLE_PREFIX}{ig}/{instance_id}"):
            if (event.stream, event.timestamp, event.message) not in seen:
                events.append(event)
    return events


def hma_events(clients: AwsClients, group: str, start: datetime, end: datetime) -> list[LogEvent]:
    return filter_events(clients, group, HMA_PREFIX, HMA_MARKER, start, end)
