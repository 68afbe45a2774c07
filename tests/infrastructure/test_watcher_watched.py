"""The watcher watched: every function's errors and throttles and the stream's lag raise an alarm, the
sources whose downstream has a rate limit are bounded, the findings table is protected, and the README's
"Remove the stack" says what the stack's deletion keeps and loses, as the template has it.

Independent references: the template itself (every ``AWS::Lambda::Function`` and event source mapping in
it, walked, never counted by hand); AWS/Lambda's metrics (Errors, Throttles: Sum; IteratorAge: milliseconds,
for stream sources; dimension FunctionName); ScalingConfig.MaximumConcurrency takes 2 to 1000 (Lambda API
reference); CloudFormation keeps a resource on stack deletion only with ``DeletionPolicy: Retain``.
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Mapping
from typing import Any

import pytest
from aws_cdk.assertions import Template

from infra import constants as c
from infra.constructs.observability import FAILURES

REPO = pathlib.Path(__file__).resolve().parents[2]


def _resources(template: Template | Mapping[str, Any], kind: str) -> dict[str, dict]:
    body = template.to_json() if isinstance(template, Template) else template
    return {k: v for k, v in body["Resources"].items() if v["Type"] == kind}


def _function_ref(value: Any) -> str | None:
    """The logical id of the function a FunctionName value points at (a Ref to it), else None."""
    if isinstance(value, dict) and set(value) == {"Ref"}:
        return str(value["Ref"])
    return None


def _on_topic(props: dict) -> bool:
    return any(str(a.get("Ref", "")).startswith("NotificationsAlertTopic") for a in props.get("AlarmActions", []))


def lambda_alarms(body: Mapping[str, Any], metric: str) -> dict[str, list[dict]]:
    """Function logical id → the alarms on its AWS/Lambda ``metric`` (FunctionName alone) that notify the topic."""
    found: dict[str, list[dict]] = {}
    for props in (r["Properties"] for r in _resources(body, "AWS::CloudWatch::Alarm").values()):
        if (props.get("Namespace"), props.get("MetricName")) != ("AWS/Lambda", metric) or not _on_topic(props):
            continue
        dimensions = props.get("Dimensions", [])
        if [d["Name"] for d in dimensions] != ["FunctionName"]:
            continue
        logical = _function_ref(dimensions[0]["Value"])
        if logical is not None:
            found.setdefault(logical, []).append(props)
    return found


def unwatched(body: Mapping[str, Any], metric: str) -> list[str]:
    """The template's functions with no alarm on ``metric`` (each alarm's dimension resolved to its function)."""
    watched = lambda_alarms(body, metric)
    return sorted(f for f in _resources(body, "AWS::Lambda::Function") if f not in watched)


@pytest.fixture(scope="module", params=["default", "every_setting"])
def body(request, template: Template, every_setting: Template) -> Mapping[str, Any]:
    return (template if request.param == "default" else every_setting).to_json()


# --------------------------------------------------------------------------- errors, throttles, lag


@pytest.mark.parametrize("metric", ["Errors", "Throttles"])
def test_every_function_has_one_alarm_on_its_errors_and_one_on_its_throttles(body: dict, metric: str):
    functions = _resources(body, "AWS::Lambda::Function")
    assert functions, "no function in the template: the check would prove nothing"
    assert unwatched(body, metric) == []
    for logical, alarms in lambda_alarms(body, metric).items():
        assert logical in functions
        [props] = alarms  # one each: a second would only send the same email twice
        # any error or throttle in five minutes; a quiet function reports nothing, which is no error
        assert (props["Statistic"], props["Period"], props["EvaluationPeriods"]) == ("Sum", 300, 1)
        assert (props["ComparisonOperator"], props["Threshold"]) == ("GreaterThanThreshold", 0)
        assert props["TreatMissingData"] == "notBreaching"
        assert props["AlarmDescription"]


def test_the_walk_finds_a_function_without_alarms():
    # the check can fail: a function no alarm names, and an alarm on another namespace, are reported
    body = {
        "Resources": {
            "Watched": {"Type": "AWS::Lambda::Function", "Properties": {}},
            "Forgotten": {"Type": "AWS::Lambda::Function", "Properties": {}},
            "Alarm": {
                "Type": "AWS::CloudWatch::Alarm",
                "Properties": {
                    "Namespace": "AWS/Lambda",
                    "MetricName": "Errors",
                    "Dimensions": [{"Name": "FunctionName", "Value": {"Ref": "Watched"}}],
                    "AlarmActions": [{"Ref": "NotificationsAlertTopicX"}],
                },
            },
            "Elsewhere": {
                "Type": "AWS::CloudWatch::Alarm",
                "Properties": {
                    "Namespace": "Custom",
                    "MetricName": "Errors",
                    "Dimensions": [{"Name": "FunctionName", "Value": {"Ref": "Forgotten"}}],
                    "AlarmActions": [{"Ref": "NotificationsAlertTopicX"}],
                },
            },
        }
    }
    assert unwatched(body, "Errors") == ["Forgotten"]
    assert unwatched(body, "Throttles") == ["Forgotten", "Watched"]


def test_a_function_nobody_described_stops_the_synth():
    import aws_cdk as cdk
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk import aws_logs as logs
    from aws_cdk import aws_sns as sns
    from aws_cdk import aws_stepfunctions as sfn

    from infra.constructs.observability import Observability

    stack = cdk.Stack(cdk.App(), "Probe")
    function = lambda_.Function(
        stack,
        "F",
        runtime=lambda_.Runtime.PYTHON_3_12,
        handler="x.h",
        code=lambda_.Code.from_inline("def h(event, context): pass"),
    )
    machine = sfn.StateMachine(stack, "M", definition_body=sfn.DefinitionBody.from_chainable(sfn.Pass(stack, "P")))
    with pytest.raises(ValueError, match="NewThing.*FAILURES"):
        Observability(
            stack,
            "O",
            topic=sns.Topic(stack, "T"),
            state_machine=machine,
            interval=cdk.Duration.minutes(15),
            probe_period=cdk.Duration.hours(24),
            rules=[],
            sweep_log_group=logs.LogGroup(stack, "L"),
            unknown_share_percent=20,
            functions={"NewThing": function},
        )


def test_every_described_failure_is_of_a_function_of_the_stack(every_setting: Template):
    # FAILURES names construct ids: one that no function has any more is a description nobody reads
    ids = set(_resources(every_setting.to_json(), "AWS::Lambda::Function"))
    for name in FAILURES:
        assert [i for i in ids if re.fullmatch(rf"\w*{name}Function[0-9A-F]{{8}}", i)], name


def test_the_stream_iterator_age_alarm_watches_the_function_the_stream_feeds(body: dict):
    [stream] = [
        p["Properties"]
        for p in _resources(body, "AWS::Lambda::EventSourceMapping").values()
        if "StartingPosition" in p["Properties"]  # a stream source (an SQS source has none)
    ]
    consumer = _function_ref(stream["FunctionName"])
    [alarm] = [p for f, alarms in lambda_alarms(body, "IteratorAge").items() for p in alarms]
    assert _function_ref(alarm["Dimensions"][0]["Value"]) == consumer
    # the oldest record handed over, in milliseconds: late means later than five minutes
    assert (alarm["Statistic"], alarm["ComparisonOperator"]) == ("Maximum", "GreaterThanThreshold")
    assert alarm["Threshold"] == c.STREAM_MAX_ITERATOR_AGE_S * 1000 == 300_000
    assert alarm["TreatMissingData"] == "notBreaching"  # a quiet stream hands nothing over


# --------------------------------------------------------------------------- concurrency


def _sqs_sources(body: dict) -> dict[str, dict]:
    """Function logical id → its SQS event source mapping's properties."""
    out = {}
    for props in (m["Properties"] for m in _resources(body, "AWS::Lambda::EventSourceMapping").values()):
        if "StartingPosition" not in props:
            out[str(_function_ref(props["FunctionName"]))] = props
    return out


def _by_handler(body: dict, handler: str) -> str:
    [logical] = [
        k for k, f in _resources(body, "AWS::Lambda::Function").items() if f["Properties"]["Handler"] == handler
    ]
    return logical


@pytest.mark.parametrize(
    ("handler", "bound"),
    [
        (c.COURIER_HANDLER, c.COURIER_MAX_CONCURRENCY),  # Slack: about one message a second per webhook
        (c.EVENT_WINDOW_HANDLER, c.WINDOW_MAX_CONCURRENCY),  # StartSession: the account's rate
    ],
)
def test_the_queue_sources_with_a_rate_limited_downstream_are_bounded(body: dict, handler: str, bound: int):
    source = _sqs_sources(body)[_by_handler(body, handler)]
    assert source["ScalingConfig"] == {"MaximumConcurrency": bound}
    assert 2 <= bound <= 1000  # what Lambda takes


def test_no_function_reserves_concurrency(body: dict):
    # reserved concurrency comes out of the account's pool (a deploy fails where too little is left) and turns a
    # busy queue source into throttles that spend its messages' receives: the sources are bounded instead, and
    # the sweep's functions by its Map states
    for logical, function in _resources(body, "AWS::Lambda::Function").items():
        assert "ReservedConcurrentExecutions" not in function["Properties"], logical


# --------------------------------------------------------------------------- what deletion keeps


def test_the_findings_table_is_retained_and_protected_from_deletion(body: dict):
    tables = _resources(body, "AWS::DynamoDB::GlobalTable")
    [findings] = [t for k, t in tables.items() if k.startswith("FindingsStoreFindings")]
    assert findings["DeletionPolicy"] == findings["UpdateReplacePolicy"] == "Retain"
    [replica] = findings["Properties"]["Replicas"]
    assert replica["DeletionProtectionEnabled"] is True
    assert replica["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    # the idempotency table goes with the stack: protection would make the stack's deletion fail on it
    [idempotency] = [t for k, t in tables.items() if k.startswith("FindingsStoreIdempotency")]
    assert idempotency["DeletionPolicy"] == "Delete"
    assert not any(r.get("DeletionProtectionEnabled") for r in idempotency["Properties"]["Replicas"])


def _removal_section() -> str:
    readme = (REPO / "README.md").read_text()
    start = readme.index("\n#### Remove the stack\n")
    return readme[start : readme.index("\n#### ", start + 1)]


def _part(section: str, title: str, following: str | None) -> str:
    start = section.index(f"**{title}**")
    return section[start : section.index(f"**{following}**") if following else len(section)]


def _types_named(text: str) -> set[str]:
    return set(re.findall(r"`(AWS::\w+::\w+)`", text))


#: Resource types that hold data or history the stack's deletion loses when it deletes them.
HOLDS_DATA = {
    "AWS::SQS::Queue",
    "AWS::StepFunctions::StateMachine",
    "AWS::DynamoDB::GlobalTable",
    "AWS::SNS::Topic",
    "AWS::CloudWatch::Alarm",
    "AWS::CloudWatch::Dashboard",
}


def test_the_readme_names_every_kept_type_and_only_those(template: Template, every_setting: Template):
    kept: set[str] = set()
    deleted: set[str] = set()
    for t in (template, every_setting):
        for resource in t.to_json()["Resources"].values():
            (kept if resource.get("DeletionPolicy") == "Retain" else deleted).add(resource["Type"])
            # what a deletion keeps, a replacement keeps too
            assert (resource.get("DeletionPolicy") == "Retain") == (resource.get("UpdateReplacePolicy") == "Retain")
    section = _removal_section()
    assert _types_named(_part(section, "Kept", "Deleted")) == kept
    named_deleted = _types_named(_part(section, "Deleted", None))
    assert sorted(HOLDS_DATA & deleted - named_deleted) == [], "deleted with their data, not said in the README"
    # the README does not call deleted what is only ever kept (a type may be both: two tables)
    assert named_deleted <= deleted


def test_the_readme_says_how_to_delete_the_protected_table(template: Template):
    section = _removal_section()
    [findings] = [
        t
        for k, t in _resources(template, "AWS::DynamoDB::GlobalTable").items()
        if k.startswith("FindingsStoreFindings")
    ]
    assert findings["Properties"]["Replicas"][0]["DeletionProtectionEnabled"]
    commands = re.findall(r"^aws dynamodb .*$", section, flags=re.M)
    assert commands == [
        "aws dynamodb update-table --table-name <FindingsTableName> --no-deletion-protection-enabled",
        "aws dynamodb delete-table --table-name <FindingsTableName>",
    ]
    assert c.OUTPUT_FINDINGS_TABLE in section


def test_the_readme_check_can_fail():
    section = "**Kept**\n- logs (`AWS::Logs::LogGroup`)\n**Deleted**\n- queues (`AWS::SQS::Queue`)\n"
    assert _types_named(_part(section, "Kept", "Deleted")) == {"AWS::Logs::LogGroup"}
    assert _types_named(_part(section, "Kept", "Deleted")) != {"AWS::Logs::LogGroup", "AWS::KMS::Key"}
