"""A cluster's alert group: what its incidents' transitions become in the channels, a bounded number at a time.

Modelled on how on-call tools group alerts (a short wait before the first message of a group, then at most
one message per interval; ``references/decisions.md``, 2026-12-03):

1. The notifier sees an incident with pending transitions on the findings stream and *arms* its cluster's
   group: the first arming of a quiet group is due ``wait_s`` later (seconds: the first alert stays fast),
   one after a flush no sooner than ``interval_s`` after that flush. Arming is one conditional write (one
   armer) and one delayed message on the alert-group queue.
2. When the message is due, :func:`flush` reads every pending transition of the cluster's incidents, lets
   the alert policy say what each channel hears (:func:`hyperpod_debugger.notify.policy.compose`: at most one
   message per channel), renders and queues them in the outbox, clears what it told, and closes the group; a
   transition that arrived meanwhile arms it again.

So, whatever the stream's batch size or order: one flush makes at most one message per channel, and a cluster
gets at most one flush per ``interval_s`` after its first. A message that cannot be rendered is set aside with
its content (the incidents it would have told) and the others go on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from functions.monitor.logic import outbox
from functions.monitor.logic.alerts import ClusterRef
from hyperpod_debugger.lifecycle.findings import iso, parse_iso

if TYPE_CHECKING:
    # The notifier arms groups and never tells anyone: it imports this module without the alert policy.
    from functions.monitor.logic.alerts import Message
    from hyperpod_debugger.lifecycle.incidents import StoredIncident
    from hyperpod_debugger.notify.policy import AlertPolicy, Batch

    Render = Callable[[Batch], Message]

#: Seconds before the first message of a quiet group, and between two messages of one cluster.
GROUP_WAIT_S = 10
GROUP_INTERVAL_S = 300
#: An armed group whose message never came (a lost send) is armed again by the next transition after this.
STALE_AFTER = timedelta(minutes=20)


@dataclass(frozen=True)
class Group:
    """One cluster's alert group as stored."""

    ref: ClusterRef
    window_id: str | None = None
    due_at: datetime | None = None
    last_flush_at: datetime | None = None


class GroupsPort(Protocol):
    def get(self, cluster_arn: str) -> Group | None: ...

    def arm(self, ref: ClusterRef, window_id: str, due_at: datetime, *, stale_before: datetime) -> bool:
        """Set the group's window unless one is armed that is not stale; True when this call armed it."""

    def cancel(self, cluster_arn: str, window_id: str) -> None:
        """Disarm (the window's message could not be sent), if it is still that window."""

    def close(self, cluster_arn: str, window_id: str, at: datetime | None) -> bool:
        """Disarm after a flush and remember when it told someone (``at``; None: it told nobody, the last
        flush time stays); False when the window is not this one."""

    def clusters(self) -> list[Group]:
        """Every cluster that has an alert group (the daily summary's list)."""


class FlushQueue(Protocol):
    def schedule(self, message: dict[str, str], delay_s: int) -> None: ...


class PendingPort(Protocol):
    """What a flush needs of the incident store."""

    def pending(self, cluster_arn: str) -> list[StoredIncident]: ...

    def incidents(self, cluster_arn: str) -> dict[str, StoredIncident]: ...

    def clear_pending(self, cluster_arn: str, key: str, entries: Sequence[str]) -> bool: ...

    def drop_pending(self, cluster_arn: str, sk: str) -> None: ...

    #: the incident items the last read could not read (sort key → the item as stored)
    unreadable_items: dict[str, dict[str, Any]]


class SetAside(Protocol):
    def __call__(self, content: Any, reason: str) -> bool: ...


@dataclass(frozen=True)
class AlertPorts:
    """What a flush and the daily summary tell through: the cluster's groups and incidents, the alert policy
    and the configured channels, the renderer, the outbox and its ledger, and where a message that cannot be
    rendered is kept."""

    groups: GroupsPort
    store: PendingPort
    policy: AlertPolicy
    channels: Sequence[str]
    render: Render
    outbox_port: outbox.OutboxPort
    ledger: outbox.Ledger
    set_aside: SetAside

    def queue(self, batches: Sequence[Batch], now: datetime) -> tuple[int, list[str]]:
        return queue_batches(
            batches,
            render=self.render,
            outbox_port=self.outbox_port,
            ledger=self.ledger,
            set_aside=self.set_aside,
            now=now,
        )


def window_id(cluster_arn: str, due: datetime) -> str:
    return "g-" + hashlib.sha256(f"{cluster_arn}|{iso(due)}".encode()).hexdigest()[:16]


def due_time(group: Group | None, now: datetime, *, wait_s: int, interval_s: int) -> datetime:
    """When a group armed now is due: ``wait_s`` from now, and no sooner than ``interval_s`` after its last
    flush."""
    due = now + timedelta(seconds=wait_s)
    if group is not None and group.last_flush_at is not None:
        due = max(due, group.last_flush_at + timedelta(seconds=interval_s))
    return due


def arm(
    ref: ClusterRef,
    *,
    groups: GroupsPort,
    queue: FlushQueue,
    now: datetime,
    wait_s: int = GROUP_WAIT_S,
    interval_s: int = GROUP_INTERVAL_S,
) -> dict[str, Any]:
    """Make sure the cluster's group will flush: arm it and schedule its message when it is not armed.

    Raises when the message cannot be scheduled (the arming is undone first): the stream retries the record.
    """
    current = groups.get(ref.cluster_arn)
    stale_before = now - STALE_AFTER
    if current is not None and current.due_at is not None and current.due_at >= stale_before:
        return {"status": "armed already", "due_at": iso(current.due_at)}
    due = due_time(current, now, wait_s=wait_s, interval_s=interval_s)
    window = window_id(ref.cluster_arn, due)
    if not groups.arm(ref, window, due, stale_before=stale_before):
        return {"status": "armed by another"}
    message = {
        "cluster_arn": ref.cluster_arn,
        "region": ref.region,
        "cluster_name": ref.cluster_name,
        "window_id": window,
        "due_at": iso(due),
    }
    try:
        queue.schedule(message, max(0, round((due - now).total_seconds())))
    except Exception:
        groups.cancel(ref.cluster_arn, window)
        raise
    return {"status": "armed", "window": window, "due_at": iso(due)}


@dataclass
class FlushResult:
    status: str
    cluster_arn: str
    batches: list[Batch] = field(default_factory=list)
    queued: int = 0
    set_aside: list[str] = field(default_factory=list)
    cleared: int = 0
    rearmed: bool = False

    def summary(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "cluster_arn": self.cluster_arn,
            "messages": {b.channel: b.kind for b in self.batches},
            "incidents_told": max((len(b.items) for b in self.batches), default=0),
            "queued": self.queued,
            "set_aside": self.set_aside,
            "cleared": self.cleared,
            "rearmed": self.rearmed,
        }


def message_of(body: dict[str, Any]) -> tuple[ClusterRef, str]:
    """The cluster and window a flush message names; raises ``ValueError`` naming what is missing."""
    missing = [k for k in ("cluster_arn", "region", "window_id") if not isinstance(body.get(k), str)]
    if missing:
        raise ValueError(f"alert-group message without {', '.join(missing)}")
    ref = ClusterRef(body["cluster_arn"], body["region"], str(body.get("cluster_name") or ""))
    return ref, body["window_id"]


def _content(batch: Batch) -> dict[str, Any]:
    """What a batch would have told, kept whole when it cannot be rendered (not a pointer to it)."""
    return {
        "channel": batch.channel,
        "kind": batch.kind,
        "cluster_arn": batch.cluster_arn,
        "incidents": [
            {
                "told": item.told,
                "key": item.incident.key,
                "incident_id": item.incident.incident_id,
                "priority": str(item.incident.incident.priority or ""),
                "verdict": item.incident.incident.verdict,
                "title": item.incident.incident.title,
                "section": item.incident.incident.section,
                "next_command": (item.incident.incident.next_command or {}).get("command"),
            }
            for item in batch.items
        ],
    }


def queue_batches(
    batches: Sequence[Batch],
    *,
    render: Render,
    outbox_port: outbox.OutboxPort,
    ledger: outbox.Ledger,
    set_aside: SetAside,
    now: datetime,
) -> tuple[int, list[str]]:
    """Render each batch and queue it in the outbox on its channel; a batch that cannot be rendered is set
    aside with its content. Returns (messages queued, reasons set aside). Raises ``outbox.ChannelError``
    when the outbox refused a message (the flush is retried; the ledger keeps what was queued)."""
    queued, aside = 0, []
    items = []
    for batch in batches:
        try:
            message = render(batch)
            items.append(outbox.alert_message(batch, message, now=now))
        except Exception as exc:  # noqa: BLE001 - one message that cannot be rendered never stops the others
            reason = f"{batch.channel} {batch.kind} message could not be rendered: {type(exc).__name__}: {exc}"[:500]
            set_aside(_content(batch), reason)
            aside.append(reason)
    # what an earlier attempt of this flush already queued (its retry comes after the queue's deduplication
    # window): read in one call, then each message put once
    ledger.load([f"queued#{item.id}" for item in items])
    for item in items:
        if ledger.done(f"queued#{item.id}"):
            continue
        outbox_port.put(item)
        ledger.mark([f"queued#{item.id}"])
        queued += 1
    return queued, aside


def flush(
    ref: ClusterRef,
    window: str,
    ports: AlertPorts,
    *,
    queue: FlushQueue,
    now: datetime,
    wait_s: int = GROUP_WAIT_S,
    interval_s: int = GROUP_INTERVAL_S,
) -> FlushResult:
    """Tell the cluster's pending transitions (at most one message per channel), clear them, close the group,
    and arm it again when something arrived meanwhile. A message for another window (a repeat, or one that a
    takeover replaced) does nothing."""
    from hyperpod_debugger.notify.policy import compose  # only a flush tells (see the imports)

    result = FlushResult("flushed", ref.cluster_arn)
    groups, store = ports.groups, ports.store
    group = groups.get(ref.cluster_arn)
    if group is None or group.window_id != window:
        result.status = "not this window"
        return result
    pending = store.pending(ref.cluster_arn)
    for sk, raw in dict(store.unreadable_items).items():
        if raw.get("pending") and ports.set_aside(raw, f"incident item {sk} could not be read"):
            store.drop_pending(ref.cluster_arn, sk)  # kept whole: not set aside again at the next flush
        result.set_aside.append(sk)
    name = ref.cluster_name or next((s.incident.cluster_name for s in pending if s.incident.cluster_name), "")
    name = name or ref.cluster_arn.rsplit("/", 1)[-1]
    batches = compose(
        pending, ports.policy, ports.channels, cluster_arn=ref.cluster_arn, cluster_name=name, region=ref.region
    )
    result.batches = batches
    result.queued, aside = ports.queue(batches, now)
    result.set_aside += aside
    for s in pending:
        if store.clear_pending(ref.cluster_arn, s.key, list(s.pending)):
            result.cleared += len(s.pending)
    # the interval runs from the last flush that told someone something: one that told nobody (everything
    # below the policy's minimums, or set aside) does not make the next incident wait
    told = len(batches) > len(aside)
    groups.close(ref.cluster_arn, window, now if told else None)
    if store.pending(ref.cluster_arn):
        arm(ref, groups=groups, queue=queue, now=now, wait_s=wait_s, interval_s=interval_s)
        result.rearmed = True
    return result


def daily_summary(ports: AlertPorts, *, now: datetime) -> dict[str, Any]:
    """One summary per cluster with open incidents, per channel that wants one (what is below its alert
    priority is only ever told here)."""
    from hyperpod_debugger.notify.policy import daily  # only a summary tells (see the imports)

    day = now.strftime("%Y-%m-%d")
    told: dict[str, int] = {}
    queued = 0
    for group in ports.groups.clusters():
        ref = group.ref
        incidents = list(ports.store.incidents(ref.cluster_arn).values())
        name = ref.cluster_name or next((s.incident.cluster_name for s in incidents if s.incident.cluster_name), "")
        batches = daily(
            incidents,
            ports.policy,
            ports.channels,
            cluster_arn=ref.cluster_arn,
            cluster_name=name or ref.cluster_arn.rsplit("/", 1)[-1],
            region=ref.region,
            day=day,
        )
        n, _ = ports.queue(batches, now)
        queued += n
        if batches:
            told[ref.cluster_arn] = len(batches[0].items)
    return {"status": "summarised", "day": day, "clusters": told, "queued": queued}


def parse_due(text: str | None) -> datetime | None:
    return parse_iso(text) if text else None


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
