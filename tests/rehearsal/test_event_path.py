"""HyperPod's published events through the deployed rules, and what people receive, as AWS runs it:
rule patterns → the event function (asynchronous invoke) → the window queue → the window function → the
findings table's stream (the template's filter, batch size and partial-batch responses) → the notifier →
the alert-group queue → the alert-group function → the outbox (SQS FIFO) → the courier → Slack and email.

The events are AWS's published examples (``tests/events/published``), moved onto the demo's EKS cluster and
one of its nodes; which rule each one reaches is decided from the event itself (its detail-type and level),
not from the rules.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from hyperpod_sim.slack_sink import block_kit_problems
from infra import constants as c

PUBLISHED = pathlib.Path(__file__).resolve().parents[1] / "events" / "published"


def _on_demo(stage, name: str) -> dict:
    """A published example with its account, cluster and instance replaced by the demo's."""
    text = (PUBLISHED / name).read_text()
    event = json.loads(text)
    detail = event["detail"].get("EventDetails", event["detail"])
    cluster = stage.demo.eks
    for old, new in (
        (detail["ClusterArn"], cluster.arn),
        (f'"{detail["ClusterName"]}"', f'"{cluster.name}"'),
        (str(detail.get("InstanceId") or "\0"), cluster.nodes["gpu-workers"][0]),
        (event["account"], cluster.arn.split(":")[4]),
    ):
        text = text.replace(old, new)
    return json.loads(text)


#: detail-type → the rule that must deliver it; None: no rule (an informational lifecycle event)
ROUTES = {
    "sagemaker-hyperpod-cluster-event--instance-creation-failed-capacity.json": "DetectionClusterEventRule",
    "sagemaker-hyperpod-cluster-event--lifecycle-script-started.json": None,
    "sagemaker-hyperpod-cluster-node-health-event--hma-nvidia-error-terminate.json": "DetectionNodeHealthRule",
    "sagemaker-hyperpod-cluster-state-change--eks-inservice-instance-group-failed.json": "DetectionStateChangeRule",
}


@pytest.fixture(scope="module")
def delivered(stage):
    """The HMA node-health example published, then everything it sets off run until the stack is quiet."""
    deliveries = stage.publish(
        _on_demo(stage, "sagemaker-hyperpod-cluster-node-health-event--hma-nvidia-error-terminate.json")
    )
    stage.settle()
    return deliveries


def test_the_node_health_event_reaches_the_event_function_once(stage, delivered):
    (delivery,) = delivered
    assert delivery.invocation is not None and delivery.invocation.ok, delivery.invocation
    assert delivery.invocation.payload["status"] == "queued"
    assert delivery.invocation.payload["node"] == stage.demo.eks.nodes["gpu-workers"][0]


def test_every_function_on_the_path_ran_and_none_failed(stage, delivered):
    ran = {i.function for i in stage.lambdas.invocations}
    for handler in (
        c.EVENT_HANDLER,
        c.EVENT_WINDOW_HANDLER,
        c.STREAM_NOTIFIER_HANDLER,
        c.ALERT_GROUPS_HANDLER,
        c.COURIER_HANDLER,
    ):
        assert stage.deployment.function_name(handler) in ran, handler
    failed = [(i.function, i.error) for i in stage.lambdas.invocations if not i.ok]
    assert not failed


def test_the_stream_hands_over_only_what_its_filter_lets_through_in_batches_of_the_template(stage, delivered):
    (mapping,) = stage.stream
    batch_size = int(mapping.props["BatchSize"])
    assert mapping.invocations
    for invocation in mapping.invocations:
        records = invocation.event["Records"]
        assert 0 < len(records) <= batch_size
        assert {r["dynamodb"]["NewImage"]["item_type"]["S"] for r in records} <= {"FINDING", "INCIDENT"}


def test_people_get_one_message_per_channel_for_the_clusters_first_triage(stage, delivered):
    assert len(stage.slack.received) == 1
    (message,) = stage.slack.received
    assert block_kit_problems(message) == []
    assert "monitoring started" in message["text"] and stage.demo.eks.name in message["text"]
    emails = stage.emails()
    assert len(emails) == 1 and "monitoring started" in emails[0].subject


def test_nothing_is_left_in_any_queue(stage, delivered):
    sqs = stage.clients.client("sqs")
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
    for logical in stage.deployment.template.of_type("AWS::SQS::Queue"):
        url = stage.deployment.refs[logical]
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
        assert sum(int(attributes[n]) for n in names) == 0, logical


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_published_events_reach_the_rule_their_kind_calls_for(stage, name):
    event = _on_demo(stage, name)
    from hyperpod_sim.rehearsal.sources import EventBus

    matched = [
        rule.name
        for rule in EventBus(stage.deployment, stage.lambdas)._rules()
        if rule.event_pattern.matches_event(event)
    ]
    expected = ROUTES[name]
    if expected is None:
        assert matched == []
    else:
        assert len(matched) == 1 and stage.deployment.logical_of(matched[0]).startswith(expected)
