"""Fleet health out of the handlers: the metrics a sweep emits (Powertools EMF on stdout) and the finding
events the courier puts on EventBridge, routed by a real rule (moto's pattern matcher) to a queue."""

# ruff: noqa: F401, F811

from __future__ import annotations

import json
import pathlib

import jsonschema
import pytest

from functions.monitor import handlers
from functions.shared import env as env_module
from hyperpod_debugger.domain.model import Tag
from hyperpod_debugger.notify import finding_event
from tests.integration.test_functions import (  # noqa: F401  (fixtures)
    lambda_context,
    live_demo,
    monitor,
    node_health_event,
    sink,
    sweep_input,
)

SCHEMA = json.loads((pathlib.Path(__file__).parents[2] / "references" / "finding-event.schema.json").read_text())


def emf_blobs(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict) and "_aws" in item:
            out.append(item)
    return out


def dimension_sets(blob: dict) -> list[list[str]]:
    return [sorted(d) for d in blob["_aws"]["CloudWatchMetrics"][0]["Dimensions"]]


def test_a_sweep_emits_the_clusters_health_per_group_and_account_wide(monitor, live_demo, lambda_context, capsys):
    # GIVEN the demo EKS cluster (its node list is the simulator's, not ours) and an empty store
    cluster = live_demo.eks
    nodes = {i for ids in cluster.nodes.values() for i in ids}
    capsys.readouterr()

    # WHEN the sweep's cluster step runs
    response = handlers.sweep_cluster(sweep_input(cluster), lambda_context)
    blobs = emf_blobs(capsys.readouterr().out)

    # THEN one blob carries the cluster's numbers, with a second, account-wide dimension set
    assert response["status"] == "processed"
    whole = [b for b in blobs if "HealthyShare" in b and "instance_group" not in b and b.get("cluster") == cluster.name]
    assert len(whole) == 1
    blob = whole[0]
    assert ["cluster", "service"] in dimension_sets(blob) and ["service"] in dimension_sets(blob)
    assert blob["Nodes"] == [len(nodes)]
    verdicts = sum(
        blob[m][0]
        for m in ("NodesHealthy", "NodesWarn", "NodesFailing", "NodesUnknown", "NodesUnobserved", "NodesNotRunning")
    )
    assert verdicts == len(nodes)
    # probing is off in this environment: nobody is "unobserved", and no probe age is claimed
    assert blob["NodesUnobserved"] == [0] and "OldestProbeAgeSeconds" not in blob
    assert blob["HealthyShare"] == [pytest.approx(100 * blob["NodesHealthy"][0] / len(nodes), abs=0.01)]
    # the open findings by priority are the store's
    stored = monitor.store.open_findings(cluster.arn).values()
    for priority in ("P0", "P1", "P2"):
        assert blob[f"OpenFindings{priority}"] == [
            sum(1 for f in stored if f.priority and f.priority.value == priority)
        ]
    # a node with an open FAIL finding is never counted healthy
    failing = {f.instance_id for f in stored if f.instance_id and f.tag is Tag.FAIL}
    assert blob["NodesFailing"] == [len(failing & nodes)]
    # and per instance group, the groups' node counts add up to the cluster's
    groups = [b for b in blobs if b.get("cluster") == cluster.name and "instance_group" in b]
    assert {b["instance_group"] for b in groups} == set(cluster.nodes)
    assert sum(b["Nodes"][0] for b in groups) == len(nodes)
    for b in groups:
        assert b["Nodes"] == [len(cluster.nodes[b["instance_group"]])]
        assert dimension_sets(b) == [["cluster", "instance_group", "service"]]


@pytest.fixture
def routed(monitor, monkeypatch):
    """The default bus with a rule for P0 and P1 NEW findings (the README's example pattern) to a queue."""
    events, sqs = monitor.clients.client("events"), monitor.clients.client("sqs")
    url = sqs.create_queue(QueueName="routed-findings")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    pattern = {
        "source": ["hyperpod-node-debugger"],
        "detail-type": ["HyperPod Node Debugger Finding"],
        "detail": {"transition": ["NEW", "REOPENED", "ESCALATED"], "finding": {"priority": ["P0", "P1"]}},
    }
    events.put_rule(Name="urgent-findings", EventPattern=json.dumps(pattern), State="ENABLED")
    events.put_targets(Rule="urgent-findings", Targets=[{"Id": "queue", "Arn": arn}])
    monkeypatch.setenv("EVENT_BUS_NAME", "default")
    env_module.clear_env_cache()
    return url


def test_every_new_finding_is_put_on_the_bus_and_a_rule_routes_the_urgent_ones(
    monitor, live_demo, lambda_context, routed, capsys
):
    # GIVEN a node-health event that opens findings on a node
    cluster = live_demo.eks
    instance_id = cluster.nodes["gpu-workers"][0]
    assert handlers.event_handler(node_health_event(cluster, instance_id), lambda_context)["status"] == "processed"

    # WHEN the stream reaches the notifier and the courier drains the outbox
    assert handlers.stream_notifier(monitor.stream_event(), lambda_context) == {"batchItemFailures": []}
    capsys.readouterr()
    assert all(r == {"batchItemFailures": []} for r in monitor.deliver(lambda_context))
    out = capsys.readouterr().out

    # THEN the rule's queue holds exactly the stored P0/P1 findings, each a schema-valid event
    sqs = monitor.clients.client("sqs")
    received = []
    while batch := sqs.receive_message(QueueUrl=routed, MaxNumberOfMessages=10).get("Messages", []):
        for message in batch:
            received.append(json.loads(message["Body"]))
            sqs.delete_message(QueueUrl=routed, ReceiptHandle=message["ReceiptHandle"])
    stored = monitor.store.open_findings(cluster.arn)
    urgent = {fp for fp, f in stored.items() if f.priority and f.priority.value in ("P0", "P1")}
    assert urgent, "the scenario opens urgent findings"
    assert {e["detail"]["finding"]["fingerprint"] for e in received} == urgent
    for event in received:
        assert event["source"] == finding_event.SOURCE and event["detail-type"] == finding_event.DETAIL_TYPE
        assert event["resources"][0] == cluster.arn
        jsonschema.validate(event["detail"], SCHEMA)
        assert event["detail"]["schema_version"] == "1" and event["detail"]["transition"] == "NEW"
        finding = stored[event["detail"]["finding"]["fingerprint"]]
        assert event["detail"]["finding"]["message"] == finding.message
        assert event["detail"]["instance_id"] == finding.instance_id
    # and the courier counted every finding it put (all of them, urgent or not)
    put = sum(sum(b["FindingEventsPut"]) for b in emf_blobs(out) if "FindingEventsPut" in b)
    assert put == len(stored)


def test_a_resolution_emits_how_long_the_finding_was_open(monitor, live_demo, lambda_context, capsys):
    # GIVEN a sweep that opened findings, and a fix the operator made (DNS hostnames on the VPC)
    cluster = live_demo.eks
    handlers.sweep_cluster(sweep_input(cluster), lambda_context)
    handlers.stream_notifier(monitor.stream_event(), lambda_context)
    dns = [f for f in monitor.store.open_findings(cluster.arn).values() if "dns" in f.check.lower()]
    if not dns:
        pytest.skip("the scenario has no DNS finding to fix")
    vpc = next(w for w in dns[0].message.replace(",", " ").split() if w.startswith("vpc-"))
    monitor.clients.client("ec2").modify_vpc_attribute(VpcId=vpc.strip(".:'\""), EnableDnsHostnames={"Value": True})

    # WHEN the next sweep resolves it and the stream reaches the notifier
    second = handlers.sweep_cluster(sweep_input(cluster), lambda_context)
    capsys.readouterr()
    handlers.stream_notifier(monitor.stream_event(), lambda_context)
    blobs = [b for b in emf_blobs(capsys.readouterr().out) if "TimeToResolveSeconds" in b]

    # THEN one value per resolution, per cluster and account-wide
    assert second["transitions"].get("RESOLVED", 0) >= 1
    values = [v for b in blobs for v in b["TimeToResolveSeconds"]]
    assert len(values) == second["transitions"]["RESOLVED"]
    assert all(v >= 0 for v in values)
    assert all(b["cluster"] == cluster.name and ["service"] in dimension_sets(b) for b in blobs)
