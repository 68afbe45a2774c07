"""The scheduled sweep's cluster step: API checks into the store, then the probe plan as batches for the state
machine (each batch runs in :mod:`functions.monitor.logic.batch`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from functions.monitor.logic.incidents import IncidentsPort, reconcile
from functions.monitor.logic.signals import kinds
from hyperpod_debugger.domain.model import CheckStatus, TriageReport
from hyperpod_debugger.lifecycle import budget, health
from hyperpod_debugger.lifecycle.findings import (
    SWEEP,
    StoredFinding,
    Transition,
    is_on_node,
    iso,
    plan_sweep,
)
from hyperpod_debugger.lifecycle.incidents import REPAIR_GRACE
from hyperpod_debugger.lifecycle.rotation import PROBEABLE, RotationPlan, describe_node, plan_rotation
from hyperpod_debugger.probe.consistency import compare_recorded
from hyperpod_debugger.remediation import ladder

if TYPE_CHECKING:
    from functions.monitor.logic.batch import SweepStore
    from hyperpod_debugger.domain.observations import ClusterObservation
    from hyperpod_debugger.lifecycle.budget import ClusterShare
    from hyperpod_debugger.lifecycle.health import ClusterHealth
    from hyperpod_debugger.triage import TriageRequest


@dataclass(frozen=True)
class RotationSettings:
    """The sweep's probe budget (from the function's environment)."""

    interval: timedelta = timedelta(minutes=15)
    period: timedelta = timedelta(days=1)
    cap: int = 480
    batch_size: int = 50
    #: this cluster's share of the StartSession budget in this sweep (rates, workers, rounds); None: every
    #: batch starts at once at the function's own rate
    share: ClusterShare | None = None
    #: when the sweep began (the rounds are offsets from it)
    sweep_started: datetime | None = None


def settings_for(
    share: ClusterShare,
    *,
    interval: timedelta,
    period: timedelta,
    began: datetime,
    max_nodes: int | None = None,
    max_batch: int | None = None,
) -> RotationSettings:
    """The rotation's settings for one cluster in one sweep: as many nodes as its share can start in the
    rounds (one batch per worker per round), within the optional caps."""
    batch_size = max(1, share.batch_size(0) if share.rounds else 1)
    if max_batch is not None:
        batch_size = min(batch_size, max_batch)
    cap = share.workers * len(share.rounds) * batch_size
    if max_nodes is not None:
        cap = min(cap, max_nodes)
    return RotationSettings(
        interval=interval, period=period, cap=cap, batch_size=batch_size, share=share, sweep_started=began
    )


@dataclass(frozen=True)
class SweepBudget:
    """The sweep's StartSession budget and the rotation's limits as the function is configured, for one cluster
    of one sweep: its share is taken when its checks are done (:meth:`settings_at`)."""

    #: StartSession calls per second the sweep may use in all, shared among the clusters it covers
    rate: float
    clusters: int
    cluster_concurrency: int
    interval_s: int
    period_s: int
    probe_timeout_s: float
    #: when the sweep began (its rounds are offsets from it)
    began: datetime
    max_nodes: int | None = None
    max_batch: int | None = None

    def settings_at(self, planned: datetime) -> RotationSettings:
        """This cluster's share of the StartSession budget in this sweep, taken when its checks are done
        (``planned``): the rounds run from then to shortly before the next sweep."""
        share = budget.share(
            self.rate,
            clusters=self.clusters,
            cluster_concurrency=self.cluster_concurrency,
            interval_s=self.interval_s,
            elapsed_s=(planned - self.began).total_seconds(),
            probe_timeout_s=self.probe_timeout_s,
        )
        return settings_for(
            share,
            interval=timedelta(seconds=self.interval_s),
            period=timedelta(seconds=self.period_s),
            began=self.began,
            max_nodes=self.max_nodes,
            max_batch=self.max_batch,
        )


def schedule(items: list[dict[str, Any]], settings: RotationSettings, now: datetime) -> list[dict[str, Any]]:
    """Each planned batch as stored: its nodes, the rate and slots its probe Lambda uses, and the round it
    runs in (``start_at`` .. ``stop_at``, when sessions may start). Worker ``w`` of round ``r`` takes batch
    ``r × workers + w``, so the batches of one worker never start sessions at the same time."""
    share, began = settings.share, settings.sweep_started or now
    out = []
    for index, item in enumerate(items):
        entry: dict[str, Any] = {"nodes": item["nodes"]}
        if share is not None and share.rounds:
            start, stop = share.rounds[min(index // share.workers, len(share.rounds) - 1)]
            entry |= {
                "rate": round(share.worker_rate, 6),
                "slots": share.slots,
                "start_at": iso(max(began + timedelta(seconds=start), now)),
                "stop_at": iso(began + timedelta(seconds=stop)),
            }
        else:
            entry["start_at"] = iso(now)
        out.append(entry)
    return out


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


# --------------------------------------------------------------------------- the cluster step


@dataclass
class SweepResult:
    """The cluster step's outcome: what the state machine gets back, and what the handler logs."""

    status: str  # processed | error
    cluster: str
    cluster_arn: str = ""
    transitions: list[Transition] = field(default_factory=list)
    plan: RotationPlan | None = None
    #: the stored plan's batches as the state machine carries them: a number and when its round opens,
    #: never node lists
    batches: list[dict[str, Any]] = field(default_factory=list)
    #: batches in flight at once (the inner Map's MaxConcurrencyPath)
    concurrency: int = 1
    error: str | None = None
    summary: dict[str, Any] | None = None
    sweep_id: str = ""
    #: the cluster's health after this run's checks (None: the node list could not be read)
    health: ClusterHealth | None = None
    #: instance id → (instance group, checks with an open problem), for the problem-node log lines
    node_groups: dict[str, str] = field(default_factory=dict)
    node_checks: dict[str, list[str]] = field(default_factory=dict)

    def response(self) -> dict[str, Any]:
        if self.status != "processed":
            return {
                "status": self.status,
                "cluster": self.cluster,
                "error": self.error,
                "batches": [],
                "concurrency": 1,
            }
        return {
            "status": "processed",
            "cluster": self.cluster,
            "cluster_arn": self.cluster_arn,
            "transitions": kinds(self.transitions),
            "rotation": self.plan.summary() if self.plan else None,
            "sweep_id": self.sweep_id,
            "batches": self.batches,
            "concurrency": self.concurrency,
        }


def sweep_cluster(
    request: TriageRequest,
    *,
    triage: Callable[[TriageRequest], tuple[TriageReport, ClusterObservation | None]],
    store: SweepStore,
    settings: RotationSettings | Callable[[datetime], RotationSettings] | None,
    sweep_id: str,
    clock: Callable[[], datetime] | None = None,
    incidents: IncidentsPort | None = None,
    repair_grace: timedelta = REPAIR_GRACE,
) -> SweepResult:
    """One cluster of the sweep: its API checks (and, on Slurm, the controller's view) into the store, then
    this sweep's probe plan as batches (``settings`` None: no probes). The cluster step reads the whole
    node list, so the findings of nodes that left the cluster resolve here.

    ``settings`` may be a function of the time the plan is made (``clock()`` once the checks are done,
    ``request.now`` without a clock): the share of the budget starts then."""
    assert request.now is not None
    now = request.now
    report, obs = triage(request)
    if report.error is not None or obs is None:
        message = report.error.message if report.error else "the cluster could not be read"
        return SweepResult("error", request.cluster, error=message)
    arn = report.cluster.arn or request.cluster
    present = frozenset(n.instance_id for n in obs.nodes.value or ()) if obs.nodes.available else None
    records = store.probe_records(arn)
    if settings is not None and obs.nodes.available:
        report = with_recorded_skew(report, obs, records, now, _period(settings, now))
    plan = plan_sweep(store.open_findings(arn), report, now, nodes_present=present, trigger=SWEEP)
    transitions = store.apply(plan, now)
    result = SweepResult(
        "processed", report.cluster.name, arn, transitions, summary=report.summary.model_dump(), sweep_id=sweep_id
    )
    if incidents is not None:
        # the cluster step read the whole node list: it speaks for every node
        reconcile(
            report,
            arn,
            findings=store,
            incidents=incidents,
            now=now,
            scope=None,
            trigger=SWEEP.what,
            repair_grace=repair_grace,
        )
    held, probed_at = store.open_findings(arn), {iid: when for iid, (when, _) in records.items()}
    if obs.nodes.available:
        nodes = list(obs.nodes.value or ())
        period = None if settings is None else _period(settings, now)
        result.health = health.fleet_health(report.cluster.name, nodes, held.values(), probed_at, now, period=period)
        result.node_groups = {n.instance_id: n.group for n in nodes}
        for finding in sorted(held.values(), key=lambda f: (f.priority or "P9", f.check)):
            if finding.instance_id:
                result.node_checks.setdefault(finding.instance_id, []).append(finding.check)
    if settings is not None:
        planned = clock() if clock is not None else now
        chosen = settings(planned) if callable(settings) else settings
        result.plan, items = plan_probe_batches(
            report, obs, held, probed_at, planned, settings=chosen, sweep_id=sweep_id
        )
        # the plan goes to the table; the state machine carries only the batch numbers and their start times
        stored = schedule(items, chosen, planned)
        store.put_plan(arn, sweep_id, stored, planned)
        result.batches = [{"batch": i, "at": entry["start_at"]} for i, entry in enumerate(stored)]
        share = chosen.share
        result.concurrency = share.concurrency if share is not None else max(1, len(stored))
    return result


def with_recorded_skew(
    report: TriageReport,
    obs: ClusterObservation,
    records: Mapping[str, tuple[datetime, Mapping[str, str]]],
    now: datetime,
    period: timedelta,
) -> TriageReport:
    """The cluster step's report with § E compared over the whole of each group: the versions the probe
    batches recorded for the nodes Running now, none older than the rotation's period. A batch compares only
    its own nodes; this sees a skew whose odd nodes were all probed in one batch."""
    running = [n for n in obs.nodes.value or () if n.status in PROBEABLE]
    findings, coverage = compare_recorded(records, running, obs.cluster, now=now, period=period)
    if not any(entry.status is CheckStatus.RAN for entry in coverage):
        return report  # nothing recorded yet (a first sweep, an older probe): the batches compare as before
    everything = [*report.findings, *findings]
    return report.model_copy(
        update={
            "findings": everything,
            "coverage": report.coverage.model_copy(update={"checks": [*report.coverage.checks, *coverage]}),
            "summary": TriageReport.summarise(everything),
            "exit_code": TriageReport.exit_code_for(everything, report.error),
        }
    )


def _period(settings: RotationSettings | Callable[[datetime], RotationSettings], now: datetime) -> timedelta:
    return (settings(now) if callable(settings) else settings).period
