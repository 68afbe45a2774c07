"""Benchmark: how fast the sweep covers a cluster, how big its state gets, and what an event storm costs.

    make bench            # or: .venv/bin/python bench/sweep_bench.py

**Sweeps** are simulated on a clock of their own (no sleeping): the stack's defaults (a sweep every 15
minutes, ``startSessionRate`` 3 of which ``startSessionReservePercent`` 34 % is left to people and 0.5/s to
the event windows, so the sweep's part is 1.48/s; ``sweepClusterConcurrency`` 3, ``probePeriodHours`` 24) go
through the real share of the budget (``hyperpod_debugger.lifecycle.budget.share``), the real planner
(``functions.monitor.logic.sweep.plan_probe_batches``: rotation, cap, batches), the real cluster-step output
and the real inner-Map items (the stack's ``ItemSelector``, applied by ``hyperpod_sim.lambda_harness``). Each
batch starts its sessions at its worker's rate from its round's start, and none after the round closes (those
nodes stay due); a session takes ``SESSION_S``; each sweep's planner sees when every node was last probed. A
pass is complete when every node has been probed once.

**The event storm**: 1,000 Node Health Events naming 1,000 distinct nodes of one 20,000-node cluster, evenly
within five minutes, through the real event path on the embedded moto server: each event parsed, turned into
its signal and kept for its cluster's window in the findings table (``functions.monitor.logic.windows``); each
window, when its delayed message is due on the simulated clock, claimed and run as one real ``run_triage``
(probes off: there is no agent here; the findings writes planned, not made), counting SageMaker, EC2 and Logs
calls. The sweep's cluster step is run the same way. A node counts as triaged when its window's report holds
HyperPod's verdict on it.

The last lines are exactly:

    sweep-pass shape=1x20000 first_pass_h=<h> floor_h=<nodes ÷ budget, h> state_kib=<largest state payload>
    sweep-pass shape=3x5000 ...
    event-storm events=1000 nodes=20000 api_calls=<n> sweep_api_calls=<n> nodes_triaged=<n>

Targets (issue 15): first pass within 1.15 × floor for both shapes, the largest state under 64 KiB, the storm
at most 3 × one sweep's cluster-step calls with every named node triaged; (issue 27) with a
``probePeriodHours`` just above the floor, no node waits longer than the period between two probes.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from functions.monitor.logic import windows
from functions.monitor.logic.sweep import SweepResult, plan_probe_batches, schedule, settings_for
from functions.shared.events import PROBE_ITEM_SELECTOR
from hyperpod_debugger.domain.model import ClusterRef, Coverage
from hyperpod_debugger.domain.observations import Cluster as ClusterShape
from hyperpod_debugger.domain.observations import (
    ClusterNode,
    ClusterObservation,
    EventWindow,
    LogObservation,
    NetworkObservation,
    Observed,
)
from hyperpod_debugger.lifecycle import budget
from hyperpod_debugger.lifecycle.findings import parse_iso
from hyperpod_debugger.triage import build_report
from hyperpod_sim.lambda_harness import map_items

#: The stack's defaults (infra/constants.py): the sweep's part of the account's rate is
#: ``budget.usable_rate(START_SESSION_RATE)``, after people's reserve and the event windows' probes.
INTERVAL_S = 15 * 60
START_SESSION_RATE = 3.0
#: probePeriodHours just above the floor of a 20,000-node cluster (20,000 ÷ 1.48/s = 3.75 h), and how long
#: the steady state is watched: detection latency as a setting
STEADY_PERIOD = timedelta(hours=4.5)
STEADY_HOURS = 18
CLUSTER_CONCURRENCY = 3
PROBE_PERIOD = timedelta(hours=24)
#: A probe session, start to document (the probe script's items run in about this long on a healthy node).
SESSION_S = 30.0
#: The cluster step before any probe starts: a fixed part and one ListClusterNodes page per 100 nodes
#: (measured: a 20,000-node triage takes ~9 s on the simulator, bench/triage_bench.py).
CLUSTER_STEP_BASE_S = 3.0
CLUSTER_STEP_PER_PAGE_S = 0.03
#: Where the simulation gives up on a pass.
HORIZON = timedelta(hours=72)
#: SageMaker, EC2 and Logs calls count towards the storm's cost.
COUNTED_SERVICES = ("sagemaker:", "ec2:", "logs:")
T0 = datetime(2026, 12, 1, tzinfo=UTC)


@dataclass
class Cluster:
    name: str
    nodes: list[ClusterNode]
    last_probed: dict[str, datetime] = field(default_factory=dict)
    #: the longest time between two probes of one node once every node has been probed
    worst_gap: timedelta = timedelta(0)
    period: timedelta = PROBE_PERIOD

    @property
    def arn(self) -> str:
        return f"arn:aws:sagemaker:us-west-2:123456789012:cluster/{self.name}"


def _nodes(prefix: int, count: int) -> list[ClusterNode]:
    return [
        ClusterNode(f"i-{prefix:02x}{n:015x}", "workers", "ml.p5.48xlarge", "Running", "", None) for n in range(count)
    ]


def _probed(cluster: Cluster, instance_id: str, at: datetime) -> None:
    last = cluster.last_probed.get(instance_id)
    if last is not None and len(cluster.last_probed) == len(cluster.nodes):  # the steady state, after a pass
        cluster.worst_gap = max(cluster.worst_gap, at - last)
    cluster.last_probed[instance_id] = at


def _sweep_cluster(cluster: Cluster, clusters: int, now: datetime, sweep_id: str) -> tuple[int, int, int]:
    """One cluster's part of one sweep, as the cluster step and the probe steps run it: the share of the
    budget taken when the checks end, the plan, its schedule (rounds), then every batch starting its sessions
    at its rate inside its round. Returns (sessions started, nodes probed, largest state payload in bytes)."""
    pages = math.ceil(len(cluster.nodes) / 100)
    checks_s = CLUSTER_STEP_BASE_S + pages * CLUSTER_STEP_PER_PAGE_S
    share = budget.share(
        budget.usable_rate(START_SESSION_RATE),
        clusters=clusters,
        cluster_concurrency=CLUSTER_CONCURRENCY,
        interval_s=INTERVAL_S,
        elapsed_s=checks_s,
        probe_timeout_s=budget.PROBE_TIMEOUT_S,
    )
    settings = settings_for(share, interval=timedelta(seconds=INTERVAL_S), period=cluster.period, began=now)
    planned_at = now + timedelta(seconds=checks_s)
    report = build_report(
        None, planned_at, ClusterRef(name=cluster.name, arn=cluster.arn, region="us-west-2"), [], Coverage()
    )
    plan, items = plan_probe_batches(
        report, _observation(cluster), {}, cluster.last_probed, planned_at, settings=settings, sweep_id=sweep_id
    )
    stored = schedule(items, settings, planned_at)
    result = SweepResult("processed", cluster.name, cluster.arn, sweep_id=sweep_id, plan=plan)
    result.batches = [{"batch": i, "at": entry["start_at"]} for i, entry in enumerate(stored)]
    result.concurrency = share.concurrency
    output = result.response()
    payloads = [json.dumps(output), *(json.dumps(i) for i in map_items(output, "$.batches", PROBE_ITEM_SELECTOR))]
    largest = max(len(p.encode()) for p in payloads)

    sessions = probed = 0
    for entry in stored:  # every batch is in flight at once, each waiting for its round
        start = (parse_iso(entry["start_at"]) - now).total_seconds()
        stop = (parse_iso(entry["stop_at"]) - now).total_seconds()
        for j, descriptor in enumerate(entry["nodes"]):
            opened = start + j / entry["rate"]
            if opened >= stop:
                break  # the round closed: the rest stay due and lead the next plan
            sessions += 1
            _probed(cluster, descriptor["instance_id"], now + timedelta(seconds=opened + SESSION_S))
            probed += 1
    return sessions, probed, largest


def _observation(cluster: Cluster) -> ClusterObservation:
    """The planner's input as the collector builds it; only the node list, events and logs are read."""
    shape = ClusterShape(
        arn=cluster.arn,
        name=cluster.name,
        cluster_id=cluster.name,
        region="us-west-2",
        account_id="123456789012",
        status="InService",
        failure_message=None,
        orchestrator="EKS",
        orchestrator_raw=None,
        eks_cluster_arn=None,
        node_recovery="Automatic",
        provisioning_mode="Continuous",
        vpc=None,
        instance_groups=(),
        creation_time=None,
    )
    unused: Observed = Observed.skip("not read by the planner")
    return ClusterObservation(
        cluster=shape,
        collected_at=T0,
        nodes=Observed.ok(cluster.nodes),
        node_detail=None,
        events=Observed.ok(EventWindow(T0, T0, ())),
        network=NetworkObservation(unused, (), unused, unused, unused, unused, unused, unused),
        eks=unused,
        logs=LogObservation("unused", unused, unused, unused),
        instance_types=unused,
        offerings=unused,
    )


def sweep_pass(shape: list[int]) -> dict[str, float]:
    clusters = [Cluster(f"c{i:011d}", _nodes(i, count)) for i, count in enumerate(shape)]
    total = sum(shape)
    sessions = 0
    largest = 0
    sweep = 0
    while True:
        now = T0 + timedelta(seconds=sweep * INTERVAL_S)
        if now - T0 > HORIZON:
            first_pass_s = math.inf
            break
        for cluster in clusters:  # all at once: the shapes have at most sweepClusterConcurrency clusters
            started, _, size = _sweep_cluster(cluster, len(clusters), now, f"sweep-{sweep}")
            sessions += started
            largest = max(largest, size)
        sweep += 1
        if all(len(c.last_probed) == len(c.nodes) for c in clusters):
            first_pass_s = max(max(c.last_probed.values()) for c in clusters).timestamp() - T0.timestamp()
            break
    usable = budget.usable_rate(START_SESSION_RATE)
    floor_s = total / usable
    return {
        "first_pass_h": first_pass_s / 3600,
        "floor_h": floor_s / 3600,
        "state_kib": largest / 1024,
        "sessions_per_s": sessions / first_pass_s if math.isfinite(first_pass_s) else 0.0,
        "sweeps": sweep,
        "usable": usable,
    }


def steady_state(nodes: int, period: timedelta, hours: float) -> dict[str, float]:
    """``probePeriodHours`` near the floor: after the first pass, the longest any node waits between probes."""
    cluster = Cluster("c00000000000", _nodes(0, nodes), period=period)
    for sweep in range(int(hours * 3600 // INTERVAL_S)):
        _sweep_cluster(cluster, 1, T0 + timedelta(seconds=sweep * INTERVAL_S), f"sweep-{sweep}")
    return {"worst_gap_h": cluster.worst_gap.total_seconds() / 3600, "period_h": period.total_seconds() / 3600}


class _PlannedStore:
    """The findings store's port without its writes: every planned change counts as done (what a storm costs
    in DynamoDB transactions is ``bench/monitor_bench.py``'s business, and moto's are slow)."""

    def open_findings(self, cluster_arn: str, *, include_resolved: bool = False) -> dict:
        return {}

    def apply(self, plan, now):  # noqa: ANN001, ANN201 - FindingsPort
        from hyperpod_debugger.lifecycle.findings import Transition

        return [
            Transition(c.kind, c.item.fingerprint, c.item.cluster_arn, c.item.instance_id, plan.at, c.item)
            for c in plan.changes()
        ]


class _Queue:
    """The window queue on the simulated clock: each message becomes visible ``delay_s`` after it was sent."""

    def __init__(self) -> None:
        self.clock = 0.0
        self.pending: list[tuple[float, windows.Window]] = []

    def schedule(self, window: windows.Window, delay_s: int) -> None:
        self.pending.append((self.clock + delay_s, window))


def event_storm(nodes: int, events: int, storm_s: float) -> dict[str, float]:
    """``events`` Node Health Events naming distinct nodes, evenly over ``storm_s`` seconds, through the real
    event path: each event parsed and kept for its cluster's window (``logic.windows.enqueue`` on the findings
    table), each window claimed when its delayed message arrives and run as one real triage (probes off: no
    agents here), on a simulated clock. Counts SageMaker, EC2 and Logs calls; the sweep's cluster step is run
    the same way."""
    from functions.monitor.logic import signals
    from functions.monitor.window_store import TableWindows
    from functions.shared.events import parse_hyperpod_event
    from hyperpod_debugger.aws.clients import AwsClients
    from hyperpod_debugger.checks.health_event import CHECK as HEALTH_CHECK
    from hyperpod_debugger.store.findings import create_table
    from hyperpod_debugger.triage import TriageRequest, run_triage
    from hyperpod_sim.server import simulated_aws

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from triage_bench import REGION, seed_large

    def counted(calls: dict[str, int]) -> int:
        return sum(n for op, n in calls.items() if op.startswith(COUNTED_SERVICES))

    now = datetime.now(UTC)
    with simulated_aws():
        clients = AwsClients(REGION, max_attempts=2)
        cluster = seed_large(clients, nodes, now)
        arn = cluster.arn
        workers = cluster.nodes["workers"]
        sweep = run_triage(TriageRequest(cluster=cluster.name, region=REGION, now=now))
        create_table(clients, "bench-findings")
        table = TableWindows(clients, "bench-findings")
        store = _PlannedStore()
        queue = _Queue()
        api_calls = 0
        triaged: set[str] = set()
        latencies: list[float] = []
        triages = 0

        def run_due(until: float) -> None:
            nonlocal api_calls, triages
            while (due := sorted(p for p in queue.pending if p[0] <= until)) != []:
                at, window = due[0]
                queue.pending.remove(due[0])
                queue.clock = at

                def run(handled: windows.WindowEvents) -> dict[str, object]:
                    nonlocal api_calls, triages
                    reports = []

                    def triage(request: TriageRequest):  # noqa: ANN202 - the real triage, its report kept
                        report = run_triage(request, clients)
                        reports.append(report)
                        return report

                    windows.handle_window(handled, triage=triage, store=store, now=now, probe=False)
                    [report] = reports
                    api_calls += counted(report.coverage.api_calls)
                    triages += 1
                    triaged.update(f.instance_id for f in report.findings if f.check == HEALTH_CHECK and f.instance_id)
                    done = queue.clock + CLUSTER_STEP_BASE_S + math.ceil(nodes / 100) * CLUSTER_STEP_PER_PAGE_S
                    arrived = {s.event_id: arrival[s.event_id] for s in handled.signals}
                    latencies.extend(done - t for t in arrived.values())
                    return {}

                windows.run_window(window, windows=table, run=run, keep_unreadable=lambda _: None)

        arrival: dict[str, float] = {}
        for i, iid in enumerate(workers[:events]):
            t = i * storm_s / events
            run_due(t)
            queue.clock = t
            event = _health_event(arn, cluster.name, iid, f"storm-{i:05d}", now)
            signal = signals.signal_of(parse_hyperpod_event(event))
            assert signal is not None
            arrival[signal.event_id] = t
            windows.enqueue(signal, windows=table, queue=queue, now=now + timedelta(seconds=t))
        run_due(math.inf)
    return {
        "api_calls": api_calls,
        "sweep_api_calls": counted(sweep.coverage.api_calls),
        "nodes_triaged": len(triaged),
        "triages": triages,
        "longest_s": max(latencies),
    }


def _health_event(arn: str, name: str, instance_id: str, event_id: str, now: datetime) -> dict[str, object]:
    """A Node Health Event in the shape HyperPod publishes (tests/events/hyperpod_node_health_event.json)."""
    return {
        "version": "0",
        "id": event_id,
        "detail-type": "SageMaker HyperPod Cluster Node Health Event",
        "source": "aws.sagemaker",
        "account": arn.split(":")[4],
        "time": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": arn.split(":")[3],
        "resources": [arn],
        "detail": {
            "ClusterName": name,
            "ClusterArn": arn,
            "InstanceId": instance_id,
            "Tags": {},
            "HealthSummary": {
                "HealthStatus": "Unhealthy",
                "HealthStatusReason": "HyperPod Health Monitoring Agent (HMA) has detected fault type "
                "NvidiaErrorTerminate on the node",
                "RepairAction": "None",
                "Recommendation": "Reboot or replace the node",
            },
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-storm", action="store_true", help="skip the event storm (it seeds 20,000 nodes)")
    args = parser.parse_args()
    targets: dict[str, bool] = {}
    lines = []
    for shape in ([20_000], [5_000] * 3):
        began = time.perf_counter()
        figures = sweep_pass(shape)
        name = f"{len(shape)}x{shape[0]}"
        print(
            f"sweep {name}: {figures['sweeps']} sweeps, StartSession {figures['sessions_per_s']:.2f}/s achieved of "
            f"the {figures['usable']:.2f}/s budget ({figures['sessions_per_s'] / figures['usable']:.0%}; the account's "
            f"{START_SESSION_RATE:g}/s less {budget.RESERVE_PERCENT:g} % for people and {budget.EVENT_WINDOW_RATE:g}/s "
            f"for the event windows); simulated in {time.perf_counter() - began:.1f} s"
        )
        lines.append(
            f"sweep-pass shape={name} first_pass_h={figures['first_pass_h']:.2f} floor_h={figures['floor_h']:.2f} "
            f"state_kib={figures['state_kib']:.1f}"
        )
        targets[f"{name}: first pass <= 1.15 x floor"] = figures["first_pass_h"] <= 1.15 * figures["floor_h"]
        targets[f"{name}: state < 64 KiB"] = figures["state_kib"] < 64
    # detection latency as a setting: probePeriodHours just above the floor (nodes ÷ budget, ~3.75 h here)
    steady = steady_state(20_000, STEADY_PERIOD, hours=STEADY_HOURS)
    print(
        f"probePeriodHours {steady['period_h']:g} on 1x20000 for {STEADY_HOURS} simulated hours: the longest gap "
        f"between two probes of one node was {steady['worst_gap_h']:.2f} h"
    )
    targets[f"1x20000: every node probed within probePeriodHours={steady['period_h']:g}"] = (
        steady["worst_gap_h"] <= steady["period_h"]
    )
    if not args.no_storm:
        began = time.perf_counter()
        storm = event_storm(20_000, 1_000, storm_s=300)
        print(
            f"event storm: {storm['triages']:.0f} window triages of {windows.WINDOW_S} s windows for 1000 events; "
            f"the longest from an event to its triage's end {storm['longest_s']:.0f} s "
            f"(simulated in {time.perf_counter() - began:.1f} s)"
        )
        lines.append(
            f"event-storm events=1000 nodes=20000 api_calls={storm['api_calls']:.0f} "
            f"sweep_api_calls={storm['sweep_api_calls']:.0f} nodes_triaged={storm['nodes_triaged']:.0f}"
        )
        targets["storm: api_calls <= 3 x sweep_api_calls"] = storm["api_calls"] <= 3 * storm["sweep_api_calls"]
        targets["storm: every named node triaged"] = storm["nodes_triaged"] == 1_000
    print("targets:")
    for name, ok in targets.items():
        print(f"  [{'PASS' if ok else 'FAIL'}] {name}")
    for line in lines:
        print(line)
    return 0 if all(targets.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
