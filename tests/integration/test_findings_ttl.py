"""How long a resolved finding stays: the stack's ``findingsTtlDays`` reaches the functions as
``FINDINGS_TTL_DAYS``, and the event handler's store writes it into the table's TTL attribute (``expires_at``,
epoch seconds, which DynamoDB's TTL reads). The handler runs in-process on moto, on a fixed clock."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import pytest

from functions.monitor import handlers, runtime
from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.store.findings import HISTORY_TTL, plain
from hyperpod_sim import scenarios
from hyperpod_sim.lambda_harness import lambda_context, monitor_harness
from tests.unit.test_eventbridge import HEALTH_CAPTURE, published

#: a fixed instant for the handler's clock (what it reads as now; nothing here waits)
AT = datetime(2026, 12, 4, 9, 30, tzinfo=UTC)
DAY_S = 86400


def health_event(cluster, instance_id: str, event_id: str, **summary) -> dict:
    """The community-captured Node Health Event (tests/events/published), aimed at a simulated node."""
    event = copy.deepcopy(published(HEALTH_CAPTURE))
    event["id"] = event_id
    event["resources"] = [cluster.arn]
    event["detail"].update(ClusterArn=cluster.arn, ClusterName=cluster.name, InstanceId=instance_id)
    event["detail"]["HealthSummary"].update(summary)
    return event


def resolve_one_finding(clients: AwsClients, ttl_days: str | None) -> list[dict]:
    """HyperPod reports a node unhealthy, then healthy: the event handler opens, then resolves, its verdict.
    Returns the findings table's items about that verdict (the finding and its history records)."""
    demo = scenarios.seed_demo(AwsClients(scenarios.REGION, max_attempts=1), AT)
    cluster = demo.eks
    node = cluster.nodes["gpu-workers"][2]
    context = lambda_context("hyperpod-monitor", account="111122223333")
    env = {"PROBE_ENABLED": "false", "FINDINGS_TTL_DAYS": ttl_days}
    with monitor_harness(clients, env=env) as monitor, runtime.use_clock(lambda: AT):
        unhealthy = health_event(cluster, node, "0f6d3c6e-1b1e-4c55-9f63-6f1f0d7d1a01", RepairAction="None")
        healthy = health_event(
            cluster, node, "0f6d3c6e-1b1e-4c55-9f63-6f1f0d7d1a02", HealthStatus="Healthy", RepairAction="None"
        )
        assert handlers.event_handler(unhealthy, context)["status"] == "processed"
        assert handlers.event_handler(healthy, context)["status"] == "processed"
        table = monitor.resources.findings_table
        items = [plain(i) for i in clients.client("dynamodb").scan(TableName=table)["Items"]]
    return [i for i in items if i.get("check") == "events.node_health"]


def epoch(at: datetime) -> int:
    return int(at.timestamp())


@pytest.mark.parametrize(("setting", "days"), [("7", 7), (None, HISTORY_TTL.days)])
def test_a_resolved_finding_expires_findings_ttl_days_after_it_resolved(clients, setting, days):
    # GIVEN the handler's environment as the stack sets it (or, unset, the store's own history TTL)
    items = resolve_one_finding(clients, setting)
    # THEN the finding is RESOLVED now, and DynamoDB's TTL removes it `days` later
    [finding] = [i for i in items if i["item_type"] == "FINDING"]
    assert finding["state"] == "RESOLVED"
    assert datetime.fromisoformat(finding["resolved_at"]) == AT
    assert int(finding["expires_at"]) == epoch(AT) + days * DAY_S
    # AND so do the history records of its opening and its resolution
    history = {i["transition"]: int(i["expires_at"]) for i in items if i["item_type"] == "HISTORY"}
    assert history == {"NEW": epoch(AT) + days * DAY_S, "RESOLVED": epoch(AT) + days * DAY_S}


def test_seven_days_is_not_the_default():
    # the contrast that keeps the test above from passing whatever the setting does
    assert timedelta(days=7) != HISTORY_TTL
