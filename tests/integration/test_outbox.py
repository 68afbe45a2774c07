"""Alerts under faults: the findings stream → stream_notifier → outbox (SQS FIFO on moto) → courier →
Slack (a local sink) and SNS (read back through a subscribed queue).

The outbox runs as Lambda's SQS event source would (``SqsEventSource``: receive a batch, invoke, delete
what succeeded), and ``SqsClock`` moves moto's SQS clock so hours of backoff pass in a test. Slack
payloads are checked with slack_sdk's own Block Kit models.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from slack_sdk.models.blocks import Block

from functions.monitor import adapters, handlers
from functions.monitor.handlers.outbox import SEND_MARGIN_S
from functions.monitor.logic import outbox
from functions.shared import clients
from hyperpod_debugger.aws.store import FindingStore
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
from hyperpod_sim import scenarios
from hyperpod_sim.lambda_harness import SqsClock, monitor_harness

ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/lw12e0dn1hhd"
OTHER = "arn:aws:sagemaker:us-west-2:111122223333:cluster/zz9yy8xx7ww6"
ENV = {"PROBE_ENABLED": "false", "SLACK_TIMEOUT_S": "1", "DIGEST_THRESHOLD": "10"}


@pytest.fixture
def monitor(aws, clients):
    with monitor_harness(clients, env=ENV) as harness:
        yield harness


@pytest.fixture
def clock():
    with SqsClock() as c:
        yield c


def finding(check: str, node: str, message: str | None = None, cluster: str = ARN) -> Finding:
    return Finding(
        tag=Tag.FAIL,
        priority=Priority.P1,
        check=check,
        section="G.1",
        message=message or f"{check} failed on {node}",
        cluster_arn=cluster,
        cluster_name="ml-eks-prod" if cluster == ARN else "ml-slurm-train",
        instance_id=node,
        evidence=["NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus."],
    )


def node(n: int) -> str:
    return f"i-{n:017x}"


def sweep(monitor, found: list[Finding], checks: set[str], *, cluster: str = ARN, at: datetime | None = None) -> None:
    """One sweep's report through the store: NEW for what is found, RESOLVED for what is gone."""
    store = FindingStore(monitor.clients, monitor.resources.findings_table)
    at = at or datetime.now(UTC)
    report = TriageReport(
        tool_version="0",
        generated_at=at.isoformat(),
        cluster=ClusterRef(name="c", arn=cluster, region=scenarios.REGION),
        findings=found,
        coverage=Coverage(checks=[CheckCoverage(check=c, status=CheckStatus.RAN) for c in sorted(checks)]),
        exit_code=TriageReport.exit_code_for(found),
    )
    store.apply(plan_sweep(store.open_findings(cluster), report, at), at)


def notify(monitor) -> dict:
    return monitor.invoke(handlers.stream_notifier, monitor.stream_event())


def headers(monitor) -> list[str]:
    return [m["blocks"][0]["text"]["text"] for m in monitor.sink.received]


def of_cluster(monitor, name: str) -> list[str]:
    return [m["blocks"][0]["text"]["text"] for m in monitor.sink.received if name in json.dumps(m)]


def dead_letters(monitor) -> list[dict]:
    sqs = monitor.clients.client("sqs")
    got = sqs.receive_message(
        QueueUrl=monitor.resources.outbox_dlq_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
    )
    return got.get("Messages", [])


def assert_block_kit(payloads: list[dict]) -> None:
    """Every payload parses and validates with Slack's own models (slack_sdk)."""
    for payload in payloads:
        assert payload.get("text"), "a notification fallback text is required"
        for block in payload["blocks"]:
            parsed = Block.parse(block)
            assert parsed is not None, block
            parsed.validate_json()


# --------------------------------------------------------------------------- the plain path


def test_each_transition_reaches_slack_and_email_once(monitor):
    sweep(monitor, [finding("gpu.xid", node(1)), finding("gpu.ecc", node(2))], {"gpu.xid", "gpu.ecc"})
    assert notify(monitor) == {"batchItemFailures": []}
    # three messages per finding wait in the outbox: one email, one Slack, one finding event (the stack's
    # default puts finding events on the account's default bus)
    assert monitor.outbox.depth() == 6
    assert all(r == {"batchItemFailures": []} for r in monitor.deliver_outbox(handlers.courier))
    assert len(monitor.sink.received) == 2 and len(monitor.emails()) == 2
    assert_block_kit(monitor.sink.received)
    assert monitor.outbox.depth() == 0 and dead_letters(monitor) == []


def test_the_same_stream_records_twice_queue_and_send_nothing_twice(monitor):
    sweep(monitor, [finding("gpu.xid", node(1))], {"gpu.xid"})
    event = monitor.stream_event()
    monitor.invoke(handlers.stream_notifier, event)
    monitor.invoke(handlers.stream_notifier, event)  # the stream redelivers the batch
    monitor.deliver_outbox(handlers.courier)
    assert len(monitor.sink.received) == 1 and len(monitor.emails()) == 1


def test_heartbeats_notify_nobody(monitor):
    sweep(monitor, [finding("gpu.xid", node(1))], {"gpu.xid"})
    notify(monitor)
    monitor.deliver_outbox(handlers.courier)
    monitor.emails()
    later = datetime.now(UTC) + timedelta(hours=2)
    sweep(monitor, [finding("gpu.xid", node(1))], {"gpu.xid"}, at=later)  # an UNCHANGED heartbeat
    assert notify(monitor) == {"batchItemFailures": []}
    assert monitor.outbox.depth() == 0


def test_many_new_findings_of_one_cluster_become_one_digest(monitor):
    checks = [f"test.check_{i}" for i in range(12)]
    sweep(monitor, [finding(c, node(i), f"problem {c}") for i, c in enumerate(checks)], set(checks))
    notify(monitor)
    monitor.deliver_outbox(handlers.courier)
    [message] = monitor.sink.received
    assert "12 findings" in message["blocks"][0]["text"]["text"]
    assert_block_kit([message])
    [email] = monitor.emails()
    assert "12 findings" in email.subject


def test_many_nodes_failing_one_check_become_one_breaker_alert(monitor):
    found = [finding("gpu.xid", node(i), "Xid 79 on the node") for i in range(6)]
    found.append(finding("disk.root_full", node(9), "root full"))
    sweep(monitor, found, {"gpu.xid", "disk.root_full"})
    notify(monitor)
    monitor.deliver_outbox(handlers.courier)
    assert len(monitor.sink.received) == 2
    assert any("6 nodes fail gpu.xid at once" in h for h in headers(monitor))
    assert_block_kit(monitor.sink.received)


# --------------------------------------------------------------------------- faults in the stream stage


def test_damaged_stream_records_are_kept_aside_and_the_good_alerts_still_go(monitor):
    sweep(monitor, [finding("gpu.xid", node(1))], {"gpu.xid"})
    event = monitor.stream_event()
    good = event["Records"]
    damaged = [
        {**good[0], "dynamodb": {**good[0]["dynamodb"], "NewImage": "not a map", "SequenceNumber": "9000001"}},
        {
            **good[0],
            "dynamodb": {**good[0]["dynamodb"], "NewImage": None, "OldImage": [1], "SequenceNumber": "9000002"},
        },
        {"eventID": "no-dynamodb-at-all"},
        None,
    ]
    response = monitor.invoke(handlers.stream_notifier, {"Records": [*damaged, *good]})
    # nothing fails: the damaged records are kept with their reason, the good one is queued
    assert response == {"batchItemFailures": []}
    monitor.deliver_outbox(handlers.courier)
    assert len(monitor.sink.received) == 1 and len(monitor.emails()) == 1
    sqs = monitor.clients.client("sqs")
    kept = sqs.receive_message(
        QueueUrl=monitor.resources.unprocessed_queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
    )["Messages"]
    assert len(kept) == 4
    reasons = [m["MessageAttributes"]["reason"]["StringValue"] for m in kept]
    assert any("not a map" in r for r in reasons) and any("SequenceNumber" in r for r in reasons)


def test_when_the_outbox_refuses_a_cluster_waits_and_other_clusters_go_on(monitor, monkeypatch):
    sweep(monitor, [finding("gpu.xid", node(1))], {"gpu.xid"})
    sweep(monitor, [finding("gpu.xid", node(2), cluster=OTHER)], {"gpu.xid"}, cluster=OTHER)
    sweep(monitor, [finding("gpu.xid", node(1)), finding("gpu.ecc", node(3))], {"gpu.xid", "gpu.ecc"})
    event = monitor.stream_event()
    real_put = adapters.SqsOutbox.put
    refused = []

    def put(self, message):
        if message.group == ARN and not refused:
            refused.append(message.key)
            raise outbox.ChannelError("outbox: ThrottlingException")
        return real_put(self, message)

    monkeypatch.setattr(adapters.SqsOutbox, "put", put)
    response = monitor.invoke(handlers.stream_notifier, event)
    findings = [r for r in event["Records"] if r["dynamodb"]["Keys"]["sk"]["S"].startswith("FINDING#")]
    by_cluster = {r["dynamodb"]["SequenceNumber"]: r["dynamodb"]["Keys"]["pk"]["S"] for r in findings}
    failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
    # every record of the refused cluster failed (the later ones wait with the first); the other went
    assert failed == {seq for seq, pk in by_cluster.items() if pk == f"CLUSTER#{ARN}"}
    monitor.deliver_outbox(handlers.courier)
    subjects = [m.subject for m in monitor.emails()]
    assert subjects and all("ml-slurm-train" in s for s in subjects)
    assert monitor.sink.received and all("ml-slurm-train" in json.dumps(m) for m in monitor.sink.received)


# --------------------------------------------------------------------------- faults in the courier


def test_new_then_resolved_with_slack_failing_once_ends_resolved_in_slack(monitor, clock):
    # GIVEN a finding opened and resolved before Slack got either message; Slack fails the first post
    sweep(monitor, [finding("gpu.xid", node(1))], {"gpu.xid"})
    sweep(monitor, [], {"gpu.xid"})
    notify(monitor)
    monitor.sink.fail_next(1, status=500)
    # WHEN the courier runs, then again once the first message's backoff has passed
    monitor.deliver_outbox(handlers.courier)
    assert monitor.sink.received == []  # "Resolved" waits behind the failed "New"
    clock.advance(120)
    monitor.deliver_outbox(handlers.courier)
    # THEN Slack shows New, then Resolved: never New last
    first, second = headers(monitor)
    assert "New" in first and "Resolved" in second
    # and the emails went out at once, once each, in order
    subjects = [e.subject for e in monitor.emails()]
    assert len(subjects) == 2 and "New" in subjects[0] and "Resolved" in subjects[1]


def test_a_hanging_slack_costs_one_timeout_per_invocation_not_one_per_message(monitor):
    checks = [f"test.check_{i}" for i in range(5)]
    sweep(monitor, [finding(c, node(i)) for i, c in enumerate(checks)], set(checks))
    notify(monitor)
    monitor.sink.hang(3)  # longer than SLACK_TIMEOUT_S=1
    event = monitor.outbox.poll()
    slack_records = [r for r in event["Records"] if json.loads(r["body"])["channel"] == "slack"]
    response = monitor.invoke(handlers.courier, event, timeout_s=60)
    monitor.outbox.settle(event, response)
    failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
    # one request reached the hanging endpoint; the other Slack messages were not tried, all wait
    assert monitor.sink.requests == 1
    assert {r["messageId"] for r in slack_records} <= failed
    # the emails and the finding events were not held back by Slack
    others = [r for r in event["Records"] if json.loads(r["body"])["channel"] != "slack"]
    assert others and not {r["messageId"] for r in others} & failed
    emails = [r for r in others if json.loads(r["body"])["channel"] == "sns"]
    assert len(monitor.emails()) == len(emails)
    monitor.sink.hang(0)


def test_without_time_for_a_delivery_nothing_is_tried_and_everything_waits(monitor):
    sweep(monitor, [finding("gpu.xid", node(1))], {"gpu.xid"})
    notify(monitor)
    event = monitor.outbox.poll()
    # a context with less time left than one Slack timeout plus the margin
    response = monitor.invoke(handlers.courier, event, timeout_s=SEND_MARGIN_S)
    assert len(response["batchItemFailures"]) == len(event["Records"])
    assert monitor.sink.requests == 0 and monitor.emails() == []


def test_a_payload_slack_refuses_goes_to_the_dead_letter_queue_whole_and_does_not_block(monitor):
    sweep(monitor, [finding("gpu.xid", node(1))], {"gpu.xid"})
    sweep(monitor, [finding("gpu.xid", node(1)), finding("gpu.ecc", node(2))], {"gpu.xid", "gpu.ecc"})
    notify(monitor)
    monitor.sink.fail_next(1, status=400)  # invalid_blocks: sending it again cannot succeed
    monitor.deliver_outbox(handlers.courier)
    # the refused message is kept, rendered, with the reason; the next one of the group went
    [dead] = dead_letters(monitor)
    kept = outbox.OutboxMessage.from_json(dead["Body"])
    assert kept.channel == "slack" and kept.slack and "blocks" in kept.slack
    assert "400" in dead["MessageAttributes"]["reason"]["StringValue"]
    assert len(monitor.sink.received) == 1 and monitor.outbox.depth() == 0


def test_a_body_that_is_not_an_outbox_message_is_dead_lettered(monitor):
    sqs = monitor.clients.client("sqs")
    sqs.send_message(
        QueueUrl=monitor.resources.outbox_url,
        MessageBody="{broken",
        MessageGroupId="slack:x",
        MessageDeduplicationId="broken-1",
    )
    responses = monitor.deliver_outbox(handlers.courier)
    assert responses == [{"batchItemFailures": []}]
    [dead] = dead_letters(monitor)
    assert dead["Body"] == "{broken" and "not JSON" in dead["MessageAttributes"]["reason"]["StringValue"]


def test_a_throttled_ledger_is_bounded_and_never_drops_a_message(monitor, monkeypatch):
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

    monkeypatch.setattr(adapters.DeliveryLedger, "__init__", init)
    sweep(monitor, [finding("gpu.xid", node(1))], {"gpu.xid"})
    notify(monitor)
    monitor.deliver_outbox(handlers.courier)
    # delivered anyway, once each; each ledger step gave up at its first error instead of stalling
    assert len(monitor.sink.received) == 1 and len(monitor.emails()) == 1
    # the notifier and the courier: one read and one write per message each (Slack, email, the finding event)
    assert calls and len(calls) <= 2 * (1 + 3)
    # and every SDK call it makes is bounded: two attempts in all, short timeouts
    config = clients.bookkeeping_clients(scenarios.REGION).client("dynamodb").meta.config
    assert config.retries["total_max_attempts"] == 2 and config.read_timeout <= 3


# --------------------------------------------------------------------------- a six-hour Slack outage


def test_a_six_hour_slack_outage_loses_no_alert_and_sends_none_twice(monitor, clock):
    """Slack answers 503 for six hours while findings open and resolve; every five minutes the event
    source polls the outbox. Afterwards Slack has every message exactly once, in each cluster's order,
    the emails went out on time, and the dead-letter queue is empty."""
    timeline = [
        (0, lambda: sweep(monitor, [finding("gpu.xid", node(1))], {"gpu.xid"})),
        (30 * 60, lambda: sweep(monitor, [finding("gpu.xid", node(2), cluster=OTHER)], {"gpu.xid"}, cluster=OTHER)),
        (60 * 60, lambda: sweep(monitor, [], {"gpu.xid"})),  # node 1's finding resolves during the outage
        (3 * 3600, lambda: sweep(monitor, [finding("gpu.ecc", node(3))], {"gpu.ecc", "gpu.xid"})),
        (5 * 3600, lambda: sweep(monitor, [], {"gpu.xid"}, cluster=OTHER)),
    ]
    outage_ends = 6 * 3600
    monitor.sink.outage(503)
    emails: list[str] = []
    now = 0
    step = 300
    pending = list(timeline)
    while now <= outage_ends + 3 * 3600:
        while pending and pending[0][0] <= now:
            pending.pop(0)[1]()
            assert notify(monitor) == {"batchItemFailures": []}
        if now >= outage_ends:
            monitor.sink.outage(None)
        monitor.deliver_outbox(handlers.courier)
        emails += [e.subject for e in monitor.emails()]
        if now < outage_ends:
            assert monitor.sink.received == []
            tried_during_outage = monitor.sink.requests
        if now >= outage_ends and monitor.outbox.depth() == 0 and not pending:
            break
        clock.advance(step)
        now += step
    # every alert arrived once, none was lost, nothing is left or dead
    assert monitor.outbox.depth() == 0 and dead_letters(monitor) == []
    assert len(monitor.sink.received) == 5 and len(set(json.dumps(m) for m in monitor.sink.received)) == 5
    assert len(emails) == 5 and len(set(emails)) == 5
    # each cluster's messages in the order they happened
    first, other = of_cluster(monitor, "ml-eks-prod"), of_cluster(monitor, "ml-slurm-train")
    assert ["New" in first[0], "Resolved" in first[1], "New" in first[2]] == [True, True, True]
    assert ["New" in other[0], "Resolved" in other[1]] == [True, True]
    assert_block_kit(monitor.sink.received)
    # Slack was really tried during the outage, and the retries were spaced, not hammered
    assert tried_during_outage >= 5
    assert tried_during_outage < 5 * (outage_ends // step)
