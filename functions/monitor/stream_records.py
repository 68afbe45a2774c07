"""The findings table's stream records, read at the edge: each record of a batch becomes one typed
:class:`~functions.monitor.logic.stream.StreamItem` (a finding transition to tell, an incident that arms its
cluster's alert group, nothing, or the reason it cannot be read), so the notifier's logic never sees a raw
record.

Records are read with Powertools' stream-record model (:class:`StreamRecord`: images come back as plain
values). One damaged record is set aside with its reason, never raised.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.shared.dynamodb_deserializer import TypeDeserializer
from aws_lambda_powertools.utilities.parser.models import DynamoDBStreamChangedRecordModel, DynamoDBStreamRecordModel
from pydantic import ValidationError, field_validator

from functions.monitor.logic.alerts import ClusterRef, StreamChange
from functions.monitor.logic.stream import StreamItem
from functions.shared.odd_input import stream_sequence_number
from hyperpod_debugger.domain.validate import region_of_arn
from hyperpod_debugger.lifecycle.findings import NOTIFYING, StoredFinding, TransitionKind
from hyperpod_debugger.notify import finding_event
from hyperpod_debugger.store.findings import from_item as stored_finding

#: Why a record without a sequence number is set aside (it cannot even be reported as failed).
NO_SEQUENCE_NUMBER = "the record has no dynamodb.SequenceNumber string"

_DESERIALIZER = TypeDeserializer()


class StreamImages(DynamoDBStreamChangedRecordModel):
    """Powertools' model of a record's ``dynamodb`` part, with the images read into plain values.

    The parent's validator assumes a map; here an image that is not one, or an attribute value
    DynamoDB could not have written, is a validation error with its reason (the record is set aside).
    """

    @field_validator("Keys", "NewImage", "OldImage", mode="before")
    @classmethod
    def deserialize_field(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, dict):
            raise ValueError(f"is a {type(value).__name__}, not a map")
        try:
            return {key: _DESERIALIZER.deserialize(typed) for key, typed in value.items()}
        except (TypeError, ValueError, AttributeError, KeyError, ArithmeticError) as exc:
            raise ValueError(f"an attribute is not a DynamoDB value ({type(exc).__name__})") from None


class StreamRecord(DynamoDBStreamRecordModel):
    """One DynamoDB stream record, as Lambda's event source delivers it."""

    dynamodb: StreamImages


def parse_stream_record(raw: Any) -> StreamRecord:
    """Raises ``pydantic.ValidationError`` for a record that is not a DynamoDB stream record."""
    return StreamRecord.model_validate(raw)


def records_of(event: Any) -> list[Any]:
    """The records of a stream event (``{"Records": [...]}``), whatever they are; none when it has no list."""
    raw = event.get("Records") if isinstance(event, dict) else None
    return list(raw) if isinstance(raw, list) else []


def record_id(raw: Any) -> str:
    """A stream record's sequence number (what a partial batch response names), or "" when it has none a
    response could name (missing, blank, or not a string: Lambda would not find it in the batch)."""
    sequence = stream_sequence_number(raw)
    return sequence if sequence.strip() else ""


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


def read_record(raw: Any, rid: str, *, from_item: Callable[..., StoredFinding] = stored_finding) -> StreamItem:
    """One record with a sequence number, read; a damaged one is an item with the reason, never raised."""
    try:
        images = parse_stream_record(raw).dynamodb
        new, old = _image(images.NewImage), _image(images.OldImage)
        ref = armed_cluster(new, old)
        if ref is not None:
            return StreamItem(rid, arms=ref)
        change = change_of(rid, new, old, from_item)
        if change is not None:  # an item the store could not have written cannot be told: set aside here
            finding_event.entry(finding_event.detail_of(change.kind, change.at, change.finding), "-")
    except ValidationError as exc:
        return StreamItem(rid, unreadable=_reason(exc), content=raw)
    except Exception as exc:  # noqa: BLE001 - one damaged record is kept aside; it never fails the batch
        return StreamItem(rid, unreadable=f"{type(exc).__name__}: {exc}"[:300], content=raw)
    return StreamItem(rid, change=change)


@dataclass
class StreamRead:
    """One batch of stream records, read: each record with a sequence number as an item (by id, in stream
    order), and the records without one (which cannot even be reported as failed), with why."""

    items: dict[str, StreamItem] = field(default_factory=dict)
    orphans: list[tuple[Any, str]] = field(default_factory=list)
    #: the records as they came, by id (what a partial response covers)
    records: dict[str, Any] = field(default_factory=dict)

    @property
    def changes(self) -> list[StreamChange]:
        """The notifying transitions, in stream order."""
        return [item.change for item in self.items.values() if item.change is not None]

    @property
    def unreadable(self) -> dict[str, str]:
        """Record id → why it cannot be read."""
        return {rid: item.unreadable for rid, item in self.items.items() if item.unreadable is not None}


def read_records(records: Sequence[Any], *, from_item: Callable[..., StoredFinding] = stored_finding) -> StreamRead:
    """Read every record on its own (``from_item`` turns a plain item into a finding)."""
    read = StreamRead()
    for raw in records:
        rid = record_id(raw)
        if not rid:
            read.orphans.append((raw, NO_SEQUENCE_NUMBER))
            continue
        read.records[rid] = raw
        read.items[rid] = read_record(raw, rid, from_item=from_item)
    return read


def _image(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) and value else None


def _reason(exc: ValidationError) -> str:
    # Where and what, never the input value (an image may hold anything).
    parts = [f"{'.'.join(str(p) for p in e['loc']) or 'record'}: {e['msg']}" for e in exc.errors()[:3]]
    return "; ".join(parts)[:300]
