"""The HMA log subscription: a filter per listed cluster log group feeding its own Lambda, scoped invoke
permissions, context validation, and the read-only and cdk-nag guarantees with the subscription on."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Match, Template

from infra import constants as c
from infra.constructs.hma_subscription import ClusterLogGroup, cluster_log_groups
from infra.stack import ACKNOWLEDGEMENTS
from tests.infrastructure import test_stack as stack_checks
from tests.infrastructure.conftest import synth

SLURM = "/aws/sagemaker/Clusters/ml-slurm-train/abc123def456"
OTHER = "/aws/sagemaker/Clusters/other-cluster/zz9yy8xx7ww6"
GROUPS = [SLURM, OTHER]


@pytest.fixture(scope="module")
def subscribed(tmp_path_factory):
    return synth(tmp_path_factory, clusterLogGroups=GROUPS)


@pytest.fixture(scope="module")
def with_groups(subscribed) -> Template:
    return subscribed[1]


def _log_function_id(template: Template) -> str:
    functions = template.find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": c.LOG_SUBSCRIPTION_HANDLER}}
    )
    [logical_id] = functions
    return logical_id


# --- filters and permissions ------------------------------------------------------------------------------


def test_one_filter_per_log_group_with_the_detection_pattern_and_the_log_function(with_groups: Template):
    function_id = _log_function_id(with_groups)
    filters = with_groups.find_resources("AWS::Logs::SubscriptionFilter")
    assert sorted(f["Properties"]["LogGroupName"] for f in filters.values()) == sorted(GROUPS)
    for resource in filters.values():
        assert resource["Properties"]["FilterPattern"] == c.DEFAULT_HMA_FILTER_PATTERN
        assert resource["Properties"]["DestinationArn"] == {"Fn::GetAtt": [function_id, "Arn"]}
        assert "RoleArn" not in resource["Properties"]  # a Lambda destination needs no role


def test_logs_may_invoke_the_function_only_from_the_subscribed_groups(with_groups: Template):
    function_id = _log_function_id(with_groups)
    permissions = with_groups.find_resources(
        "AWS::Lambda::Permission", {"Properties": {"Principal": "logs.amazonaws.com"}}
    )
    assert len(permissions) == len(GROUPS)
    sources = []
    for resource in permissions.values():
        props = resource["Properties"]
        assert props["Action"] == "lambda:InvokeFunction"
        assert props["FunctionName"] == {"Fn::GetAtt": [function_id, "Arn"]}
        sources.append(json.dumps(props["SourceArn"]))
    for group in GROUPS:
        [source] = [s for s in sources if f":log-group:{group}:*" in s]
        assert ":logs:" in source
    # every filter waits for its own permission (CloudWatch tests the destination when the filter is created)
    filters = with_groups.find_resources("AWS::Logs::SubscriptionFilter")
    for resource in filters.values():
        [depends] = resource["DependsOn"]
        assert depends in permissions


def test_nothing_else_may_invoke_the_log_function(with_groups: Template):
    function_id = _log_function_id(with_groups)
    permissions = with_groups.find_resources("AWS::Lambda::Permission")
    targeting = [p for p in permissions.values() if function_id in json.dumps(p["Properties"]["FunctionName"])]
    assert targeting and all(p["Properties"]["Principal"] == "logs.amazonaws.com" for p in targeting)


def test_the_log_function_has_the_event_handlers_environment_and_its_own_role(
    with_groups: Template, template: Template
):
    with_groups.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Handler": c.LOG_SUBSCRIPTION_HANDLER,
            "Runtime": "python3.12",
            "TracingConfig": {"Mode": "Active"},
            "Environment": {
                "Variables": Match.object_like(
                    {
                        "FINDINGS_TABLE": {"Ref": Match.string_like_regexp("FindingsStore")},
                        "IDEMPOTENCY_TABLE": {"Ref": Match.string_like_regexp("FindingsStore")},
                        "CLUSTER_ALLOWLIST": "",
                        "POWERTOOLS_SERVICE_NAME": c.SERVICE_NAME,
                    }
                )
            },
        },
    )
    # one function more than without log groups, with a role of its own
    functions = with_groups.find_resources("AWS::Lambda::Function")
    assert len(functions) == len(template.find_resources("AWS::Lambda::Function")) + 1
    assert len({json.dumps(f["Properties"]["Role"]) for f in functions.values()}) == len(functions)


def test_the_log_function_only_keeps_records_for_their_windows(with_groups: Template):
    policies = [r for k, r in with_groups.find_resources("AWS::IAM::Policy").items() if k.startswith("HmaSubscription")]
    statements = {s.get("Sid"): s for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]}
    assert {"KeepEventsForWindows", "ScheduleWindows", "OwnLogGroup"} <= set(statements)
    actions = {a for s in statements.values() for a in stack_checks._actions(s)}
    assert not {a for a in actions if a.split(":")[0] in {"sagemaker", "ec2", "eks", "ssm", "ssmmessages"}}
    [function] = with_groups.find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": c.LOG_SUBSCRIPTION_HANDLER}}
    ).values()
    variables = function["Properties"]["Environment"]["Variables"]
    assert "EVENT_WINDOW_QUEUE_URL" in variables and variables["EVENT_WINDOW_S"] == "100"


def test_a_custom_filter_pattern_is_used_verbatim(tmp_path_factory):
    pattern = '?HealthMonitoringAgentDetectionEvent ?"NvidiaErrorReboot"'
    _, template, _ = synth(tmp_path_factory, clusterLogGroups=SLURM, hmaFilterPattern=pattern)
    template.has_resource_properties("AWS::Logs::SubscriptionFilter", {"LogGroupName": SLURM, "FilterPattern": pattern})


def test_without_log_groups_there_is_no_filter_and_no_extra_function(template: Template, stack):
    template.resource_count_is("AWS::Logs::SubscriptionFilter", 0)
    assert (
        template.find_resources("AWS::Lambda::Function", {"Properties": {"Handler": c.LOG_SUBSCRIPTION_HANDLER}}) == {}
    )
    assert template.find_resources("AWS::Lambda::Permission", {"Properties": {"Principal": "logs.amazonaws.com"}}) == {}
    assert stack.hma_subscription is None


# --- the read-only promise and cdk-nag, with the subscription on ------------------------------------------


def test_no_sagemaker_ec2_eks_write_action_with_the_subscription(with_groups: Template):
    stack_checks.test_no_sagemaker_ec2_eks_write_action_anywhere(with_groups)
    stack_checks.test_every_identity_action_is_on_the_allowed_verb_list(with_groups)
    stack_checks.test_no_managed_policies_roles_carry_no_inline_wildcards(with_groups)


def test_cdk_nag_passes_with_the_subscription_and_needs_no_new_acknowledgement(subscribed):
    _, _, outdir = subscribed
    report = json.loads((outdir / "validation-report.json").read_text())
    (plugin,) = report["pluginReports"]
    assert plugin["conclusion"] == "success"
    assert plugin["violations"] == []
    assert {v["ruleName"] for v in plugin["suppressedViolations"]} == set(ACKNOWLEDGEMENTS)


# --- context validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "entry",
    [
        "/aws/lambda/my-function",
        "/aws/sagemaker/Clusters/ml-slurm-train",
        "/aws/sagemaker/Clusters/ml-slurm-train/abc123def456/extra",
        "/aws/sagemaker/Clusters/ml-slurm-train/ABC123DEF456",
        "/aws/sagemaker/Clusters/ml_slurm_train/abc123def456",
        "/aws/sagemaker/Clusters/-dash/abc123def456",
        "/aws/sagemaker/Clusters/" + "a" * 64 + "/abc123def456",
        "aws/sagemaker/Clusters/ml-slurm-train/abc123def456",
        "/aws/sagemaker/Clusters/*/abc123def456",
    ],
)
def test_an_entry_that_is_not_a_cluster_log_group_is_rejected(entry):
    with pytest.raises(ValueError, match=r"is not a HyperPod cluster log group: expected /aws/sagemaker/Clusters/"):
        cluster_log_groups([entry], [])


def test_valid_entries_are_parsed_and_deduplicated():
    groups = cluster_log_groups([SLURM, OTHER, SLURM], [])
    assert groups == [
        ClusterLogGroup(SLURM, "ml-slurm-train", "abc123def456"),
        ClusterLogGroup(OTHER, "other-cluster", "zz9yy8xx7ww6"),
    ]


@pytest.mark.parametrize(
    "allowlist",
    [
        ["ml-slurm-train"],
        ["abc123def456"],
        ["arn:aws:sagemaker:us-west-2:111122223333:cluster/abc123def456"],
        ["something-else", "ml-slurm-train"],
    ],
)
def test_an_allowlisted_cluster_may_be_subscribed(allowlist):
    assert [g.name for g in cluster_log_groups([SLURM], allowlist)] == ["ml-slurm-train"]


@pytest.mark.parametrize(
    "allowlist",
    [["other-cluster"], ["zz9yy8xx7ww6"], ["arn:aws:sagemaker:us-west-2:111122223333:cluster/abc123def4567"]],
)
def test_a_log_group_outside_the_allowlist_is_rejected(allowlist):
    with pytest.raises(ValueError, match="ml-slurm-train .abc123def456., which clusterAllowlist does not list"):
        cluster_log_groups([SLURM], allowlist)


def test_a_bad_log_group_fails_the_synth_with_the_reason(tmp_path_factory):
    with pytest.raises(ValueError, match="clusterLogGroups entry '/aws/lambda/x' is not a HyperPod cluster log group"):
        synth(tmp_path_factory, clusterLogGroups='["/aws/lambda/x"]')


def test_an_allowlist_mismatch_fails_the_synth_with_the_reason(tmp_path_factory):
    with pytest.raises(ValueError, match="which clusterAllowlist does not list"):
        synth(tmp_path_factory, clusterAllowlist="ml-eks-prod", clusterLogGroups=[SLURM])


def test_the_allowlist_reaches_the_log_function(tmp_path_factory):
    _, template, _ = synth(tmp_path_factory, clusterAllowlist="ml-slurm-train", clusterLogGroups=SLURM)
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Handler": c.LOG_SUBSCRIPTION_HANDLER,
            "Environment": {"Variables": Match.object_like({"CLUSTER_ALLOWLIST": "ml-slurm-train"})},
        },
    )
    template.resource_count_is("AWS::Logs::SubscriptionFilter", 1)


@pytest.mark.parametrize(
    ("metric", "namespace"), [("LogPayloadsRejected", c.METRICS_NAMESPACE), ("Errors", "AWS/Lambda")]
)
def test_rejected_or_failed_deliveries_raise_an_alarm(with_groups: Template, metric, namespace):
    alarms = [
        a
        for a in with_groups.find_resources("AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == metric and a["Properties"].get("Namespace") == namespace
    ]
    assert any("log-subscription" in a["Properties"]["AlarmDescription"] for a in alarms)
