"""The HMA log-subscription handler, invoked in-process against moto: a CloudWatch Logs delivery from a
cluster's log group → one scoped triage per node with detections → the findings store."""

from __future__ import annotations

import base64
import copy
import gzip
import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from functions.monitor import adapters, handlers, signal_run
from functions.shared import env as env_module
from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.lifecycle.findings import State
from hyperpod_debugger.store.findings import FindingStore, create_table
from hyperpod_sim import scenarios, seed
from hyperpod_sim.lambda_harness import LambdaContext
from hyperpod_sim.lambda_harness import lambda_context as new_context

TABLE = "hyperpod-findings"
IDEMPOTENCY = "hyperpod-idempotency"


@pytest.fixture
def lambda_context() -> LambdaContext:
    return new_context("hyperpod-hma-logs", region=scenarios.REGION, account=seed.ACCOUNT)


@pytest.fixture
def store(aws, clients, monkeypatch) -> Iterator[FindingStore]:
    """The findings and idempotency tables on moto, and the function's environment pointing at them."""
    create_table(clients, TABLE)
    clients.client("dynamodb").create_table(
        TableName=IDEMPOTENCY,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
    )
    for name, value in {
        "AWS_REGION": scenarios.REGION,
        "FINDINGS_TABLE": TABLE,
        "IDEMPOTENCY_TABLE": IDEMPOTENCY,
        "PROBE_ENABLED": "false",
        "POWERTOOLS_TRACE_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CLUSTER_ALLOWLIST", raising=False)
    env_module.clear_env_cache()
    adapters.idempotency_store.cache_clear()
    yield FindingStore(clients, TABLE)
    env_module.clear_env_cache()
    adapters.idempotency_store.cache_clear()


@pytest.fixture
def live_demo(clients):
    """The demo clusters seeded around the real clock, as the handler triages at the current time."""
    return scenarios.seed_demo(AwsClients(scenarios.REGION, max_attempts=1), datetime.now(UTC))


def delivery(cluster, stream: str, messages: list[str], first_id: int = 1) -> dict:
    """What CloudWatch Logs hands the function for one stream of the cluster's log group."""
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    document = {
        "messageType": "DATA_MESSAGE",
        "owner": seed.ACCOUNT,
        "logGroup": cluster.log_group,
        "logStream": stream,
        "subscriptionFilters": ["HyperPodNodeDebugger-HmaSubscription"],
        "logEvents": [
            {"id": f"{37000000000000000000 + first_id + n}", "timestamp": now_ms + n, "message": m}
            for n, m in enumerate(messages)
        ],
    }
    return encode(document)


def encode(document: object) -> dict:
    raw = json.dumps(document).encode()
    return {"awslogs": {"data": base64.b64encode(gzip.compress(raw)).decode()}}


def slurm_detection(cluster) -> tuple[str, str]:
    """The demo Slurm worker whose HMA stream holds an Xid 79 record, and that stream's name."""
    worker = cluster.nodes["worker-group-1"][0]
    return worker, f"SagemakerHealthMonitoringAgent/worker-group-1/{worker}"


def test_an_hma_detection_triages_its_node_into_the_findings_store(store, live_demo, lambda_context):
    # GIVEN a Slurm HMA detection (Xid 79, with the agent's "data: " key) delivered from the cluster's log group
    cluster = live_demo.slurm
    worker, stream = slurm_detection(cluster)
    event = delivery(cluster, stream, [seed.slurm_hma_record(datetime.now(UTC), 79), "agent heartbeat"])

    # WHEN the log-subscription handler runs
    result = handlers.log_subscription(event, lambda_context)

    # THEN one scoped triage of that node wrote NEW findings, some of them about the node itself
    assert result["status"] == "processed"
    assert result["cluster"] == cluster.name and result["cluster_arn"] == cluster.arn
    [node] = result["nodes"]
    assert node["node"] == worker
    assert node["reason"] == "HMA: Xid 79 (GPU has fallen off the bus)"
    assert result["transitions"].get("NEW", 0) > 0 and result["deferred"] == []
    stored = store.open_findings(cluster.arn)
    assert len(stored) == result["transitions"]["NEW"]
    assert all(f.state is State.OPEN for f in stored.values())
    assert any(f.instance_id == worker for f in stored.values())
    assert len(store.sweeps(cluster.arn)) == 1


def test_the_same_delivery_twice_makes_no_new_transition(store, live_demo, lambda_context, monkeypatch):
    # GIVEN one delivery that Lambda hands the function twice (an async retry)
    calls = []
    real = signal_run.run_triage
    monkeypatch.setattr(signal_run, "run_triage", lambda req, clients: calls.append(req) or real(req, clients))
    cluster = live_demo.slurm
    _, stream = slurm_detection(cluster)
    event = delivery(cluster, stream, [seed.slurm_hma_record(datetime.now(UTC), 79)])

    # WHEN the handler receives both
    first = handlers.log_subscription(event, lambda_context)
    before = store.open_findings(cluster.arn)
    second = handlers.log_subscription(copy.deepcopy(event), lambda_context)

    # THEN the triage ran once, the store is unchanged and the second answer is the first one's
    assert len(calls) == 1
    assert second == first
    assert store.open_findings(cluster.arn) == before
    assert len(store.sweeps(cluster.arn)) == 1

    # AND a later delivery (new log event ids) for the same node is a new triage with nothing NEW
    later = handlers.log_subscription(
        delivery(cluster, stream, [seed.slurm_hma_record(datetime.now(UTC), 79)], first_id=500), lambda_context
    )
    assert len(calls) == 2
    assert not later["transitions"].get("NEW")


def test_the_eks_xid_detection_names_the_node_and_the_code(store, live_demo, lambda_context):
    cluster = live_demo.eks
    node = cluster.nodes["gpu-workers"][1]
    stream = f"SagemakerHealthMonitoringAgent/gpu-workers/{node}"
    event = delivery(cluster, stream, [seed.hma_record(datetime.now(UTC), 79, detail="GPU has fallen off the bus")])

    result = handlers.log_subscription(event, lambda_context)

    assert [n["node"] for n in result["nodes"]] == [node]
    assert result["nodes"][0]["reason"].startswith("HMA: Xid 79")
    assert any(f.instance_id == node for f in store.open_findings(cluster.arn).values())


def test_a_control_message_is_ignored(store, lambda_context, monkeypatch):
    monkeypatch.setattr(signal_run, "run_triage", lambda *a: pytest.fail("no triage for a control message"))
    control = {
        "messageType": "CONTROL_MESSAGE",
        "owner": "CloudwatchLogs",
        "logGroup": "",
        "logStream": "",
        "subscriptionFilters": [],
        "logEvents": [{"id": "", "timestamp": 1780334425000, "message": "CWL CONTROL MESSAGE: Checking health"}],
    }
    assert handlers.log_subscription(encode(control), lambda_context) == {
        "status": "ignored",
        "reason": "control message",
    }


@pytest.mark.parametrize(
    "event",
    [
        {"awslogs": {"data": "H4sIAAAA!!!"}},
        {"awslogs": {"data": base64.b64encode(b"not gzip").decode()}},
        {"hello": "world"},
    ],
)
def test_a_malformed_delivery_is_logged_and_rejected_without_raising(store, lambda_context, caplog, event):
    result = handlers.log_subscription(event, lambda_context)

    assert result["status"] == "rejected" and result["error"]
    [error] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert error.getMessage().startswith("log payload rejected")


def test_a_delivery_from_a_log_group_of_another_shape_is_rejected(store, live_demo, lambda_context):
    document = json.loads(
        gzip.decompress(base64.b64decode(delivery(live_demo.slurm, "s", ["x"])["awslogs"]["data"])).decode()
    )
    document["logGroup"] = "/aws/lambda/something-else"
    result = handlers.log_subscription(encode(document), lambda_context)
    assert result["status"] == "rejected" and "not a HyperPod cluster log group" in result["error"]


def test_a_lifecycle_stream_is_dropped_without_a_triage(store, live_demo, lambda_context, monkeypatch):
    monkeypatch.setattr(signal_run, "run_triage", lambda *a: pytest.fail("no triage for a lifecycle stream"))
    cluster = live_demo.slurm
    worker = cluster.nodes["worker-group-1"][0]
    event = delivery(cluster, f"LifecycleConfig/worker-group-1/{worker}", ["HealthMonitoringAgentDetectionEvent"])

    result = handlers.log_subscription(event, lambda_context)

    assert result["status"] == "processed" and result["nodes"] == [] and result["transitions"] == {}
    assert "is not an HMA stream" in result["dropped"]


def test_a_cluster_outside_the_allowlist_is_skipped(store, live_demo, lambda_context, monkeypatch):
    monkeypatch.setenv("CLUSTER_ALLOWLIST", "some-other-cluster")
    env_module.clear_env_cache()
    monkeypatch.setattr(signal_run, "run_triage", lambda *a: pytest.fail("no triage outside the allowlist"))
    cluster = live_demo.slurm
    _, stream = slurm_detection(cluster)

    result = handlers.log_subscription(
        delivery(cluster, stream, [seed.slurm_hma_record(datetime.now(UTC), 79)]), lambda_context
    )

    assert result["status"] == "skipped" and result["cluster"] == cluster.name
    assert store.open_findings(cluster.arn) == {}


def test_the_allowlist_accepts_the_cluster_by_id(store, live_demo, lambda_context, monkeypatch):
    cluster = live_demo.slurm
    monkeypatch.setenv("CLUSTER_ALLOWLIST", f"other,{cluster.cluster_id}")
    env_module.clear_env_cache()
    _, stream = slurm_detection(cluster)

    result = handlers.log_subscription(
        delivery(cluster, stream, [seed.slurm_hma_record(datetime.now(UTC), 79)]), lambda_context
    )

    assert result["status"] == "processed" and len(result["nodes"]) == 1


def test_nodes_past_the_cap_are_deferred_to_the_sweep(store, live_demo, lambda_context, monkeypatch):
    # GIVEN LOG_MAX_NODES=1 and a batch that names two nodes (real deliveries carry one stream, so one node)
    from functions.monitor import hma_logs
    from functions.monitor.logic import signals

    monkeypatch.setenv("LOG_MAX_NODES", "1")
    env_module.clear_env_cache()
    cluster = live_demo.slurm
    first, second = cluster.nodes["worker-group-1"]
    real = hma_logs.read_subscription

    def two_nodes(event, **kwargs):
        batch = real(event, **kwargs)
        extra = signals.ClusterSignal("hma-extra", batch.cluster_arn, batch.signals[0].region, second, "HMA: test")
        return hma_logs.HmaBatch(batch.cluster, batch.cluster_arn, batch.log_stream, (*batch.signals, extra), 2)

    monkeypatch.setattr(hma_logs, "read_subscription", two_nodes)
    _, stream = slurm_detection(cluster)

    # WHEN the handler runs
    result = handlers.log_subscription(
        delivery(cluster, stream, [seed.slurm_hma_record(datetime.now(UTC), 79)]), lambda_context
    )

    # THEN only the first node was triaged and the second is reported as deferred
    assert [n["node"] for n in result["nodes"]] == [first]
    assert result["deferred"] == [second]
