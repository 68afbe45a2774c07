"""Coalesced events: HyperPod events for one cluster that arrive within a short window become one triage.

A rack failure or a bad driver rollout sends hundreds of Node Health Events within minutes; a triage per
event would read the whole cluster (one ListClusterNodes page per 100 nodes, the VPC, logs, Kubernetes)
hundreds of times. Instead (``references/decisions.md``, 2026-12-02):

1. The event function keeps each event in the findings table (one item per event, under the cluster) and
   makes sure a *window* is open for the cluster: an event that finds none opens one (a write conditional
   on the cluster's window record being as the event last saw it, so exactly one opener) and schedules it on
   the window queue (an SQS message delay) to run when it is due. Later events only add their item.
2. When the window is due, the window function *claims* it (marks the record claimed, with the time: the
   next event opens a new window), reads the cluster's kept events received since the window opened (an
   earlier window's, still in its triage or retried, are left to it), and runs **one** triage: the cluster is
   read once, every node the events named is probed (up to a cap; the rest are left to the sweep, which
   probes suspects first) and gets HyperPod's verdict; then the events it handled are deleted.

When a window is due (``references/decisions.md``, 2026-12-03, the leading edge):

* On a *quiet* cluster (no window claimed within its cooldown, normally ``window_s``): an *urgent* event
  (:func:`urgent`: a fault HyperPod reports on a node, an Error Cluster Event, a failed cluster) opens a
  *leading* window due ``lead_s`` later (seconds: the rest of a burst that arrives with it joins); any other
  event a window due ``window_s`` later, as before.
* Otherwise the window is due when the cooldown since the last claim ends: a storm is read once per
  ``window_s``. The leading window's read is paid back once: in a run that began with one, the window after
  the first follow-up waits two windows, so a storm that outlasts two windows costs what it cost without a
  leading edge (a five-minute storm: three cluster reads), and one shorter than that at most one more.

Nothing is dropped: events are kept until a triage that handled them succeeded; a window whose message was
lost is taken over by the next event once it is ``STALE_AFTER`` past due; a window with one node and nothing
else runs the node's scoped triage, exactly as one event would.

Everything here is pure or takes its ports; the DynamoDB and SQS adapter is ``functions.monitor.window_store``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol

from functions.monitor.logic.incidents import IncidentsPort, reconcile, run_scope
from functions.monitor.logic.signals import ClusterSignal, FindingsPort
from hyperpod_debugger.aws.ssm_documents import NO_DOCUMENTS, SessionDocuments
from hyperpod_debugger.domain.observations import NodeHealthReport
from hyperpod_debugger.lifecycle.findings import Transition, Trigger, iso, parse_iso, plan_sweep
from hyperpod_debugger.lifecycle.incidents import REPAIR_GRACE

if TYPE_CHECKING:
    from functions.monitor.logic.signals import Triage
    from hyperpod_debugger.triage import TriageRequest

#: How long a window gathers events before its triage runs, and the least time between two claimed windows
#: of one cluster (seconds): a storm of five minutes costs three cluster reads.
WINDOW_S = 100
#: How long after an urgent event on a quiet cluster its leading window is due (seconds): the events of a burst
#: that arrive with it (a rack, a switch) join it, and the first alert still comes in seconds.
LEAD_S = 2
#: Attempts at opening a window when the cluster's window record keeps changing under the event function.
OPEN_ATTEMPTS = 5
#: A window this long past due whose message never came (a lost send) is taken over by the next event.
STALE_AFTER = timedelta(minutes=5)
#: Nodes one window probes (the rest get HyperPod's verdict and the cluster's checks now, and their probe
#: in the next sweep, which probes suspects first).
WINDOW_PROBE_MAX_NODES = 15
#: StartSession calls per second a window's probes use (the sweep leaves 10 % of the account's rate).
WINDOW_PROBE_RATE = 0.5


@dataclass(frozen=True)
class Window:
    """One window of a cluster: the id its message carries, when it opened and when it is due; and its place
    in its cluster's run of windows (what the cooldown after it is)."""

    cluster_arn: str
    region: str
    window_id: str
    opened_at: datetime
    due_at: datetime
    #: 0 for the window opened on a quiet cluster, then 1, 2, ... while the cluster stays in cooldown
    seq: int = 0
    #: its run began with a leading window (an urgent event on a quiet cluster)
    led: bool = False
    #: after its claim, the seconds before the cluster's next window may be due
    cooldown_s: int = WINDOW_S

    @property
    def leading(self) -> bool:
        """Due at once: the window an urgent event opened on a quiet cluster."""
        return self.led and self.seq == 0

    def message(self) -> dict[str, str]:
        return {
            "cluster_arn": self.cluster_arn,
            "region": self.region,
            "window_id": self.window_id,
            "opened_at": iso(self.opened_at),
            "due_at": iso(self.due_at),
        }

    @classmethod
    def from_message(cls, body: dict[str, Any]) -> Window:
        """Raises ``ValueError`` naming what is missing or malformed."""
        missing = [k for k in ("cluster_arn", "region", "window_id", "due_at") if not isinstance(body.get(k), str)]
        if missing:
            raise ValueError(f"window message without {', '.join(missing)}")
        due = parse_iso(body["due_at"])
        opened = parse_iso(body["opened_at"]) if isinstance(body.get("opened_at"), str) else due
        return cls(body["cluster_arn"], body["region"], body["window_id"], opened, due)


@dataclass(frozen=True)
class LastWindow:
    """A cluster's latest window as the table holds it: still open, or claimed (its triage started then)."""

    window: Window
    claimed_at: datetime | None = None

    @property
    def open(self) -> bool:
        return self.claimed_at is None

    def stale(self, now: datetime) -> bool:
        """Open and so long past due that its message was lost: the next event takes it over."""
        return self.open and self.window.due_at < now - STALE_AFTER

    def cooldown_until(self) -> datetime | None:
        """When the cluster may be read again (claimed windows only)."""
        if self.claimed_at is None:
            return None
        return self.claimed_at + timedelta(seconds=self.window.cooldown_s)


@dataclass(frozen=True)
class Opened:
    """What opening a window did: ``ok``, or the record the table held instead (None: no record)."""

    ok: bool
    found: LastWindow | None = None


class WindowsPort(Protocol):
    """Where kept events and the clusters' windows live (the findings table)."""

    def keep(self, cluster_arn: str, record: dict[str, Any], now: datetime) -> None:
        """Keep one event's record (a repeat of the same event id overwrites it)."""

    def open(self, window: Window, *, replacing: LastWindow | None) -> Opened:
        """Write ``window`` as its cluster's window if the record is still ``replacing`` (None: no record);
        else write nothing and say what the record is."""

    def cancel(self, window: Window, *, restore: LastWindow | None) -> None:
        """Undo opening ``window`` (its message could not be sent), if it is still that window: put ``restore``
        back (None: remove the record)."""

    def claim(self, window: Window, now: datetime) -> Literal["claimed", "gone", "superseded"]:
        """Mark ``window`` claimed at ``now`` so the next event opens a new one: ``claimed``; ``gone`` when it was
        claimed before (a repeat delivery, or a retry after a failed triage); ``superseded`` when another window
        took it over (this message was late), starting where it started."""

    def kept(self, cluster_arn: str) -> list[dict[str, Any]]:
        """Every kept event record of the cluster, oldest first."""

    def discard(self, cluster_arn: str, event_ids: Sequence[str]) -> int:
        """Delete the kept records of these events (handled); how many were deleted."""


class QueuePort(Protocol):
    def schedule(self, window: Window, delay_s: int) -> None:
        """Deliver ``window.message()`` to the window function in ``delay_s`` seconds; raises when refused."""


# --- one event -----------------------------------------------------------------------------------------


def record_of(signal: ClusterSignal, received_at: datetime) -> dict[str, Any]:
    """A signal as the item kept for its window (JSON types only)."""
    health = signal.health
    return {
        "event_id": signal.event_id,
        "cluster_arn": signal.cluster_arn,
        "region": signal.region,
        "node": signal.node,
        "reason": signal.reason,
        "cluster_name": signal.cluster_name,
        "cluster_ref": signal.cluster_ref,
        "source": signal.source,
        "notes": list(signal.notes),
        "received_at": iso(received_at),
        "health": None
        if health is None
        else {
            "instance_id": health.instance_id,
            "status": health.status,
            "reason": health.reason,
            "repair_action": health.repair_action,
            "recommendation": health.recommendation,
            "event_id": health.event_id,
            "at": iso(health.at) if health.at else None,
        },
    }


def signal_of_record(record: dict[str, Any]) -> ClusterSignal:
    """A kept record back as the signal it was; raises ``ValueError`` for a record that is not one."""
    try:
        health = record.get("health")
        report = None
        if isinstance(health, dict):
            at = health.get("at")
            report = NodeHealthReport(
                instance_id=str(health["instance_id"]),
                status=health.get("status"),
                reason=health.get("reason"),
                repair_action=health.get("repair_action"),
                recommendation=health.get("recommendation"),
                event_id=health.get("event_id"),
                at=parse_iso(at) if isinstance(at, str) else None,
            )
        return ClusterSignal(
            event_id=str(record["event_id"]),
            cluster_arn=str(record["cluster_arn"]),
            region=str(record["region"]),
            node=str(record["node"]) if record.get("node") else None,
            reason=str(record.get("reason") or ""),
            cluster_name=str(record.get("cluster_name") or ""),
            cluster_ref=str(record.get("cluster_ref") or ""),
            health=report,
            notes=tuple(str(n) for n in record.get("notes") or ()),
            source=str(record.get("source") or "HyperPod event"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"a kept event record that cannot be read ({type(exc).__name__}: {exc})") from None


#: Where an urgent event comes from (``ClusterSignal.source``); a Node Health Event is urgent unless it
#: reports the node healthy.
NODE_HEALTH_SOURCE = "Node Health Event"
URGENT_SOURCES = frozenset({"health-agent log record", "cluster event (error)", "cluster state change (failed)"})


def urgent(signal: ClusterSignal) -> bool:
    """An event that may mean a P0 fault, worth a triage at once on a quiet cluster: a Node Health Event that
    does not report its node healthy, a health agent's (HMA) detection in the cluster's logs, an Error Cluster
    Event, a Cluster State Change to Failed. Routine events (a node back to Healthy, a Warn Cluster Event,
    other state changes) wait a full window, as before, so a cluster's routine churn spends no leading read."""
    if signal.source == NODE_HEALTH_SOURCE:
        return signal.health is None or signal.health.unhealthy
    return signal.source.lower() in URGENT_SOURCES


def cooldown_after(seq: int, led: bool, window_s: int) -> int:
    """Seconds after the claim of a run's window ``seq`` before the next may be due: ``window_s``, but twice
    that after the first follow-up of a run that began with a leading window (its read is paid back once)."""
    return 2 * window_s if led and seq == 1 else window_s


def _window_id(signal: ClusterSignal, now: datetime) -> str:
    digest = hashlib.sha256(f"{signal.cluster_arn}|{signal.event_id}|{iso(now)}".encode()).hexdigest()[:16]
    return f"w-{digest}"


def plan_window(
    signal: ClusterSignal,
    last: LastWindow | None,
    now: datetime,
    *,
    window_s: int = WINDOW_S,
    lead_s: int = LEAD_S,
) -> Window | None:
    """The window ``signal`` opens given its cluster's ``last`` window (None: the table has none), or None when
    it joins the open one.

    In cooldown (a window was claimed less than its cooldown ago) the window is due when the cooldown ends and
    continues the run; otherwise the cluster is quiet and the window starts a run: due ``lead_s`` after an
    urgent event (a leading window), ``window_s`` after any other. Taking over a lost window (open, stale)
    starts where that one started, so it covers that window's events.
    """
    if last is not None and last.open and not last.stale(now):
        return None
    window_id = _window_id(signal, now)
    until = last.cooldown_until() if last is not None else None
    if last is not None and until is not None and now < until:
        seq, led = last.window.seq + 1, last.window.led
        return Window(
            signal.cluster_arn,
            signal.region,
            window_id,
            now,
            until,
            seq=seq,
            led=led,
            cooldown_s=cooldown_after(seq, led, window_s),
        )
    opened = last.window.opened_at if last is not None and last.open else now
    lead = urgent(signal)
    due = now + timedelta(seconds=min(lead_s, window_s) if lead else window_s)
    return Window(
        signal.cluster_arn,
        signal.region,
        window_id,
        opened,
        due,
        seq=0,
        led=lead,
        cooldown_s=cooldown_after(0, lead, window_s),
    )


class WindowContention(RuntimeError):
    """The cluster's window record changed under every attempt to open a window: the event is retried."""


def enqueue(
    signal: ClusterSignal,
    *,
    windows: WindowsPort,
    queue: QueuePort,
    now: datetime,
    window_s: int = WINDOW_S,
    lead_s: int = LEAD_S,
) -> dict[str, Any]:
    """Keep the event for its cluster's window, opening (and scheduling) a window when none is open
    (:func:`plan_window` says when it is due).

    The first attempt assumes the cluster has no window record; a conditional write that finds one returns
    it, and the window is planned again from it (no read before the write: the event function writes only).
    Raises when the event cannot be kept, when the record changed under :data:`OPEN_ATTEMPTS` attempts, or
    when a window it opened cannot be scheduled (the record is put back first): the event function fails,
    and EventBridge/Lambda retry it.
    """
    windows.keep(signal.cluster_arn, record_of(signal, now), now)
    out: dict[str, Any] = {
        "status": "queued",
        "event_id": signal.event_id,
        "cluster_arn": signal.cluster_arn,
        "node": signal.node,
    }
    last: LastWindow | None = None
    for _ in range(OPEN_ATTEMPTS):
        window = plan_window(signal, last, now, window_s=window_s, lead_s=lead_s)
        if window is None:
            return {**out, "window": "joined the open window"}
        opened = windows.open(window, replacing=last)
        if opened.ok:
            break
        last = opened.found
    else:
        raise WindowContention(f"the window record of {signal.cluster_arn} changed under {OPEN_ATTEMPTS} attempts")
    try:
        queue.schedule(window, max(0, math.ceil((window.due_at - now).total_seconds())))
    except Exception:
        windows.cancel(window, restore=last)
        raise
    return {**out, "window": window.window_id, "due_at": iso(window.due_at), "leading": window.leading}


# --- one window ----------------------------------------------------------------------------------------


@dataclass
class WindowEvents:
    """The kept events of one window, read back: the signals in arrival order and what could not be read."""

    signals: list[ClusterSignal] = field(default_factory=list)
    #: kept records that are not events any more (damaged): ``{"event_id", "error", "record"}``
    unreadable: list[dict[str, Any]] = field(default_factory=list)

    @property
    def event_ids(self) -> list[str]:
        return [s.event_id for s in self.signals]

    @property
    def nodes(self) -> list[str]:
        """The distinct nodes the events named, in the order they were first named."""
        return list(dict.fromkeys(s.node for s in self.signals if s.node))

    @property
    def cluster_wide(self) -> bool:
        """More than one node, or an event about the cluster itself: one cluster-wide triage."""
        return len(self.nodes) != 1 or any(s.node is None for s in self.signals)

    def idempotency_key(self, cluster_arn: str) -> str:
        """The same events give the same key (a repeat delivery reuses the first run's result)."""
        joined = "\n".join(sorted(self.event_ids))
        return f"window#{cluster_arn}#{hashlib.sha256(joined.encode()).hexdigest()[:32]}"


def read_events(records: Iterable[dict[str, Any]]) -> WindowEvents:
    out = WindowEvents()
    seen: set[str] = set()
    for record in records:
        try:
            signal = signal_of_record(record)
        except ValueError as exc:
            out.unreadable.append({"event_id": str(record.get("event_id") or ""), "error": str(exc), "record": record})
            continue
        if signal.event_id not in seen:
            seen.add(signal.event_id)
            out.signals.append(signal)
    return out


def window_trigger(events: WindowEvents) -> tuple[Trigger, dict[str, Trigger]]:
    """What made the monitor look, as alerts say it: the window as a whole, and per named node its event."""
    per_node = {s.node: s.trigger for s in events.signals if s.node}
    sources = sorted({s.source for s in events.signals})
    count = len(events.signals)
    words = f"{count} HyperPod events in one window ({', '.join(sources)})" if count > 1 else events.signals[0].source
    kind: Literal["event", "log"] = "log" if all(s.trigger.kind == "log" for s in events.signals) else "event"
    return Trigger(kind, words), per_node


def window_request(
    events: WindowEvents,
    now: datetime,
    *,
    probe: bool,
    probe_timeout: float,
    documents: SessionDocuments = NO_DOCUMENTS,
    max_nodes: int = WINDOW_PROBE_MAX_NODES,
    rate: float = WINDOW_PROBE_RATE,
) -> TriageRequest:
    """One triage for the window: scoped to the node when the window named one node only, else the whole
    cluster with the named nodes probed (up to ``max_nodes``) and HyperPod's verdict on each."""
    # Imported here, as in ``signals.triage_request``: the event and log functions enqueue, never triage.
    from hyperpod_debugger.probe.options import ProbeOptions
    from hyperpod_debugger.triage import TriageRequest

    first = events.signals[0]
    nodes = events.nodes
    health = tuple(s.health for s in events.signals if s.health is not None)
    options = ProbeOptions(max_nodes=max(1, max_nodes), rate=rate, timeout=probe_timeout, documents=documents)
    if not events.cluster_wide:
        return TriageRequest(
            cluster=first.cluster,
            region=first.region,
            node=nodes[0],
            now=now,
            probe=probe,
            probe_options=replace(options, max_nodes=1),
            health=health,
        )
    return TriageRequest(
        cluster=first.cluster,
        region=first.region,
        nodes=tuple(nodes),
        now=now,
        probe=probe and bool(nodes),
        probe_options=options,
        health=health,
    )


def handle_window(
    events: WindowEvents,
    *,
    triage: Triage,
    store: FindingsPort,
    now: datetime,
    probe: bool = True,
    probe_timeout: float = 180.0,
    documents: SessionDocuments = NO_DOCUMENTS,
    max_nodes: int = WINDOW_PROBE_MAX_NODES,
    rate: float = WINDOW_PROBE_RATE,
    incidents: IncidentsPort | None = None,
    repair_grace: timedelta = REPAIR_GRACE,
) -> tuple[list[Transition], dict[str, Any]]:
    """Run the window's one triage and write what changed. Returns the transitions and what the triage
    did (for the log and the response): nodes named, probed, and not probed (not Running, or over the cap:
    the sweep probes them, suspects first)."""
    request = window_request(
        events,
        now,
        probe=probe,
        probe_timeout=probe_timeout,
        documents=documents,
        max_nodes=max_nodes,
        rate=rate,
    )
    report = triage(request)
    cluster = report.cluster.arn or events.signals[0].cluster_arn
    trigger, per_node = window_trigger(events)
    plan = plan_sweep(store.open_findings(cluster), report, now, trigger=trigger, node_triggers=per_node)
    transitions = store.apply(plan, now)
    if incidents is not None and report.error is None:
        changed = [c.item.instance_id for c in plan.changes()]
        scope = run_scope(report, changed, node=request.node) if request.node else None
        reconcile(
            report,
            cluster,
            findings=store,
            incidents=incidents,
            now=now,
            scope=scope,
            trigger=trigger.what,
            repair_grace=repair_grace,
        )
    probed = set(report.coverage.probed_nodes or ())
    named = events.nodes
    summary = {
        "events": len(events.signals),
        "nodes": len(named),
        "probed": len([n for n in named if n in probed]),
        "not_probed": [n for n in named if n not in probed] if request.probe else [],
        "scoped": request.node,
        "api_calls": sum(report.coverage.api_calls.values()),
        "error": report.error.kind if report.error else None,
    }
    return transitions, summary


#: Clocks of two invocations may differ this much: an event kept this long before its window opened is its.
CLOCK_SKEW = timedelta(seconds=2)


def _since(records: list[dict[str, Any]], opened_at: datetime) -> list[dict[str, Any]]:
    """The kept events that are this window's: received since it opened. Older ones belong to an earlier
    window still running (a long triage) or being retried, which handles them; a record whose time cannot
    be read is taken, so that it is looked at."""
    out = []
    for record in records:
        try:
            received = parse_iso(str(record["received_at"]))
        except (KeyError, ValueError):
            out.append(record)
            continue
        if received >= opened_at - CLOCK_SKEW:
            out.append(record)
    return out


def run_window(
    window: Window,
    *,
    windows: WindowsPort,
    run: Callable[[WindowEvents], dict[str, Any]],
    keep_unreadable: Callable[[list[dict[str, Any]]], None],
    now: datetime | None = None,
) -> dict[str, Any]:
    """Claim the window, run its one triage over the cluster's kept events received since the window opened
    (an earlier window's events are that window's, even while its triage still runs), then forget them.

    ``run`` is the idempotent triage (keyed on the events it handles). A ``superseded`` message is stale
    (a newer window took over after this one's message went missing) and does nothing. Kept records that
    cannot be read go to ``keep_unreadable`` (the unprocessed-events queue) before they are forgotten.
    Raises when the triage fails: the message is retried and the events stay kept. ``now`` is when the claim
    happens (the cooldown runs from it); without it, the window's due time (a caller that delivers each
    message when it is due, such as a simulation).
    """
    claimed = windows.claim(window, window.due_at if now is None else now)
    out: dict[str, Any] = {"cluster_arn": window.cluster_arn, "window": window.window_id, "claim": claimed}
    if claimed == "superseded":
        return {**out, "status": "superseded"}
    events = read_events(_since(windows.kept(window.cluster_arn), window.opened_at))
    damaged = [u["event_id"] for u in events.unreadable if u["event_id"]]
    if events.unreadable:
        keep_unreadable(events.unreadable)
        windows.discard(window.cluster_arn, damaged)
        out["unreadable"] = [f"{u['event_id'] or '(no id)'}: {u['error']}" for u in events.unreadable]
    if not events.signals:
        return {**out, "status": "empty"}
    result = run(events)
    discarded = windows.discard(window.cluster_arn, events.event_ids)
    return {**out, **result, "status": "processed", "discarded": discarded}
