"""The findings table's stream, read: finding transitions (their events) and incidents that arm an alert group."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from functions.shared.events import parse_stream_record, stream_sequence_number
from hyperpod_debugger.domain.validate import region_of_arn
from hyperpod_debugger.lifecycle.findings import NOTIFYING, StoredFinding, TransitionKind
from hyperpod_debugger.notify import finding_event


@dataclass(frozen=True)
class ClusterRef:
    """A cluster as an alert group knows it."""

    cluster_arn: str
    region: str
    cluster_name: str


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


@dataclass
class Delivery:
    """The finding events of one cluster's changes in one batch of stream records."""

    key: str
    kind: Literal["events"]
    changes: list[StreamChange] = field(default_factory=list)

    @property
    def record_ids(self) -> list[str]:
        return [c.record_id for c in self.changes]


def plan_deliveries(changes: Sequence[StreamChange]) -> list[Delivery]:
    """One delivery of finding events per cluster, in stream order (ten events per PutEvents message)."""
    by_cluster: dict[str, list[StreamChange]] = defaultdict(list)
    for c in changes:
        by_cluster[c.finding.cluster_arn].append(c)
    return [
        Delivery(key=f"events:{cluster}:{group[0].record_id}", kind="events", changes=group)
        for cluster, group in by_cluster.items()
    ]


@dataclass(frozen=True)
class Message:
    """A rendered message: Slack's payload, an email's subject and body (an Amazon Q Developer notification's
    JSON in ``body``), or finding events."""

    slack: dict[str, Any]
    subject: str
    body: str
    #: one PutEvents entry per change, in the delivery's order (empty: no event bus configured)
    events: tuple[dict[str, Any], ...] = ()


def events_of(delivery: Delivery, *, bus: str, runbook_base_url: str | None) -> tuple[dict[str, Any], ...]:
    """Every change of the delivery as a finding event (a rule routes findings, not messages)."""
    return tuple(
        finding_event.entry(finding_event.detail_of(c.kind, c.at, c.finding, runbook_base_url=runbook_base_url), bus)
        for c in delivery.changes
    )


def render(delivery: Delivery, *, region: str, runbook_base_url: str | None, event_bus: str | None = None) -> Message:
    """A delivery's finding events (people hear of incidents, through the alert groups, not of findings)."""
    events = events_of(delivery, bus=event_bus, runbook_base_url=runbook_base_url) if event_bus else ()
    return Message({}, "", "", events)


# --------------------------------------------------------------------------- incidents on the stream


def armed_cluster(new: dict[str, Any] | None, old: dict[str, Any] | None) -> ClusterRef | None:
    """The cluster whose alert group an incident record asks to arm: the incident has pending transitions
    that the old image did not have; None otherwise (an update, a flush clearing them, a deletion)."""
    if not new or new.get("item_type") != "INCIDENT":
        return None
    pending = new.get("pending")
    if not isinstance(pending, dict) or not pending:
        return None
    before = old.get("pending") if old else None
    if isinstance(before, dict) and set(pending) <= set(before):
        return None
    arn = str(new.get("cluster_arn") or "")
    if not arn:
        return None
    return ClusterRef(arn, region_of_arn(arn) or "", str(new.get("cluster_name") or ""))


# --------------------------------------------------------------------------- reading the stream


def record_id(raw: Any) -> str:
    """A stream record's sequence number (what a partial batch response names), or "" when it has none a
    response could name (missing, blank, or not a string: Lambda would not find it in the batch)."""
    sequence = stream_sequence_number(raw)
    return sequence if sequence.strip() else ""


@dataclass
class StreamRead:
    """One batch of stream records, read: the notifying transitions, the records that could not be read
    (id → reason), and the records without a sequence number (which cannot even be reported as failed)."""

    changes: list[StreamChange] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)
    orphans: list[tuple[Any, str]] = field(default_factory=list)
    records: dict[str, Any] = field(default_factory=dict)
    #: clusters whose alert group incident records ask to arm, with those records' ids
    arms: dict[str, tuple[ClusterRef, list[str]]] = field(default_factory=dict)


def read_records(records: Sequence[Any], *, from_item: Callable[..., StoredFinding]) -> StreamRead:
    """Read every record on its own with Powertools' stream-record model (images come back as plain
    values); one damaged record is set aside with its reason, never raised.

    ``from_item`` turns a plain item into a finding.
    """
    read = StreamRead()
    for raw in records:
        rid = record_id(raw)
        if not rid:
            read.orphans.append((raw, "the record has no dynamodb.SequenceNumber string"))
            continue
        read.records[rid] = raw
        try:
            images = parse_stream_record(raw).dynamodb
            new, old = _image(images.NewImage), _image(images.OldImage)
            ref = armed_cluster(new, old)
            if ref is not None:
                read.arms.setdefault(ref.cluster_arn, (ref, []))[1].append(rid)
                continue
            change = change_of(rid, new, old, from_item)
            if change is not None:  # an item the store could not have written cannot be told: set aside here
                finding_event.entry(finding_event.detail_of(change.kind, change.at, change.finding), "-")
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
