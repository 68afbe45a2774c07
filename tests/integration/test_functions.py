"""The monitor's Lambda handlers, invoked in-process against moto: EventBridge event → triage → findings
store → DynamoDB stream → Slack (a local sink) and SNS (read back through a subscribed SQS queue)."""

from __future__ import annotations

import copy
import json
import pathlib
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from functions.monitor import adapters, handlers, signal_run
from functions.shared import env as env_module
from functions.shared.events import (
    ClusterEvent,
    ClusterStateChange,
    NodeHealthEvent,
    ScheduleEvent,
    parse_monitor_event,
)
from hyperpod_debugger.aws.clients import AwsClients
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
from hyperpod_debugger.store.findings import FindingStore, create_table
from hyperpod_sim import scenarios
from hyperpod_sim.lambda_harness import (
    ALERT_GROUP_QUEUE,
    LambdaContext,
    SqsEventSource,
    StreamReader,
    create_outbox,
    read_emails,
)
from hyperpod_sim.lambda_harness import lambda_context as new_context
from hyperpod_sim.slack_sink import SlackSink
from tests.unit.test_eventbridge import HEALTH_CAPTURE, STATE_CAPTURE, published

EVENTS = pathlib.Path(__file__).resolve().parents[1] / "events"
TABLE = "hyperpod-findings"
IDEMPOTENCY = "hyperpod-idempotency"
SECRET = "hyperpod/slack-webhook"
ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/lw12e0dn1hhd"


def load(name: str) -> dict:
    return json.loads((EVENTS / name).read_text())


@pytest.fixture
def lambda_context() -> LambdaContext:
    return new_context("hyperpod-monitor", account="111122223333")


@pytest.fixture
def sink():
    with SlackSink() as s:
        yield s


@pytest.fixture
def monitor(aws, clients, sink, monkeypatch):
    """The stack's resources on moto and the functions' environment pointing at them."""
    create_table(clients, TABLE)
    clients.client("dynamodb").create_table(
        TableName=IDEMPOTENCY,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
    )
    clients.client("secretsmanager").create_secret(Name=SECRET, SecretString=sink.url)
    sns, sqs = clients.client("sns"), clients.client("sqs")
    topic = sns.create_topic(Name="hyperpod-alerts")["TopicArn"]
    queue_url = sqs.create_queue(QueueName="alerts-mailbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
    outbox_url, outbox_dlq_url = create_outbox(clients)
    groups_url = sqs.create_queue(QueueName=ALERT_GROUP_QUEUE)["QueueUrl"]
    for name, value in {
        "AWS_REGION": scenarios.REGION,
        "FINDINGS_TABLE": TABLE,
        "IDEMPOTENCY_TABLE": IDEMPOTENCY,
        "PROBE_ENABLED": "false",
        "SLACK_SECRET_NAME": SECRET,
        "ALERT_TOPIC_ARN": topic,
        "OUTBOX_QUEUE_URL": outbox_url,
        "OUTBOX_DLQ_URL": outbox_dlq_url,
        "ALERT_GROUP_QUEUE_URL": groups_url,
        "ALERT_GROUP_WAIT_S": "0",  # the group's first flush at once: no clock to move here
        "SLACK_TIMEOUT_S": "5",
        "POWERTOOLS_TRACE_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    env_module.clear_env_cache()
    adapters.idempotency_store.cache_clear()
    yield Monitor(clients, queue_url, outbox_url, groups_url)
    env_module.clear_env_cache()
    adapters.idempotency_store.cache_clear()


@dataclass
class Monitor:
    clients: AwsClients
    queue_url: str
    outbox_url: str
    groups_url: str
    _stream: StreamReader | None = None

    def deliver(self, context) -> list[dict]:
        """The alert groups due now flushed into the outbox, then the outbox to the courier, as their event
        sources would; the courier's responses."""
        groups = SqsEventSource(self.clients, self.groups_url, batch_size=1)
        while (event := groups.poll()) is not None:
            groups.settle(event, handlers.alert_groups(event, context))
        source = SqsEventSource(self.clients, self.outbox_url)
        responses = []
        while (event := source.poll()) is not None:
            response = handlers.courier(event, context)
            source.settle(event, response)
            responses.append(response)
        return responses

    @property
    def store(self) -> FindingStore:
        return FindingStore(self.clients, TABLE)

    def stream_event(self) -> dict:
        """Every stream record written since the last call, as Lambda's event source delivers them."""
        if self._stream is None:
            self._stream = StreamReader(self.clients, TABLE)
        return self._stream.read()

    def emails(self) -> list[dict]:
        return [e.envelope for e in read_emails(self.clients, self.queue_url)]


@pytest.fixture
def live_demo(clients):
    """The demo clusters seeded around the real clock, as the handler triages at the current time."""
    return scenarios.seed_demo(AwsClients(scenarios.REGION, max_attempts=1), datetime.now(UTC))


def node_health_event(cluster, instance_id: str, event_id: str = "7a3e6c1d-5f0b-4b8e-9d2a-1c4f6e8a0b31") -> dict:
    event = load("hyperpod_node_health_event.json")
    event["id"] = event_id
    event["resources"] = [cluster.arn]
    event["detail"].update(ClusterArn=cluster.arn, ClusterName=cluster.name, InstanceId=instance_id)
    return event


def seed_findings(store: FindingStore, findings: list[Finding], check_ids: set[str]) -> None:
    """Write NEW findings straight through the store, as one sweep of a cluster would."""
    report = TriageReport(
        tool_version="0",
        generated_at="2026-11-30T12:00:00+00:00",
        cluster=ClusterRef(name="sample-cluster", arn=ARN, region=scenarios.REGION),
        findings=findings,
        coverage=Coverage(checks=[CheckCoverage(check=c, status=CheckStatus.RAN) for c in sorted(check_ids)]),
        exit_code=TriageReport.exit_code_for(findings),
    )
    now = datetime.now(UTC)
    store.apply(plan_sweep(store.open_findings(ARN), report, now), now)


def finding(check: str, node: str, message: str = "GPU fell off the bus") -> Finding:
    return Finding(
        tag=Tag.FAIL,
        priority=Priority.P1,
        check=check,
        section="B.1",
        message=message,
        cluster_arn=ARN,
        instance_id=node,
        evidence=["NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus."],
    )


def node(n: int) -> str:
    return f"i-{n:017x}"


# --------------------------------------------------------------------------- recorded event shapes


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("hyperpod_node_health_event.json", NodeHealthEvent),
        ("hyperpod_cluster_event.json", ClusterEvent),
        ("hyperpod_cluster_state_change.json", ClusterStateChange),
        ("scheduled_event.json", ScheduleEvent),
    ],
)
def test_recorded_events_parse_into_their_models(name, model):
    # GIVEN an event shape recorded from the AWS documentation
    event = load(name)
    # WHEN it is parsed
    parsed = parse_monitor_event(event)
    # THEN it is the detail-type's model, and the cluster id (not the name) ends the ARN
    assert isinstance(parsed, model)
    assert parsed.id == event["id"]
    if model is not ScheduleEvent:
        assert parsed.resources[0].rsplit("/", 1)[-1] == "lw12e0dn1hhd"


# --------------------------------------------------------------------------- event handler


def test_node_health_event_triages_stores_and_notifies_slack_and_email(monitor, live_demo, sink, lambda_context):
    # GIVEN an HMA node-health event for a node of the demo EKS cluster
    cluster = live_demo.eks
    instance_id = cluster.nodes["gpu-workers"][0]
    event = node_health_event(cluster, instance_id)

    # WHEN the event handler runs
    result = handlers.event_handler(event, lambda_context)

    # THEN a scoped triage wrote NEW findings into the store
    assert result["status"] == "processed" and result["node"] == instance_id
    assert result["transitions"].get("NEW", 0) > 0
    stored = monitor.store.open_findings(cluster.arn)
    assert stored and len(stored) == result["transitions"]["NEW"]
    assert len(monitor.store.sweeps(cluster.arn)) == 1

    # WHEN the table's stream reaches the notifier
    stream = monitor.stream_event()
    response = handlers.stream_notifier(stream, lambda_context)

    # THEN every message was queued, and the courier delivered each to Slack and SNS
    assert response == {"batchItemFailures": []}
    assert all(r == {"batchItemFailures": []} for r in monitor.deliver(lambda_context))
    emails = monitor.emails()
    assert sink.received and len(emails) == len(sink.received)
    assert not sink.rejected
    assert all(e["Subject"] and e["Message"] for e in emails)
    text = json.dumps(sink.received)
    assert SECRET not in text and sink.url not in text


def test_duplicate_event_id_is_processed_once(monitor, live_demo, lambda_context, monkeypatch):
    # GIVEN the same event delivered twice (SageMaker may send one change more than once)
    calls = []
    real = signal_run.run_triage
    monkeypatch.setattr(signal_run, "run_triage", lambda req, clients: calls.append(req) or real(req, clients))
    cluster = live_demo.eks
    event = node_health_event(cluster, cluster.nodes["gpu-workers"][1])

    # WHEN the handler receives both
    first = handlers.event_handler(event, lambda_context)
    second = handlers.event_handler(copy.deepcopy(event), lambda_context)

    # THEN the triage ran once and the second call returned the first one's result
    assert len(calls) == 1
    assert second == first
    assert len(monitor.store.sweeps(cluster.arn)) == 1

    # AND a new event id for the same node is a new triage
    handlers.event_handler(node_health_event(cluster, cluster.nodes["gpu-workers"][1], "another-id"), lambda_context)
    assert len(calls) == 2


def test_malformed_event_is_logged_and_rejected_without_raising(monitor, lambda_context, caplog):
    # GIVEN a node-health event without its InstanceId
    event = load("hyperpod_node_health_event.json")
    del event["detail"]["InstanceId"]

    # WHEN the handler receives it
    result = handlers.event_handler(event, lambda_context)

    # THEN it returns a failure naming the field, logs a clear error, and stored nothing
    assert result["status"] == "rejected"
    assert any(e["at"].endswith("InstanceId") for e in result["errors"])
    [error] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert error.getMessage().startswith("event rejected") and "InstanceId" in json.dumps(error.errors)
    assert monitor.store.open_findings(ARN) == {}


def test_something_that_is_not_an_event_is_rejected(monitor, lambda_context):
    assert handlers.event_handler({"hello": "world"}, lambda_context)["status"] == "rejected"


def test_info_level_cluster_event_is_ignored(monitor, lambda_context, monkeypatch):
    # GIVEN an Info-level cluster event
    monkeypatch.setattr(signal_run, "run_triage", lambda *a: pytest.fail("no triage for Info events"))
    event = load("hyperpod_cluster_event.json")
    event["detail"]["EventDetails"]["EventLevel"] = "Info"
    # WHEN / THEN it is ignored with a log line
    assert handlers.event_handler(event, lambda_context) == {"status": "ignored", "event_id": event["id"]}


def test_missing_configuration_fails_loudly(monitor, lambda_context, monkeypatch):
    monkeypatch.delenv("FINDINGS_TABLE")
    env_module.clear_env_cache()
    with pytest.raises(Exception, match="FINDINGS_TABLE"):
        handlers.event_handler(load("hyperpod_node_health_event.json"), lambda_context)


# --------------------------------------------------------------------------- scheduled sweep


def sweep_input(cluster) -> dict:
    """What the state machine's Map state hands one worker (see infra/constructs/sweep.py)."""
    return {"cluster_name": cluster.name, "cluster_arn": cluster.arn, "sweep_id": "sweep-2026-11-30T10-00"}


def test_sweep_stores_new_findings_then_a_repeat_sweep_changes_nothing(monitor, live_demo, lambda_context):
    # GIVEN the demo EKS cluster and an empty store
    cluster = live_demo.eks

    # WHEN the sweep worker runs twice for it
    first = handlers.sweep_cluster(sweep_input(cluster), lambda_context)
    second = handlers.sweep_cluster(sweep_input(cluster), lambda_context)

    # THEN the first sweep opened findings and the second only confirmed them
    assert first["status"] == "processed" and first["cluster"] == cluster.name
    assert first["transitions"].get("NEW", 0) > 0
    assert len(monitor.store.open_findings(cluster.arn)) == first["transitions"]["NEW"]
    assert second["status"] == "processed"
    assert not second["transitions"].get("NEW") and not second["transitions"].get("RESOLVED")
    assert len(monitor.store.sweeps(cluster.arn)) == 2


def test_sweep_skips_a_cluster_outside_the_allowlist(monitor, live_demo, lambda_context, monkeypatch):
    monkeypatch.setenv("CLUSTER_ALLOWLIST", "some-other-cluster")
    env_module.clear_env_cache()

    result = handlers.sweep_cluster(sweep_input(live_demo.eks), lambda_context)

    assert result["status"] == "skipped"
    assert monitor.store.open_findings(live_demo.eks.arn) == {}


def test_sweep_input_without_a_cluster_is_rejected(monitor, lambda_context):
    result = handlers.sweep_cluster({"sweep_id": "x"}, lambda_context)
    assert result["status"] == "rejected"


def test_sweep_of_a_missing_cluster_reports_the_error_and_writes_nothing(monitor, lambda_context):
    missing = "arn:aws:sagemaker:us-west-2:111122223333:cluster/doesnotexist"
    result = handlers.sweep_cluster({"cluster_name": "gone", "cluster_arn": missing}, lambda_context)
    assert result["status"] == "error" and result["error"]
    assert monitor.store.open_findings(missing) == {}


# --------------------------------------------------------------------------- published events, kept rejections


def published_health(cluster, instance_id: str, **summary) -> dict:
    """The community-captured Node Health Event (tests/events/published), aimed at a simulated node."""
    event = copy.deepcopy(published(HEALTH_CAPTURE))
    event["resources"] = [cluster.arn]
    event["detail"].update(ClusterArn=cluster.arn, ClusterName=cluster.name, InstanceId=instance_id)
    event["detail"]["HealthSummary"].update(summary)
    return event


@pytest.fixture
def unprocessed(monitor, monkeypatch):
    url = monitor.clients.client("sqs").create_queue(QueueName="unprocessed-events")["QueueUrl"]
    monkeypatch.setenv("UNPROCESSED_QUEUE_URL", url)
    env_module.clear_env_cache()
    return url


def kept(clients: AwsClients, url: str) -> list[dict]:
    got = clients.client("sqs").receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])
    return got.get("Messages", [])


def test_a_rejected_event_is_kept_verbatim_with_its_reason(monitor, unprocessed, lambda_context, caplog):
    # GIVEN a node-health event without its InstanceId
    event = published(HEALTH_CAPTURE)
    del event["detail"]["InstanceId"]
    # WHEN the handler receives it
    result = handlers.event_handler(event, lambda_context)
    # THEN it is rejected, logged with the event's id, and kept in the unprocessed queue as it came
    assert result["status"] == "rejected" and result["kept"] is True
    [error] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert error.event_id == event["id"]
    [message] = kept(monitor.clients, unprocessed)
    assert json.loads(message["Body"]) == event
    attributes = {k: v["StringValue"] for k, v in message["MessageAttributes"].items()}
    assert attributes["kind"] == "event" and "InstanceId" in attributes["reason"]
    assert attributes["detail_type"] == "SageMaker HyperPod Cluster Node Health Event"


def test_an_event_whose_arn_has_no_valid_region_is_kept_not_triaged(monitor, unprocessed, lambda_context, monkeypatch):
    monkeypatch.setattr(signal_run, "run_triage", lambda *a: pytest.fail("no triage for an unusable event"))
    event = published(STATE_CAPTURE)
    event["detail"]["ClusterArn"] = "arn:aws:sagemaker:moon-1:842413447717:cluster/qx06scn2c9eu"
    result = handlers.event_handler(event, lambda_context)
    assert result["status"] == "rejected" and "not a SageMaker HyperPod cluster ARN" in result["errors"][0]["error"]
    assert len(kept(monitor.clients, unprocessed)) == 1


def test_when_the_queue_cannot_keep_a_rejected_event_the_invocation_fails(monitor, lambda_context, monkeypatch):
    # Lambda then retries and finally hands the event to its on-failure destination: still kept
    monkeypatch.setenv("UNPROCESSED_QUEUE_URL", "https://sqs.us-west-2.amazonaws.com/111122223333/missing-queue")
    env_module.clear_env_cache()
    with pytest.raises(RuntimeError, match="unprocessed-events queue refused"):
        handlers.event_handler({"hello": "world"}, lambda_context)


def test_hyperpods_repair_action_is_shown_beside_ours_and_no_second_action_is_suggested(
    monitor, live_demo, lambda_context
):
    # GIVEN the captured event: HyperPod is replacing the node itself (RepairAction Replace)
    cluster = live_demo.eks
    instance_id = cluster.nodes["gpu-workers"][1]  # Xid 79 recurred: our ladder says replace
    # WHEN the handler triages it
    result = handlers.event_handler(published_health(cluster, instance_id), lambda_context)
    assert result["status"] == "processed"
    # THEN HyperPod's own verdict is a finding of the node, with its words verbatim
    stored = list(monitor.store.open_findings(cluster.arn).values())
    [verdict] = [f for f in stored if f.check == "events.node_health"]
    assert verdict.instance_id == instance_id and verdict.tag == "WARN"
    assert "RepairAction: Replace" in verdict.evidence
    assert any(e.startswith("Recommendation: HyperPod is working on repairing") for e in verdict.evidence)
    # AND no finding of that node suggests a reboot or a replacement of our own
    steps = {c["step"] for f in stored if f.instance_id == instance_id for c in f.suggested_commands}
    assert not steps & {"reboot", "replace", "drain"}


def test_a_healthy_event_resolves_hyperpods_verdict(monitor, live_demo, lambda_context):
    cluster = live_demo.eks
    instance_id = cluster.nodes["gpu-workers"][2]
    handlers.event_handler(published_health(cluster, instance_id, RepairAction="None"), lambda_context)
    assert any(f.check == "events.node_health" for f in monitor.store.open_findings(cluster.arn).values())
    healthy = published_health(cluster, instance_id, HealthStatus="Healthy", RepairAction="None")
    healthy["id"] = "60196056-7245-ee37-b872-54761ba04a7d"
    handlers.event_handler(healthy, lambda_context)
    assert not any(f.check == "events.node_health" for f in monitor.store.open_findings(cluster.arn).values())


def test_without_hyperpods_repair_action_our_ladder_still_suggests_its_rung(monitor, live_demo, lambda_context):
    # the contrast to the test above: the same node, HyperPod taking no action itself
    cluster = live_demo.eks
    instance_id = cluster.nodes["gpu-workers"][1]  # Xid 79 recurred: our ladder says replace
    handlers.event_handler(published_health(cluster, instance_id, RepairAction="None"), lambda_context)
    stored = list(monitor.store.open_findings(cluster.arn).values())
    steps = {c["step"] for f in stored if f.instance_id == instance_id for c in f.suggested_commands}
    assert steps & {"reboot", "replace"}
    [verdict] = [f for f in stored if f.check == "events.node_health"]
    assert "RepairAction: None" in verdict.evidence


@pytest.mark.parametrize("module", ["events", "hma", "sweep", "probes", "stream", "outbox"])
def test_an_entry_point_imports_only_what_it_uses(module):
    """A cold start pays for its own function only: no X-Ray SDK at import (the tracer is built on the first
    invocation), and no triage in the functions that only deliver alerts."""
    import subprocess
    import sys

    code = (
        f"import sys, functions.monitor.handlers.{module}; "
        "print(' '.join(m for m in ('aws_xray_sdk', 'hyperpod_debugger.triage', 'moto', 'hyperpod_sim') "
        "if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "aws_xray_sdk" not in loaded and "moto" not in loaded and "hyperpod_sim" not in loaded
    if module in ("stream", "outbox"):
        assert "hyperpod_debugger.triage" not in loaded
