"""The notifier: one batch of the findings table's stream records → finding events in the outbox, and the alert
groups of the clusters whose incidents changed armed.

People are told of incidents, not findings: an incident record with transitions to tell arms its cluster's
alert group (:mod:`functions.monitor.logic.alert_groups`), which flushes them a few seconds later, grouped.
What fails is named by record id, so the stream retries exactly those records and nothing else.

A batch runs in two steps (Powertools' batch processor drives them, ``handlers.stream``): :meth:`Notifier.plan`
takes the steps across records once (one delivery of finding events per cluster, ten per message, read ahead
in the ledger), then :meth:`Notifier.notify` handles each record in stream order and raises for one the stream
must retry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from functions.monitor.logic import alerts, outbox
from hyperpod_debugger.lifecycle.findings import TransitionKind
from hyperpod_debugger.notify import finding_event
from hyperpod_debugger.notify.stored import cluster_label


class SetAside(Protocol):
    def __call__(self, raw: Any, reason: str, /) -> bool:
        """Keep an unreadable record for inspection: True when kept, False when there is nowhere to keep
        it; raises ``RuntimeError`` when the place refused it."""
        ...


@dataclass(frozen=True)
class StreamItem:
    """One stream record, read: the finding transition it tells, the cluster whose alert group it arms, or
    neither; or why it cannot be read (``content``: the record as it came, kept aside whole)."""

    record_id: str
    change: alerts.StreamChange | None = None
    arms: alerts.ClusterRef | None = None
    unreadable: str | None = None
    content: Any = None


@dataclass(frozen=True)
class Unreadable:
    record_id: str  # "" when the record has no sequence number
    reason: str
    kept: bool
    error: str = ""  # why it could not be kept, when it could not


@dataclass
class NotifyResult:
    #: Stream record ids reported as failed: the stream retries them.
    failed: set[str] = field(default_factory=set)
    unreadable: list[Unreadable] = field(default_factory=list)
    deliveries: int = 0
    queued: int = 0
    refused: list[tuple[str, str]] = field(default_factory=list)  # (delivery key, error)
    #: cluster → what arming its alert group said; (cluster, error) where it could not be armed
    armed: dict[str, Any] = field(default_factory=dict)
    arm_errors: list[tuple[str, str]] = field(default_factory=list)


class NotQueued(RuntimeError):
    """The record's part was not done (its message refused, its group not armed, or, unreadable, it could not
    be kept): it fails, and the stream retries it."""


def resolutions(changes: Sequence[alerts.StreamChange], failed: set[str]) -> list[tuple[str, float]]:
    """How long each resolved finding was open, by cluster, leaving out records the stream will retry (they
    are counted when they go through)."""
    out = []
    for change in changes:
        if change.kind is not TransitionKind.RESOLVED or change.record_id in failed:
            continue
        seconds = finding_event.open_seconds(change.finding, change.at)
        if seconds is not None:
            out.append((cluster_label(change.finding.cluster_arn, change.finding.cluster_name), seconds))
    return out


@dataclass
class Notifier:
    """One batch's notifications: :meth:`plan` the batch, then :meth:`notify` each record in stream order.

    * an unreadable record is kept aside with its reason and never fails (unless it could not be kept);
    * the finding events of one cluster's changes are one delivery, queued when its first record comes;
      once a message of a cluster was refused, that cluster's later change records wait (they fail with
      it), so the outbox never holds a later transition of a finding without the earlier one;
    * the first incident record of a cluster arms its alert group; when it cannot be armed, every record
      that asked fails and the stream retries them.
    """

    queue: outbox.OutboxPort
    ledger: outbox.Ledger
    channels: Sequence[str]
    render: Callable[[alerts.Delivery], alerts.Message]
    arm: Callable[[alerts.ClusterRef], Any]
    set_aside: SetAside
    now: datetime
    result: NotifyResult = field(default_factory=NotifyResult, init=False)
    _changes: list[alerts.StreamChange] = field(default_factory=list, init=False, repr=False)
    #: record id → the delivery its change travels in ("events" channel only)
    _delivery_of: dict[str, alerts.Delivery] = field(default_factory=dict, init=False, repr=False)
    _delivered: set[str] = field(default_factory=set, init=False, repr=False)  # keys of the deliveries tried
    _held: set[str] = field(default_factory=set, init=False, repr=False)  # clusters whose message the outbox refused
    #: cluster → the ids of the records that ask to arm its group
    _arming: dict[str, list[str]] = field(default_factory=dict, init=False, repr=False)
    _armed: set[str] = field(default_factory=set, init=False, repr=False)  # clusters whose group arming was tried

    def keep_unnamed(self, records: Sequence[tuple[Any, str]]) -> None:
        """Set aside records without a sequence number (nothing could retry them: an error is reported)."""
        for raw, reason in records:
            self._keep("", raw, reason)

    def plan(self, items: Sequence[StreamItem]) -> None:
        """The steps across records: one delivery of finding events per cluster (its ledger keys read in one
        call), and which records ask to arm each cluster's group."""
        self._changes = [item.change for item in items if item.change is not None]
        for item in items:
            if item.arms is not None:
                self._arming.setdefault(item.arms.cluster_arn, []).append(item.record_id)
        if "events" not in self.channels:
            return
        deliveries = alerts.plan_deliveries(self._changes)
        self.result.deliveries = len(deliveries)
        self.ledger.load(outbox.queued_ids(deliveries, ("events",)))
        self._delivery_of = {rid: d for d in deliveries for rid in d.record_ids}

    def notify(self, item: StreamItem) -> None:
        """This record's part; raises :class:`NotQueued` when the stream must retry it."""
        if item.unreadable is not None:
            self._keep(item.record_id, item.content, item.unreadable)
        elif item.arms is not None:
            self._arm(item.arms)
        elif item.record_id in self._delivery_of:
            self._queue(self._delivery_of[item.record_id])
        if item.record_id in self.result.failed:
            raise NotQueued(f"stream record {item.record_id} was not queued; the stream retries it")

    def resolutions(self) -> list[tuple[str, float]]:
        """Once the batch is done: the resolved findings' open times, of the records that went through."""
        return resolutions(self._changes, self.result.failed)

    def _keep(self, rid: str, raw: Any, reason: str) -> None:
        try:
            kept = self.set_aside(raw, reason)
        except RuntimeError as exc:
            # Not kept: a record with an id fails and the stream retries it, so nothing is lost.
            if rid:
                self.result.failed.add(rid)
            self.result.unreadable.append(Unreadable(rid, reason, kept=False, error=str(exc)))
            return
        self.result.unreadable.append(Unreadable(rid, reason, kept=kept))

    def _queue(self, delivery: alerts.Delivery) -> None:
        """Render the delivery and queue its messages (one per ten changes), each once: a message the ledger
        says was queued already is not queued again."""
        if delivery.key in self._delivered:
            return
        self._delivered.add(delivery.key)
        cluster = delivery.changes[0].finding.cluster_arn
        if cluster in self._held:
            self.result.failed.update(delivery.record_ids)
            return
        try:
            for message in outbox.outbox_messages(delivery, self.render(delivery), channels=("events",), now=self.now):
                if self.ledger.done(f"queued#{message.id}"):
                    continue
                self.queue.put(message)
                self.ledger.mark([f"queued#{message.id}"])
                self.result.queued += 1
        except outbox.ChannelError as exc:
            self._held.add(cluster)
            self.result.failed.update(delivery.record_ids)
            self.result.refused.append((delivery.key, str(exc)))

    def _arm(self, ref: alerts.ClusterRef) -> None:
        if ref.cluster_arn in self._armed:
            return
        self._armed.add(ref.cluster_arn)
        try:
            self.result.armed[ref.cluster_arn] = self.arm(ref)
        except Exception as exc:  # noqa: BLE001 - the records fail and the stream retries them
            self.result.failed.update(self._arming.get(ref.cluster_arn, []))
            self.result.arm_errors.append((ref.cluster_arn, f"{type(exc).__name__}: {exc}"[:300]))
