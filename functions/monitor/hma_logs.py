"""HMA detection records delivered by a CloudWatch Logs subscription, as per-node triage signals. Pure.

On Slurm clusters the HyperPod Health Monitoring Agent (HMA) reports most of what it detects only in the
cluster's log group (``/aws/sagemaker/Clusters/<cluster name>/<cluster id>``), one stream per node
(``SagemakerHealthMonitoringAgent/<instance group>/<instance id>``), not as EventBridge events. A
subscription filter on that group hands matching records to a Lambda as::

    {"awslogs": {"data": base64(gzip(json))}}

where the JSON is ``{"messageType", "owner", "logGroup", "logStream", "subscriptionFilters",
"logEvents": [{"id", "timestamp", "message"}]}``. One delivery carries the events of one log stream.

A subscription filter pattern matches the *message text* only; it cannot select log streams. The same
log group also holds the lifecycle-script streams (``LifecycleConfig/...``), so a pattern that happens
to match a lifecycle line (a script that greps for the agent's marker, say) still delivers it here.
That is why :func:`read_subscription` keeps only streams named ``SagemakerHealthMonitoringAgent/...``
and, inside them, only messages :func:`parse_hma_message` calls detections.

Nothing here calls AWS; the handler (``handlers.hma``) runs the signals.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import unicodedata
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from functions.monitor.logic.signals import ClusterSignal
from functions.shared.odd_input import without_surrogates
from hyperpod_debugger.checks.logs import HMA_PREFIX, parse_hma_message, parse_stream_name
from hyperpod_debugger.domain.xid import lookup

LOG_GROUP_PREFIX = "/aws/sagemaker/Clusters/"
CONTROL_MESSAGE = "CONTROL_MESSAGE"
DATA_MESSAGE = "DATA_MESSAGE"

#: A delivery is at most about 1 MB of log text; anything that inflates past this is not a real payload.
MAX_DECODED_BYTES = 8 * 1024 * 1024
#: Xid labels named in one signal's reason; the rest are counted.
_MAX_CODES_NAMED = 4
_MAX_REASON = 300

# botocore's ClusterName pattern (1-63 characters) and the 12-character id that ends a cluster ARN.
_CLUSTER_NAME = r"[A-Za-z0-9](?:-*[A-Za-z0-9])*"
_LOG_GROUP = re.compile(rf"/aws/sagemaker/Clusters/(?P<name>{_CLUSTER_NAME})/(?P<id>[a-z0-9]{{12}})")
_ACCOUNT = re.compile(r"\d{12}")
_PARTITION = re.compile(r"aws(?:-[a-z]+)*")
_REGION = re.compile(r"[a-z]{2}(?:-[a-z]+)+-\d+")
# Checked again here (fullmatch): the stream parser's anchors let a trailing newline through.
_INSTANCE_ID = re.compile(r"i-[0-9a-f]{8,17}")


class LogPayloadError(ValueError):
    """A subscription payload that cannot be read; retrying the same payload cannot fix it."""


def _shown(value: object, limit: int = 120) -> str:
    """A value quoted for an error message: ASCII only (no control characters), cut to ``limit``."""
    text = str(value)
    return ascii(text[:limit] + ("..." if len(text) > limit else ""))


# --------------------------------------------------------------------------- payload


class _LogEvent(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str
    timestamp: int
    message: str


class _DataMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    messageType: Literal["DATA_MESSAGE"]
    owner: str
    logGroup: str
    logStream: str
    subscriptionFilters: list[Any] = []
    #: each event is read on its own (:func:`_read_events`): one malformed event never holds back the others
    logEvents: list[Any]


@dataclass(frozen=True)
class LogRecord:
    id: str
    timestamp: int  # epoch milliseconds
    message: str


@dataclass(frozen=True)
class BadLogEvent:
    """A log event of the delivery that cannot be read: where it is, its id when it has one, and why."""

    index: int
    id: str
    reason: str
    event: Any = None  # the event as it came (kept with its reason; never logged)

    def summary(self) -> dict[str, Any]:
        return {"index": self.index, "id": _shown(self.id, 80) if self.id else None, "reason": self.reason}


@dataclass(frozen=True)
class SubscriptionPayload:
    """The decoded delivery. A control message has no group, stream or events worth reading."""

    message_type: str
    owner: str = ""
    log_group: str = ""
    log_stream: str = ""
    events: tuple[LogRecord, ...] = ()
    #: the log events that could not be read, with why (the others are read as if they were alone)
    bad_events: tuple[BadLogEvent, ...] = ()

    @property
    def is_control(self) -> bool:
        return self.message_type == CONTROL_MESSAGE


def _inflate(raw: bytes) -> bytes:
    if raw[:2] != b"\x1f\x8b":
        raise LogPayloadError("awslogs.data is not gzip-compressed (no gzip header)")
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        text = inflater.decompress(raw, MAX_DECODED_BYTES + 1)
    except zlib.error as exc:
        raise LogPayloadError(f"awslogs.data is not valid gzip ({exc})") from None
    if len(text) > MAX_DECODED_BYTES:
        raise LogPayloadError(f"awslogs.data inflates past {MAX_DECODED_BYTES} bytes")
    if not inflater.eof:
        raise LogPayloadError("awslogs.data is a truncated gzip stream")
    return text


def decode_subscription(event: object) -> SubscriptionPayload:
    """The delivery's decoded content.

    Raises :class:`LogPayloadError` naming what is wrong: no ``awslogs.data``, bad base64, not gzip,
    not JSON, an unknown ``messageType`` or a missing / mistyped field of a data message.
    """
    awslogs = event.get("awslogs") if isinstance(event, Mapping) else None
    data = awslogs.get("data") if isinstance(awslogs, Mapping) else None
    if not isinstance(data, str) or not data:
        raise LogPayloadError("not a CloudWatch Logs subscription event: no awslogs.data string")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise LogPayloadError("awslogs.data is not valid base64 (truncated or not base64)") from None
    text = _inflate(raw)
    try:
        decoded: Any = without_surrogates(json.loads(text.decode("utf-8")))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise LogPayloadError("awslogs.data does not hold UTF-8 JSON") from None
    if not isinstance(decoded, dict):
        raise LogPayloadError("awslogs.data does not hold a JSON object")
    message_type = decoded.get("messageType")
    if message_type == CONTROL_MESSAGE:
        return SubscriptionPayload(message_type=CONTROL_MESSAGE)
    if message_type != DATA_MESSAGE:
        raise LogPayloadError(f"unknown messageType {_shown(message_type)}")
    try:
        model = _DataMessage.model_validate(decoded)
    except ValidationError as exc:
        problems = sorted({".".join(str(p) for p in err["loc"]) + f": {err['msg']}" for err in exc.errors()})
        raise LogPayloadError(f"data message missing or invalid fields: {'; '.join(problems[:5])}") from None
    events, bad = _read_events(model.logEvents)
    return SubscriptionPayload(
        message_type=DATA_MESSAGE,
        owner=model.owner,
        log_group=model.logGroup,
        log_stream=model.logStream,
        events=events,
        bad_events=bad,
    )


def _read_events(raw: list[Any]) -> tuple[tuple[LogRecord, ...], tuple[BadLogEvent, ...]]:
    """Every log event read on its own: the readable ones, and each other one with where and why."""
    good: list[LogRecord] = []
    bad: list[BadLogEvent] = []
    for index, item in enumerate(raw):
        given = item.get("id") if isinstance(item, dict) else None
        event_id = given if isinstance(given, str) else ""
        try:
            event = _LogEvent.model_validate(item)
        except ValidationError as exc:
            where = [".".join(["logEvents", str(index), *(str(p) for p in e["loc"])]) for e in exc.errors()[:3]]
            problems = [f"{at}: {e['msg']}" for at, e in zip(where, exc.errors()[:3], strict=True)]
            bad.append(BadLogEvent(index, event_id, "; ".join(problems)[:300], item))
            continue
        good.append(LogRecord(event.id, event.timestamp, event.message))
    return tuple(good), tuple(bad)


# --------------------------------------------------------------------------- names and ARNs


@dataclass(frozen=True)
class ClusterLogGroup:
    """``/aws/sagemaker/Clusters/<name>/<id>``, parsed."""

    log_group: str
    name: str
    cluster_id: str

    def arn(self, *, partition: str, region: str, account: str) -> str:
        return f"arn:{partition}:sagemaker:{region}:{account}:cluster/{self.cluster_id}"


def parse_log_group(log_group: str) -> ClusterLogGroup:
    """Raises :class:`LogPayloadError` for anything not shaped like a HyperPod cluster log group."""
    match = _LOG_GROUP.fullmatch(log_group)
    if match is None or len(match.group("name")) > 63:
        raise LogPayloadError(
            f"log group {_shown(log_group)} is not a HyperPod cluster log group "
            f"({LOG_GROUP_PREFIX}<cluster name>/<12-character cluster id>)"
        )
    return ClusterLogGroup(log_group, match.group("name"), match.group("id"))


def partition_of(function_arn: str | None) -> str:
    """The partition of the invoked function's ARN (``aws``, ``aws-cn``, ``aws-us-gov``); else ``aws``."""
    parts = (function_arn or "").split(":")
    if len(parts) > 2 and parts[0] == "arn" and _PARTITION.fullmatch(parts[1]):
        return parts[1]
    return "aws"


# --------------------------------------------------------------------------- signals


@dataclass(frozen=True)
class HmaBatch:
    """What one data message asks for: one signal per node with detections, and what was dropped."""

    cluster: ClusterLogGroup
    cluster_arn: str
    log_stream: str
    signals: tuple[ClusterSignal, ...]
    #: detection records among the events (all nodes)
    detections: int = 0
    #: why nothing in the payload counts (not an HMA stream, no detection); None when signals exist
    dropped: str | None = None
    #: detection records whose stream names no instance id (no node to triage)
    unattributed: int = 0
    #: log events that could not be read (reported with their reasons; the others are still triaged)
    bad_events: tuple[BadLogEvent, ...] = ()


def _clean(text: str) -> str:
    """One line, printable characters only, cut to the reason length."""
    printable = "".join(ch if unicodedata.category(ch)[0] != "C" else " " for ch in text)
    flat = " ".join(printable.split())
    return flat if len(flat) <= _MAX_REASON else flat[: _MAX_REASON - 3] + "..."


def _reason(codes: list[int], words: list[str], records: int) -> str:
    if codes:
        unique = list(dict.fromkeys(codes))
        labels = [lookup(code).label() for code in unique[:_MAX_CODES_NAMED]]
        more = len(unique) - len(labels)
        text = ", ".join(labels) + (f" and {more} more" if more else "")
    elif words:
        text = " / ".join(dict.fromkeys(words))
    else:
        text = f"{records} detection record(s) without an Xid or condition"
    return _clean(f"HMA: {text}")


def signal_id(log_group: str, log_stream: str, node: str, event_ids: list[str]) -> str:
    """Deterministic per payload and node: a retried delivery of the same events gets the same id."""
    key = json.dumps([log_group, log_stream, node, sorted(event_ids)], ensure_ascii=True)
    return "hma-" + hashlib.sha256(key.encode()).hexdigest()[:40]


def signals_from_payload(payload: SubscriptionPayload, *, region: str, partition: str = "aws") -> HmaBatch:
    """One :class:`ClusterSignal` per node with detection records in the payload.

    Raises :class:`LogPayloadError` when the log group is not a cluster log group or the owner is not an
    account id (the ARN could not be built). A non-HMA stream or a payload without detections is not an
    error: the batch has no signals and says why in ``dropped``.
    """
    cluster = parse_log_group(payload.log_group)
    if not _ACCOUNT.fullmatch(payload.owner):
        raise LogPayloadError(f"owner {_shown(payload.owner)} is not a 12-digit account id")
    if not _REGION.fullmatch(region) or not _PARTITION.fullmatch(partition):
        raise LogPayloadError(f"cannot build a cluster ARN in {_shown(partition)}/{_shown(region)}")
    arn = cluster.arn(partition=partition, region=region, account=payload.owner)
    stream = payload.log_stream
    if not stream.startswith(f"{HMA_PREFIX}/"):
        why = f"stream {_shown(stream)} is not an HMA stream"
        return HmaBatch(cluster, arn, stream, signals=(), dropped=why, bad_events=payload.bad_events)

    instance_id = parse_stream_name(stream, HMA_PREFIX).instance_id
    node = instance_id if instance_id and _INSTANCE_ID.fullmatch(instance_id) else None
    by_node: dict[str, list[tuple[LogRecord, tuple[int, ...], list[str]]]] = {}
    detections = unattributed = 0
    for record in payload.events:
        if not record.message.strip():
            continue
        codes, reason, condition, is_detection = parse_hma_message(record.message)
        if not is_detection:
            continue
        detections += 1
        if node is None:
            unattributed += 1
            continue
        by_node.setdefault(node, []).append((record, codes, [w for w in (condition, reason) if w]))

    signals = []
    for name in sorted(by_node):
        found = by_node[name]
        node_codes = [code for _, record_codes, _ in found for code in record_codes]
        words = [word for _, _, record_words in found for word in record_words]
        signals.append(
            ClusterSignal(
                event_id=signal_id(cluster.log_group, stream, name, [r.id for r, _, _ in found]),
                cluster_arn=arn,
                region=region,
                node=name,
                reason=_reason(node_codes, words, len(found)),
                source="health-agent log record",
            )
        )
    dropped = None
    if not signals:
        dropped = "detections on a stream naming no instance id" if unattributed else "no detection records"
    return HmaBatch(
        cluster,
        arn,
        stream,
        tuple(signals),
        detections=detections,
        dropped=dropped,
        unattributed=unattributed,
        bad_events=payload.bad_events,
    )


def read_subscription(event: object, *, region: str, partition: str = "aws") -> HmaBatch | None:
    """Decode and reduce one delivery; ``None`` for CloudWatch's control (connectivity-check) message.

    Raises :class:`LogPayloadError` for a payload that cannot be read.
    """
    payload = decode_subscription(event)
    if payload.is_control:
        return None
    return signals_from_payload(payload, region=region, partition=partition)
