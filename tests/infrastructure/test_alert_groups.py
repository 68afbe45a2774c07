"""The alerting part of the synthesized template (issue 27): the alert-group function and its queue, the daily
summary's schedule, the policy settings, the channels that exist only when configured, and the notifier's
stream filter, executed by a real event-pattern matcher over the records the store really writes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template
from moto import mock_aws
from moto.events.models import EventPattern, EventPatternParser

from functions.monitor.alert_store import GROUP_PK, TableAlertGroups
from functions.monitor.logic.alerts import ClusterRef
from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.domain.checking import make_finding
from hyperpod_debugger.domain.model import CheckCoverage, CheckStatus, Coverage, Priority, Tag
from hyperpod_debugger.domain.model import ClusterRef as Ref
from hyperpod_debugger.lifecycle.findings import plan_sweep
from hyperpod_debugger.lifecycle.incidents import desired_incidents, plan_incidents
from hyperpod_debugger.run_report import build_report
from hyperpod_debugger.store.findings import FindingStore, create_table
from hyperpod_debugger.store.incidents import IncidentStore
from hyperpod_sim import moto_patches
from hyperpod_sim.lambda_harness import StreamReader
from infra import constants as c
from tests.infrastructure.conftest import synth

ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/abc123"


def _function(template: Template, handler: str) -> tuple[str, Mapping[str, Any]]:
    [(logical, function)] = [
        (k, f)
        for k, f in template.find_resources("AWS::Lambda::Function").items()
        if f["Properties"]["Handler"] == handler
    ]
    return logical, function


def _env(template: Template, handler: str) -> dict:
    return _function(template, handler)[1]["Properties"]["Environment"]["Variables"]


def test_the_alert_group_function_reads_its_queue_one_message_at_a_time(template: Template):
    logical, _ = _function(template, c.ALERT_GROUPS_HANDLER)
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "FunctionName": {"Ref": logical},
            "BatchSize": 1,
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
            "EventSourceArn": {"Fn::GetAtt": [Match.string_like_regexp("AlertGroupQueue"), "Arn"]},
        },
    )
    queues = template.find_resources("AWS::SQS::Queue")
    [queue] = [q for k, q in queues.items() if k.startswith("NotificationsAlertGroupQueue")]
    redrive = queue["Properties"]["RedrivePolicy"]
    assert redrive["maxReceiveCount"] == 10
    assert redrive["deadLetterTargetArn"]["Fn::GetAtt"][0].startswith("NotificationsAlertGroupDlq")
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    assert [k for k in alarms if k.startswith("NotificationsAlertGroupDlqDepth")]


def test_the_daily_summary_runs_at_the_configured_hour(tmp_path_factory):
    template = synth(tmp_path_factory, dailySummaryHourUtc=6)[1]
    logical, _ = _function(template, c.ALERT_GROUPS_HANDLER)
    template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "ScheduleExpression": "cron(0 6 * * ? *)",
            "Targets": [Match.object_like({"Arn": {"Fn::GetAtt": [logical, "Arn"]}})],
        },
    )


def test_the_policy_settings_reach_the_alert_group_function(tmp_path_factory):
    template = synth(tmp_path_factory, alertMinPriority="p2", slackMinPriority="P0", dailySummaryChannels="email")[1]
    env = _env(template, c.ALERT_GROUPS_HANDLER)
    assert (env["SLACK_MIN_PRIORITY"], env["EMAIL_MIN_PRIORITY"], env["CHATBOT_MIN_PRIORITY"]) == ("P0", "P2", "P2")
    assert env["DAILY_SUMMARY_CHANNELS"] == "sns"
    assert (env["ALERT_GROUP_WAIT_S"], env["ALERT_GROUP_INTERVAL_S"]) == (
        str(c.DEFAULT_ALERT_GROUP_WAIT_SECONDS),
        str(c.DEFAULT_ALERT_GROUP_INTERVAL_SECONDS),
    )
    # the notifier arms the groups with the same timing
    notifier = _env(template, c.STREAM_NOTIFIER_HANDLER)
    assert notifier["ALERT_GROUP_WAIT_S"] == env["ALERT_GROUP_WAIT_S"]


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ({"slackMinPriority": "P3"}, "slackMinPriority"),
        ({"alertGroupIntervalSeconds": 5}, "alertGroupIntervalSeconds"),
        ({"alertGroupIntervalSeconds": 1200}, "alertGroupIntervalSeconds"),
        ({"dailySummaryHourUtc": 24}, "dailySummaryHourUtc"),
        ({"dailySummaryChannels": "email,pager"}, "dailySummaryChannels"),
        ({"chatNotifications": "yes"}, "chatNotifications"),
    ],
)
def test_a_bad_alert_setting_fails_the_synth_naming_it(tmp_path_factory, setting, named):
    with pytest.raises(Exception, match=named):
        synth(tmp_path_factory, **setting)


def test_the_chat_channel_exists_only_when_asked_for(template: Template, every_setting: Template):
    assert "ChatTopicArn" not in template.to_json().get("Outputs", {})
    assert "CHATBOT_TOPIC_ARN" not in _env(template, c.ALERT_GROUPS_HANDLER)
    outputs = every_setting.to_json()["Outputs"]
    assert "ChatTopicArn" in outputs
    [(logical, topic)] = [
        (k, t)
        for k, t in every_setting.find_resources("AWS::SNS::Topic").items()
        if k.startswith("NotificationsChatTopic")
    ]
    assert "KmsMasterKeyId" in topic["Properties"]
    assert _env(every_setting, c.ALERT_GROUPS_HANDLER)["CHATBOT_TOPIC_ARN"] == {"Ref": logical}
    assert _env(every_setting, c.COURIER_HANDLER)["CHATBOT_TOPIC_ARN"] == {"Ref": logical}
    publish = [
        st
        for k, p in every_setting.find_resources("AWS::IAM::Policy").items()
        if k.startswith("NotificationsCourier")
        for st in p["Properties"]["PolicyDocument"]["Statement"]
        if st.get("Sid") == "PublishAlerts"
    ]
    assert {"Ref": logical} in publish[0]["Resource"]


def _statement(template: Template, prefix: str, sid: str) -> dict:
    [st] = [
        st
        for k, p in template.find_resources("AWS::IAM::Policy").items()
        if k.startswith(prefix)
        for st in p["Properties"]["PolicyDocument"]["Statement"]
        if st.get("Sid") == sid
    ]
    return st


def test_the_table_writes_of_alerting_are_held_to_their_partitions(template: Template):
    arm = _statement(template, "NotificationsStreamNotifier", "ArmAlertGroups")
    assert arm["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [GROUP_PK]}}
    flush = _statement(template, "NotificationsAlertGroups", "IncidentsAndAlertGroups")
    assert flush["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [GROUP_PK, "CLUSTER#*"]}}
    assert GROUP_PK == c.ALERT_GROUP_PARTITION


def _records() -> list[dict]:
    """The stream records a triage, its incidents and an alert group's arming really write (moto)."""
    moto_patches.apply()
    with mock_aws():
        clients = AwsClients("us-west-2", max_attempts=1)
        create_table(clients, "findings")
        stream = StreamReader(clients, "findings")
        now = datetime(2026, 12, 3, 3, 0, tzinfo=UTC)
        ident = {
            "cluster_arn": ARN,
            "cluster_name": "train",
            "instance_id": "i-0aaaaaaaaaaaaaaa1",
            "instance_group": "g",
        }
        finding = make_finding(ident, "probe.xid", Tag.FAIL, "Xid 79 on GPU 0", priority=Priority.P0, section="G.1")
        ref = Ref(name="train", arn=ARN, region="us-west-2")
        coverage = Coverage(checks=[CheckCoverage(check="probe.xid", status=CheckStatus.RAN)])
        report = build_report(None, now, ref, [finding], coverage)
        store = FindingStore(clients, "findings")
        store.apply(plan_sweep({}, report, now), now)
        incidents = IncidentStore(clients, "findings")
        plan = plan_incidents({}, desired_incidents(ARN, [("fp", finding)]), now, cluster_arn=ARN)
        incidents.apply(plan, lambda key, current: None)
        TableAlertGroups(clients, "findings").arm(ClusterRef(ARN, "us-west-2", "train"), "g-1", now, stale_before=now)
        return stream.read()["Records"]


def test_the_notifier_wakes_for_findings_and_incidents_and_nothing_else_the_table_writes(template: Template):
    [mapping] = [
        m
        for m in template.find_resources("AWS::Lambda::EventSourceMapping").values()
        if "FilterCriteria" in m["Properties"]
    ]
    [criterion] = mapping["Properties"]["FilterCriteria"]["Filters"]
    pattern = EventPattern(criterion["Pattern"], EventPatternParser(criterion["Pattern"]).parse())
    records = _records()

    def kind(record: dict) -> str | None:
        # moto writes a first, attribute-less image when an UpdateItem creates an item: it matches nothing
        return record["dynamodb"].get("NewImage", {}).get("item_type", {}).get("S")

    kinds = {kind(r) for r in records}
    assert {"FINDING", "HISTORY", "SWEEP", "INCIDENT", "ALERTGROUP"} <= kinds  # what the store really wrote
    woken = {kind(r) for r in records if pattern.matches_event(r)}  # type: ignore[arg-type]  # moto hints a TypedDict; any JSON matches
    assert woken == {"FINDING", "INCIDENT"}
    assert json.loads(criterion["Pattern"])["dynamodb"]["NewImage"]["item_type"]["S"] == ["FINDING", "INCIDENT"]


TRIAGING = (c.EVENT_HANDLER, c.EVENT_WINDOW_HANDLER, c.SWEEP_HANDLER, c.PROBE_BATCH_HANDLER)


def test_every_function_that_triages_knows_how_long_hyperpod_may_repair(template: Template, tmp_path_factory):
    for handler in TRIAGING:
        assert _env(template, handler)["REPAIR_GRACE_S"] == str(c.DEFAULT_REPAIR_GRACE_MINUTES * 60), handler
    longer = synth(tmp_path_factory, repairGraceMinutes=90)[1]
    assert {_env(longer, h)["REPAIR_GRACE_S"] for h in TRIAGING} == {"5400"}
    with pytest.raises(Exception, match="repairGraceMinutes"):
        synth(tmp_path_factory, repairGraceMinutes=2)
