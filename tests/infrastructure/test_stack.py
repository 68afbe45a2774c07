"""Template assertions on the synthesized monitor stack, an IAM write-action scan, and cdk-nag."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from hyperpod_debugger.domain import eventbridge
from infra import constants as c
from infra.stack import ACKNOWLEDGEMENTS
from tests.infrastructure.conftest import synth
from tests.unit.test_eventbridge import (
    CAPACITY,
    HEALTH_CAPTURE,
    HEALTH_DOCS,
    LCS_STARTED,
    STATE_CAPTURE,
    STATE_DOCS,
    matching_rules,
    published,
)

# --- detection --------------------------------------------------------------------------------------------

PUBLISHED_VERDICTS = {
    # decided from AWS's documentation (see tests/unit/test_eventbridge.py): which rule each published event fires
    CAPACITY: [eventbridge.CLUSTER_EVENT],
    LCS_STARTED: [],
    HEALTH_DOCS: [eventbridge.NODE_HEALTH],
    HEALTH_CAPTURE: [eventbridge.NODE_HEALTH],
    STATE_DOCS: [eventbridge.STATE_CHANGE],
    STATE_CAPTURE: [eventbridge.STATE_CHANGE],
}


def deployed_patterns(template: Template) -> dict[str, dict]:
    """detail-type -> the EventPattern each synthesized rule carries."""
    out = {}
    for rule in template.find_resources("AWS::Events::Rule").values():
        pattern = rule["Properties"].get("EventPattern")
        if pattern:
            (detail_type,) = pattern["detail-type"]
            out[detail_type] = pattern
    return out


def test_the_deployed_patterns_are_the_shared_ones(template: Template):
    assert deployed_patterns(template) == eventbridge.rule_patterns()


@pytest.mark.parametrize(("name", "expected"), sorted(PUBLISHED_VERDICTS.items()))
def test_each_published_event_fires_exactly_its_rule_in_the_synthesized_template(template: Template, name, expected):
    assert matching_rules(deployed_patterns(template), published(name)) == expected


@pytest.mark.parametrize("detail_type", eventbridge.DETAIL_TYPES)
def test_rule_per_detail_type_targets_event_handler_with_dlq_and_retries(template: Template, detail_type):
    template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "EventPattern": Match.object_like({"source": ["aws.sagemaker"], "detail-type": [detail_type]}),
            "Targets": [
                Match.object_like(
                    {
                        "Arn": {"Fn::GetAtt": [Match.string_like_regexp("EventHandlerFunction"), "Arn"]},
                        "DeadLetterConfig": {"Arn": Match.any_value()},
                        "RetryPolicy": {
                            "MaximumRetryAttempts": c.EVENT_TARGET_RETRY_ATTEMPTS,
                            "MaximumEventAgeInSeconds": 7200,
                        },
                    }
                )
            ],
        },
    )


def test_failed_invocations_of_the_event_handler_are_kept(template: Template):
    # Lambda's own retries of an async invocation, then its on-failure destination: the same queue
    template.has_resource_properties(
        "AWS::Lambda::EventInvokeConfig",
        {
            "FunctionName": {"Ref": Match.string_like_regexp("DetectionEventHandlerFunction")},
            "MaximumRetryAttempts": 2,
            "DestinationConfig": {
                "OnFailure": {"Destination": {"Fn::GetAtt": [Match.string_like_regexp("EventTargetDlq"), "Arn"]}}
            },
        },
    )
    (handler,) = [
        f
        for f in template.find_resources("AWS::Lambda::Function").values()
        if f["Properties"]["Handler"] == c.EVENT_HANDLER
    ]
    url = handler["Properties"]["Environment"]["Variables"]["UNPROCESSED_QUEUE_URL"]
    assert url == {"Ref": Match.string_like_regexp("EventTargetDlq")} or "EventTargetDlq" in json.dumps(url)


@pytest.mark.parametrize(
    ("metric", "namespace"),
    [
        ("ApproximateNumberOfMessagesVisible", "AWS/SQS"),  # something is waiting in the unprocessed queue
        ("EventsRejected", c.METRICS_NAMESPACE),  # the handler could not read an event
        ("Errors", "AWS/Lambda"),  # the handler failed (retried, then kept)
    ],
)
def test_lost_or_failed_events_raise_an_alarm_on_the_topic(template: Template, metric, namespace):
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "MetricName": metric,
            "Namespace": namespace,
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
            "AlarmActions": [{"Ref": Match.string_like_regexp("AlertTopic")}],
        },
    )


def test_the_rejected_events_alarm_watches_the_dimension_the_functions_emit():
    from functions.shared.observability import NAMESPACE, SERVICE

    assert (c.MONITOR_METRICS_SERVICE, c.METRICS_NAMESPACE) == (SERVICE, NAMESPACE)


def test_exactly_three_event_rules_and_two_schedules(template: Template):
    rules = template.find_resources("AWS::Events::Rule")
    patterns = [r for r in rules.values() if "EventPattern" in r["Properties"]]
    schedules = sorted(
        r["Properties"]["ScheduleExpression"] for r in rules.values() if "ScheduleExpression" in r["Properties"]
    )
    assert len(patterns) == 3
    # the sweep, and the alert groups' daily summary
    assert schedules == ["cron(0 9 * * ? *)", "rate(15 minutes)"]


def test_schedule_starts_the_sweep_state_machine_every_15_minutes(template: Template):
    template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "ScheduleExpression": "rate(15 minutes)",
            "Targets": [
                Match.object_like(
                    {
                        "Arn": {"Ref": Match.string_like_regexp("SweepStateMachine")},
                        "DeadLetterConfig": Match.any_value(),
                    }
                )
            ],
        },
    )


# --- findings store ---------------------------------------------------------------------------------------


def test_findings_table_keys_stream_ttl_pitr_gsi(template: Template):
    template.has_resource_properties(
        "AWS::DynamoDB::GlobalTable",
        {
            "KeySchema": [
                {"AttributeName": c.TABLE_PK, "KeyType": "HASH"},
                {"AttributeName": c.TABLE_SK, "KeyType": "RANGE"},
            ],
            "AttributeDefinitions": Match.array_with(
                [
                    {"AttributeName": c.TABLE_PK, "AttributeType": "S"},
                    {"AttributeName": c.TABLE_SK, "AttributeType": "S"},
                ]
            ),
            "BillingMode": "PAY_PER_REQUEST",
            "StreamSpecification": {"StreamViewType": "NEW_AND_OLD_IMAGES"},
            "TimeToLiveSpecification": {"AttributeName": c.TTL_ATTRIBUTE, "Enabled": True},
            "Replicas": [Match.object_like({"PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True}})],
            "GlobalSecondaryIndexes": [
                Match.object_like(
                    {
                        "IndexName": c.GSI_BY_NODE,
                        "KeySchema": [
                            {"AttributeName": c.GSI_BY_NODE_PK, "KeyType": "HASH"},
                            {"AttributeName": c.GSI_BY_NODE_SK, "KeyType": "RANGE"},
                        ],
                    }
                ),
                Match.object_like(
                    {
                        "IndexName": c.GSI_BY_CLUSTER,
                        "KeySchema": [
                            {"AttributeName": c.GSI_BY_CLUSTER_PK, "KeyType": "HASH"},
                            {"AttributeName": c.GSI_BY_CLUSTER_SK, "KeyType": "RANGE"},
                        ],
                    }
                ),
            ],
        },
    )


def test_the_indexes_the_store_queries_are_the_ones_the_stack_deploys(template: Template):
    # the store (layers) names its indexes and writes their keys on its own; the stack (infra) declares them:
    # a query on an index the template lacks fails only in AWS, so the two are held together here
    from hyperpod_debugger.store import findings as store

    [table] = [
        r["Properties"]
        for r in template.find_resources("AWS::DynamoDB::GlobalTable").values()
        if "StreamSpecification" in r["Properties"]
    ]
    deployed = {
        g["IndexName"]: tuple(k["AttributeName"] for k in g["KeySchema"]) for g in table["GlobalSecondaryIndexes"]
    }
    assert deployed == {store.NODE_INDEX: ("node_pk", "last_seen"), store.CLUSTER_INDEX: ("cluster_pk", "last_seen")}
    kinds = {d["AttributeName"]: d["AttributeType"] for d in table["AttributeDefinitions"]}
    assert {kinds[name] for keys in deployed.values() for name in keys} == {"S"}


def test_idempotency_table_with_ttl(template: Template):
    template.has_resource_properties(
        "AWS::DynamoDB::GlobalTable",
        {
            "KeySchema": [{"AttributeName": c.IDEMPOTENCY_PK, "KeyType": "HASH"}],
            "TimeToLiveSpecification": {"AttributeName": c.IDEMPOTENCY_TTL, "Enabled": True},
        },
    )
    template.resource_count_is("AWS::DynamoDB::GlobalTable", 2)


# --- sweep ------------------------------------------------------------------------------------------------


def _definition(template: Template) -> dict:
    (machine,) = template.find_resources("AWS::StepFunctions::StateMachine").values()
    parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    return json.loads("".join(_render(p) for p in parts))


def _render(part) -> str:
    """Intrinsics inside the ASL string become readable markers such as `GetAtt:SweepSweepClusterFunction…`."""
    if isinstance(part, str):
        return part
    if "Fn::GetAtt" in part:
        return "GetAtt:" + part["Fn::GetAtt"][0]
    return "Ref:" + part.get("Ref", "?")


def test_sweep_pages_through_clusters_then_checks_and_probes_each_in_batches(template: Template):
    definition = _definition(template)
    states = definition["States"]
    assert definition["StartAt"] == "ListClusters"
    for name in ("ListClusters", "ListMoreClusters"):
        assert states[name]["Resource"].endswith(":states:::aws-sdk:sagemaker:listClusters")
        assert states[name]["ResultPath"] == "$.page"
    # every page is swept: a NextToken loops back through ListMoreClusters into the same Map
    assert states["ListClusters"]["Next"] == "EachCluster" and states["EachCluster"]["Next"] == "MorePages"
    [more] = states["MorePages"]["Choices"]
    assert more == {"Variable": "$.page.NextToken", "IsPresent": True, "Next": "ListMoreClusters"}
    assert states["MorePages"]["Default"] == "Done" and states["ListMoreClusters"]["Next"] == "EachCluster"
    assert states["ListMoreClusters"]["Parameters"]["NextToken.$"] == "$.page.NextToken"

    each = states["EachCluster"]
    assert each["Type"] == "Map" and each["ItemsPath"] == "$.page.ClusterSummaries"
    assert each["ItemSelector"]["cluster_name.$"] == "$$.Map.Item.Value.ClusterName"
    inner = each["ItemProcessor"]["States"]
    assert inner["CheckCluster"]["Resource"].startswith("GetAtt:SweepSweepClusterFunction")
    assert inner["CheckCluster"]["Next"] == "EachBatch"
    assert inner["CheckCluster"]["Catch"][0]["Next"] == "ClusterFailed"  # one cluster failing spares the rest
    batches = inner["EachBatch"]
    assert batches["Type"] == "Map" and batches["ItemsPath"] == "$.batches" and batches["ResultPath"] is None
    # the items are batch numbers; each becomes a reference to the plan the cluster step stored, with the
    # very selector the simulator applies (hyperpod_sim.lambda_harness.map_items)
    from functions.shared.events import PROBE_ITEM_SELECTOR

    assert batches["ItemSelector"] == PROBE_ITEM_SELECTOR
    probe = batches["ItemProcessor"]["States"]["ProbeNodes"]
    assert probe["Resource"].startswith("GetAtt:SweepProbeBatchFunction")
    assert probe["Catch"][0]["Next"] == "BatchFailed"
    assert all("States.TaskFailed" not in r["ErrorEquals"] for r in probe["Retry"])  # no re-probe in a sweep
    # the cluster's output that the outer Map gathers stays small whatever the batches held
    assert inner["ClusterDone"]["Parameters"] == {"status.$": "$.status"}


def test_map_concurrency_and_function_settings_share_the_start_session_budget(template: Template, stack):
    from hyperpod_debugger.lifecycle import budget

    settings = stack.sweep.settings
    states = _definition(template)["States"]
    each = states["EachCluster"]
    assert each["MaxConcurrency"] == settings.cluster_concurrency == c.DEFAULT_CLUSTER_CONCURRENCY
    # each cluster step shares the budget at run time among this page's clusters, from the sweep's start
    assert each["ItemSelector"]["clusters.$"] == "States.ArrayLength($.page.ClusterSummaries)"
    assert each["ItemSelector"]["sweep_started.$"] == "$$.Execution.StartTime"
    inner = each["ItemProcessor"]["States"]["EachBatch"]
    assert inner["MaxConcurrencyPath"] == "$.concurrency" and "MaxConcurrency" not in inner
    # each batch waits for its round, then probes
    processor = inner["ItemProcessor"]
    assert processor["StartAt"] == "WaitForRound"
    assert processor["States"]["WaitForRound"] == {"Type": "Wait", "TimestampPath": "$.start_at", "Next": "ProbeNodes"}
    # the last round's sessions may end after the next sweep began: the execution outlives the interval
    assert _definition(template)["TimeoutSeconds"] == 900 + 120 + 180
    # the sweep's part: the account's rate less people's reserve (34 %) and the event windows' 0.5/s
    assert settings.reserve_percent == c.DEFAULT_START_SESSION_RESERVE_PERCENT == budget.RESERVE_PERCENT
    assert c.DEFAULT_START_SESSION_RATE == budget.ACCOUNT_RATE
    usable = c.DEFAULT_START_SESSION_RATE * (1 - c.DEFAULT_START_SESSION_RESERVE_PERCENT / 100) - 0.5
    assert f"{usable:.3f}" == "1.480" and settings.reserved_rate >= 1.0
    # the event windows are told the probe rate the budget counted for them
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Handler": c.EVENT_WINDOW_HANDLER,
            "Environment": {"Variables": Match.object_like({"EVENT_WINDOW_PROBE_RATE": "0.5"})},
        },
    )
    for handler in (c.SWEEP_HANDLER, c.PROBE_BATCH_HANDLER):
        template.has_resource_properties(
            "AWS::Lambda::Function",
            {
                "Handler": handler,
                "Environment": {
                    "Variables": Match.object_like(
                        {
                            "START_SESSION_RATE": f"{usable:.3f}",
                            "SWEEP_CLUSTER_CONCURRENCY": str(settings.cluster_concurrency),
                            "SWEEP_INTERVAL_S": "900",
                            "PROBE_PERIOD_S": "86400",
                        }
                    )
                },
            },
        )


@pytest.mark.parametrize("bad", [(0, 3), (3, 0), (-1, 1)])
def test_sweep_settings_refuse_nonsense(bad):
    from hyperpod_debugger.lifecycle.budget import SweepSettings

    with pytest.raises(ValueError):
        SweepSettings(*bad)


@pytest.mark.parametrize(
    ("expression", "seconds"),
    [("rate(15 minutes)", 900), ("rate(1 minute)", 60), ("rate(2 hours)", 7200), ("rate(1 day)", 86400)],
)
def test_schedule_interval_from_rate_expressions(expression, seconds):
    from infra.settings import rate_seconds

    assert rate_seconds(expression) == seconds


@pytest.mark.parametrize("expression", ["cron(0/15 * * * ? *)", "rate(0 minutes)", "every 15 minutes", ""])
def test_schedule_interval_refuses_what_the_rotation_cannot_plan_from(expression):
    from infra.settings import rate_seconds

    with pytest.raises(ValueError, match="sweepSchedule"):
        rate_seconds(expression)


def test_notifier_wakes_only_for_finding_and_incident_items(template: Template):
    (mapping,) = [
        m
        for m in template.find_resources("AWS::Lambda::EventSourceMapping").values()
        if "FilterCriteria" in m["Properties"]
    ]
    [criterion] = mapping["Properties"]["FilterCriteria"]["Filters"]
    assert json.loads(criterion["Pattern"]) == {"dynamodb": {"NewImage": {"item_type": {"S": ["FINDING", "INCIDENT"]}}}}


def test_sweep_state_machine_logs_and_traces(template: Template):
    template.has_resource_properties(
        "AWS::StepFunctions::StateMachine",
        {"TracingConfiguration": {"Enabled": True}, "LoggingConfiguration": Match.object_like({"Level": "ALL"})},
    )


# --- lambda factory ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("handler", [c.EVENT_HANDLER, c.SWEEP_HANDLER, c.STREAM_NOTIFIER_HANDLER])
def test_functions_share_factory_defaults(template: Template, handler: str):
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Handler": handler,
            "Runtime": "python3.12",
            "Architectures": ["arm64"],
            "TracingConfig": {"Mode": "Active"},
            "LoggingConfig": Match.object_like({"LogFormat": "JSON", "LogGroup": Match.any_value()}),
            "Layers": [Match.any_value()],
            "Environment": {
                "Variables": Match.object_like(
                    {"POWERTOOLS_SERVICE_NAME": c.SERVICE_NAME, "POWERTOOLS_METRICS_NAMESPACE": c.METRICS_NAMESPACE}
                )
            },
        },
    )


def test_each_function_has_its_own_role_and_retained_log_group(template: Template):
    functions = template.find_resources("AWS::Lambda::Function")
    roles = {json.dumps(f["Properties"]["Role"]) for f in functions.values()}
    # event handler, event window, sweep cluster step, sweep probe batch, stream notifier, alert groups, courier
    assert len(functions) == 7
    assert len(roles) == 7
    template.all_resources_properties("AWS::Logs::LogGroup", {"RetentionInDays": 30})


# --- notifications ----------------------------------------------------------------------------------------


def test_stream_event_source_reports_batch_failures_with_dlq(template: Template):
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "BatchSize": c.STREAM_BATCH_SIZE,
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
            "BisectBatchOnFunctionError": True,
            "MaximumRetryAttempts": c.STREAM_RETRY_ATTEMPTS,
            "EventSourceArn": {"Fn::GetAtt": [Match.string_like_regexp("FindingsStoreFindings"), "StreamArn"]},
            "DestinationConfig": {
                "OnFailure": {"Destination": {"Fn::GetAtt": [Match.string_like_regexp("NotifierDlq"), "Arn"]}}
            },
        },
    )


def test_topic_is_kms_encrypted_with_a_rotating_key(template: Template):
    template.has_resource_properties(
        "AWS::SNS::Topic", {"KmsMasterKeyId": {"Fn::GetAtt": [Match.string_like_regexp("TopicKey"), "Arn"]}}
    )
    template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})
    template.resource_count_is("AWS::SNS::Subscription", 0)


def test_dlq_depth_alarm_notifies_the_topic(template: Template):
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "MetricName": "ApproximateNumberOfMessagesVisible",
            "Namespace": "AWS/SQS",
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
            "AlarmActions": [{"Ref": Match.string_like_regexp("AlertTopic")}],
        },
    )


def test_without_a_slack_secret_there_is_no_slack_channel(template: Template):
    # no secret named: no function reads one, and none is told of a Slack channel (no retries, no alarms for it)
    for policy in template.find_resources("AWS::IAM::Policy").values():
        for st in policy["Properties"]["PolicyDocument"]["Statement"]:
            assert "secretsmanager:GetSecretValue" not in _actions(st)
    for function in template.find_resources("AWS::Lambda::Function").values():
        assert "SLACK_SECRET_NAME" not in function["Properties"].get("Environment", {}).get("Variables", {})


def test_only_the_courier_reads_the_slack_secret(every_setting: Template):
    template = every_setting
    readers = {
        k
        for k, p in template.find_resources("AWS::IAM::Policy").items()
        for st in p["Properties"]["PolicyDocument"]["Statement"]
        if "secretsmanager:GetSecretValue" in _actions(st)
    }
    assert readers and all(k.startswith("NotificationsCourier") for k in readers)
    statements = [
        st
        for k, p in template.find_resources("AWS::IAM::Policy").items()
        if k.startswith("NotificationsCourier")
        for st in p["Properties"]["PolicyDocument"]["Statement"]
        if "secretsmanager:GetSecretValue" in _actions(st)
    ]
    assert len(statements) == 1
    assert _actions(statements[0]) == ["secretsmanager:GetSecretValue"]
    arn_tail = statements[0]["Resource"]["Fn::Join"][1][-1]
    assert arn_tail == ":secret:hyperpod-debugger/slack-webhook-??????"
    (courier,) = [
        f
        for f in template.find_resources("AWS::Lambda::Function").values()
        if f["Properties"]["Handler"] == c.COURIER_HANDLER
    ]
    assert courier["Properties"]["Environment"]["Variables"]["SLACK_SECRET_NAME"] == "hyperpod-debugger/slack-webhook"


def test_the_outbox_is_fifo_with_a_dead_letter_queue_that_keeps_about_two_days_of_retries(template: Template):
    queues = template.find_resources("AWS::SQS::Queue")
    [outbox] = [q for k, q in queues.items() if k.startswith("NotificationsOutbox") and "Dlq" not in k]
    props = outbox["Properties"]
    assert props["FifoQueue"] is True and props["VisibilityTimeout"] == c.OUTBOX_VISIBILITY_S
    assert props["MessageRetentionPeriod"] == c.OUTBOX_RETENTION_DAYS * 86400
    assert props["RedrivePolicy"]["maxReceiveCount"] == c.OUTBOX_MAX_RECEIVES
    assert props["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0].startswith("NotificationsOutboxDlq")
    # the courier's backoff (60 s doubling to 900 s) over the receive limit outlasts a day-long outage
    from functions.monitor.logic.outbox import retry_delay

    waited = sum(retry_delay(n, None) for n in range(1, c.OUTBOX_MAX_RECEIVES + 1))
    assert waited > 36 * 3600 and waited < c.OUTBOX_RETENTION_DAYS * 86400
    # AWS's advice for an SQS event source: a visibility timeout of at least six times the function's
    assert c.OUTBOX_VISIBILITY_S >= 6 * c.COURIER_TIMEOUT_S


def test_the_courier_reads_the_outbox_and_reports_item_failures(template: Template):
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "EventSourceArn": {"Fn::GetAtt": [Match.string_like_regexp("NotificationsOutbox(?!Dlq)"), "Arn"]},
            "FunctionName": {"Ref": Match.string_like_regexp("NotificationsCourierFunction")},
            "BatchSize": c.OUTBOX_BATCH_SIZE,
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
        },
    )


@pytest.mark.parametrize(
    ("metric", "threshold"),
    [("ApproximateNumberOfMessagesVisible", 0), ("ApproximateAgeOfOldestMessage", c.OUTBOX_MAX_AGE_S)],
)
def test_undeliverable_or_waiting_alerts_raise_an_alarm(template: Template, metric, threshold):
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "MetricName": metric,
            "Namespace": "AWS/SQS",
            "Threshold": threshold,
            "Dimensions": [
                {
                    "Name": "QueueName",
                    "Value": {"Fn::GetAtt": [Match.string_like_regexp("NotificationsOutbox"), "QueueName"]},
                }
            ],
            "AlarmActions": [{"Ref": Match.string_like_regexp("AlertTopic")}],
        },
    )


# --- IAM: read-only toward HyperPod, EC2 and EKS -----------------------------------------------------------

READ_VERBS = ("Describe", "List", "Get", "Filter")
ALLOWED_VERBS = READ_VERBS + (
    "StartSession",
    "TerminateSession",
    "OpenDataChannel",
    "Query",
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "BatchWriteItem",  # the probe rotation's last-probed records and the notifier's ledger, our tables only
    "BatchGetItem",  # the notifier's delivery ledger, on the idempotency table only
    "Publish",
    "SendMessage",
    # the courier's event source on the outbox, and its backoff (our own queues only)
    "ReceiveMessage",
    "DeleteMessage",
    "ChangeMessageVisibility",
)
# Exact actions outside the verb list, each with the reason it is there.
ALLOWED_EXACT = {
    "lambda:InvokeFunction",  # the state machine invokes the sweep function
    "states:StartExecution",  # the schedule starts the sweep
    "kms:Decrypt",  # publishing to / alarms on the KMS-encrypted topic
    "kms:GenerateDataKey",
    "events:PutEvents",  # the courier's finding events, on the configured bus and for their source only
}
ALLOWED_SERVICES = {"xray", "logs"}  # trace writes and log delivery / log writes


def _statements(node):
    """Every policy statement anywhere in the template (identity, resource and key policies)."""
    if isinstance(node, dict):
        if "Statement" in node and isinstance(node["Statement"], list):
            yield from node["Statement"]
        for value in node.values():
            yield from _statements(value)
    elif isinstance(node, list):
        for value in node:
            yield from _statements(value)


def _actions(statement) -> list[str]:
    actions = statement.get("Action", [])
    return [actions] if isinstance(actions, str) else list(actions)


def _all_actions(template: Template) -> list[str]:
    return [a for s in _statements(template.to_json()["Resources"]) for a in _actions(s)]


def test_scan_finds_statements(template: Template):
    actions = _all_actions(template)
    assert "sagemaker:ListClusterNodes" in actions
    assert "ssm:StartSession" in actions
    assert len(actions) > 40


def test_no_sagemaker_ec2_eks_write_action_anywhere(template: Template):
    offenders = []
    for action in _all_actions(template):
        service, _, verb = action.partition(":")
        if action == "*" or (service in {"sagemaker", "ec2", "eks"} and not verb.startswith(READ_VERBS)):
            offenders.append(action)
        if (
            service in {"sagemaker", "ec2", "eks"}
            and "*" in verb
            and not re.fullmatch(r"(Describe|List|Get)\w*\*?", verb)
        ):
            offenders.append(action)
    assert offenders == []


def test_every_identity_action_is_on_the_allowed_verb_list(template: Template):
    offenders = []
    for logical_id, resource in template.find_resources("AWS::IAM::Policy").items():
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Effect"] == "Deny":
                # the one Deny: sessions with any document but the stack's pinned ones
                assert statement["Sid"] == "OnlyPinnedDocuments" and _actions(statement) == ["ssm:StartSession"]
                continue
            for action in _actions(statement):
                service, _, verb = action.partition(":")
                if action in ALLOWED_EXACT or service in ALLOWED_SERVICES or verb.startswith(ALLOWED_VERBS):
                    continue
                offenders.append(f"{logical_id}: {action}")
    assert offenders == []


def test_no_managed_policies_roles_carry_no_inline_wildcards(template: Template):
    for role in template.find_resources("AWS::IAM::Role").values():
        assert "ManagedPolicyArns" not in role["Properties"]
    assert template.find_resources("AWS::IAM::ManagedPolicy") == {}


@pytest.mark.parametrize("prefix", ["NotificationsStreamNotifier", "NotificationsCourier"])
def test_notifier_has_no_hyperpod_or_ssm_access(template: Template, prefix):
    notifier_policies = [r for k, r in template.find_resources("AWS::IAM::Policy").items() if k.startswith(prefix)]
    assert notifier_policies
    actions = [
        a for p in notifier_policies for s in p["Properties"]["PolicyDocument"]["Statement"] for a in _actions(s)
    ]
    assert not [a for a in actions if a.split(":")[0] in {"sagemaker", "ec2", "eks", "ssm", "ssmmessages"}]


#: What the notifying functions may do with DynamoDB beyond the delivery ledger (with every setting): the
#: notifier arms alert groups; the alert groups read and clear incidents; the courier paces Slack.
BEYOND_THE_LEDGER = {
    "NotificationsStreamNotifier": [("ArmAlertGroups", ["dynamodb:GetItem", "dynamodb:UpdateItem"])],
    "NotificationsAlertGroups": [
        ("IncidentsAndAlertGroups", ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem"])
    ],
    "NotificationsCourier": [("SlackPace", ["dynamodb:UpdateItem"])],
}


@pytest.mark.parametrize("prefix", sorted(BEYOND_THE_LEDGER))
def test_notifying_functions_touch_dynamodb_only_as_they_must(every_setting: Template, prefix):
    template = every_setting
    policies = [r for k, r in template.find_resources("AWS::IAM::Policy").items() if k.startswith(prefix)]
    statements = [s for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]]

    def on_stream(statement) -> bool:  # the event source mapping reads the stream (generated default policy)
        resource = statement.get("Resource")
        return isinstance(resource, dict) and resource.get("Fn::GetAtt", [None, None])[1] == "StreamArn"

    dynamo = [s for s in statements if any(a.startswith("dynamodb:") for a in _actions(s)) and not on_stream(s)]
    got = sorted((s.get("Sid"), sorted(_actions(s))) for s in dynamo)
    assert got == sorted(
        [("DeliveryLedger", ["dynamodb:BatchGetItem", "dynamodb:BatchWriteItem"]), *BEYOND_THE_LEDGER[prefix]]
    )
    ledger = next(s for s in dynamo if s.get("Sid") == "DeliveryLedger")
    assert ledger["Resource"]["Fn::GetAtt"][0].startswith("FindingsStoreIdempotency")


# --- cdk-nag ----------------------------------------------------------------------------------------------


def test_cdk_nag_reports_no_unacknowledged_violations(synthesized):
    _, _, outdir = synthesized
    report = json.loads((outdir / "validation-report.json").read_text())
    (plugin,) = report["pluginReports"]
    assert plugin["pluginName"] == "AwsSolutions"
    assert plugin["conclusion"] == "success"
    assert plugin["violations"] == []
    suppressed = {v["ruleName"] for v in plugin["suppressedViolations"]}
    assert suppressed == set(ACKNOWLEDGEMENTS)  # every acknowledgement is used, none is stale


def test_acknowledgements_are_granular_and_reasoned():
    for finding_id, reason in ACKNOWLEDGEMENTS.items():
        assert re.fullmatch(r"AwsSolutions-[A-Z]+\d+(\[[^\]]+\])?", finding_id)
        assert len(reason) > 80


# --- context ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def customized(tmp_path_factory):
    _, template, _ = synth(
        tmp_path_factory,
        startSessionRate=7,
        startSessionReservePercent=50,
        sweepSchedule="rate(1 hour)",
        clusterAllowlist="abc123def456,arn:aws:sagemaker:us-east-1:111122223333:cluster/zz9yy8xx7ww6",
        alertEmails=["ops@example.com", "oncall@example.com"],
        slackSecretName="team/slack",
    )
    return template


def test_context_drives_concurrency_schedule_allowlist_and_subscriptions(customized: Template):
    each = _definition(customized)["States"]["EachCluster"]
    # 7 calls a second, half of them left to people: 3 clusters at once share 7 × 50 % − the windows' 0.5
    assert each["MaxConcurrency"] == 3
    customized.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Handler": c.PROBE_BATCH_HANDLER,
            "Environment": {
                "Variables": Match.object_like(
                    {"START_SESSION_RATE": "3.000", "SWEEP_CLUSTER_CONCURRENCY": "3", "SWEEP_INTERVAL_S": "3600"}
                )
            },
        },
    )
    customized.has_resource_properties("AWS::Events::Rule", {"ScheduleExpression": "rate(1 hour)"})
    assert deployed_patterns(customized) == eventbridge.rule_patterns(
        ["abc123def456", "arn:aws:sagemaker:us-east-1:111122223333:cluster/zz9yy8xx7ww6"]
    )
    customized.resource_count_is("AWS::SNS::Subscription", 2)
    customized.has_resource_properties("AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "ops@example.com"})


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    # names and ids together: events carry both the name and the ARN (with the id) in their detail
    return synth(tmp_path_factory, clusterAllowlist="sample-cluster,qx06scn2c9eu")[1]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (CAPACITY, [eventbridge.CLUSTER_EVENT]),  # sample-cluster by name
        (HEALTH_DOCS, [eventbridge.NODE_HEALTH]),
        (HEALTH_CAPTURE, [eventbridge.NODE_HEALTH]),  # k8-1 by its id qx06scn2c9eu
        (STATE_CAPTURE, [eventbridge.STATE_CHANGE]),
    ],
)
def test_an_allowlist_of_names_and_ids_selects_published_events_of_those_clusters(named: Template, name, expected):
    assert matching_rules(deployed_patterns(named), published(name)) == expected


def test_an_allowlist_leaves_out_events_of_other_clusters(tmp_path_factory):
    template = synth(tmp_path_factory, clusterAllowlist="ml-eks-prod,ml-slurm-train")[1]
    patterns = deployed_patterns(template)
    assert all(matching_rules(patterns, published(name)) == [] for name in PUBLISHED_VERDICTS)


def test_an_allowlist_entry_that_is_no_cluster_is_rejected_with_the_reason(tmp_path_factory):
    with pytest.raises(ValueError, match="clusterAllowlist: not a HyperPod cluster.*'bad name'"):
        synth(tmp_path_factory, clusterAllowlist="ml-eks-prod,bad name")


def test_invalid_start_session_rate_is_rejected(tmp_path_factory):
    with pytest.raises(Exception, match="startSessionRate"):
        synth(tmp_path_factory, startSessionRate=0)


@pytest.mark.parametrize(
    ("reserve", "message"),
    [
        ("all", "startSessionReservePercent must be a number, got 'all'"),
        # 80 % of 3 would leave the sweep 0.1/s; 90 % leaves 0.3/s, less than the event windows' 0.5/s
        (90, "startSessionReservePercent 90 leaves 0.30 .*nothing is left for the sweep"),
    ],
)
def test_a_reserve_for_people_that_is_no_share_or_leaves_the_sweep_nothing_fails_the_synth(
    tmp_path_factory, reserve, message
):
    with pytest.raises(ValueError, match=message):
        synth(tmp_path_factory, startSessionReservePercent=reserve)


def test_the_simulators_outbox_is_the_stacks():
    # the local harness builds the outbox with the stack's settings (it cannot import infra/)
    from hyperpod_sim import lambda_harness as h

    assert (h.OUTBOX_VISIBILITY_S, h.OUTBOX_MAX_RECEIVES, h.OUTBOX_RETENTION_S) == (
        c.OUTBOX_VISIBILITY_S,
        c.OUTBOX_MAX_RECEIVES,
        c.OUTBOX_RETENTION_DAYS * 86400,
    )


# --- event windows ------------------------------------------------------------------------------------------


def _resource(template: Template, kind: str, logical_prefix: str) -> Mapping[str, Any]:
    [found] = [r for k, r in template.find_resources(kind).items() if k.startswith(logical_prefix)]
    return found


def test_the_window_queue_feeds_the_window_function_one_window_at_a_time(template: Template):
    queue = _resource(template, "AWS::SQS::Queue", "DetectionEventWindowQueue")["Properties"]
    assert queue["SqsManagedSseEnabled"] is True
    # six times the window function's five minutes, as Lambda advises for SQS sources
    assert queue["VisibilityTimeout"] == 1800
    # a window that keeps failing ends in the unprocessed-events queue (its alarm fires), not lost
    assert queue["RedrivePolicy"]["maxReceiveCount"] == 5
    assert queue["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0].startswith("DetectionEventTargetDlq")
    [mapping] = [
        m["Properties"]
        for m in template.find_resources("AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["EventSourceArn"]["Fn::GetAtt"][0].startswith("DetectionEventWindowQueue")
    ]
    assert mapping["BatchSize"] == 1
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["FunctionName"]["Ref"].startswith("DetectionEventWindowFunction")


def test_the_event_function_is_told_its_window_and_may_only_keep_and_schedule(template: Template):
    function = _resource(template, "AWS::Lambda::Function", "DetectionEventHandlerFunction")["Properties"]
    variables = function["Environment"]["Variables"]
    assert variables["EVENT_WINDOW_QUEUE_URL"]["Ref"].startswith("DetectionEventWindowQueue")
    assert variables["EVENT_WINDOW_S"] == str(c.DEFAULT_EVENT_WINDOW_SECONDS)
    assert function["Timeout"] == 30


def test_the_window_length_is_a_setting_and_refused_beyond_sqs_delays(tmp_path_factory):
    template = synth(tmp_path_factory, eventWindowSeconds=60)[1]
    function = _resource(template, "AWS::Lambda::Function", "DetectionEventHandlerFunction")["Properties"]
    assert function["Environment"]["Variables"]["EVENT_WINDOW_S"] == "60"
    with pytest.raises(ValueError, match="eventWindowSeconds"):
        synth(tmp_path_factory, eventWindowSeconds=901)
