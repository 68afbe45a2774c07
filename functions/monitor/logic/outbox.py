"""The outbox: one rendered message per channel, and the courier's one attempt with its backoff."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from functions.monitor.logic.alerts import Delivery, Message
from hyperpod_debugger.notify import finding_event

#: Channels in the order they are queued for one message (email first: it never waits for Slack; the
#: findings' events last). "events": the finding events on EventBridge, ten per message (one PutEvents).
CHANNELS = ("sns", "slack", "events")
OUTBOX_VERSION = 1


@dataclass(frozen=True)
class OutboxMessage:
    """One rendered message for one channel, as it waits in the outbox queue.

    ``id`` is stable for the same records on the same channel: it is the queue's deduplication id and
    the delivery ledger's key, so a record read twice from the stream is queued once and sent once.
    ``group`` (the cluster) orders the queue: a message that waits holds back the later ones of its
    cluster on its channel, so Slack never shows "New" after "Resolved" for one finding.
    """

    id: str
    channel: str
    group: str
    key: str
    kind: str
    records: tuple[str, ...]
    created_at: str
    slack: dict[str, Any] | None = None
    subject: str | None = None
    body: str | None = None
    #: PutEvents entries (the "events" channel): at most ten, each for one of ``records``
    events: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> str:
        return json.dumps(
            {
                "v": OUTBOX_VERSION,
                "id": self.id,
                "channel": self.channel,
                "group": self.group,
                "key": self.key,
                "kind": self.kind,
                "records": list(self.records),
                "created_at": self.created_at,
                "slack": self.slack,
                "subject": self.subject,
                "body": self.body,
                "events": list(self.events),
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> OutboxMessage:
        """Raises ``ValueError`` naming what is wrong with a body that is not an outbox message."""
        try:
            data = json.loads(text)
        except (TypeError, ValueError):
            raise ValueError("the body is not JSON") from None
        if not isinstance(data, dict) or data.get("v") != OUTBOX_VERSION:
            raise ValueError(f"not an outbox message of version {OUTBOX_VERSION}")
        channel = data.get("channel")
        if channel not in CHANNELS:
            raise ValueError(f"unknown channel {channel!r}")
        for name in ("id", "group", "key", "kind", "created_at"):
            if not isinstance(data.get(name), str) or not data[name]:
                raise ValueError(f"{name} is missing")
        records = data.get("records")
        if not isinstance(records, list) or not all(isinstance(r, str) for r in records):
            raise ValueError("records is not a list of record ids")
        if channel == "slack" and not isinstance(data.get("slack"), dict):
            raise ValueError("a Slack message without its payload")
        if channel == "sns" and not (isinstance(data.get("subject"), str) and isinstance(data.get("body"), str)):
            raise ValueError("an email without its subject and body")
        events = data.get("events") or []
        if channel == "events" and not (
            isinstance(events, list)
            and 0 < len(events) <= finding_event.MAX_ENTRIES
            and all(isinstance(e, dict) and isinstance(e.get("Detail"), str) for e in events)
        ):
            raise ValueError(f"finding events must be 1 to {finding_event.MAX_ENTRIES} PutEvents entries")
        return cls(
            id=data["id"],
            channel=channel,
            group=data["group"],
            key=data["key"],
            kind=data["kind"],
            records=tuple(records),
            created_at=data["created_at"],
            slack=data.get("slack"),
            subject=data.get("subject"),
            body=data.get("body"),
            events=tuple(events) if channel == "events" else (),
        )


def message_id(channel: str, record_ids: Sequence[str]) -> str:
    digest = hashlib.sha256("\x1f".join([channel, *sorted(record_ids)]).encode()).hexdigest()
    return digest[:64]


def event_parts(record_ids: Sequence[str]) -> list[list[str]]:
    """The record ids of each "events" message of one delivery (ten changes per PutEvents)."""
    return finding_event.chunks(list(record_ids))


def outbox_messages(
    delivery: Delivery, message: Message, *, channels: Sequence[str], now: datetime
) -> list[OutboxMessage]:
    """One outbox message per configured channel for one delivery (the events channel: one per ten changes)."""
    group = delivery.changes[0].finding.cluster_arn if delivery.changes else "-"
    out = []
    for channel in (c for c in CHANNELS if c in channels):
        if channel == "events":
            out.extend(_event_messages(delivery, message, group, now))
            continue
        out.append(
            OutboxMessage(
                id=message_id(channel, delivery.record_ids),
                channel=channel,
                group=group,
                key=delivery.key,
                kind=delivery.kind,
                records=tuple(delivery.record_ids),
                created_at=now.isoformat(),
                slack=message.slack if channel == "slack" else None,
                subject=message.subject if channel == "sns" else None,
                body=message.body if channel == "sns" else None,
            )
        )
    return out


def _event_messages(delivery: Delivery, message: Message, group: str, now: datetime) -> list[OutboxMessage]:
    if len(message.events) != len(delivery.changes):
        return []  # rendered without a bus: nothing to put
    entries = dict(zip(delivery.record_ids, message.events, strict=True))
    return [
        OutboxMessage(
            id=message_id("events", part),
            channel="events",
            group=group,
            key=delivery.key,
            kind=delivery.kind,
            records=tuple(part),
            created_at=now.isoformat(),
            events=tuple(entries[r] for r in part),
        )
        for part in event_parts(delivery.record_ids)
    ]


class ChannelError(Exception):
    """A channel could not deliver (adapters translate their SDK / HTTP errors into this).

    ``permanent``: sending the same message again cannot succeed (Slack refused the payload, the
    webhook is gone): it goes to the dead-letter queue at once instead of holding back its group.
    ``retry_after``: the channel said when to come back (Slack's 429 Retry-After), in seconds.
    """

    def __init__(self, message: str, *, permanent: bool = False, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.retry_after = retry_after


class Channels(Protocol):
    """Where messages go; a method raises :class:`ChannelError` when its delivery failed."""

    def slack(self, payload: dict[str, Any]) -> None: ...

    def email(self, subject: str, body: str) -> None: ...

    def events(self, entries: Sequence[dict[str, Any]]) -> None: ...


def send(message: OutboxMessage, channels: Channels) -> None:
    """Send one outbox message on its channel (one attempt: the queue does the retrying)."""
    if message.channel == "slack":
        channels.slack(message.slack or {})
    elif message.channel == "events":
        channels.events(message.events)
    else:
        channels.email(message.subject or "", message.body or "")


def retry_delay(receive_count: int, retry_after: float | None, *, base: int = 60, cap: int = 900) -> int:
    """Seconds before a failed message is tried again: the channel's own Retry-After when it gave one,
    else exponential from ``base`` up to ``cap`` by how often the queue has handed it out."""
    if retry_after is not None and retry_after >= 0:
        return int(min(max(retry_after, 1), 12 * 3600))
    attempts = max(receive_count, 1)
    return int(min(base * 2 ** min(attempts - 1, 20), cap))


class Ledger(Protocol):
    """Keys of what was already done (``queued#<id>``, ``sent#<id>``), so a retry does not do it twice."""

    def load(self, keys: Sequence[str]) -> None:
        """Read ahead what these keys say (one batch read instead of one read per message)."""

    def done(self, key: str) -> bool: ...

    def mark(self, keys: Sequence[str]) -> None: ...


class NoLedger:
    """Remembers nothing: every attempt acts again (the queue's deduplication still holds for 5 minutes)."""

    def load(self, keys: Sequence[str]) -> None:
        return None

    def done(self, key: str) -> bool:
        return False

    def mark(self, keys: Sequence[str]) -> None:
        return None


# --------------------------------------------------------------------------- queueing


class OutboxPort(Protocol):
    """Where rendered messages wait for the courier; ``put`` raises :class:`ChannelError` when refused."""

    def put(self, message: OutboxMessage) -> None: ...


@dataclass
class QueueResult:
    failed: set[str] = field(default_factory=set)  # stream record ids to report as failed
    queued: int = 0
    refused: list[tuple[str, str]] = field(default_factory=list)  # (delivery key, error)


def queue_transitions(
    deliveries: Sequence[Delivery],
    *,
    outbox: OutboxPort,
    ledger: Ledger,
    channels: Sequence[str],
    render: Callable[[Delivery], Message],
    now: datetime,
) -> QueueResult:
    """Render every delivery and queue one message per channel in the outbox, in stream order.

    Once a message of a cluster could not be queued, the later deliveries of that cluster are not queued
    either (their records fail with it), so the outbox never holds a later transition of a finding
    without the earlier one. A message the ledger says was queued already is not queued again.
    """
    result = QueueResult()
    held: set[str] = set()
    for delivery in deliveries:
        cluster = delivery.changes[0].finding.cluster_arn
        if cluster in held:
            result.failed.update(delivery.record_ids)
            continue
        try:
            for item in outbox_messages(delivery, render(delivery), channels=channels, now=now):
                if ledger.done(f"queued#{item.id}"):
                    continue
                outbox.put(item)
                ledger.mark([f"queued#{item.id}"])
                result.queued += 1
        except ChannelError as exc:
            held.add(cluster)
            result.failed.update(delivery.record_ids)
            result.refused.append((delivery.key, str(exc)))
    return result


def message_id_of(body: Any) -> str:
    """The outbox message id a queue message's body carries (the ledger's key), or, for a body that is
    not an outbox message, a hash of it (so even a foreign body has a stable key)."""
    try:
        return OutboxMessage.from_json(str(body)).id
    except ValueError:
        return hashlib.sha256(str(body).encode()).hexdigest()[:64]


def queued_ids(deliveries: Sequence[Delivery], channels: Sequence[str]) -> list[str]:
    """The ledger keys of every message these deliveries would queue."""
    keys: list[str] = []
    for d in deliveries:
        for c in (c for c in CHANNELS if c in channels):
            parts = event_parts(d.record_ids) if c == "events" else [d.record_ids]
            keys.extend(f"queued#{message_id(c, part)}" for part in parts)
    return keys


# --------------------------------------------------------------------------- the courier


@dataclass(frozen=True)
class OutboxRecord:
    """One message as the outbox's event source hands it over."""

    message_id: str
    body: str
    receipt_handle: str
    group: str
    receive_count: int = 1


class NotAttempted(Exception):
    """Not tried in this invocation (no time left, or its channel is down right now): retried later."""


class CourierPorts(Protocol):
    """What the courier acts on: the channels, the queue's backoff and dead letters, and the clock."""

    def send(self, message: OutboxMessage) -> None: ...

    def backoff(self, receipt_handle: str, seconds: int) -> None: ...

    def dead_letter(self, body: str, *, group: str, dedup: str, reason: str) -> None: ...

    def remaining_s(self) -> float: ...


@dataclass
class Courier:
    """One invocation's deliveries: :meth:`deliver` per record (raises to leave it in the queue), then
    :meth:`hold_back` for the records the batch processor failed without calling it.

    * a message already sent (the ledger says so) is not sent again;
    * a failure keeps the message in the queue for a backoff (the channel's Retry-After, else doubling
      from ``base`` to ``cap``), and the messages held back behind it in its group wait as long, so the
      group comes back whole (a FIFO group is blocked while any of it is in flight);
    * a message its channel refuses as such goes to the dead-letter queue at once, not blocking its group;
    * once a channel failed, its other messages wait untried, and none is tried without ``needed_s`` left.
    """

    ports: CourierPorts
    ledger: Ledger
    needed_s: float
    base: int = 60
    cap: int = 900
    down: dict[str, str] = field(default_factory=dict)
    group_delay: dict[str, int] = field(default_factory=dict)
    backed_off: set[str] = field(default_factory=set)
    sent: list[OutboxMessage] = field(default_factory=list)
    dead: list[tuple[str, str]] = field(default_factory=list)  # (delivery key or message id, reason)
    failures: list[tuple[OutboxMessage, str]] = field(default_factory=list)

    def _retry_later(self, record: OutboxRecord, retry_after: float | None) -> None:
        delay = retry_delay(record.receive_count, retry_after, base=self.base, cap=self.cap)
        self.ports.backoff(record.receipt_handle, delay)
        self.backed_off.add(record.message_id)
        self.group_delay[record.group] = max(self.group_delay.get(record.group, 0), delay)

    def deliver(self, record: OutboxRecord) -> None:
        try:
            item = OutboxMessage.from_json(record.body)
        except ValueError as exc:
            reason = f"not an outbox message: {exc}"
            self.ports.dead_letter(record.body, group=record.group or "-", dedup=record.message_id, reason=reason)
            self.dead.append((record.message_id, reason))
            return
        if self.ledger.done(f"sent#{item.id}"):
            return
        if item.channel in self.down:
            self._retry_later(record, None)
            raise NotAttempted(f"{item.channel} failed earlier in this invocation: {self.down[item.channel]}")
        if self.ports.remaining_s() < self.needed_s:
            raise NotAttempted("not enough time left in this invocation")
        try:
            self.ports.send(item)
        except ChannelError as exc:
            if exc.permanent:
                self.ports.dead_letter(record.body, group=record.group or item.group, dedup=item.id, reason=str(exc))
                self.dead.append((item.key, str(exc)))
                return
            self.down[item.channel] = str(exc)
            self._retry_later(record, exc.retry_after)
            self.failures.append((item, str(exc)))
            raise
        self.ledger.mark([f"sent#{item.id}"])
        self.sent.append(item)

    def hold_back(self, records: Sequence[OutboxRecord], failed: set[str]) -> None:
        """Give the failed records of a backed-off group the same backoff as its head."""
        for record in records:
            if record.message_id in failed and record.message_id not in self.backed_off:
                delay = self.group_delay.get(record.group)
                if delay is not None:
                    self.ports.backoff(record.receipt_handle, delay)
