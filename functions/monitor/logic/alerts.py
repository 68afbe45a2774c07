"""What the findings table's stream tells: finding transitions (their events, one delivery per cluster) and the
clusters whose incidents arm an alert group. The records themselves are read at the edge
(:mod:`functions.monitor.stream_records`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from hyperpod_debugger.lifecycle.findings import StoredFinding, TransitionKind


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
    # Imported here: only the notifier puts finding events; the alert-group function reads this module too.
    from hyperpod_debugger.notify import finding_event

    return tuple(
        finding_event.entry(finding_event.detail_of(c.kind, c.at, c.finding, runbook_base_url=runbook_base_url), bus)
        for c in delivery.changes
    )


def render(delivery: Delivery, *, region: str, runbook_base_url: str | None, event_bus: str | None = None) -> Message:
    """A delivery's finding events (people hear of incidents, through the alert groups, not of findings)."""
    events = events_of(delivery, bus=event_bus, runbook_base_url=runbook_base_url) if event_bus else ()
    return Message({}, "", "", events)
