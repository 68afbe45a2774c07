"""The findings stream's transitions → messages: singles, digests and circuit-breaker alerts."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from functions.shared.events import parse_stream_record
from hyperpod_debugger.lifecycle.findings import NOTIFYING, StoredFinding, TransitionKind
from hyperpod_debugger.notify import (
    Notice,
    breaker,
    breaker_email,
    digest,
    digest_email,
    email_text,
    finding_event,
    slack_message,
)
from hyperpod_debugger.notify.stored import notice_of


@dataclass(frozen=True)
class StreamChange:
    """One notifying transition read from the findings table's stream."""

    record_id: str
    kind: TransitionKind
    at: str
    finding: StoredFinding


def change_of(
    record_id: str, new: dict[str, Any] | None, old: dict[str, Any] | None, from_item: Callable[..., StoredFinding]
) -> StreamChange | None:
    """The notifying transition a stream record carries, or None (heartbeat, history, sweep, ack, delete).

    ``new`` and ``old`` are the plain (deserialised) images. The store writes ``last_transition`` and
    ``last_transition_at`` with each transition and leaves them alone on a heartbeat, so a record is a
    transition exactly when ``last_transition_at`` changed.
    """
    if not new or new.get("item_type") != "FINDING":
        return None
    kind_text, at = new.get("last_transition"), new.get("last_transition_at")
    if not kind_text or not at or (old and old.get("last_transition_at") == at):
        return None
    try:
        kind = TransitionKind(str(kind_text))
    except ValueError:
        return None
    if kind not in NOTIFYING:
        return None
    return StreamChange(record_id=record_id, kind=kind, at=str(at), finding=from_item(new))


def to_notice(change: StreamChange, region: str) -> Notice:
    return notice_of(change.kind, change.at, change.finding, region)


@dataclass
class Delivery:
    """One message (Slack and email) covering one or more stream records."""

    key: str
    kind: Literal["single", "digest", "breaker"]
    changes: list[StreamChange] = field(default_factory=list)

    @property
    def record_ids(self) -> list[str]:
        return [c.record_id for c in self.changes]


def plan_deliveries(
    changes: Sequence[StreamChange], *, digest_threshold: int = 10, breaker_threshold: int = 5
) -> list[Delivery]:
    """Group one batch's transitions into messages.

    NEW findings of one check on at least ``breaker_threshold`` nodes of one cluster become one
    circuit-breaker alert (likely a shared cause, not N node faults); of the NEW findings left, more
    than ``digest_threshold`` in one cluster become one digest. Everything else is one message each.
    """
    new_by_check: dict[tuple[str, str], list[StreamChange]] = defaultdict(list)
    for c in changes:
        if c.kind is TransitionKind.NEW and c.finding.instance_id:
            new_by_check[(c.finding.cluster_arn, c.finding.check)].append(c)
    out: list[Delivery] = []
    grouped: set[str] = set()
    for (cluster, check), group in new_by_check.items():
        if len({c.finding.instance_id for c in group}) >= breaker_threshold:
            out.append(Delivery(key=f"breaker:{cluster}:{check}", kind="breaker", changes=group))
            grouped |= {c.record_id for c in group}
    new_by_cluster: dict[str, list[StreamChange]] = defaultdict(list)
    for c in changes:
        if c.kind is TransitionKind.NEW and c.record_id not in grouped:
            new_by_cluster[c.finding.cluster_arn].append(c)
    for cluster, group in new_by_cluster.items():
        if len(group) > digest_threshold:
            out.append(Delivery(key=f"digest:{cluster}", kind="digest", changes=group))
            grouped |= {c.record_id for c in group}
    for c in changes:
        if c.record_id not in grouped:
            out.append(Delivery(key=f"single:{c.record_id}", kind="single", changes=[c]))
    return out


@dataclass(frozen=True)
class Message:
    slack: dict[str, Any]
    subject: str
    body: str
    #: one PutEvents entry per change, in the delivery's order (empty: no event bus configured)
    events: tuple[dict[str, Any], ...] = ()


def events_of(delivery: Delivery, *, bus: str, runbook_base_url: str | None) -> tuple[dict[str, Any], ...]:
    """Every change of the delivery as a finding event (a digest or a breaker alert is still one event per
    finding: a rule routes findings, not messages)."""
    return tuple(
        finding_event.entry(finding_event.detail_of(c.kind, c.at, c.finding, runbook_base_url=runbook_base_url), bus)
        for c in delivery.changes
    )


def render(delivery: Delivery, *, region: str, runbook_base_url: str | None, event_bus: str | None = None) -> Message:
    events = events_of(delivery, bus=event_bus, runbook_base_url=runbook_base_url) if event_bus else ()
    message = _render(delivery, region=region, runbook_base_url=runbook_base_url)
    return Message(message.slack, message.subject, message.body, events)


def _render(delivery: Delivery, *, region: str, runbook_base_url: str | None) -> Message:
    notices = [to_notice(c, region) for c in delivery.changes]
    first = notices[0]
    if delivery.kind == "single":
        subject, body = email_text(first, runbook_base_url=runbook_base_url)
        return Message(slack_message(first, runbook_base_url=runbook_base_url), subject, body)
    if delivery.kind == "digest":
        kw: dict[str, Any] = {"cluster_name": first.cluster_name, "runbook_base_url": runbook_base_url}
        subject, body = digest_email(notices, **kw)
        return Message(digest(notices, **kw), subject, body)
    sample = min(notices, key=lambda n: n.finding.instance_id or "").finding
    ids = sorted(n.finding.instance_id or "" for n in notices)
    args = (sample.check, sample.section, ids)
    kw = {"cluster_name": first.cluster_name, "sample": sample, "runbook_base_url": runbook_base_url}
    subject, body = breaker_email(*args, **kw)
    return Message(breaker(*args, **kw), subject, body)


# --------------------------------------------------------------------------- reading the stream


def record_id(raw: Any) -> str:
    """A stream record's sequence number (what a partial batch response names), or ""."""
    if not isinstance(raw, dict):
        return ""
    images = raw.get("dynamodb")
    sequence = images.get("SequenceNumber") if isinstance(images, dict) else None
    return str(sequence or "")


@dataclass
class StreamRead:
    """One batch of stream records, read: the notifying transitions, the records that could not be read
    (id → reason), and the records without a sequence number (which cannot even be reported as failed)."""

    changes: list[StreamChange] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)
    orphans: list[tuple[Any, str]] = field(default_factory=list)
    records: dict[str, Any] = field(default_factory=dict)


def read_records(records: Sequence[Any], *, from_item: Callable[..., StoredFinding]) -> StreamRead:
    """Read every record on its own with Powertools' stream-record model (images come back as plain
    values); one damaged record is set aside with its reason, never raised.

    ``from_item`` turns a plain item into a finding.
    """
    read = StreamRead()
    for raw in records:
        rid = record_id(raw)
        if not rid:
            read.orphans.append((raw, "the record has no dynamodb.SequenceNumber"))
            continue
        read.records[rid] = raw
        try:
            images = parse_stream_record(raw).dynamodb
            change = change_of(rid, _image(images.NewImage), _image(images.OldImage), from_item)
        except ValidationError as exc:
            read.unreadable[rid] = _reason(exc)
            continue
        except Exception as exc:  # noqa: BLE001 - one damaged record is kept aside; it never fails the batch
            read.unreadable[rid] = f"{type(exc).__name__}: {exc}"[:300]
            continue
        if change is not None:
            read.changes.append(change)
    return read


def _image(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) and value else None


def _reason(exc: ValidationError) -> str:
    # Where and what, never the input value (an image may hold anything).
    parts = [f"{'.'.join(str(p) for p in e['loc']) or 'record'}: {e['msg']}" for e in exc.errors()[:3]]
    return "; ".join(parts)[:300]
