"""From a published HyperPod event to what the monitor triages (``functions.monitor.logic.signals.signal_of``)."""

from __future__ import annotations

import copy

import pytest

from functions.monitor.logic import signals
from functions.shared.events import parse_hyperpod_event
from tests.unit.test_eventbridge import (
    CAPACITY,
    HEALTH_CAPTURE,
    HEALTH_DOCS,
    LCS_STARTED,
    STATE_CAPTURE,
    STATE_DOCS,
    published,
)


def signal(event: dict) -> signals.ClusterSignal | None:
    return signals.signal_of(parse_hyperpod_event(event))


@pytest.mark.parametrize("name", [CAPACITY, LCS_STARTED, HEALTH_DOCS, HEALTH_CAPTURE, STATE_DOCS, STATE_CAPTURE])
def test_every_published_event_parses(name):
    parsed = parse_hyperpod_event(published(name))
    assert parsed.detail_type == published(name)["detail-type"]


def test_the_capacity_error_triages_its_node_and_finds_the_cluster_by_name():
    got = signal(published(CAPACITY))
    assert got is not None
    assert (got.node, got.region, got.cluster_name) == ("i-0391f86fa0fe0d465", "us-west-2", "sample-cluster")
    # the documentation's ARN ends with the name, which the API would refuse: the name is used instead
    assert got.cluster == "sample-cluster"
    assert any("no cluster id" in note for note in got.notes)
    assert got.reason.startswith("Error: Instance creation")


def test_an_informational_event_without_a_level_is_not_triaged():
    assert signal(published(LCS_STARTED)) is None


def test_a_node_health_event_with_an_invalid_instance_id_still_triages_the_cluster():
    # AWS's example carries i-12345678abcdefghi (not hex): nothing may put it into a command
    got = signal(published(HEALTH_DOCS))
    assert got is not None and got.node is None and got.health is None
    assert any("not an EC2 instance id" in note for note in got.notes)


def test_hyperpod_s_repair_action_and_recommendation_are_carried():
    got = signal(published(HEALTH_CAPTURE))
    assert got is not None and got.node == "i-0fdc8ceb3bfecc215"
    assert got.cluster == "arn:aws:sagemaker:us-west-2:842413447717:cluster/qx06scn2c9eu"
    health = got.health
    assert health is not None
    assert (health.status, health.reason, health.repair_action) == ("Unhealthy", None, "Replace")
    assert health.recommendation.startswith("HyperPod is working on repairing")
    assert health.hyperpod_acting and health.unhealthy
    assert "repair action Replace" in got.reason


def test_the_arn_not_the_envelope_decides_the_region():
    event = copy.deepcopy(published(HEALTH_CAPTURE))
    event["region"] = "us-east-1"
    event["detail"]["ClusterArn"] = "arn:aws:sagemaker:eu-west-1:842413447717:cluster/qx06scn2c9eu"
    got = signal(event)
    assert got is not None and got.region == "eu-west-1"


def test_an_arn_with_an_invalid_region_is_an_unusable_event():
    event = copy.deepcopy(published(STATE_CAPTURE))
    event["detail"]["ClusterArn"] = "arn:aws:sagemaker:not_a_region:842413447717:cluster/qx06scn2c9eu"
    with pytest.raises(signals.UnusableEvent, match="not a SageMaker HyperPod cluster ARN"):
        signal(event)


def test_a_state_change_triages_the_whole_cluster():
    got = signal(published(STATE_CAPTURE))
    assert got is not None and got.node is None and got.reason == "cluster status Updating"


def test_missing_optional_fields_do_not_reject_an_event():
    event = copy.deepcopy(published(HEALTH_CAPTURE))
    del event["detail"]["HealthSummary"]
    del event["detail"]["Tags"]
    got = signal(event)
    assert got is not None and got.health is not None and got.health.status is None
