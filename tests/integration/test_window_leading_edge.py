"""The leading edge through the real handlers and the DynamoDB adapter on the simulated account, on one simulated
clock: moto's SQS time and the handlers' ``now`` are frozen between the test's steps and moved by it, so "what
ran when" is exact (no sleeping, no wall-clock figure)."""

from __future__ import annotations

import copy
import math
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import moto.sqs.models as sqs_models
import pytest

import functions.monitor.handlers.windows as window_function
from functions.monitor import handlers, signal_run
from functions.monitor.logic import windows
from functions.monitor.logic.signals import ClusterSignal, NodeHealthReport
from functions.monitor.window_store import TableWindows
from hyperpod_debugger.lifecycle.findings import parse_iso
from hyperpod_debugger.store.findings import create_table
from hyperpod_sim import seed
from hyperpod_sim.demo import _simulated_account
from hyperpod_sim.lambda_harness import monitor_harness
from hyperpod_sim.monitor_demo import DEMO_ENV, node_health_event
from tests.integration.test_log_subscription import delivery, slurm_detection

W = windows.WINDOW_S
LEAD = windows.LEAD_S


class SimClock:
    """Seconds since the test began, for moto's SQS (message delays, visibility) and the handlers' clock."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.start = datetime.now(UTC).replace(microsecond=0)  # whole seconds: the table keeps milliseconds
        self.t = 0.0
        real_time, real_millis = sqs_models.unix_time, sqs_models.unix_time_millis
        monkeypatch.setattr(sqs_models, "unix_time", lambda dt=None: real_time(dt) if dt else self.seconds())
        monkeypatch.setattr(
            sqs_models, "unix_time_millis", lambda dt=None: real_millis(dt) if dt else self.seconds() * 1000.0
        )
        monkeypatch.setattr(signal_run, "now", self.now)
        monkeypatch.setattr(window_function, "now", self.now)

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.t)

    def seconds(self) -> float:
        return self.now().timestamp()


@pytest.fixture
def account(monkeypatch):
    clock = SimClock(monkeypatch)
    with _simulated_account(clock.now()) as (clients, demo):
        with monitor_harness(clients, env=DEMO_ENV, coalesce=True) as monitor:
            yield clients, demo, monitor, clock


def event_for(demo, node: str, when: datetime, n: int, status: str = "Unhealthy") -> dict:
    event = copy.deepcopy(node_health_event(demo, node, when))
    event["id"] = f"0000000{n}-aaaa-4bbb-8ccc-{n:012d}"
    event["detail"]["HealthSummary"]["HealthStatus"] = status
    return event


def applied(monitor) -> list[dict]:
    return [entry for entry in monitor.logs if entry.get("message") == "window triage applied"]


def run_until(monitor, clock: SimClock, until: float) -> list[float]:
    """Move the clock a second at a time up to ``until``, running the window function on what is visible;
    the seconds at which a window ran."""
    ran = []
    while clock.t < until:
        clock.t += 1
        if any(r == {"batchItemFailures": []} for r in monitor.run_windows(handlers.event_window)):
            ran.append(clock.t)
    return ran


def test_a_lone_node_health_event_on_a_quiet_cluster_is_triaged_in_seconds_scoped_to_its_node(account):
    _, demo, monitor, clock = account
    node = demo.eks.nodes["gpu-workers"][1]
    queued = monitor.invoke(handlers.event_handler, event_for(demo, node, clock.now(), 1))
    assert queued["leading"] is True and parse_iso(queued["due_at"]) == clock.now() + timedelta(seconds=LEAD)
    assert run_until(monitor, clock, W + 10) == [LEAD]  # before: W seconds
    [window] = applied(monitor)
    assert window["scoped"] == node and window["events"] == 1 and window["probed"] == 1


def test_the_next_event_waits_for_the_cooldown_and_a_routine_one_for_a_whole_window(account):
    _, demo, monitor, clock = account
    first, second = demo.eks.nodes["gpu-workers"][:2]
    monitor.invoke(handlers.event_handler, event_for(demo, first, clock.now(), 1))
    assert run_until(monitor, clock, LEAD) == [LEAD]
    clock.t = 30
    queued = monitor.invoke(handlers.event_handler, event_for(demo, second, clock.now(), 2))
    assert queued["leading"] is False
    # the cluster was read at LEAD s: the next read is a window later, whatever the event's urgency
    assert run_until(monitor, clock, 400) == [LEAD + W]
    assert [w["scoped"] for w in applied(monitor)] == [first, second]
    # long after: the cluster is quiet again; a node reported healthy is routine and waits a whole window
    clock.t = 1000
    routine = monitor.invoke(handlers.event_handler, event_for(demo, first, clock.now(), 3, status="Healthy"))
    assert routine["leading"] is False
    assert run_until(monitor, clock, 1000 + W + 10) == [1000 + W]


def test_a_health_agent_detection_in_the_logs_leads_too(account):
    _, demo, monitor, clock = account
    worker, stream = slurm_detection(demo.slurm)
    payload = delivery(demo.slurm, stream, [seed.slurm_hma_record(clock.now(), 79)])
    result = monitor.invoke(handlers.log_subscription, payload)
    [kept] = result["nodes"]
    assert kept["node"] == worker and kept["window"].startswith("w-")
    assert run_until(monitor, clock, W) == [LEAD]
    [window] = applied(monitor)
    assert window["scoped"] == worker


def test_a_lost_window_is_taken_over_by_an_urgent_event_which_leads_and_covers_its_events(account):
    clients, demo, monitor, clock = account
    table = TableWindows(clients, monitor.resources.findings_table)
    node = demo.eks.nodes["gpu-workers"][0]
    lost_signal = windows.signal_of_record(
        {"event_id": "lost-1", "cluster_arn": demo.eks.arn, "region": "us-west-2", "node": node}
    )
    past = clock.now() - timedelta(minutes=10)
    lost = windows.plan_window(lost_signal, None, past)  # its opener died before sending its message
    assert lost is not None and table.open(lost, replacing=None).ok
    table.keep(demo.eks.arn, windows.record_of(lost_signal, past), past)

    taken = monitor.invoke(handlers.event_handler, event_for(demo, node, clock.now(), 2))
    assert taken["leading"] is True and taken["window"] != lost.window_id
    assert run_until(monitor, clock, W) == [LEAD]
    [window] = applied(monitor)
    assert window["events"] == 2


# --- the adapter alone -------------------------------------------------------------------------------------


ARN = "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcd1234efgh"
T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def signal(n: int) -> ClusterSignal:
    node = f"i-{n:017x}"
    return ClusterSignal(
        event_id=f"e-{n:05d}",
        cluster_arn=ARN,
        region="us-west-2",
        node=node,
        health=NodeHealthReport(instance_id=node, status="Unhealthy"),
        source="Node Health Event",
    )


@pytest.fixture
def table():
    from hyperpod_debugger.aws.clients import AwsClients
    from hyperpod_sim.server import simulated_aws

    with simulated_aws():
        clients = AwsClients("us-west-2", max_attempts=1)
        create_table(clients, "windows-table")
        yield TableWindows(clients, "windows-table"), clients


class Queue:
    def __init__(self) -> None:
        self.clock = 0.0
        self.pending: list[tuple[float, windows.Window]] = []

    def schedule(self, window: windows.Window, delay_s: int) -> None:
        self.pending.append((self.clock + delay_s, window))


def test_a_five_minute_storm_on_the_table_is_three_reads_the_first_in_seconds(table):
    store, clients = table
    queue = Queue()
    triages: list[tuple[float, list[str]]] = []

    def deliver(until: float) -> None:
        while due := sorted((p for p in queue.pending if p[0] <= until), key=lambda p: p[0]):
            when, window = due[0]
            queue.pending.remove(due[0])

            def run(handled: windows.WindowEvents, when: float = when) -> dict[str, Any]:
                triages.append((when, handled.event_ids))
                return {}

            now = T0 + timedelta(seconds=when)
            windows.run_window(window, windows=store, run=run, keep_unreadable=lambda _: None, now=now)

    event_path: Counter[str] = Counter()
    for i in range(300):  # one Node Health Event a second for five minutes, each naming another node
        deliver(i)
        queue.clock = i
        before = Counter(clients.calls)
        windows.enqueue(signal(i), windows=store, queue=queue, now=T0 + timedelta(seconds=i))
        event_path += Counter(clients.calls) - before
    deliver(math.inf)

    assert [t for t, _ in triages] == [LEAD, LEAD + W, LEAD + 3 * W]
    handled = [e for _, ids in triages for e in ids]
    assert sorted(handled) == [f"e-{i:05d}" for i in range(300)]  # each once, none lost
    assert store.kept(ARN) == []
    # the event function only writes (its role has PutItem and DeleteItem on the table): one item per event,
    # one refused write per event that found a window, one more write per window it opened
    assert set(event_path) == {"dynamodb:PutItem"}
    assert event_path["dynamodb:PutItem"] == 300 + 299 + 3  # (the first event found no record)
    # one record for the cluster, claimed, expiring
    last = store.latest(ARN)
    assert last is not None and not last.open and last.claimed_at == T0 + timedelta(seconds=LEAD + 3 * W)
    [item] = clients.client("dynamodb").scan(TableName="windows-table")["Items"]
    assert int(item["expires_at"]["N"]) > (T0 + timedelta(seconds=LEAD + 3 * W)).timestamp()


def test_of_two_openers_that_saw_the_same_record_one_opens_and_the_other_is_told_what_it_found(table):
    store, _ = table
    a = windows.plan_window(signal(1), None, T0)
    b = windows.plan_window(signal(2), None, T0)
    assert a is not None and b is not None
    assert store.open(a, replacing=None).ok
    refused = store.open(b, replacing=None)
    assert not refused.ok and refused.found == windows.LastWindow(a)
    # claimed, the record is still there for the next window's cooldown; an opener that saw it open is refused
    assert store.claim(a, T0 + timedelta(seconds=LEAD)) == "claimed"
    assert not store.open(b, replacing=windows.LastWindow(a)).ok
    seen = store.latest(ARN)
    assert seen == windows.LastWindow(a, T0 + timedelta(seconds=LEAD))
    follow = windows.plan_window(signal(2), seen, T0 + timedelta(seconds=10))
    assert follow is not None and store.open(follow, replacing=seen).ok
    assert store.claim(a, T0 + timedelta(seconds=20)) == "gone"  # a repeat delivery of a's message


def test_a_window_that_could_not_be_scheduled_is_undone_to_the_record_it_replaced(table):
    store, _ = table
    lead = windows.plan_window(signal(1), None, T0)
    assert lead is not None and store.open(lead, replacing=None).ok
    assert store.claim(lead, T0 + timedelta(seconds=LEAD)) == "claimed"
    seen = store.latest(ARN)

    class Refusing:
        def schedule(self, window, delay_s):
            raise RuntimeError("SQS refused the message")

    with pytest.raises(RuntimeError):
        windows.enqueue(signal(2), windows=store, queue=Refusing(), now=T0 + timedelta(seconds=30))
    assert store.latest(ARN) == seen  # the cooldown is remembered: the retry does not lead
    assert [r["event_id"] for r in store.kept(ARN)] == ["e-00002"]  # and the event is kept for it
    # with nothing to put back, the record goes
    elsewhere = ClusterSignal(event_id="x", cluster_arn=f"{ARN}0", region="us-west-2", source="Node Health Event")
    lone = windows.plan_window(elsewhere, None, T0)
    assert lone is not None and store.open(lone, replacing=None).ok
    store.cancel(lone, restore=None)
    assert store.latest(f"{ARN}0") is None
