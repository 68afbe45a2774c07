"""The EventBridge rule patterns against the events AWS publishes, matched by a real pattern engine.

Expected verdicts come from AWS's documentation, not from the code: the events reference defines Info
as "progressing normally" and Warn/Error as needing attention; a Node Health Event fires when a node
turns unhealthy or healthy again; a State Change reports the cluster's status. The published events
are in ``tests/events/published/`` (sources in SOURCES.md). Cases marked *derived* change one field of
a published event, named in the case.
"""

from __future__ import annotations

import copy
import json
import pathlib

import pytest
from moto.events.models import EventPattern

from hyperpod_debugger.checks.classify import classify
from hyperpod_debugger.domain import eventbridge as eb

PUBLISHED = pathlib.Path(__file__).resolve().parents[1] / "events" / "published"

CAPACITY = "sagemaker-hyperpod-cluster-event--instance-creation-failed-capacity.json"
LCS_STARTED = "sagemaker-hyperpod-cluster-event--lifecycle-script-started.json"
HEALTH_DOCS = "sagemaker-hyperpod-cluster-node-health-event--hma-nvidia-error-terminate.json"
HEALTH_CAPTURE = "sagemaker-hyperpod-cluster-node-health-event--replace-in-progress-community-capture.json"
STATE_DOCS = "sagemaker-hyperpod-cluster-state-change--eks-inservice-instance-group-failed.json"
STATE_CAPTURE = "sagemaker-hyperpod-cluster-state-change--eks-updating-scale-up-community-capture.json"


def published(name: str) -> dict:
    return json.loads((PUBLISHED / name).read_text())


def matching_rules(patterns: dict[str, dict], event: dict) -> list[str]:
    """The detail-types whose rule EventBridge (moto's engine) would fire for ``event``."""
    return [
        dt
        for dt, pattern in patterns.items()
        if EventPattern.load(json.dumps(pattern)).matches_event(event)  # type: ignore[arg-type]  # moto hints a TypedDict; any JSON matches
    ]


def with_details(name: str, **fields) -> dict:
    """A published Cluster Event with fields of ``detail.EventDetails`` changed (None removes one)."""
    event = copy.deepcopy(published(name))
    details = event["detail"]["EventDetails"]
    for key, value in fields.items():
        if value is None:
            details.pop(key, None)
        else:
            details[key] = value
    return event


def test_every_published_file_is_listed_with_its_source():
    files = sorted(p.name for p in PUBLISHED.glob("*.json"))
    sources = (PUBLISHED / "SOURCES.md").read_text()
    assert files and all(f"## {name}" in sources for name in files)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (CAPACITY, [eb.CLUSTER_EVENT]),  # Error: instance creation failed for lack of capacity
        (LCS_STARTED, []),  # no EventLevel, "has Started": informational, no triage
        (HEALTH_DOCS, [eb.NODE_HEALTH]),
        (HEALTH_CAPTURE, [eb.NODE_HEALTH]),
        (STATE_DOCS, [eb.STATE_CHANGE]),
        (STATE_CAPTURE, [eb.STATE_CHANGE]),
    ],
)
def test_published_events_fire_exactly_the_rules_they_should(name, expected):
    assert matching_rules(eb.rule_patterns(), published(name)) == expected


@pytest.mark.parametrize(
    ("fields", "fires"),
    [
        ({"EventLevel": "Info"}, False),  # derived: the capacity event at Info
        ({"EventLevel": "Warn"}, True),  # derived: at Warn
        ({"EventLevel": None}, True),  # derived: no level, description says "failed"
        ({"EventLevel": None, "Description": "Instance creation started successfully"}, False),
        # derived: level-less families of the events reference that need attention
        ({"EventLevel": None, "Description": "Slurm configuration drift detected: partition dev"}, True),
        (
            {
                "EventLevel": None,
                "Description": "UpdateClusterSoftware for Instance i-0391f86fa0fe0d465 in IG p5Inst "
                "skipped due to PodDisruptionBudget constraint.",
            },
            True,
        ),
        (
            {
                "EventLevel": None,
                "Description": "Baking period failed for IG p5Inst in Cluster sample-cluster. "
                "Alarms [p99-latency] entered ALARM state. Initiating auto-rollback.",
            },
            True,
        ),
    ],
)
def test_cluster_event_rule_by_level_and_description(fields, fires):
    event = with_details(CAPACITY, **fields)
    assert (matching_rules(eb.rule_patterns(), event) == [eb.CLUSTER_EVENT]) is fires
    details = event["detail"]["EventDetails"]
    # the handler reads the level the same way the rule does
    assert eb.triggers_triage(details.get("EventLevel"), details.get("Description")) is fires


def test_a_lifecycle_script_failure_without_a_level_fires():
    # derived: the published "has Started" event, as the reference's LCS failure family words it
    event = with_details(
        LCS_STARTED,
        Description="Instance lifecycle script execution for EC2 Instance "
        "i-0391f86fa0fe0d465 has Failed. To view lifecycle script logs, visit log group",
    )
    assert matching_rules(eb.rule_patterns(), event) == [eb.CLUSTER_EVENT]
    assert eb.effective_level(None, event["detail"]["EventDetails"]["Description"]) == "Error"


def test_the_engine_is_not_trivially_true():
    # a pattern for another source matches none of the published events
    other = {"x": {"source": ["aws.ec2"], "detail-type": [eb.CLUSTER_EVENT]}}
    assert all(matching_rules(other, published(p.name)) == [] for p in PUBLISHED.glob("*.json"))


# --------------------------------------------------------------------------- the allowlist


@pytest.mark.parametrize(
    ("allowlist", "name", "fires"),
    [
        (["sample-cluster"], CAPACITY, True),  # name → detail.EventDetails.ClusterName
        (["sample-cluster"], HEALTH_DOCS, True),  # name → detail.ClusterName
        (["sample-cluster"], STATE_DOCS, True),
        (["other-cluster"], CAPACITY, False),
        (["other-cluster"], HEALTH_DOCS, False),
        (["k8-1"], HEALTH_CAPTURE, True),
        (["qx06scn2c9eu"], HEALTH_CAPTURE, True),  # id → suffix of detail.ClusterArn
        (["qx06scn2c9eu"], STATE_CAPTURE, True),
        (["zz9yy8xx7ww6"], STATE_CAPTURE, False),
        (["arn:aws:sagemaker:us-west-2:842413447717:cluster/qx06scn2c9eu"], HEALTH_CAPTURE, True),
        (["arn:aws:sagemaker:us-east-1:842413447717:cluster/qx06scn2c9eu"], HEALTH_CAPTURE, False),
        (["other-cluster", "qx06scn2c9eu"], STATE_CAPTURE, True),  # names and ids together
        (["other-cluster", "qx06scn2c9eu"], CAPACITY, False),
        (["sample-cluster", "qx06scn2c9eu"], CAPACITY, True),
    ],
)
def test_the_allowlist_filters_where_events_carry_the_name_and_the_arn(allowlist, name, fires):
    event = published(name)
    patterns = eb.rule_patterns(allowlist)
    assert bool(matching_rules(patterns, event)) is fires
    # the handlers' own check agrees with the rule
    detail = event["detail"].get("EventDetails", event["detail"])
    assert eb.Allowlist.parse(allowlist).allows(detail["ClusterName"], detail["ClusterArn"]) is fires


def test_an_allowlist_never_widens_the_level_filter():
    event = with_details(CAPACITY, EventLevel="Info")
    assert matching_rules(eb.rule_patterns(["sample-cluster", "qx06scn2c9eu"]), event) == []


def test_a_lowercase_12_character_entry_is_both_a_name_and_an_id():
    allow = eb.Allowlist.parse(["abc123def456"])
    assert allow.names == ("abc123def456",) and allow.ids == ("abc123def456",)


@pytest.mark.parametrize(
    "entry",
    ["bad name", "arn:aws:sagemaker:us-west-2:111122223333:cluster/sample-cluster", "arn:aws:s3:::bucket", "-x"],
)
def test_entries_that_are_not_clusters_are_refused_by_name(entry):
    with pytest.raises(ValueError, match="not a HyperPod cluster") as raised:
        eb.Allowlist.parse(["ml-eks-prod", entry])
    assert repr(entry) in str(raised.value)


# --------------------------------------------------------------------------- cluster ARNs


def test_the_arn_decides_the_region_and_an_id_arn_is_the_api_reference():
    where = eb.event_cluster("arn:aws:sagemaker:eu-west-1:842413447717:cluster/qx06scn2c9eu", "k8-1")
    assert (where.region, where.account, where.cluster_id) == ("eu-west-1", "842413447717", "qx06scn2c9eu")
    assert where.reference == where.arn


def test_a_documentation_style_arn_with_the_name_falls_back_to_the_name():
    # AWS's examples end the ARN with the cluster name; the API needs the id, so the name is used
    where = eb.event_cluster("arn:aws:sagemaker:us-west-2:111122223333:cluster/sample-cluster", "sample-cluster")
    assert where.cluster_id is None and where.reference == "sample-cluster"


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws:sagemaker:mars-1:111122223333:cluster/qx06scn2c9eu",
        "arn:aws:sagemaker:us-west-2:1111:cluster/qx06scn2c9eu",
        "arn:aws:eks:us-west-2:111122223333:cluster/qx06scn2c9eu",
        "",
    ],
)
def test_an_arn_without_a_valid_region_or_shape_is_refused(arn):
    with pytest.raises(ValueError):
        eb.event_cluster(arn, "k8-1")


# --------------------------------------------------------------------------- families


@pytest.mark.parametrize(
    ("description", "section", "key"),
    [
        # wordings of the HyperPod cluster events reference (placeholders filled in)
        (
            "Baking period failed for IG gpu in Cluster c1. Alarms [a] entered ALARM state. Initiating auto-rollback.",
            "E",
            "patch_rollback",
        ),
        (
            "Rollback failed for IG gpu in Cluster c1. Some instances may be in FailedMaintenance state.",
            "E",
            "patch_rollback",
        ),
        (
            "UpdateClusterSoftware for Instance i-0abc12345678 in IG gpu skipped due to PodDisruptionBudget constraint.",
            "E",
            "patch_blocked",
        ),
        ("UpdateClusterSoftware failed for IG gpu in Cluster c1. Initiating rollback.", "E", "patch_rollback"),
        ("Slurm configuration drift detected: partition dev", "H", "slurm_drift"),
        ("Failed to enable AutoScaling in Cluster c1", "J", "autoscaling"),
        ("CustomResourceDefinition installation failed for EKS Cluster eks1", "J", "autoscaling"),
        ("FSx creation failed for IG gpu in Cluster c1", "J", "storage"),
        ("Failed to delete unused Customer ENIs for EC2 Instance i-0abc12345678", "B.1", "eni_cleanup"),
        ("EKS Access Entries creation failed", "B.1", "access_entry"),
        ("Failed to update Kubernetes config for instance i-0abc12345678", "F", "kube_config"),
        ("Failed to submit reboot request for EC2 Instance i-0abc12345678", "F", "hardware"),
        ("Instance i-0abc12345678 failed to start as part of instance replacement", "F", "hardware"),
    ],
)
def test_newer_cluster_event_families_have_their_own_cause(description, section, key):
    cause = classify(description)
    assert (cause.section, cause.key) == (section, key)
    # and each of them, level-less, starts a triage
    assert eb.triggers_triage(None, description)
