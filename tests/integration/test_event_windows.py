"""Coalesced events through the real handlers on the simulated account: the event function keeps each event and
opens its cluster's window; the window function, when the window's delayed message arrives, runs one triage
for every event of the window. Moto's SQS clock is moved past the delay (no sleeping)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta

import pytest

from functions.monitor import handlers, signal_run
from functions.monitor.logic import windows
from functions.monitor.window_store import TableWindows, WindowQueue
from hyperpod_debugger.store.findings import FindingStore
from hyperpod_sim.demo import _simulated_account
from hyperpod_sim.lambda_harness import SqsClock, monitor_harness
from hyperpod_sim.monitor_demo import DEMO_ENV, node_health_event


@pytest.fixture
def account():
    now = datetime.now(UTC)
    with _simulated_account(now) as (clients, demo), SqsClock() as clock:
        with monitor_harness(clients, env=DEMO_ENV, coalesce=True) as monitor:
            yield clients, demo, monitor, clock, now


def event_for(demo, node: str, now: datetime, n: int) -> dict:
    event = copy.deepcopy(node_health_event(demo, node, now))
    event["id"] = f"0000000{n}-aaaa-4bbb-8ccc-{n:012d}"
    return event


def window_logs(monitor) -> list[dict]:
    return [entry for entry in monitor.logs if entry.get("message") == "window triage applied"]


def test_events_for_one_cluster_become_one_triage_that_probes_every_named_node(account):
    clients, demo, monitor, clock, now = account
    nodes = demo.eks.nodes["gpu-workers"][:3]
    results = [monitor.invoke(handlers.event_handler, event_for(demo, n, now, i)) for i, n in enumerate(nodes)]
    assert [r["status"] for r in results] == ["queued"] * 3
    # a Node Health Event on a quiet cluster opens a leading window (due in seconds: tests/integration/
    # test_window_leading_edge.py follows it on a simulated clock); the two that follow join it
    assert results[0]["window"].startswith("w-") and results[0]["leading"] is True
    assert [r["window"] for r in results[1:]] == ["joined the open window"] * 2
    assert monitor.windows.depth() == 1  # one window message for the three events

    clock.advance(windows.WINDOW_S + 1)
    [response] = monitor.run_windows(handlers.event_window)
    assert response == {"batchItemFailures": []}
    [applied] = window_logs(monitor)
    assert (applied["events"], applied["nodes"], applied.get("scoped")) == (3, 3, None)
    # one cluster read for the three events; the Running nodes probed (the third is in Failure, not probed)
    assert applied["probed"] == 2 and applied["not_probed"] == [nodes[2]]

    store = FindingStore(clients, monitor.resources.findings_table)
    stored = store.open_findings(demo.eks.arn).values()
    verdicts = {f.instance_id: f for f in stored if f.check == "events.node_health"}
    assert set(verdicts) == set(nodes)  # HyperPod's verdict on each named node
    # each alert names the event about its node; the cluster's own findings name the window
    assert all(f.trigger_node == node and f.trigger_kind == "event" for node, f in verdicts.items())
    others = [f for f in stored if f.instance_id not in nodes]
    assert others and all(f.trigger and f.trigger.startswith("3 HyperPod events in one window") for f in others)
    # the events are forgotten once handled, and the next event opens a new window: not a leading one, since
    # the cluster was read a moment ago (it is due a cooldown after that read)
    assert TableWindows(clients, monitor.resources.findings_table).kept(demo.eks.arn) == []
    again = monitor.invoke(handlers.event_handler, event_for(demo, nodes[0], now, 9))
    assert again["window"].startswith("w-") and again["leading"] is False


def test_one_event_alone_gets_the_nodes_scoped_triage(account):
    _, demo, monitor, clock, now = account
    node = demo.eks.nodes["gpu-workers"][1]
    monitor.invoke(handlers.event_handler, event_for(demo, node, now, 1))
    clock.advance(windows.WINDOW_S + 1)
    monitor.run_windows(handlers.event_window)
    [applied] = window_logs(monitor)
    assert applied["scoped"] == node and applied["probed"] == 1


def test_a_failed_triage_keeps_the_events_and_the_retry_runs_them(account, monkeypatch):
    clients, demo, monitor, clock, now = account
    nodes = demo.eks.nodes["gpu-workers"][:2]
    for i, node in enumerate(nodes):
        monitor.invoke(handlers.event_handler, event_for(demo, node, now, i))
    clock.advance(windows.WINDOW_S + 1)

    def broken(request, clients):
        raise RuntimeError("SageMaker is down")

    monkeypatch.setattr(signal_run, "run_triage", broken)
    [failed] = monitor.run_windows(handlers.event_window)
    assert len(failed["batchItemFailures"]) == 1
    kept = TableWindows(clients, monitor.resources.findings_table).kept(demo.eks.arn)
    assert len(kept) == 2  # nothing lost

    monkeypatch.undo()
    clock.advance(1801)  # the queue's visibility timeout: SQS delivers the window again
    [retried] = monitor.run_windows(handlers.event_window)
    assert retried == {"batchItemFailures": []}
    [applied] = window_logs(monitor)
    assert applied["events"] == 2
    assert TableWindows(clients, monitor.resources.findings_table).kept(demo.eks.arn) == []


def test_a_window_message_that_is_not_one_is_kept_aside_and_not_retried(account):
    clients, _, monitor, _, _ = account
    WindowQueue(clients, monitor.resources.window_queue_url)._sqs.send_message(
        QueueUrl=monitor.resources.window_queue_url, MessageBody="not a window"
    )
    [response] = monitor.run_windows(handlers.event_window)
    assert response == {"batchItemFailures": []}
    kept = clients.client("sqs").receive_message(
        QueueUrl=monitor.resources.unprocessed_queue_url, MessageAttributeNames=["All"]
    )["Messages"]
    assert kept[0]["MessageAttributes"]["kind"]["StringValue"] == "window message"


def test_a_lost_window_is_taken_over_and_its_late_message_does_nothing(account):
    clients, demo, monitor, clock, now = account
    table = TableWindows(clients, monitor.resources.findings_table)
    node = demo.eks.nodes["gpu-workers"][0]
    signal = windows.signal_of_record(
        {"event_id": "lost-1", "cluster_arn": demo.eks.arn, "region": "us-west-2", "node": node}
    )
    # an opener that died between opening the window and sending its message
    past = now - timedelta(minutes=10)
    lost = windows.plan_window(signal, None, past)
    assert lost is not None and table.open(lost, replacing=None).ok
    table.keep(demo.eks.arn, windows.record_of(signal, past), past)

    taken = monitor.invoke(handlers.event_handler, event_for(demo, node, now, 2))
    assert taken["window"].startswith("w-") and taken["window"] != lost.window_id
    assert table.claim(lost, now) == "superseded"  # the lost message, should it arrive, runs nothing
    clock.advance(windows.WINDOW_S + 1)
    monitor.run_windows(handlers.event_window)
    [applied] = window_logs(monitor)
    assert applied["events"] == 2  # the lost window's event is handled by the one that took over


def test_a_damaged_kept_event_goes_to_the_unprocessed_queue(account):
    clients, demo, monitor, clock, now = account
    node = demo.eks.nodes["gpu-workers"][0]
    monitor.invoke(handlers.event_handler, event_for(demo, node, now, 1))
    ddb = clients.client("dynamodb")
    ddb.put_item(
        TableName=monitor.resources.findings_table,
        Item={
            "pk": {"S": f"EVENTS#{demo.eks.arn}"},
            "sk": {"S": "EVENT#damaged"},
            "item_type": {"S": "EVENT"},
            "record": {"S": "{not json"},
        },
    )
    clock.advance(windows.WINDOW_S + 1)
    [response] = monitor.run_windows(handlers.event_window)
    assert response == {"batchItemFailures": []}
    [applied] = window_logs(monitor)
    assert applied["events"] == 1
    kept = clients.client("sqs").receive_message(
        QueueUrl=monitor.resources.unprocessed_queue_url, MessageAttributeNames=["All"]
    )["Messages"]
    assert json.loads(kept[0]["Body"])["event_id"] == "damaged"
    assert TableWindows(clients, monitor.resources.findings_table).kept(demo.eks.arn) == []


def test_a_window_opened_while_the_last_one_still_triages_takes_only_its_own_events(account):
    clients, demo, monitor, _, now = account
    table = TableWindows(clients, monitor.resources.findings_table)
    first, second = demo.eks.nodes["gpu-workers"][:2]

    def signal(event_id: str, node: str) -> windows.ClusterSignal:
        record = {"event_id": event_id, "cluster_arn": demo.eks.arn, "region": "us-west-2", "node": node}
        return windows.signal_of_record(record)

    class Queue:
        sent: list[windows.Window] = []

        def schedule(self, window, delay_s):
            self.sent.append(window)

    queue = Queue()
    windows.enqueue(signal("e-1", first), windows=table, queue=queue, now=now)
    [a] = queue.sent
    assert table.claim(a, now) == "claimed"  # a's triage starts (and, on a big cluster, takes minutes)
    windows.enqueue(signal("e-2", second), windows=table, queue=queue, now=now + timedelta(seconds=50))
    [_, b] = queue.sent
    handled: dict[str, list[str]] = {}

    def run_as(name):
        def run(events):
            handled[name] = events.event_ids
            return {}

        return run

    windows.run_window(b, windows=table, run=run_as("b"), keep_unreadable=lambda _: None)
    assert handled["b"] == ["e-2"]  # not a's event, which a's own triage handles
    # a's triage failed and its message comes back: it still handles its own event
    result = windows.run_window(a, windows=table, run=run_as("a"), keep_unreadable=lambda _: None)
    assert result["claim"] == "gone" and handled["a"] == ["e-1"]
    assert table.kept(demo.eks.arn) == []
