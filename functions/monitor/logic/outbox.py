"""The outbox: one rendered message per channel, and the courier's one attempt with its backoff."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from hyperpod_debugger.domain.redact import redact

if TYPE_CHECKING:
    from functions.monitor.logic.alerts import Delivery, Message
    from hyperpod_debugger.notify.policy import Batch

#: Channels in the order they are queued for one message (email first: it never waits for Slack; the
#: findings' events last). "events": the finding events on EventBridge, ten per message (one PutEvents).
CHANNELS = ("sns", "slack", "chatbot", "events")
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
        if channel == "chatbot" and not isinstance(data.get("body"), str):
            raise ValueError("a chat notification without its body")
        events = data.get("events") or []
        if channel == "events":
            _check_events(events)
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


def _check_events(events: Any) -> None:
    # Imported here: the finding events' module (and the finding model it reads) only where events are read.
    from hyperpod_debugger.notify.finding_event import MAX_ENTRIES

    if not (
        isinstance(events, list)
        and 0 < len(events) <= MAX_ENTRIES
        and all(isinstance(e, dict) and isinstance(e.get("Detail"), str) for e in events)
    ):
        raise ValueError(f"finding events must be 1 to {MAX_ENTRIES} PutEvents entries")


def message_id(channel: str, record_ids: Sequence[str]) -> str:
    digest = hashlib.sha256("\x1f".join([channel, *sorted(record_ids)]).encode()).hexdigest()
    return digest[:64]


def event_parts(record_ids: Sequence[str]) -> list[list[str]]:
    """The record ids of each "events" message of one delivery (ten changes per PutEvents)."""
    from hyperpod_debugger.notify.finding_event import chunks  # only the notifier queues events

    return chunks(list(record_ids))


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
                subject=message.subject if channel in ("sns", "chatbot") else None,
                body=message.body if channel in ("sns", "chatbot") else None,
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
    The message is redacted (:func:`~hyperpod_debugger.domain.redact.redact`) when the error is made: it
    becomes a dead-letter reason and a log line, and a proxy or Slack error can echo a webhook's path.
    """

    def __init__(self, message: str, *, permanent: bool = False, retry_after: float | None = None) -> None:
        super().__init__(redact(message))
        self.permanent = permanent
        self.retry_after = retry_after


class Channels(Protocol):
    """Where messages go; a method raises :class:`ChannelError` when its delivery failed."""

    def slack(self, payload: dict[str, Any]) -> None: ...

    def email(self, subject: str, body: str) -> None: ...

    def events(self, entries: Sequence[dict[str, Any]]) -> None: ...

    def chat(self, notification: str) -> None:
        """An Amazon Q Developer custom notification (its JSON) on the chat topic."""


def send(message: OutboxMessage, channels: Channels) -> None:
    """Send one outbox message on its channel (one attempt: the queue does the retrying)."""
    if message.channel == "slack":
        channels.slack(message.slack or {})
    elif message.channel == "events":
        channels.events(message.events)
    elif message.channel == "chatbot":
        channels.chat(message.body or "")
    elif message.channel == "sns":
        channels.email(message.subject or "", message.body or "")
    else:
        raise ChannelError(f"unknown channel {message.channel!r}", permanent=True)


def retry_delay(receive_count: int, retry_after: float | None, *, base: int = 60, cap: int = 900) -> int:
    """Seconds before a failed message is tried again: the channel's own Retry-After when it gave one,
    else exponential from ``base`` up to ``cap`` by how often the queue has handed it out."""
    if retry_after is not None and retry_after >= 0:
        return math.ceil(min(max(retry_after, 1), 12 * 3600))  # never back before the channel said
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


def alert_message(batch: Batch, message: Message, *, now: datetime) -> OutboxMessage:
    """One incident message (what one flush of a cluster's alert group tells one channel) as it waits in the
    outbox: its id is stable for the same pending transitions on the same channel."""
    channel = batch.channel
    # one digest of what it covers (a group of thousands of transitions would not fit a queue message)
    covered = hashlib.sha256("\x1f".join([batch.cluster_arn, *batch.entries]).encode()).hexdigest()[:32]
    records = (f"{batch.kind}#{covered}",)
    return OutboxMessage(
        id=message_id(channel, records),
        channel=channel,
        group=batch.cluster_arn,
        key=f"{batch.kind}:{batch.cluster_arn}",
        kind=batch.kind,
        records=records,
        created_at=now.isoformat(),
        slack=message.slack if channel == "slack" else None,
        subject=message.subject if channel in ("sns", "chatbot") else None,
        body=message.body if channel in ("sns", "chatbot") else None,
    )


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
    """Not tried in this invocation (no time left, its channel is down or held, or its slot on the channel's
    lane is past the invocation): retried later."""


@dataclass(frozen=True)
class Lane:
    """The shared send schedule of one paced channel (one Slack webhook), in epoch seconds.

    ``due``: when the next send is due at the steady pace (a GCRA's theoretical arrival time: each send
    moves it one interval on); ``blocked_until``: the channel said to wait until then (Slack's 429
    Retry-After), and nobody sends before.
    """

    due: float = 0.0
    blocked_until: float = 0.0


@dataclass(frozen=True)
class Pace:
    """A channel's documented rate: one message per ``interval_s``, ``burst`` at once after a quiet spell.

    Slack's incoming webhooks: about one message a second per webhook, short bursts allowed.
    """

    interval_s: float = 1.0
    burst: int = 3

    @property
    def tolerance_s(self) -> float:
        """How far ahead of the steady pace a send may go (the burst)."""
        return self.interval_s * (max(self.burst, 1) - 1)

    def next_slot(self, lane: Lane, now: float) -> tuple[float, Lane]:
        """When the next send may start at ``now``, and the lane once that slot is taken."""
        at = max(now, lane.due - self.tolerance_s, lane.blocked_until)
        return at, Lane(due=max(lane.due, at) + self.interval_s, blocked_until=lane.blocked_until)

    def blocked(self, lane: Lane, until: float) -> Lane:
        """The lane once the channel said to wait until ``until``: nobody sends before, and after it the
        sends start one interval apart (no burst: the channel has just said it is full)."""
        if until <= lane.blocked_until:
            return lane
        return Lane(due=max(lane.due, until + self.tolerance_s), blocked_until=until)


#: The paced channels: Slack's incoming webhooks. A channel not named here (email, events, an SNS-published
#: chat channel) is never paced; a new channel with a documented rate adds its :class:`Pace` here.
PACES: dict[str, Pace] = {"slack": Pace()}


@dataclass(frozen=True)
class Slot:
    """A send slot on a lane: ``at`` (epoch seconds); ``reserved`` False when it starts too late to take."""

    at: float
    reserved: bool


class Lanes(Protocol):
    """The paced channels' lanes, shared by every courier (a lane per webhook)."""

    def reserve(self, lane: str, pace: Pace, *, now: float, within_s: float) -> Slot:
        """Take the lane's next slot when it starts within ``within_s`` of ``now``; a later one is returned
        untaken (the message waits that long in the queue instead)."""

    def block(self, lane: str, pace: Pace, *, until: float) -> None:
        """Nobody sends on the lane before ``until``."""


class LocalLanes:
    """Lanes this process alone keeps (no shared store, or the shared one is unavailable)."""

    def __init__(self) -> None:
        self.lanes: dict[str, Lane] = {}

    def reserve(self, lane: str, pace: Pace, *, now: float, within_s: float) -> Slot:
        at, after = pace.next_slot(self.lanes.get(lane, Lane()), now)
        if at - now > within_s:
            return Slot(at, reserved=False)
        self.lanes[lane] = after
        return Slot(at, reserved=True)

    def block(self, lane: str, pace: Pace, *, until: float) -> None:
        self.lanes[lane] = pace.blocked(self.lanes.get(lane, Lane()), until)


class CourierPorts(Protocol):
    """What the courier acts on: the channels, the queue's backoff and dead letters, and the clock."""

    def send(self, message: OutboxMessage) -> None: ...

    def backoff(self, receipt_handle: str, seconds: int) -> None: ...

    def dead_letter(self, body: str, *, group: str, dedup: str, reason: str) -> None: ...

    def remaining_s(self) -> float: ...

    def now(self) -> float:
        """Epoch seconds (the lanes are shared between hosts: a wall clock, not a monotonic one)."""

    def sleep(self, seconds: float) -> None: ...

    def lane(self, channel: str) -> str | None:
        """The lane a paced channel's messages share (a Slack webhook), or None: not paced. Raises
        :class:`ChannelError` when the channel cannot say (its webhook secret cannot be read)."""


def _seconds(delay: float) -> int:
    """A wait as a visibility timeout: whole seconds, at least one, never rounded down."""
    return max(1, math.ceil(delay - 1e-6))


@dataclass
class Courier:
    """One invocation's deliveries: :meth:`deliver` per record (raises to leave it in the queue), then
    :meth:`hold_back` for the records the batch processor failed without calling it.

    * a message already sent (the ledger says so) is not sent again;
    * a paced channel's message (Slack) waits for its slot on the channel's lane, which every courier
      shares: it sleeps until the slot when that leaves ``needed_s``, else it waits in the queue as long
      as the slot is away (not the exponential schedule);
    * when the channel says how long to wait (Slack's 429 Retry-After), nobody sends on its lane before
      then: this message and every later one of the channel wait out what is left of it;
    * another failure keeps the message in the queue for a backoff (doubling from ``base`` to ``cap``);
    * the messages held back behind a waiting one in its group wait as long, so the group comes back
      whole (a FIFO group is blocked while any of it is in flight);
    * a message its channel refuses as such goes to the dead-letter queue at once, not blocking its group;
    * once a channel failed or is full, its other messages wait untried (other channels go on), and none
      is tried without ``needed_s`` left.
    """

    ports: CourierPorts
    ledger: Ledger
    needed_s: float
    base: int = 60
    cap: int = 900
    lanes: Lanes = field(default_factory=LocalLanes)
    paces: Mapping[str, Pace] = field(default_factory=lambda: dict(PACES))
    down: dict[str, str] = field(default_factory=dict)
    #: channel -> epoch seconds it is held until (its lane's next free slot, or its Retry-After)
    held: dict[str, float] = field(default_factory=dict)
    group_delay: dict[str, int] = field(default_factory=dict)
    backed_off: set[str] = field(default_factory=set)
    sent: list[OutboxMessage] = field(default_factory=list)
    dead: list[tuple[str, str]] = field(default_factory=list)  # (delivery key or message id, reason)
    failures: list[tuple[OutboxMessage, str]] = field(default_factory=list)
    #: messages left for their channel's pace: (message, seconds it waits)
    paced: list[tuple[OutboxMessage, int]] = field(default_factory=list)
    #: seconds slept waiting for slots, per channel
    waited: dict[str, float] = field(default_factory=dict)

    def _wait_in_queue(self, record: OutboxRecord, delay: int) -> None:
        self.ports.backoff(record.receipt_handle, delay)
        self.backed_off.add(record.message_id)
        self.group_delay[record.group] = max(self.group_delay.get(record.group, 0), delay)

    def _retry_later(self, record: OutboxRecord, retry_after: float | None) -> int:
        delay = retry_delay(record.receive_count, retry_after, base=self.base, cap=self.cap)
        self._wait_in_queue(record, delay)
        return delay

    def deliver(self, record: OutboxRecord) -> None:
        try:
            item = OutboxMessage.from_json(record.body)
        except ValueError as exc:
            reason = redact(f"not an outbox message: {exc}")
            self.ports.dead_letter(record.body, group=record.group or "-", dedup=record.message_id, reason=reason)
            self.dead.append((record.message_id, reason))
            return
        if self.ledger.done(f"sent#{item.id}"):
            return
        self._still_held(record, item.channel)
        if item.channel in self.down:
            self._retry_later(record, None)
            raise NotAttempted(f"{item.channel} failed earlier in this invocation: {self.down[item.channel]}")
        if self.ports.remaining_s() < self.needed_s:
            raise NotAttempted("not enough time left in this invocation")
        pace = self.paces.get(item.channel)
        lane: str | None = None
        try:
            lane = self.ports.lane(item.channel) if pace is not None else None
            if pace is not None and lane is not None:
                self._take_slot(record, item, lane, pace)
            self.ports.send(item)
        except ChannelError as exc:
            if exc.permanent:
                self.ports.dead_letter(record.body, group=record.group or item.group, dedup=item.id, reason=str(exc))
                self.dead.append((item.key, str(exc)))
                return
            self._failed(record, item, exc, lane, pace)
            raise
        self.ledger.mark([f"sent#{item.id}"])
        self.sent.append(item)

    def _still_held(self, record: OutboxRecord, channel: str) -> None:
        """Raise :class:`NotAttempted`, the message waiting out the hold, while its channel is held."""
        until = self.held.get(channel)
        if until is None:
            return
        now = self.ports.now()
        if until <= now and channel not in self.down:
            del self.held[channel]  # the lane's slot has come: ask the lane again
            return
        delay = _seconds(until - now)
        self._wait_in_queue(record, delay)
        raise NotAttempted(f"{channel} is held for {delay} s: {self.down.get(channel, 'waiting for its slot')}")

    def _take_slot(self, record: OutboxRecord, item: OutboxMessage, lane: str, pace: Pace) -> None:
        """Sleep until the lane's next slot, or leave the message in the queue until then."""
        slot = self.lanes.reserve(lane, pace, now=self.ports.now(), within_s=self.ports.remaining_s() - self.needed_s)
        now = self.ports.now()  # the shared lane took a round trip: a slow one may have used the margin
        if not slot.reserved or self.ports.remaining_s() - max(slot.at - now, 0.0) < self.needed_s:
            self.held[item.channel] = max(slot.at, now)
            delay = _seconds(slot.at - now)
            self._wait_in_queue(record, delay)
            self.paced.append((item, delay))
            raise NotAttempted(f"{item.channel}: the next slot is {delay} s away, past this invocation")
        if slot.at > now:
            self.ports.sleep(slot.at - now)
            self.waited[item.channel] = self.waited.get(item.channel, 0.0) + (slot.at - now)

    def _failed(
        self, record: OutboxRecord, item: OutboxMessage, exc: ChannelError, lane: str | None, pace: Pace | None
    ) -> None:
        """A failure that may pass: the message waits (the channel's Retry-After, shared on its lane when it
        has one, else the exponential schedule) and the channel's other messages wait with it."""
        told = exc.retry_after is not None and exc.retry_after >= 0
        until = self.ports.now() + (exc.retry_after or 0.0)
        if told and lane is not None and pace is not None:
            # every courier's next slot on the lane is after the block: the later messages ask the lane
            self.lanes.block(lane, pace, until=until)
        else:
            self.down[item.channel] = str(exc)
            if told:
                self.held[item.channel] = until
        self._retry_later(record, exc.retry_after)
        self.failures.append((item, str(exc)))

    def hold_back(self, records: Sequence[OutboxRecord], failed: set[str]) -> None:
        """Give the failed records of a backed-off group the same backoff as its head."""
        for record in records:
            if record.message_id in failed and record.message_id not in self.backed_off:
                delay = self.group_delay.get(record.group)
                if delay is not None:
                    self.ports.backoff(record.receipt_handle, delay)
