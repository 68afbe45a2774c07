"""Alerts under faults, through the deployed path: findings written and the cluster's incidents reconciled →
the findings stream → stream_notifier (finding events into the outbox, the cluster's alert group armed) →
the alert-group function (at most one message per channel per flush) → outbox (SQS FIFO on moto) → courier →
Slack (a local sink), SNS (read back through a subscribed queue) and EventBridge (a rule to a queue).

The outbox and the alert-group queue run as Lambda's SQS event sources would (``SqsEventSource``: receive a
batch, invoke, delete what succeeded). ``SqsClock(frozen=True)`` is the only clock: moto's SQS time moves only
when a test moves it, and the functions read the same time (``use_clock``), so the group wait, the interval
between two flushes of a cluster and hours of backoff pass in a test without waiting for them. Slack payloads
are checked with slack_sdk's own Block Kit models.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from slack_sdk.models.blocks import Block

from functions.monitor import adapters
from functions.monitor.handlers import alerts, stream
from functions.monitor.handlers import outbox as courier
from functions.monitor.handlers.outbox import SEND_MARGIN_S
from functions.monitor.logic import outbox
from functions.monitor.logic.incidents import reconcile
from functions.monitor.runtime import use_clock
from functions.shared import clients
from hyperpod_debugger.domain.model import (
    CheckCoverage,
    CheckStatus,
    ClusterRef,
    Coverage,
    Finding,
    Priority,
    Tag,
    TriageReport,
)
from hyperpod_debugger.lifecycle.findings import plan_sweep
from hyperpod_debugger.notify import alerts as render
from hyperpod_debugger.notify import finding_event
from hyperpod_debugger.remediation.verdict import node_verdicts
from hyperpod_debugger.store.findings import FindingStore
from hyperpod_debugger.store.incidents import IncidentStore, from_item, to_item
from hyperpod_sim import scenarios
from hyperpod_sim.lambda_harness import MonitorHarness, SqsClock, monitor_harness
from tests.unit.test_alert_policy import _stored
from tests.unit.test_notify_render import _rebooted_with_more

ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/lw12e0dn1hhd"
OTHER = "arn:aws:sagemaker:us-west-2:111122223333:cluster/zz9yy8xx7ww6"
THIRD = "arn:aws:sagemaker:us-west-2:111122223333:cluster/qq1rr2ss3tt4"
NAMES = {ARN: "ml-eks-prod", OTHER: "ml-slurm-train", THIRD: "ml-eks-eval"}
#: The alert groups' timing, set explicitly (the stack's defaults): a quiet cluster's first message comes
#: WAIT_S after its first transition, and two messages of one cluster are at least INTERVAL_S apart.
WAIT_S = 10
INTERVAL_S = 300
#: The alert-group queue's visibility timeout (the stack's) and a second: a flush that failed is handed out
#: again once it has passed.
FLUSH_RETRY_S = 360 + 1
ENV = {
    "PROBE_ENABLED": "false",
    "SLACK_TIMEOUT_S": "1",
    "ALERT_GROUP_WAIT_S": str(WAIT_S),
    "ALERT_GROUP_INTERVAL_S": str(INTERVAL_S),
}
OK: dict[str, list[dict[str, str]]] = {"batchItemFailures": []}


@pytest.fixture
def monitor(aws, clients) -> Iterator[MonitorHarness]:
    with monitor_harness(clients, env=ENV) as harness:
        yield harness


@pytest.fixture
def clock(monitor, monkeypatch) -> Iterator[SqsClock]:
    """One simulated clock for SQS, the functions and the courier's Slack pace (a wait for a Slack slot moves
    it on); the sweeps below write at its time too."""
    with SqsClock(frozen=True) as sqs_clock, use_clock(lambda: at(sqs_clock)):
        monkeypatch.setattr(courier, "clock", sqs_clock.now)
        monkeypatch.setattr(courier, "sleep", sqs_clock.advance)
        yield sqs_clock


@pytest.fixture
def bus(monitor) -> str:
    """A rule on the default bus sending every finding event to a queue; returns the queue's URL."""
    events, sqs = monitor.clients.client("events"), monitor.clients.client("sqs")
    url = sqs.create_queue(QueueName="finding-events")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name="findings", EventPattern=json.dumps({"source": [finding_event.SOURCE]}), State="ENABLED")
    events.put_targets(Rule="findings", Targets=[{"Id": "queue", "Arn": arn}])
    return url


def at(sqs_clock: SqsClock) -> datetime:
    return datetime.fromtimestamp(sqs_clock.now(), UTC)


def finding(
    check: str,
    node: str,
    message: str | None = None,
    cluster: str = ARN,
    *,
    tag: Tag = Tag.FAIL,
    priority: Priority = Priority.P1,
) -> Finding:
    return Finding(
        tag=tag,
        priority=priority,
        check=check,
        section="G.1",
        message=message or f"{check} failed on {node}",
        cluster_arn=cluster,
        cluster_name=NAMES[cluster],
        instance_id=node,
        evidence=["NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus."],
    )


def node(n: int) -> str:
    return f"i-{n:017x}"


def sweep(monitor: MonitorHarness, clock: SqsClock, found: list[Finding], checks: set[str], *, cluster: str = ARN):
    """One sweep of a whole cluster at the clock's time, as the sweep's cluster step writes it: the findings
    through the store (NEW for what is found, RESOLVED for what is gone), then the cluster's incidents
    reconciled (every node in scope). Returns what reconciling did."""
    store = FindingStore(monitor.clients, monitor.resources.findings_table)
    now = at(clock)
    report = TriageReport(
        tool_version="0",
        generated_at=now.isoformat(),
        cluster=ClusterRef(name=NAMES[cluster], arn=cluster, region=scenarios.REGION),
        findings=found,
        coverage=Coverage(checks=[CheckCoverage(check=c, status=CheckStatus.RAN) for c in sorted(checks)]),
        exit_code=TriageReport.exit_code_for(found),
        node_verdicts=node_verdicts(found),
    )
    store.apply(plan_sweep(store.open_findings(cluster), report, now), now)
    incidents = IncidentStore(monitor.clients, monitor.resources.findings_table)
    return reconcile(report, cluster, findings=store, incidents=incidents, now=now, scope=None)


def watching(monitor: MonitorHarness, clock: SqsClock, *clusters: str) -> None:
    """Each cluster's first triage, finding nothing (the baseline), told to nobody: what fails later alerts."""
    for cluster in clusters or (ARN,):
        assert sweep(monitor, clock, [], {"gpu.xid"}, cluster=cluster).baseline
    assert all(r == OK for r in monitor.notify_stream(stream.handler))
    assert monitor.alert_groups.depth() == 0


@dataclass
class Notified:
    stream: list[dict]
    groups: list[dict]

    @property
    def ok(self) -> bool:
        return all(r == OK for r in self.stream + self.groups)


def notify(monitor: MonitorHarness, clock: SqsClock, *, wait: float = WAIT_S, shuffle=None) -> Notified:
    """The stream's new records to the notifier as deployed (ten per invocation), then ``wait`` seconds for
    the group wait to pass, then every alert group that is due flushed. Returns both functions' responses."""
    responses = monitor.notify_stream(stream.handler, shuffle=shuffle)
    clock.advance(wait)
    return Notified(responses, monitor.run_alert_groups(alerts.handler))


def deliver(monitor: MonitorHarness) -> list[dict]:
    return monitor.deliver_outbox(courier.handler)


def header(payload: dict) -> str:
    return payload["blocks"][0]["text"]["text"]


def headers(monitor: MonitorHarness) -> list[str]:
    return [header(m) for m in monitor.sink.received]


def of_cluster(monitor: MonitorHarness, cluster: str) -> list[str]:
    return [header(m) for m in monitor.sink.received if NAMES[cluster] in header(m)]


def told(text: str) -> tuple[str, str]:
    """What one incident message's header tells: ("opened" or "resolved", the node)."""
    [instance] = [word for word in text.split() if word.startswith("i-")]
    return ("resolved" if "RESOLVED" in text else "opened", instance)


def queue_messages(monitor: MonitorHarness, url: str) -> list[dict]:
    sqs = monitor.clients.client("sqs")
    out: list[dict] = []
    while got := sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], WaitTimeSeconds=0
    ).get("Messages", []):
        for message in got:
            out.append(message)
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return out


def dead_letters(monitor: MonitorHarness) -> list[dict]:
    return queue_messages(monitor, monitor.resources.outbox_dlq_url)


def bus_events(monitor: MonitorHarness, url: str) -> list[dict]:
    """The details of the finding events the rule delivered since the last call."""
    return [json.loads(m["Body"])["detail"] for m in queue_messages(monitor, url)]


def transitions(events: list[dict]) -> list[tuple[str, str]]:
    """(transition, instance id) of each finding event, sorted."""
    return sorted((e["transition"], e["instance_id"]) for e in events)


def assert_block_kit(payloads: list[dict]) -> None:
    """Every payload parses and validates with Slack's own models (slack_sdk)."""
    assert payloads
    for payload in payloads:
        assert payload.get("text"), "a notification fallback text is required"
        for block in payload["blocks"]:
            parsed = Block.parse(block)
            assert parsed is not None, block
            parsed.validate_json()


# --------------------------------------------------------------------------- the plain path


def test_an_incident_opening_reaches_slack_and_email_once_and_its_findings_the_bus(monitor, clock, bus):
    watching(monitor, clock)
    assert sweep(monitor, clock, [finding("gpu.xid", node(1))], {"gpu.xid"}).counts() == {"OPENED": 1}
    notified = notify(monitor, clock)
    # the stream armed the cluster's group once, and its one flush went through
    assert notified.ok and len(notified.groups) == 1
    assert all(r == OK for r in deliver(monitor))
    [slack] = monitor.sink.received
    assert header(slack).endswith(f"P1 INVESTIGATE {node(1)} · ml-eks-prod")
    assert "gpu.xid failed on" in slack["text"]
    assert_block_kit([slack])
    [email] = monitor.emails()
    assert email.subject.startswith(f"[HyperPod P1] ml-eks-prod: INVESTIGATE {node(1)}")
    assert "Why: gpu.xid failed on" in email.message
    assert transitions(bus_events(monitor, bus)) == [("NEW", node(1))]
    assert monitor.outbox.depth() == 0 and dead_letters(monitor) == []


def test_two_incidents_opening_together_are_one_message_per_channel_naming_both(monitor, clock, bus):
    watching(monitor, clock)
    sweep(monitor, clock, [finding("gpu.xid", node(1)), finding("gpu.ecc", node(2))], {"gpu.xid", "gpu.ecc"})
    assert notify(monitor, clock).ok
    deliver(monitor)
    [slack] = monitor.sink.received
    assert header(slack).endswith("ml-eks-prod: 2 nodes need action")
    # each node is one line of the message
    assert [sum(n in json.dumps(b) for b in slack["blocks"]) for n in (node(1), node(2))] == [1, 1]
    assert_block_kit([slack])
    [email] = monitor.emails()
    assert "2 nodes need action" in email.subject and node(1) in email.message and node(2) in email.message
    # the finding events are per finding, not per message
    assert transitions(bus_events(monitor, bus)) == [("NEW", node(1)), ("NEW", node(2))]


def test_a_clusters_first_triage_is_one_baseline_summary_and_what_opens_later_alerts_alone(monitor, clock):
    # GIVEN the monitor's first look at a cluster that already has three problems, one of them P2
    found = [
        finding("gpu.xid", node(1)),
        finding("gpu.ecc", node(2)),
        finding("disk.usage", node(3), "root volume 85% full", tag=Tag.WARN, priority=Priority.P2),
    ]
    reconciled = sweep(monitor, clock, found, {"gpu.xid", "gpu.ecc", "disk.usage"})
    assert reconciled.baseline and reconciled.counts() == {"OPENED": 3}
    assert notify(monitor, clock).ok
    deliver(monitor)
    # THEN each channel gets one summary of where monitoring starts, the P2 listed in it once
    [slack] = monitor.sink.received
    assert header(slack).endswith("ml-eks-prod: monitoring started, 3 open problems")
    assert all(n in json.dumps(slack) for n in (node(1), node(2), node(3)))
    assert "1 of them are below this channel's alert priority" in json.dumps(slack)
    assert_block_kit([slack])
    [email] = monitor.emails()
    assert "monitoring started, 3 open problems" in email.subject
    # WHEN later (after the cluster's interval) a node fails, and another gets a P2 warning
    clock.advance(INTERVAL_S)
    found += [
        finding("gpu.xid", node(4)),
        finding("disk.usage", node(5), "root 85%", tag=Tag.WARN, priority=Priority.P2),
    ]
    assert sweep(monitor, clock, found, {"gpu.xid", "gpu.ecc", "disk.usage"}).counts() == {"OPENED": 2}
    assert notify(monitor, clock).ok
    deliver(monitor)
    # THEN the P1 is an alert of its own, not a baseline; the P2 pages nobody (the daily summary has it)
    assert len(monitor.sink.received) == 2
    later = monitor.sink.received[1]
    assert header(later).endswith(f"P1 INVESTIGATE {node(4)} · ml-eks-prod") and node(5) not in json.dumps(later)
    [email] = monitor.emails()
    assert node(4) in email.subject and node(5) not in email.message


def test_the_same_records_handed_over_twice_at_every_stage_send_nothing_twice(monitor, clock, bus):
    watching(monitor, clock)
    sweep(monitor, clock, [finding("gpu.xid", node(1))], {"gpu.xid"})
    [event] = monitor.stream.batches()
    # the stream redelivers the batch: the group is armed once
    assert monitor.invoke(stream.handler, event) == OK
    assert monitor.invoke(stream.handler, event) == OK
    assert monitor.alert_groups.depth() == 1
    clock.advance(WAIT_S)
    # the alert-group queue hands its message over twice (at-least-once): the second is not this window
    flush = monitor.alert_groups.poll()
    assert monitor.invoke(alerts.handler, flush) == OK
    assert monitor.invoke(alerts.handler, flush) == OK
    monitor.alert_groups.settle(flush, OK)
    # the outbox hands a batch over twice (a courier timed out after sending): the ledger knows it was sent
    batch = monitor.outbox.poll()
    assert monitor.invoke(courier.handler, batch) == OK
    assert monitor.invoke(courier.handler, batch) == OK
    monitor.outbox.settle(batch, OK)
    # and the stream redelivers the batch once more after all that: nothing is left to tell
    assert monitor.invoke(stream.handler, event) == OK
    clock.advance(INTERVAL_S)
    monitor.run_alert_groups(alerts.handler)
    deliver(monitor)
    assert len(monitor.sink.received) == 1 and len(monitor.emails()) == 1
    assert transitions(bus_events(monitor, bus)) == [("NEW", node(1))]
    # and nothing is left to tell or waiting to be told
    assert IncidentStore(monitor.clients, monitor.resources.findings_table).pending(ARN) == []
    assert monitor.alert_groups.depth() == 0 and monitor.outbox.depth() == 0


def test_heartbeats_notify_nobody(monitor, clock, bus):
    watching(monitor, clock)
    sweep(monitor, clock, [finding("gpu.xid", node(1))], {"gpu.xid"})
    notify(monitor, clock)
    deliver(monitor)
    assert len(monitor.sink.received) == 1 and len(monitor.emails()) == 1 and len(bus_events(monitor, bus)) == 1
    clock.advance(2 * 3600)
    reconciled = sweep(monitor, clock, [finding("gpu.xid", node(1))], {"gpu.xid"})  # an UNCHANGED heartbeat
    assert reconciled.changes == []
    notified = notify(monitor, clock, wait=INTERVAL_S)
    assert notified.ok and notified.groups == []  # no group was armed
    assert monitor.outbox.depth() == 0
    deliver(monitor)
    assert len(monitor.sink.received) == 1 and monitor.emails() == [] and bus_events(monitor, bus) == []


# --------------------------------------------------------------------------- many at once: bounded


def test_twelve_nodes_failing_at_once_are_one_slack_message_and_one_email_naming_the_count(monitor, clock, bus):
    watching(monitor, clock)
    checks = [f"test.check_{i}" for i in range(12)]
    sweep(monitor, clock, [finding(c, node(i), f"problem {c}") for i, c in enumerate(checks)], set(checks))
    # whatever the order the stream hands the records over in
    notified = notify(monitor, clock, shuffle=random.Random(3))
    assert notified.ok and len(notified.stream) > 1 and len(notified.groups) == 1
    deliver(monitor)
    [message] = monitor.sink.received
    assert header(message).endswith("ml-eks-prod: 12 nodes need action")
    assert "… and 2 more." in json.dumps(message, ensure_ascii=False)  # ten shown, the rest counted
    assert_block_kit([message])
    [email] = monitor.emails()
    assert "12 nodes need action" in email.subject
    assert all(node(i) in email.message for i in range(12))
    # every finding is still its own event on the bus
    assert transitions(bus_events(monitor, bus)) == sorted(("NEW", node(i)) for i in range(12))


def test_six_nodes_failing_one_check_and_another_failing_are_one_message_naming_the_shared_check(monitor, clock):
    watching(monitor, clock)
    found = [finding("gpu.xid", node(i), "Xid 79 on the node") for i in range(6)]
    found.append(finding("disk.root_full", node(9), "root full"))
    sweep(monitor, clock, found, {"gpu.xid", "disk.root_full"})
    assert notify(monitor, clock).ok
    deliver(monitor)
    [message] = monitor.sink.received
    assert header(message).endswith("ml-eks-prod: 7 nodes need action")
    assert "6 nodes fail `gpu.xid`" in json.dumps(message) and node(9) in json.dumps(message)
    assert_block_kit([message])
    [email] = monitor.emails()
    assert "6 nodes fail gpu.xid" in email.message


def test_nodes_failing_one_after_another_are_the_first_alert_then_one_message_per_interval(monitor, clock):
    # GIVEN a quiet cluster where one node fails, then five more, one every 20 s (each run reconciling)
    watching(monitor, clock)
    found = [finding("gpu.xid", node(0))]
    sweep(monitor, clock, found, {"gpu.xid"})
    assert notify(monitor, clock).ok
    deliver(monitor)
    # THEN the first is told alone after the group wait
    assert [node(0) in h for h in headers(monitor)] == [True] and len(monitor.emails()) == 1
    for i in range(1, 6):
        clock.advance(20)
        found.append(finding("gpu.xid", node(i)))
        sweep(monitor, clock, found, {"gpu.xid"})
        assert notify(monitor, clock).ok
        deliver(monitor)
    # and the next ones wait for the cluster's interval: nothing more yet
    assert len(monitor.sink.received) == 1 and monitor.emails() == []
    clock.advance(INTERVAL_S)
    monitor.run_alert_groups(alerts.handler)
    deliver(monitor)
    # THEN they come as one message per channel naming the five
    assert len(monitor.sink.received) == 2
    later = monitor.sink.received[1]
    assert header(later).endswith("ml-eks-prod: 5 nodes need action")
    assert all(node(i) in json.dumps(later) for i in range(1, 6)) and node(0) not in json.dumps(later)
    assert_block_kit(monitor.sink.received)
    [email] = monitor.emails()
    assert "5 nodes need action" in email.subject


# --------------------------------------------------------------------------- faults in the stream stage


def test_damaged_stream_records_are_kept_aside_and_the_good_alerts_still_go(monitor, clock):
    watching(monitor, clock)
    sweep(monitor, clock, [finding("gpu.xid", node(1))], {"gpu.xid"})
    good = monitor.stream_event()["Records"]
    damaged = [
        {**good[0], "dynamodb": {**good[0]["dynamodb"], "NewImage": "not a map", "SequenceNumber": "9000001"}},
        {
            **good[0],
            "dynamodb": {**good[0]["dynamodb"], "NewImage": None, "OldImage": [1], "SequenceNumber": "9000002"},
        },
        {"eventID": "no-dynamodb-at-all"},
        None,
    ]
    response = monitor.invoke(stream.handler, {"Records": [*damaged, *good]})
    # nothing fails: the damaged records are kept with their reason, the good ones arm the group
    assert response == OK
    clock.advance(WAIT_S)
    monitor.run_alert_groups(alerts.handler)
    deliver(monitor)
    assert len(monitor.sink.received) == 1 and len(monitor.emails()) == 1
    kept = queue_messages(monitor, monitor.resources.unprocessed_queue_url)
    assert len(kept) == 4
    reasons = [m["MessageAttributes"]["reason"]["StringValue"] for m in kept]
    assert sum("not a map" in r for r in reasons) == 2
    assert sum("no dynamodb.SequenceNumber" in r for r in reasons) == 2


def test_when_the_outbox_refuses_a_flush_that_cluster_waits_for_its_retry_and_others_go_on(monitor, clock, monkeypatch):
    watching(monitor, clock, ARN, OTHER)
    sweep(monitor, clock, [finding("gpu.xid", node(1))], {"gpu.xid"})
    sweep(monitor, clock, [finding("gpu.xid", node(2), cluster=OTHER)], {"gpu.xid"}, cluster=OTHER)
    assert all(r == OK for r in monitor.notify_stream(stream.handler))
    real_put = adapters.SqsOutbox.put
    refused: list[str] = []

    def put(self, message):
        # the outbox refuses the first cluster's Slack message once (its email was queued just before)
        if message.group == ARN and message.channel == "slack" and not refused:
            refused.append(message.id)
            raise outbox.ChannelError("outbox: ThrottlingException")
        return real_put(self, message)

    monkeypatch.setattr(adapters.SqsOutbox, "put", put)
    clock.advance(WAIT_S)
    responses = monitor.run_alert_groups(alerts.handler)
    # one flush per cluster; the refused one failed and waits in its queue for the retry
    assert refused and sorted(len(r["batchItemFailures"]) for r in responses) == [0, 1]
    assert monitor.alert_groups.depth() == 1
    deliver(monitor)
    # the other cluster was not held back
    assert [NAMES[OTHER] in h for h in headers(monitor)] == [True]
    first = [e.subject for e in monitor.emails()]
    assert any(NAMES[OTHER] in s for s in first)
    # WHEN the refused flush comes back (the queue's visibility timeout)
    clock.advance(FLUSH_RETRY_S)
    assert monitor.run_alert_groups(alerts.handler) == [OK]
    deliver(monitor)
    # THEN the refused cluster's alert arrived, once on each channel
    assert len(of_cluster(monitor, ARN)) == 1 and len(of_cluster(monitor, OTHER)) == 1
    subjects = first + [e.subject for e in monitor.emails()]
    assert sorted(NAMES[ARN] in s for s in subjects) == [False, True]
    assert monitor.outbox.depth() == 0 and monitor.alert_groups.depth() == 0


def test_when_the_outbox_refuses_a_finding_event_that_clusters_records_are_retried_and_others_go_on(
    monitor, clock, bus, monkeypatch
):
    watching(monitor, clock, ARN, OTHER)
    sweep(monitor, clock, [finding("gpu.xid", node(1))], {"gpu.xid"})
    sweep(monitor, clock, [finding("gpu.xid", node(2), cluster=OTHER)], {"gpu.xid"}, cluster=OTHER)
    clock.advance(1)
    sweep(monitor, clock, [finding("gpu.xid", node(1)), finding("gpu.ecc", node(3))], {"gpu.xid", "gpu.ecc"})
    event = monitor.stream_event()
    real_put = adapters.SqsOutbox.put
    refused = []

    def put(self, message):
        if message.group == ARN and not refused:
            refused.append(message.key)
            raise outbox.ChannelError("outbox: ThrottlingException")
        return real_put(self, message)

    monkeypatch.setattr(adapters.SqsOutbox, "put", put)
    response = monitor.invoke(stream.handler, event)
    findings = {
        r["dynamodb"]["SequenceNumber"]: r["dynamodb"]["Keys"]["pk"]["S"]
        for r in event["Records"]
        if r["dynamodb"]["Keys"]["sk"]["S"].startswith("FINDING#") and r["eventName"] != "REMOVE"
    }
    failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
    # the refused cluster's finding records failed, and only they: the other cluster's went, and the incident
    # records armed both groups (the alerts do not wait for the events)
    assert refused and failed and failed <= {seq for seq, pk in findings.items() if pk == f"CLUSTER#{ARN}"}
    assert len(bus_events(monitor, bus)) == 0
    clock.advance(WAIT_S)
    assert monitor.run_alert_groups(alerts.handler) == [OK, OK]
    deliver(monitor)
    assert transitions(bus_events(monitor, bus)) == [("NEW", node(2))]
    assert len(monitor.sink.received) == 2 and len(monitor.emails()) == 2
    # WHEN the stream retries the failed records
    retry = {"Records": [r for r in event["Records"] if r["dynamodb"]["SequenceNumber"] in failed]}
    assert monitor.invoke(stream.handler, retry) == OK
    deliver(monitor)
    # THEN the refused cluster's events are on the bus, and nobody was alerted again
    assert transitions(bus_events(monitor, bus)) == [("NEW", node(1)), ("NEW", node(3))]
    assert len(monitor.sink.received) == 2 and monitor.emails() == []


# --------------------------------------------------------------------------- faults in the courier


def test_opened_then_resolved_with_slack_failing_once_ends_with_the_resolution_in_slack(monitor, clock):
    # GIVEN an incident told, then resolved and told in the next flush, before Slack got either message
    watching(monitor, clock)
    sweep(monitor, clock, [finding("gpu.xid", node(1))], {"gpu.xid"})
    assert notify(monitor, clock).ok
    sweep(monitor, clock, [], {"gpu.xid"})
    assert notify(monitor, clock, wait=INTERVAL_S).ok  # the cluster's next flush is an interval later
    monitor.sink.fail_next(1, status=500)
    # WHEN the courier runs, then again once the first message's backoff has passed
    deliver(monitor)
    assert monitor.sink.received == [] and monitor.sink.requests == 1  # the resolution waits behind the opening
    clock.advance(120)
    deliver(monitor)
    # THEN Slack shows the opening, then the resolution: never the opening last
    assert [told(h) for h in headers(monitor)] == [("opened", node(1)), ("resolved", node(1))]
    assert_block_kit(monitor.sink.received)
    # and the emails went out at once, once each, in order
    subjects = [e.subject for e in monitor.emails()]
    assert len(subjects) == 2 and "[HyperPod P1]" in subjects[0] and "[HyperPod RESOLVED]" in subjects[1]


def test_an_incident_opened_and_resolved_before_its_flush_is_told_nowhere_but_its_events_are_on_the_bus(
    monitor, clock, bus
):
    """A flap (opened and cleared within one group wait) is not worth waking anyone for: no Slack message, no
    email, nothing left pending; the bus still carries both finding events for whoever keeps the history."""
    watching(monitor, clock)
    sweep(monitor, clock, [finding("gpu.xid", node(1))], {"gpu.xid"})
    assert all(r == OK for r in monitor.notify_stream(stream.handler))  # the opening arms the group
    clock.advance(WAIT_S // 2)
    sweep(monitor, clock, [], {"gpu.xid"})  # and the next look, within the group wait, finds it gone
    monitor.sink.fail_next(1, status=500)
    assert notify(monitor, clock, wait=WAIT_S - WAIT_S // 2).ok
    deliver(monitor)
    assert monitor.sink.requests == 0 and monitor.emails() == []
    assert transitions(bus_events(monitor, bus)) == [("NEW", node(1)), ("RESOLVED", node(1))]
    incidents = IncidentStore(monitor.clients, monitor.resources.findings_table)
    assert incidents.pending(ARN) == []
    assert [s.state.value for s in incidents.incidents(ARN).values()] == ["RESOLVED"]


def test_a_told_incident_that_resolves_reopens_and_resolves_before_the_next_flush_ends_resolved_in_slack(
    monitor, clock
):
    # GIVEN an incident Slack and email were told of
    watching(monitor, clock)
    found = [finding("gpu.xid", node(1))]
    sweep(monitor, clock, found, {"gpu.xid"})
    assert notify(monitor, clock).ok
    deliver(monitor)
    assert [told(h) for h in headers(monitor)] == [("opened", node(1))] and len(monitor.emails()) == 1
    # WHEN, within the cluster's interval, it resolves, opens again and resolves again
    for now_found in ([], found, []):
        clock.advance(20)
        sweep(monitor, clock, now_found, {"gpu.xid"})
        assert notify(monitor, clock).ok
    clock.advance(INTERVAL_S)
    monitor.run_alert_groups(alerts.handler)
    deliver(monitor)
    # THEN the last thing Slack says of it is that it resolved (a resolution is told where the opening was)
    assert told(headers(monitor)[-1]) == ("resolved", node(1))
    assert "[HyperPod RESOLVED]" in monitor.emails()[-1].subject


def test_a_hanging_slack_costs_one_timeout_per_invocation_not_one_per_message(monitor, clock):
    clusters = (ARN, OTHER, THIRD)
    watching(monitor, clock, *clusters)
    for i, cluster in enumerate(clusters):
        sweep(monitor, clock, [finding("gpu.xid", node(i), cluster=cluster)], {"gpu.xid"}, cluster=cluster)
    assert notify(monitor, clock).ok
    monitor.sink.hang(3)  # longer than SLACK_TIMEOUT_S=1
    event = monitor.outbox.poll()
    slack_records = [r for r in event["Records"] if json.loads(r["body"])["channel"] == "slack"]
    assert len(slack_records) == 3  # one message per cluster, each in a group of its own
    response = monitor.invoke(courier.handler, event, timeout_s=60)
    monitor.outbox.settle(event, response)
    failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
    # one request reached the hanging endpoint; the other Slack messages were not tried, all wait
    assert monitor.sink.requests == 1
    assert {r["messageId"] for r in slack_records} <= failed
    # the emails and the finding events were not held back by Slack
    others = [r for r in event["Records"] if json.loads(r["body"])["channel"] != "slack"]
    assert others and not {r["messageId"] for r in others} & failed
    emails = [r for r in others if json.loads(r["body"])["channel"] == "sns"]
    assert len(emails) == 3 and len(monitor.emails()) == 3
    monitor.sink.hang(0)


def test_without_time_for_a_delivery_nothing_is_tried_and_everything_waits(monitor, clock):
    watching(monitor, clock)
    sweep(monitor, clock, [finding("gpu.xid", node(1))], {"gpu.xid"})
    notify(monitor, clock)
    event = monitor.outbox.poll()
    assert {json.loads(r["body"])["channel"] for r in event["Records"]} == {"slack", "sns", "events"}
    # a context with less time left than one Slack timeout plus the margin
    response = monitor.invoke(courier.handler, event, timeout_s=SEND_MARGIN_S)
    assert len(response["batchItemFailures"]) == len(event["Records"])
    assert monitor.sink.requests == 0 and monitor.emails() == []


def test_a_payload_slack_refuses_goes_to_the_dead_letter_queue_whole_and_does_not_block(monitor, clock):
    # GIVEN two messages of one cluster waiting in the outbox (two flushes an interval apart)
    watching(monitor, clock)
    sweep(monitor, clock, [finding("gpu.xid", node(1))], {"gpu.xid"})
    notify(monitor, clock)
    sweep(monitor, clock, [finding("gpu.xid", node(1)), finding("gpu.ecc", node(2))], {"gpu.xid", "gpu.ecc"})
    notify(monitor, clock, wait=INTERVAL_S)
    monitor.sink.fail_next(1, status=400)  # invalid_blocks: sending it again cannot succeed
    deliver(monitor)
    # the refused message is kept, rendered, with the reason; the next one of the group went
    [dead] = dead_letters(monitor)
    kept = outbox.OutboxMessage.from_json(dead["Body"])
    assert kept.channel == "slack" and kept.slack and node(1) in header(kept.slack)
    assert "400" in dead["MessageAttributes"]["reason"]["StringValue"]
    [sent] = monitor.sink.received
    assert node(2) in header(sent) and monitor.outbox.depth() == 0
    assert len(monitor.emails()) == 2


def test_a_body_that_is_not_an_outbox_message_is_dead_lettered(monitor):
    sqs = monitor.clients.client("sqs")
    sqs.send_message(
        QueueUrl=monitor.resources.outbox_url,
        MessageBody="{broken",
        MessageGroupId="slack:x",
        MessageDeduplicationId="broken-1",
    )
    responses = deliver(monitor)
    assert responses == [OK]
    [dead] = dead_letters(monitor)
    assert dead["Body"] == "{broken" and "not JSON" in dead["MessageAttributes"]["reason"]["StringValue"]


def test_a_throttled_ledger_is_bounded_and_never_drops_a_message(monitor, clock, bus, monkeypatch):
    from botocore.exceptions import ClientError

    calls: list[str] = []

    class Throttled:
        """The ledger table answering every call with a throughput error."""

        def batch_get_item(self, **_):
            calls.append("get")
            raise ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow"}}, "BatchGetItem"
            )

        def batch_write_item(self, **_):
            calls.append("write")
            raise ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow"}}, "BatchWriteItem"
            )

    real_init = adapters.DeliveryLedger.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self._ddb = Throttled()

    watching(monitor, clock)
    monkeypatch.setattr(adapters.DeliveryLedger, "__init__", init)
    sweep(monitor, clock, [finding("gpu.xid", node(1))], {"gpu.xid"})
    notified = notify(monitor, clock)
    responses = deliver(monitor)
    # delivered anyway, once each; each ledger step gave up at its first error instead of stalling
    assert len(monitor.sink.received) == 1 and len(monitor.emails()) == 1
    assert transitions(bus_events(monitor, bus)) == [("NEW", node(1))]
    # three messages (the email, the Slack message, the finding event): each written once when queued and
    # once when sent; at most one read per invocation
    assert len(notified.stream) == 1 and len(notified.groups) == 1 and len(responses) == 1
    assert calls.count("write") == 2 * 3
    assert 0 < calls.count("get") <= len(notified.stream) + len(notified.groups) + len(responses)
    # and every SDK call it makes is bounded: two attempts in all, short timeouts
    config = clients.bookkeeping_clients(scenarios.REGION).client("dynamodb").meta.config
    assert config.retries["total_max_attempts"] == 2 and config.read_timeout <= 3


# --------------------------------------------------------------------------- a six-hour Slack outage


def test_a_six_hour_slack_outage_loses_no_alert_and_sends_none_twice(monitor, clock):
    """Slack answers 503 for six hours while incidents open and resolve in two clusters; every five minutes
    the alert groups that are due flush and the event source polls the outbox. Afterwards Slack has every
    message exactly once, in each cluster's order, the emails went out on time, and the dead-letter queue is
    empty."""
    watching(monitor, clock, ARN, OTHER)
    timeline = [
        (0, lambda: sweep(monitor, clock, [finding("gpu.xid", node(1))], {"gpu.xid"})),
        (
            30 * 60,
            lambda: sweep(monitor, clock, [finding("gpu.xid", node(2), cluster=OTHER)], {"gpu.xid"}, cluster=OTHER),
        ),
        (60 * 60, lambda: sweep(monitor, clock, [], {"gpu.xid"})),  # node 1's incident resolves during the outage
        (3 * 3600, lambda: sweep(monitor, clock, [finding("gpu.ecc", node(3))], {"gpu.ecc", "gpu.xid"})),
        (5 * 3600, lambda: sweep(monitor, clock, [], {"gpu.xid"}, cluster=OTHER)),
    ]
    outage_ends = 6 * 3600
    monitor.sink.outage(503)
    emails: list[tuple[int, str]] = []
    now = 0
    step = 300
    pending = list(timeline)
    tried_during_outage = 0
    while now <= outage_ends + 3 * 3600:
        while pending and pending[0][0] <= now:
            pending.pop(0)[1]()
        notified = notify(monitor, clock)  # the stream, then the group wait; what is due flushes
        assert notified.ok
        if now >= outage_ends:
            monitor.sink.outage(None)
        deliver(monitor)
        emails += [(now, e.subject) for e in monitor.emails()]
        if now < outage_ends:
            assert monitor.sink.received == []
            tried_during_outage = monitor.sink.requests
        if now >= outage_ends and monitor.outbox.depth() == 0 and monitor.alert_groups.depth() == 0 and not pending:
            break
        clock.advance(step - WAIT_S)
        now += step
    # every alert arrived once, none was lost, nothing is left or dead
    assert monitor.outbox.depth() == 0 and dead_letters(monitor) == []
    assert len(monitor.sink.received) == 5 and len({json.dumps(m) for m in monitor.sink.received}) == 5
    # the emails went out as each incident was told, during the outage, once each
    assert len(emails) == 5 and len({s for _, s in emails}) == 5
    assert [t for t, _ in emails] == [0, 30 * 60, 60 * 60, 3 * 3600, 5 * 3600]
    # each cluster's messages in the order they happened
    assert [told(h) for h in of_cluster(monitor, ARN)] == [
        ("opened", node(1)),
        ("resolved", node(1)),
        ("opened", node(3)),
    ]
    assert [told(h) for h in of_cluster(monitor, OTHER)] == [("opened", node(2)), ("resolved", node(2))]
    assert_block_kit(monitor.sink.received)
    # Slack was really tried during the outage, and the retries were spaced, not hammered
    assert tried_during_outage >= 5
    assert tried_during_outage < 5 * (outage_ends // step)


def test_a_node_alert_names_the_worst_problem_and_what_the_reboot_leaves_after_the_store_and_the_stream(monitor, clock):
    # GIVEN a node whose rung is a reboot (an Xid HyperPod's agent saw) while its worst problems are a full
    # root volume and a stopped slurmd, which no reboot fixes (a reboot frees no disk)
    watching(monitor, clock)
    i = node(3)
    xid = finding("logs.hma", i, "HMA detected Xid 79 (GPU has fallen off the bus) on the node")
    xid = xid.model_copy(update={"node_action": "reboot", "section": "G"})
    disk = finding("probe.disk", i, "Root volume / is 93% full (7.0 GiB free)", priority=Priority.P0)
    disk = disk.model_copy(update={"section": "I.2"})
    slurmd = finding("probe.services", i, "slurmd is not running (failed)", priority=Priority.P0)
    slurmd = slurmd.model_copy(update={"section": "H"})
    sweep(monitor, clock, [xid, disk, slurmd], {"logs.hma", "probe.disk", "probe.services"})
    # WHEN the incident goes through the table, its stream, the alert group and the courier
    assert notify(monitor, clock).ok
    assert all(r == OK for r in deliver(monitor))
    # THEN the one Slack message and the one email say the rung, the worst problem and what the rung leaves
    [slack] = monitor.sink.received
    assert_block_kit([slack])
    assert "REBOOT" in header(slack) and i in header(slack)
    text = "\n".join(b["text"]["text"] for b in slack["blocks"] if b["type"] == "section")
    assert "*Worst problem (a reboot does not fix it):*\n• P0 FAIL Root volume / is 93% full" in text
    assert "*A reboot does not fix:*\n• P0 FAIL slurmd is not running (failed) (§ H)" in text
    assert text.index("*Why:*") < text.index("Worst problem") < text.index("*Runbook:*")
    [email] = monitor.emails()
    assert "Worst problem (a reboot does not fix it):\n  - P0 FAIL Root volume / is 93% full" in email.message
    assert "A reboot does not fix:\n  - P0 FAIL slurmd is not running (failed) (§ H)" in email.message


# a unit of the store's item shape, here because the adapter imports boto3
def test_a_stored_incident_keeps_its_other_problems_and_an_older_item_without_them_still_reads() -> None:
    [stored] = _stored(_rebooted_with_more())
    assert stored.incident.worst is not None and len(stored.incident.others) == 3
    assert from_item(to_item(stored)) == stored
    older = {k: v for k, v in to_item(stored).items() if k not in ("worst", "others")}
    read = from_item(older)
    assert read.incident.worst is None and read.incident.others == ()
    assert render.node_issues(read.incident) == []
