"""The notifier's step: one batch of the findings table's stream records → finding events in the outbox, and
the alert groups of the clusters whose incidents changed armed.

People are told of incidents, not findings: an incident record with transitions to tell arms its cluster's
alert group (:mod:`functions.monitor.logic.alert_groups`), which flushes them a few seconds later, grouped.
What fails is named by record id, so the stream retries exactly those records and nothing else.
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
    #: cluster → what arming its alert group said; (cluster, error) where it could not be armed
    armed: dict[str, Any] = field(default_factory=dict)
    arm_errors: list[tuple[str, str]] = field(default_factory=list)


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
    arm: Callable[[alerts.ClusterRef], Any],
) -> NotifyResult:
    """Read every record (a damaged one is set aside with its reason, never raised); queue the finding
    events of the batch's finding transitions (ten per message); arm the alert group of every cluster whose
    incidents have transitions to tell. A cluster whose group cannot be armed fails its records, and the
    stream retries them."""
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
    if "events" in channels:
        deliveries = alerts.plan_deliveries(read.changes)
        result.deliveries = len(deliveries)
        ledger.load(outbox.queued_ids(deliveries, ("events",)))
        queued = outbox.queue_transitions(
            deliveries, outbox=queue, ledger=ledger, channels=("events",), render=render, now=now
        )
        result.failed |= queued.failed
        result.queued = queued.queued
        result.refused = queued.refused
    for cluster, (ref, record_ids) in read.arms.items():
        try:
            result.armed[cluster] = arm(ref)
        except Exception as exc:  # noqa: BLE001 - the records fail and the stream retries them
            result.failed.update(record_ids)
            result.arm_errors.append((cluster, f"{type(exc).__name__}: {exc}"[:300]))
    result.resolutions = resolutions(read.changes, result.failed)
    return result
