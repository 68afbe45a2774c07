"""Fleet health out of the handlers: the metrics a sweep emits (Powertools EMF on stdout) and the finding
events the courier puts on EventBridge, routed by a real rule (moto's pattern matcher) to a queue."""

# ruff: noqa: F401, F811

from __future__ import annotations

import json
import pathlib
import re

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

ROOT = pathlib.Path(__file__).parents[2]
SCHEMA = json.loads((ROOT / "references" / "finding-event.schema.json").read_text())


def readme_json(option: str) -> list:
    """Every JSON argument the README passes as ``--<option> '...'``, in order (its routing examples)."""
    text = (ROOT / "README.md").read_text()
    return [json.loads(m) for m in re.findall(rf"--{option} '(.*?)'", text, flags=re.S)]


PAGERDUTY_PATTERN, CENTRAL_PATTERN = readme_json("event-pattern")
[PAGERDUTY_TARGET], [CENTRAL_TARGET] = readme_json("targets")


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
    """The default bus with the README's two rules, each to a queue of its own in place of its target:
    P0 and P1 openings (the PagerDuty example) and every finding (the forwarding to a central account)."""
    events, sqs = monitor.clients.client("events"), monitor.clients.client("sqs")
    urls = {}
    for name, pattern in (("urgent", PAGERDUTY_PATTERN), ("central", CENTRAL_PATTERN)):
        url = sqs.create_queue(QueueName=f"routed-{name}")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(Name=f"findings-{name}", EventPattern=json.dumps(pattern), State="ENABLED")
        events.put_targets(Rule=f"findings-{name}", Targets=[{"Id": "queue", "Arn": arn}])
        urls[name] = url
    monkeypatch.setenv("EVENT_BUS_NAME", "default")
    env_module.clear_env_cache()
    return urls


def drain(sqs, url: str) -> list[dict]:
    received = []
    while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        for message in batch:
            received.append(json.loads(message["Body"]))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return received


def transform(event: dict, transformer: dict) -> dict:
    """An EventBridge input transformer applied to ``event``: each path of InputPathsMap (dot notation)
    read from the event, each string placed JSON-escaped where the template quotes its <name>."""
    values = {}
    for name, path in transformer["InputPathsMap"].items():
        value: object = event
        for key in path.removeprefix("$.").split("."):
            value = value.get(key) if isinstance(value, dict) else None
        values[name] = value
    template = transformer["InputTemplate"]
    for name, value in values.items():
        text = json.dumps(value if isinstance(value, str) else json.dumps(value))[1:-1]
        template = template.replace(f"<{name}>", text)
    return json.loads(template)


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
    received = drain(sqs, routed["urgent"])
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
    # the forwarding rule takes every one of them, urgent or not
    forwarded = drain(sqs, routed["central"])
    assert sorted(e["detail"]["finding"]["fingerprint"] for e in forwarded) == sorted(stored)
    # each urgent one, through the README's input transformer, is an Events API v2 request PagerDuty takes
    # (PagerDuty's documented fields: event_action one of trigger/acknowledge/resolve; dedup_key at most
    # 255 characters; payload summary, source, and severity one of critical/error/warning/info)
    for event in received:
        request = transform(event, PAGERDUTY_TARGET["InputTransformer"])
        assert request["routing_key"] == "YOUR_PAGERDUTY_INTEGRATION_KEY"  # no <placeholder> EventBridge would fill
        assert request["event_action"] == "trigger"
        assert request["dedup_key"] == event["detail"]["finding"]["fingerprint"] and len(request["dedup_key"]) <= 255
        payload = request["payload"]
        assert payload["summary"] == event["detail"]["finding"]["message"]
        assert payload["source"] == cluster.name
        assert payload["custom_details"]["check"] == event["detail"]["finding"]["check"]
        assert payload["severity"] in {"critical", "error", "warning", "info"}
        assert payload["custom_details"]["runbook"].startswith("references/node-diagnostics-detail.md")


def test_the_readmes_targets_and_central_bus_policy_are_well_formed():
    from policy_sentry.querying.actions import get_action_data

    # the central account's bus policy grants PutEvents on its own bus, to the organization only
    [policy] = readme_json("policy")
    [statement] = policy["Statement"]
    assert statement["Action"] == "events:PutEvents" and get_action_data("events", "PutEvents")["events"]
    assert statement["Resource"] == CENTRAL_TARGET["Arn"]
    assert statement["Condition"]["StringEquals"]["aws:PrincipalOrgID"].startswith("o-")
    # a target event bus in another account needs a role; an API destination always does
    assert {"Id", "Arn", "RoleArn"} <= set(CENTRAL_TARGET) and {"Id", "Arn", "RoleArn"} <= set(PAGERDUTY_TARGET)
    # every path the transformer reads is a field of the documented detail
    for path in PAGERDUTY_TARGET["InputTransformer"]["InputPathsMap"].values():
        node: dict = SCHEMA
        for key in path.removeprefix("$.detail.").split("."):
            node = _schema_ref(node)["properties"][key]
        assert node, path


def _schema_ref(node: dict) -> dict:
    ref = node.get("$ref", "")
    return SCHEMA["$defs"][ref.rsplit("/", 1)[-1]] if ref else node


def test_a_probe_batch_counts_its_start_session_calls_and_the_throttled_answers():
    # GIVEN the demo account with probing on, and Session Manager throttling the first two StartSession
    # requests it receives (what the service answers over its rate)
    import importlib
    from datetime import UTC, datetime

    from functions.shared.events import PROBE_ITEM_SELECTOR
    from hyperpod_sim.demo import simulated_account_and_ssm
    from hyperpod_sim.fake_ssm import Faults
    from hyperpod_sim.lambda_harness import map_items, monitor_harness
    from hyperpod_sim.monitor_demo import DEMO_ENV

    def handler(name: str):
        module, attribute = name.rsplit(".", 1)
        return getattr(importlib.import_module(module), attribute)

    with (
        simulated_account_and_ssm(datetime.now(UTC)) as (clients, demo, ssm),
        monitor_harness(clients, env=DEMO_ENV) as monitor,
    ):
        cluster = demo.eks
        swept = monitor.invoke(
            handler("functions.monitor.handlers.sweep.handler"),
            {"cluster_arn": cluster.arn, "cluster_name": cluster.name, "sweep_id": "throttled"},
        )
        batches = map_items(swept, "$.batches", PROBE_ITEM_SELECTOR)
        assert batches, "the sweep planned no probe"
        ssm.set_faults(Faults(throttle_first_n=2))
        before = len(monitor.metrics)
        for batch in batches:
            monitor.invoke(handler("functions.monitor.handlers.probes.handler"), batch)
        received = ssm.start_calls

    # THEN the batches' metrics say what the service saw: every throttled answer, and one call per
    # StartSession the batch made. botocore retries a throttled request within the same call, and any
    # other answer ends it, so the calls are the service's answers that were not throttles (two throttles
    # are fewer than the clients' attempts: no call ended on one)
    blobs = [b for b in monitor.metrics[before:] if "StartSessionCalls" in b and b.get("cluster") == cluster.name]
    calls = sum(sum(b["StartSessionCalls"]) for b in blobs)
    throttles = sum(sum(b["StartSessionThrottles"]) for b in blobs)
    throttled = [c for c in received if c.error == "ThrottlingException"]
    assert throttles == len(throttled) >= 2
    assert calls == len(received) - len(throttled) >= 1
