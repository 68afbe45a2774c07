"""The notifier's step: one batch of the findings table's stream records → messages in the outbox.

Read every record (a damaged one is set aside with its reason, never raised), group the notifying
transitions into messages, and queue each message once per channel. What fails is named by record id,
so the stream retries exactly those records and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from functions.monitor.logic import alerts, outbox
from hyperpod_debugger.lifecycle.findings import StoredFinding, TransitionKind
from hyperpod_debugger.notify import finding_event
from hyperpod_debugger.notify.stored import cluster_label


class SetAside(Protocol):
    def __call__(self, raw: Any, reason: str) -> bool:
        """Keep an unreadable record for inspection: True when kept, False when there is nowhere to keep
        it; raises ``RuntimeError`` when the place refused it."""
        ...


@dataclass(frozen=True)
class Unreadable:
    record_id: str  # "" when the record has no sequence number
    reason: str
    kept: bool
    error: str = ""  # why it could not be kept, when it could not


@dataclass
class NotifyResult:
    #: The batch's records that carry a sequence number, in stream order (what a partial response covers).
    records: list[Any] = field(default_factory=list)
    #: Stream record ids to report as failed: the stream retries them.
    failed: set[str] = field(default_factory=set)
    unreadable: list[Unreadable] = field(default_factory=list)
    deliveries: int = 0
    queued: int = 0
    refused: list[tuple[str, str]] = field(default_factory=list)  # (delivery key, error)
    #: (cluster, seconds from first seen) of every RESOLVED transition queued in this batch
    resolutions: list[tuple[str, float]] = field(default_factory=list)


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


def notify(
    records: Sequence[Any],
    *,
    from_item: Callable[..., StoredFinding],
    set_aside: SetAside,
    queue: outbox.OutboxPort,
    ledger: outbox.Ledger,
    channels: Sequence[str],
    render: Callable[[alerts.Delivery], alerts.Message],
    now: datetime,
    digest_threshold: int,
    breaker_threshold: int,
) -> NotifyResult:
    read = alerts.read_records(records, from_item=from_item)
    result = NotifyResult(records=list(read.records.values()))
    damaged = [(rid, read.records[rid], reason) for rid, reason in read.unreadable.items()]
    damaged += [("", raw, reason) for raw, reason in read.orphans]
    for rid, raw, reason in damaged:
        try:
            kept = set_aside(raw, reason)
        except RuntimeError as exc:
            # Not kept: a record with an id fails and the stream retries it, so nothing is lost.
            if rid:
                result.failed.add(rid)
            result.unreadable.append(Unreadable(rid, reason, kept=False, error=str(exc)))
            continue
        result.unreadable.append(Unreadable(rid, reason, kept=kept))
    deliveries = alerts.plan_deliveries(
        read.changes, digest_threshold=digest_threshold, breaker_threshold=breaker_threshold
    )
    result.deliveries = len(deliveries)
    ledger.load(outbox.queued_ids(deliveries, channels))
    queued = outbox.queue_transitions(
        deliveries, outbox=queue, ledger=ledger, channels=channels, render=render, now=now
    )
    result.failed |= queued.failed
    result.queued = queued.queued
    result.refused = queued.refused
    result.resolutions = resolutions(read.changes, result.failed)
    return result
