"""A HyperPod event → a triage signal → a scoped triage → the findings store's transitions."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from functions.monitor.logic.incidents import IncidentsPort, reconcile, run_scope
from hyperpod_debugger.aws.ssm_documents import NO_DOCUMENTS, SessionDocuments
from hyperpod_debugger.domain import eventbridge
from hyperpod_debugger.domain.observations import NodeHealthReport
from hyperpod_debugger.domain.validate import INSTANCE_ID_RE
from hyperpod_debugger.lifecycle.findings import StoredFinding, SweepPlan, Transition, Trigger, plan_sweep
from hyperpod_debugger.lifecycle.incidents import REPAIR_GRACE

if TYPE_CHECKING:
    from functions.shared.events import ClusterEvent, ClusterStateChange, NodeHealthEvent
    from hyperpod_debugger.domain.model import TriageReport
    from hyperpod_debugger.triage import TriageRequest

    Triage = Callable[[TriageRequest], TriageReport]


@dataclass(frozen=True)
class ClusterSignal:
    """What a HyperPod event asks the monitor to look at."""

    event_id: str
    cluster_arn: str
    region: str
    #: the node the event names; the triage probes only this node and resolves only its findings
    node: str | None = None
    reason: str = ""
    cluster_name: str = ""
    #: what to call the SageMaker API with: the ARN, or the name when the ARN carries no cluster id
    cluster_ref: str = ""
    #: HyperPod's own verdict on ``node`` (Node Health Event), shown beside our findings
    health: NodeHealthReport | None = None
    #: what the event said that could not be used as given (logged with the triage)
    notes: tuple[str, ...] = ()
    #: what sent it, as alerts say it: "Node Health Event", "Cluster Event (Error)", "health-agent log record"
    source: str = "HyperPod event"

    @property
    def cluster(self) -> str:
        return self.cluster_ref or self.cluster_arn

    @property
    def trigger(self) -> Trigger:
        words = f"{self.source} for {self.node}" if self.node else self.source
        if self.source.startswith("health-agent"):
            return Trigger("log", words, self.node)
        return Trigger("event", words, self.node)


def kinds(transitions: Sequence[Transition]) -> dict[str, int]:
    """Transitions counted by kind, for the log line and the response."""
    return dict(Counter(t.kind.value for t in transitions))


class UnusableEvent(ValueError):
    """A HyperPod event the monitor cannot act on (no valid cluster ARN or Region): kept, not retried."""


def _node(instance_id: str | None, notes: list[str]) -> str | None:
    """The instance id when it is one; otherwise None (the cluster is still triaged) and a note."""
    if not instance_id:
        return None
    if INSTANCE_ID_RE.match(instance_id):
        return instance_id
    notes.append(f"InstanceId {ascii(instance_id)[:80]} is not an EC2 instance id: the whole cluster is triaged")
    return None


def signal_of(event: ClusterEvent | ClusterStateChange | NodeHealthEvent) -> ClusterSignal | None:
    """The parsed event as a triage signal; None for an informational Cluster Event.

    The cluster's ARN decides the Region (the envelope's ``region`` is where EventBridge received
    it). Raises :class:`UnusableEvent` when the ARN is not a cluster ARN with a valid Region.
    """
    # Imported here: the EventBridge models are the event function's (the others import this module too).
    from functions.shared.events import ClusterStateChange, NodeHealthEvent

    notes: list[str] = []
    if isinstance(event, NodeHealthEvent):
        d = event.detail
        where = _where(d.ClusterArn, d.ClusterName)
        node = _node(d.InstanceId, notes)
        h = d.HealthSummary
        health = None
        if node is not None:
            health = NodeHealthReport(
                instance_id=node,
                status=h.HealthStatus,
                reason=h.HealthStatusReason,
                repair_action=h.RepairAction,
                recommendation=h.Recommendation,
                event_id=event.id,
                at=event.time,
            )
        reason = f"node health {h.HealthStatus or '(no status)'}: {h.HealthStatusReason or '-'}"
        if h.RepairAction:
            reason += f" (HyperPod repair action {h.RepairAction})"
        return _signal(event.id, where, node, reason, notes, health, source="Node Health Event")
    if isinstance(event, ClusterStateChange):
        change = event.detail
        where = _where(change.ClusterArn, change.ClusterName)
        status = change.ClusterStatus or "(not given)"
        return _signal(
            event.id, where, None, f"cluster status {status}", notes, source=f"Cluster State Change ({status})"
        )
    e = event.detail.EventDetails
    if not eventbridge.triggers_triage(e.EventLevel, e.Description):
        return None
    where = _where(e.ClusterArn, e.ClusterName)
    level = eventbridge.effective_level(e.EventLevel, e.Description)
    if not e.EventLevel:
        notes.append(f"no EventLevel: read as {level} from its description")
    node = _node(e.InstanceId, notes)
    reason = f"{level}: {e.Description or '(no description)'}"
    return _signal(event.id, where, node, reason, notes, source=f"Cluster Event ({level})")


def _where(arn: str, name: str) -> eventbridge.EventCluster:
    try:
        return eventbridge.event_cluster(arn, name)
    except ValueError as exc:
        raise UnusableEvent(str(exc)) from None


def _signal(
    event_id: str,
    where: eventbridge.EventCluster,
    node: str | None,
    reason: str,
    notes: list[str],
    health: NodeHealthReport | None = None,
    *,
    source: str,
) -> ClusterSignal:
    if where.cluster_id is None:
        notes.append(f"the cluster ARN carries no cluster id: the cluster is looked up by its name {where.name!r}")
    return ClusterSignal(
        event_id=event_id,
        cluster_arn=where.arn,
        region=where.region,
        node=node,
        reason=reason,
        cluster_name=where.name,
        cluster_ref=where.reference,
        health=health,
        notes=tuple(notes),
        source=source,
    )


class FindingsPort(Protocol):
    def open_findings(self, cluster_arn: str, *, include_resolved: bool = False) -> dict[str, StoredFinding]: ...

    def apply(self, plan: SweepPlan, now: datetime) -> list[Transition]: ...


def triage_request(
    signal: ClusterSignal,
    now: datetime,
    *,
    probe: bool,
    probe_timeout: float,
    documents: SessionDocuments = NO_DOCUMENTS,
) -> TriageRequest:
    # Imported here: the triage (and the probes it loads) only where a signal is triaged; a function that hands
    # signals to their window (the event and log functions, with a window queue) never loads it.
    from hyperpod_debugger.probe.options import ProbeOptions
    from hyperpod_debugger.triage import TriageRequest

    return TriageRequest(
        cluster=signal.cluster,
        region=signal.region,
        node=signal.node,
        now=now,
        probe=probe and signal.node is not None,
        probe_options=ProbeOptions(max_nodes=1, timeout=probe_timeout, documents=documents),
        health=(signal.health,) if signal.health is not None else (),
    )


def handle_cluster_event(
    signal: ClusterSignal,
    *,
    triage: Triage,
    store: FindingsPort,
    now: datetime,
    probe: bool = True,
    probe_timeout: float = 180.0,
    documents: SessionDocuments = NO_DOCUMENTS,
    incidents: IncidentsPort | None = None,
    repair_grace: timedelta = REPAIR_GRACE,
) -> list[Transition]:
    """Run the scoped triage the signal asks for and write what changed (and, with ``incidents``, bring the
    cluster's incidents up to date).

    Parameters
    ----------
    signal: the cluster (ARN) and, for node events, the node.
    triage: runs one triage (``hyperpod_debugger.triage.run_triage`` bound to clients).
    store: the findings store; a focused run resolves only findings of its node.

    Returns
    -------
    The transitions that happened (a duplicate or concurrent run gets none for the same change).

    Integrations
    ------------
    SageMaker/EC2/EKS/Logs (read-only, through ``triage``), Session Manager (probe), DynamoDB.
    """
    report = triage(triage_request(signal, now, probe=probe, probe_timeout=probe_timeout, documents=documents))
    cluster = report.cluster.arn or signal.cluster_arn
    plan = plan_sweep(store.open_findings(cluster), report, now, trigger=signal.trigger)
    transitions = store.apply(plan, now)
    if incidents is not None and report.error is None:
        changed = [c.item.instance_id for c in plan.changes()]
        scope = None if signal.node is None else run_scope(report, changed, node=signal.node)
        reconcile(
            report,
            cluster,
            findings=store,
            incidents=incidents,
            now=now,
            scope=scope,
            trigger=signal.trigger.what,
            repair_grace=repair_grace,
        )
    return transitions


@dataclass
class NodesRun:
    """One log payload's nodes: what each triage changed, and the nodes left to the sweep."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    transitions: Counter[str] = field(default_factory=Counter)


def triage_nodes(
    signals: Sequence[ClusterSignal], run: Callable[[ClusterSignal], dict[str, Any]], *, limit: int
) -> NodesRun:
    """Run the first ``limit`` node signals one after the other (``run`` is the idempotent signal runner,
    so a retried payload redoes only the nodes that did not complete); the rest wait for the sweep."""
    taken, rest = signals[:limit], signals[limit:]
    result = NodesRun(deferred=[s.node for s in rest if s.node])
    for signal in taken:
        counted = dict(run(signal).get("transitions") or {})
        result.transitions.update(counted)
        result.nodes.append(
            {"node": signal.node, "event_id": signal.event_id, "reason": signal.reason, "transitions": counted}
        )
    return result
