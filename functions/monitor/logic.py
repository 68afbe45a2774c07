"""The monitor's orchestration, pure: no event, no Lambda context, no boto3.

* :func:`signal_of`: a parsed HyperPod event → what to triage (or nothing, for informational events).
* :func:`handle_cluster_event`: one HyperPod signal → a scoped triage (the cluster's API checks plus a
  probe of the named node) → the findings store's transitions.
* :func:`plan_deliveries` / :func:`outbox_messages`: the findings stream's transitions → Slack and
  email messages, grouped into a digest when one batch opens many findings of one cluster and into one
  circuit-breaker alert when many nodes fail the same check, rendered and queued in the outbox.
* :func:`send` / :func:`retry_delay`: the courier's side: one message, one attempt, and when to try again.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from functions.shared.events import ClusterEvent, ClusterStateChange, NodeHealthEvent
from hyperpod_debugger.aws.ssm_documents import NO_DOCUMENTS, SessionDocuments
from hyperpod_debugger.domain import eventbridge
from hyperpod_debugger.domain.model import TriageReport
from hyperpod_debugger.domain.observations import ClusterObservation, NodeHealthReport
from hyperpod_debugger.domain.validate import INSTANCE_ID_RE
from hyperpod_debugger.lifecycle.findings import (
    NOTIFYING,
    StoredFinding,
    SweepPlan,
    Transition,
    TransitionKind,
    is_on_node,
    plan_sweep,
)
from hyperpod_debugger.lifecycle.rotation import RotationPlan, describe_node, plan_rotation
from hyperpod_debugger.notify import Notice, breaker, breaker_email, digest, digest_email, email_text, slack_message
from hyperpod_debugger.notify.stored import notice_of
from hyperpod_debugger.probe.runner import ProbeOptions
from hyperpod_debugger.remediation import ladder
from hyperpod_debugger.triage import TriageRequest

# --------------------------------------------------------------------------- event → triage → store


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

    @property
    def cluster(self) -> str:
        return self.cluster_ref or self.cluster_arn


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
        return _signal(event.id, where, node, reason, notes, health)
    if isinstance(event, ClusterStateChange):
        d = event.detail
        where = _where(d.ClusterArn, d.ClusterName)
        return _signal(event.id, where, None, f"cluster status {d.ClusterStatus or '(not given)'}", notes)
    e = event.detail.EventDetails
    if not eventbridge.triggers_triage(e.EventLevel, e.Description):
        return None
    where = _where(e.ClusterArn, e.ClusterName)
    level = eventbridge.effective_level(e.EventLevel, e.Description)
    if not e.EventLevel:
        notes.append(f"no EventLevel: read as {level} from its description")
    node = _node(e.InstanceId, notes)
    return _signal(event.id, where, node, f"{level}: {e.Description or '(no description)'}", notes)


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
    )


class FindingsPort(Protocol):
    def open_findings(self, cluster_arn: str, *, include_resolved: bool = False) -> dict[str, StoredFinding]: ...

    def apply(self, plan: SweepPlan, now: datetime) -> list[Transition]: ...


Triage = Callable[[TriageRequest], TriageReport]


def triage_request(
    signal: ClusterSignal,
    now: datetime,
    *,
    probe: bool,
    probe_timeout: float,
    documents: SessionDocuments = NO_DOCUMENTS,
) -> TriageRequest:
    return TriageRequest(
        cluster=signal.cluster,
        region=signal.region,
        node=signal.node,
        now=now,
        probe=probe and signal.node is not None,
        probe_options=ProbeOptions(max_nodes=1, timeout=probe_timeout, documents=documents),
        health=signal.health,
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
) -> list[Transition]:
    """Run the scoped triage the signal asks for and write what changed.

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
    plan = plan_sweep(store.open_findings(cluster), report, now)
    return store.apply(plan, now)


# --------------------------------------------------------------------------- sweep → probe batches


@dataclass(frozen=True)
class RotationSettings:
    """The sweep's probe budget (from the function's environment)."""

    interval: timedelta = timedelta(minutes=15)
    period: timedelta = timedelta(days=1)
    cap: int = 480
    batch_size: int = 50


def probe_suspects(report: TriageReport, stored: dict[str, StoredFinding]) -> list[str]:
    """Nodes to re-probe first: named by this run's problems, or carrying an open on-node finding."""
    named = [f.instance_id for f in report.findings if f.instance_id and f.is_problem]
    held = [f.instance_id for f in stored.values() if f.instance_id and is_on_node(f.check)]
    return list(dict.fromkeys([*named, *held]))


def plan_probe_batches(
    report: TriageReport,
    obs: ClusterObservation,
    stored: dict[str, StoredFinding],
    last_probed: dict[str, datetime],
    now: datetime,
    *,
    settings: RotationSettings,
    sweep_id: str,
) -> tuple[RotationPlan, list[dict[str, Any]]]:
    """The cluster step's plan, and one state-machine item per batch (what ``probe_batch`` receives).

    ``stored`` holds the cluster's open findings after this run's API checks were applied.
    """
    nodes = list(obs.nodes.value or ()) if obs.nodes.available else []
    plan = plan_rotation(
        nodes,
        last_probed,
        now,
        suspects=probe_suspects(report, stored),
        interval=settings.interval,
        period=settings.period,
        cap=settings.cap,
        batch_size=settings.batch_size,
    )
    controllers = ladder.slurm_controllers(obs)
    recovering = ladder.recovery_in_progress(obs, now)
    items = []
    for batch in plan.batches:
        described = []
        for node in batch:
            descriptor = describe_node(node, controller=node.instance_id in controllers)
            if node.instance_id in recovering:
                descriptor["recovering"] = recovering[node.instance_id]
            described.append(descriptor)
        items.append(
            {
                "cluster_arn": report.cluster.arn,
                "cluster_name": report.cluster.name,
                "sweep_id": sweep_id,
                "nodes": described,
            }
        )
    return plan, items


# --------------------------------------------------------------------------- stream → notifications


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


def to_notice(change: StreamChange, region: str) -> Notice:
    return notice_of(change.kind, change.at, change.finding, region)


@dataclass
class Delivery:
    """One message (Slack and email) covering one or more stream records."""

    key: str
    kind: Literal["single", "digest", "breaker"]
    changes: list[StreamChange] = field(default_factory=list)

    @property
    def record_ids(self) -> list[str]:
        return [c.record_id for c in self.changes]


def plan_deliveries(
    changes: Sequence[StreamChange], *, digest_threshold: int = 10, breaker_threshold: int = 5
) -> list[Delivery]:
    """Group one batch's transitions into messages.

    NEW findings of one check on at least ``breaker_threshold`` nodes of one cluster become one
    circuit-breaker alert (likely a shared cause, not N node faults); of the NEW findings left, more
    than ``digest_threshold`` in one cluster become one digest. Everything else is one message each.
    """
    new_by_check: dict[tuple[str, str], list[StreamChange]] = defaultdict(list)
    for c in changes:
        if c.kind is TransitionKind.NEW and c.finding.instance_id:
            new_by_check[(c.finding.cluster_arn, c.finding.check)].append(c)
    out: list[Delivery] = []
    grouped: set[str] = set()
    for (cluster, check), group in new_by_check.items():
        if len({c.finding.instance_id for c in group}) >= breaker_threshold:
            out.append(Delivery(key=f"breaker:{cluster}:{check}", kind="breaker", changes=group))
            grouped |= {c.record_id for c in group}
    new_by_cluster: dict[str, list[StreamChange]] = defaultdict(list)
    for c in changes:
        if c.kind is TransitionKind.NEW and c.record_id not in grouped:
            new_by_cluster[c.finding.cluster_arn].append(c)
    for cluster, group in new_by_cluster.items():
        if len(group) > digest_threshold:
            out.append(Delivery(key=f"digest:{cluster}", kind="digest", changes=group))
            grouped |= {c.record_id for c in group}
    for c in changes:
        if c.record_id not in grouped:
            out.append(Delivery(key=f"single:{c.record_id}", kind="single", changes=[c]))
    return out


@dataclass(frozen=True)
class Message:
    slack: dict[str, Any]
    subject: str
    body: str


def render(delivery: Delivery, *, region: str, runbook_base_url: str | None) -> Message:
    notices = [to_notice(c, region) for c in delivery.changes]
    first = notices[0]
    if delivery.kind == "single":
        subject, body = email_text(first, runbook_base_url=runbook_base_url)
        return Message(slack_message(first, runbook_base_url=runbook_base_url), subject, body)
    if delivery.kind == "digest":
        kw: dict[str, Any] = {"cluster_name": first.cluster_name, "runbook_base_url": runbook_base_url}
        subject, body = digest_email(notices, **kw)
        return Message(digest(notices, **kw), subject, body)
    sample = min(notices, key=lambda n: n.finding.instance_id or "").finding
    ids = sorted(n.finding.instance_id or "" for n in notices)
    args = (sample.check, sample.section, ids)
    kw = {"cluster_name": first.cluster_name, "sample": sample, "runbook_base_url": runbook_base_url}
    subject, body = breaker_email(*args, **kw)
    return Message(breaker(*args, **kw), subject, body)


# --------------------------------------------------------------------------- the outbox

#: Channels in the order they are queued for one message (email first: it never waits for Slack).
CHANNELS = ("sns", "slack")
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
        )


def message_id(channel: str, record_ids: Sequence[str]) -> str:
    digest = hashlib.sha256("\x1f".join([channel, *sorted(record_ids)]).encode()).hexdigest()
    return digest[:64]


def outbox_messages(
    delivery: Delivery, message: Message, *, channels: Sequence[str], now: datetime
) -> list[OutboxMessage]:
    """One outbox message per configured channel for one delivery."""
    group = delivery.changes[0].finding.cluster_arn if delivery.changes else "-"
    out = []
    for channel in (c for c in CHANNELS if c in channels):
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


def send(message: OutboxMessage, channels: Channels) -> None:
    """Send one outbox message on its channel (one attempt: the queue does the retrying)."""
    if message.channel == "slack":
        channels.slack(message.slack or {})
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

    def done(self, key: str) -> bool: ...

    def mark(self, keys: Sequence[str]) -> None: ...


class NoLedger:
    """Remembers nothing: every attempt acts again (the queue's deduplication still holds for 5 minutes)."""

    def done(self, key: str) -> bool:
        return False

    def mark(self, keys: Sequence[str]) -> None:
        return None


__all__ = [
    "CHANNELS",
    "ChannelError",
    "Channels",
    "ClusterSignal",
    "Delivery",
    "FindingsPort",
    "Ledger",
    "Message",
    "NoLedger",
    "OutboxMessage",
    "RotationSettings",
    "UnusableEvent",
    "StreamChange",
    "change_of",
    "message_id",
    "outbox_messages",
    "retry_delay",
    "send",
    "handle_cluster_event",
    "plan_deliveries",
    "plan_probe_batches",
    "probe_suspects",
    "render",
    "signal_of",
]
