"""The rehearsal's IAM evaluator on small hand-written policies, each expectation from the IAM User Guide
("Policy evaluation logic", "IAM JSON policy elements: Condition operators", "Policy variables"), and the
call recorder's reading of a request (SigV4 scope, JSON, query and REST protocols from botocore's model)."""

from __future__ import annotations

import json

import pytest

from hyperpod_sim.rehearsal.calls import CallRecorder, Raw, _queried_keys, conforms, identify
from hyperpod_sim.rehearsal.iam_eval import Request, Unsupported, evaluate

TABLE = "arn:aws:dynamodb:us-west-2:123456789012:table/findings"
SECRET = "arn:aws:secretsmanager:us-west-2:123456789012:secret:hyperpod-debugger/slack-webhook"


def _policy(*statements: dict) -> list:
    return [("P", {"Version": "2012-10-17", "Statement": list(statements)})]


def _allow(action, resource="*", **extra) -> dict:
    return {"Effect": "Allow", "Action": action, "Resource": resource, **extra}


# --------------------------------------------------------------------------- Allow, Deny, nothing


def test_an_explicit_deny_wins_over_any_allow():
    policies = _policy(
        _allow("dynamodb:*", Sid="All"),
        {"Sid": "NoDeletes", "Effect": "Deny", "Action": "dynamodb:DeleteItem", "Resource": TABLE},
    )
    denied = evaluate(policies, Request("dynamodb:DeleteItem", TABLE))
    assert not denied.allowed and denied.statements == ("P/NoDeletes",) and "explicitly denied" in denied.reason
    assert evaluate(policies, Request("dynamodb:GetItem", TABLE)).allowed


def test_without_an_allow_the_request_is_denied():
    decision = evaluate(_policy(_allow("sqs:SendMessage")), Request("sqs:DeleteMessage", "*"))
    assert not decision.allowed and "no statement" in decision.reason


def test_not_action_allows_everything_but_what_it_names():
    policies = _policy({"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"})
    assert evaluate(policies, Request("sqs:SendMessage", "arn:aws:sqs:us-west-2:123456789012:q")).allowed
    assert not evaluate(policies, Request("iam:CreateUser", "*")).allowed


def test_action_names_match_case_insensitively_with_wildcards():
    policies = _policy(_allow(["DynamoDB:get*", "s3:Get?bject"]))
    assert evaluate(policies, Request("dynamodb:GetItem", TABLE)).allowed
    assert evaluate(policies, Request("s3:GetObject", "*")).allowed
    assert not evaluate(policies, Request("s3:GetObjectAcl", "*")).allowed  # ? is one character, no more


def test_resource_wildcards_match_one_character_per_question_mark_and_case_matters():
    policies = _policy(_allow("secretsmanager:GetSecretValue", f"{SECRET}-??????"))
    assert evaluate(policies, Request("secretsmanager:GetSecretValue", f"{SECRET}-AbCdEf")).allowed
    assert not evaluate(policies, Request("secretsmanager:GetSecretValue", f"{SECRET}-AbCdEfG")).allowed
    assert not evaluate(policies, Request("secretsmanager:GetSecretValue", f"{SECRET}-AbC")).allowed
    upper = SECRET.replace("slack-webhook", "Slack-Webhook")
    assert not evaluate(policies, Request("secretsmanager:GetSecretValue", f"{upper}-AbCdEf")).allowed


def test_a_statement_on_one_table_does_not_reach_its_index_nor_another_table():
    policies = _policy(_allow("dynamodb:Query", TABLE))
    assert evaluate(policies, Request("dynamodb:Query", TABLE)).allowed
    denied = evaluate(policies, Request("dynamodb:Query", f"{TABLE}/index/by_node"))
    assert not denied.allowed and "other resources" in denied.reason
    assert not evaluate(policies, Request("dynamodb:Query", f"{TABLE}2")).allowed


def test_not_resource_allows_every_resource_but_those_it_names():
    policies = _policy({"Effect": "Allow", "Action": "sqs:SendMessage", "NotResource": "arn:aws:sqs:*:*:private-*"})
    assert evaluate(policies, Request("sqs:SendMessage", "arn:aws:sqs:us-west-2:123456789012:public")).allowed
    assert not evaluate(policies, Request("sqs:SendMessage", "arn:aws:sqs:us-west-2:123456789012:private-1")).allowed


# --------------------------------------------------------------------------- conditions


PUT_EVENTS = _allow(
    "events:PutEvents",
    "arn:aws:events:us-west-2:123456789012:event-bus/default",
    Sid="Findings",
    Condition={"StringEquals": {"events:source": "hyperpod-node-debugger", "events:detail-type": ["A", "B"]}},
)


def _put(source: str | None, detail_type: str | None) -> Request:
    context = {}
    if source is not None:
        context["events:source"] = [source]
    if detail_type is not None:
        context["events:detail-type"] = [detail_type]
    return Request("events:PutEvents", "arn:aws:events:us-west-2:123456789012:event-bus/default", context)


def test_every_condition_key_must_match_any_of_its_values():
    policies = _policy(PUT_EVENTS)
    assert evaluate(policies, _put("hyperpod-node-debugger", "B")).allowed
    failed = evaluate(policies, _put("someone-else", "A"))
    assert not failed.allowed
    assert "condition fails" in failed.reason and "events:source" in failed.reason and "someone-else" in failed.reason
    assert not evaluate(policies, _put("hyperpod-node-debugger", "C")).allowed


def test_a_condition_key_the_request_lacks_does_not_match():
    assert not evaluate(_policy(PUT_EVENTS), _put("hyperpod-node-debugger", None)).allowed


def test_condition_key_names_are_case_insensitive_and_values_are_not():
    policies = _policy(PUT_EVENTS)
    request = Request(
        "events:PutEvents",
        "arn:aws:events:us-west-2:123456789012:event-bus/default",
        {"Events:Source": ["hyperpod-node-debugger"], "EVENTS:DETAIL-TYPE": ["A"]},
    )
    assert evaluate(policies, request).allowed
    assert not evaluate(policies, _put("HyperPod-Node-Debugger", "A")).allowed


def test_if_exists_matches_when_the_key_is_absent_and_checks_it_when_present():
    policies = _policy(
        _allow("ssm:StartSession", Condition={"BoolIfExists": {"ssm:SessionDocumentAccessCheck": "true"}})
    )
    assert evaluate(policies, Request("ssm:StartSession", "*")).allowed
    assert evaluate(policies, Request("ssm:StartSession", "*", {"ssm:SessionDocumentAccessCheck": ["true"]})).allowed
    assert not evaluate(
        policies, Request("ssm:StartSession", "*", {"ssm:SessionDocumentAccessCheck": ["false"]})
    ).allowed
    without = _policy(_allow("ssm:StartSession", Condition={"Bool": {"ssm:SessionDocumentAccessCheck": "true"}}))
    assert not evaluate(without, Request("ssm:StartSession", "*")).allowed


def test_a_negated_operator_matches_when_the_key_is_absent():
    # "If the policy condition requires that the key is not matched, such as StringNotLike or ArnNotLike, and
    # the right key is not present, the condition is true."
    document = "arn:aws:ssm:us-west-2::document/SSM-SessionManagerRunShell"
    policies = _policy(
        _allow("ssm:StartSession"),
        {
            "Sid": "OnlyPinned",
            "Effect": "Deny",
            "Action": "ssm:StartSession",
            "Resource": "arn:aws:ssm:*::document/*",
            "Condition": {"StringNotEquals": {"aws:ResourceTag/pinned": "yes"}},
        },
    )
    assert not evaluate(policies, Request("ssm:StartSession", document)).allowed
    assert evaluate(policies, Request("ssm:StartSession", document, {"aws:ResourceTag/pinned": ["yes"]})).allowed
    assert not evaluate(policies, Request("ssm:StartSession", document, {"aws:ResourceTag/pinned": ["no"]})).allowed


def test_for_all_values_needs_every_value_in_the_set_and_holds_for_an_empty_set():
    policies = _policy(
        _allow(
            "dynamodb:Query",
            TABLE,
            Condition={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["ALERTGROUP", "CLUSTER#*"]}},
        )
    )
    assert evaluate(policies, Request("dynamodb:Query", TABLE, {"dynamodb:LeadingKeys": ["CLUSTER#a"]})).allowed
    mixed = Request("dynamodb:Query", TABLE, {"dynamodb:LeadingKeys": ["ALERTGROUP", "EVENTS#a"]})
    assert not evaluate(policies, mixed).allowed
    # "ForAllValues ... also returns true if there are no context keys in the request"
    assert evaluate(policies, Request("dynamodb:Query", TABLE)).allowed


def test_for_any_value_needs_one_value_in_the_set_and_fails_for_an_absent_key():
    policies = _policy(_allow("sqs:SendMessage", Condition={"ForAnyValue:StringEquals": {"aws:TagKeys": ["team"]}}))
    assert evaluate(policies, Request("sqs:SendMessage", "*", {"aws:TagKeys": ["owner", "team"]})).allowed
    assert not evaluate(policies, Request("sqs:SendMessage", "*", {"aws:TagKeys": ["owner"]})).allowed
    assert not evaluate(policies, Request("sqs:SendMessage", "*")).allowed


def test_a_policy_variable_takes_the_requests_value_and_matches_nothing_without_one():
    session = "arn:aws:ssm:us-west-2:123456789012:session/s-1"
    tag = "ssm:resourceTag/aws:ssmmessages:session-id"
    policies = _policy(_allow("ssm:TerminateSession", Condition={"StringLike": {tag: ["${aws:userid}"]}}))
    mine = {"aws:userid": ["AROAEXAMPLE:rehearsal"], tag: ["AROAEXAMPLE:rehearsal"]}
    assert evaluate(policies, Request("ssm:TerminateSession", session, mine)).allowed
    theirs = {"aws:userid": ["AROAEXAMPLE:rehearsal"], tag: ["AROAOTHER:rehearsal"]}
    assert not evaluate(policies, Request("ssm:TerminateSession", session, theirs)).allowed
    assert not evaluate(policies, Request("ssm:TerminateSession", session, {tag: ["AROAEXAMPLE:rehearsal"]})).allowed


def test_a_variable_in_a_resource_is_taken_literally_not_as_a_wildcard():
    policies = _policy(_allow("ssm:TerminateSession", "arn:aws:ssm:*:*:session/${aws:username}-*"))
    request = Request("ssm:TerminateSession", "arn:aws:ssm:us-west-2:1:session/ana-1", {"aws:username": ["ana"]})
    assert evaluate(policies, request).allowed
    starred = Request("ssm:TerminateSession", "arn:aws:ssm:us-west-2:1:session/bob-1", {"aws:username": ["*"]})
    assert not evaluate(policies, starred).allowed


def test_null_checks_whether_the_key_is_present():
    policies = _policy(_allow("sqs:SendMessage", Condition={"Null": {"aws:userid": "false"}}))
    assert evaluate(policies, Request("sqs:SendMessage", "*", {"aws:userid": ["x"]})).allowed
    assert not evaluate(policies, Request("sqs:SendMessage", "*")).allowed


def test_an_operator_it_does_not_know_is_refused_not_guessed():
    policies = _policy(_allow("sqs:SendMessage", Condition={"DateGreaterThan": {"aws:CurrentTime": "2020-01-01"}}))
    with pytest.raises(Unsupported):
        evaluate(policies, Request("sqs:SendMessage", "*", {"aws:CurrentTime": ["2026-01-01T00:00:00Z"]}))


# --------------------------------------------------------------------------- reading a request


def _signed(key: str, service: str) -> dict[str, str]:
    return {
        "authorization": f"AWS4-HMAC-SHA256 Credential={key}/20260101/us-west-2/{service}/aws4_request, "
        "SignedHeaders=host;x-amz-date, Signature=abc",
    }


def test_a_json_protocol_request_is_read_from_its_target_and_body():
    body = json.dumps({"TableName": "findings", "Key": {"pk": {"S": "ALERTGROUP"}}}).encode()
    headers = {**_signed("ASIAEXAMPLE", "dynamodb"), "x-amz-target": "DynamoDB_20120810.GetItem"}
    call = identify(Raw("moto", "POST", "/", "", headers, body, 200))
    assert (call.access_key, call.region, call.service, call.operation) == (
        "ASIAEXAMPLE",
        "us-west-2",
        "dynamodb",
        "GetItem",
    )
    assert call.params["TableName"] == "findings"


def test_a_query_protocol_request_is_read_from_its_form():
    body = b"Action=Publish&Version=2010-03-31&TopicArn=arn%3Aaws%3Asns%3Aus-west-2%3A123456789012%3At&Message=hi"
    headers = {**_signed("ASIAEXAMPLE", "sns"), "content-type": "application/x-www-form-urlencoded; charset=utf-8"}
    call = identify(Raw("moto", "POST", "/", "", headers, body, 200))
    assert call.operation == "Publish" and call.params["TopicArn"] == "arn:aws:sns:us-west-2:123456789012:t"


def test_a_rest_request_is_matched_to_its_operation_by_botocores_model():
    # Lambda's Invoke: POST /2015-03-31/functions/{FunctionName}/invocations (the Lambda API reference)
    headers = {**_signed("ak", "lambda"), "x-amz-invocation-type": "RequestResponse"}
    event = json.dumps({"FunctionName": "not-this-one"}).encode()  # the payload is the event, not parameters
    call = identify(
        Raw("moto", "POST", "/2015-03-31/functions/fn-1/invocations", "Qualifier=live", headers, event, 200)
    )
    assert call.operation == "Invoke"
    assert call.params["FunctionName"] == "fn-1" and call.params["Qualifier"] == "live"
    # EKS's DescribeCluster: GET /clusters/{name}
    eks = identify(Raw("moto", "GET", "/clusters/ml-eks", "", _signed("ASIAEXAMPLE", "eks"), b"", 200))
    assert eks.operation == "DescribeCluster" and eks.params["name"] == "ml-eks"


def test_a_presigned_request_is_attributed_to_its_key():
    query = "X-Amz-Credential=ASIAEXAMPLE%2F20260101%2Fus-west-2%2Fsts%2Faws4_request&Action=GetCallerIdentity"
    call = identify(Raw("moto", "GET", "/", query, {}, b"", 200))
    assert (call.access_key, call.service, call.operation) == ("ASIAEXAMPLE", "sts", "GetCallerIdentity")


def test_the_data_channel_upgrade_is_open_data_channel():
    call = identify(
        Raw("ssm", "GET", "/v1/data-channel/s-1", "role=publish_subscribe", _signed("A", "ssmmessages"), b"", 101)
    )
    assert (call.service, call.operation) == ("ssmmessages", "OpenDataChannel")


def test_the_harness_requests_are_left_out():
    recorder = CallRecorder()
    recorder.record(Raw("moto", "POST", "/", "", _signed("testing", "sqs"), b"", 200))
    recorder.record(Raw("moto", "POST", "/", "", _signed("ASIAEXAMPLE", "sqs"), b"", 200))
    assert [call.access_key for call in recorder.calls] == ["ASIAEXAMPLE"]


def test_a_query_names_its_partition_key_through_placeholders():
    params = {
        "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
        "ExpressionAttributeNames": {"#pk": "pk", "#sk": "sk"},
        "ExpressionAttributeValues": {":pk": {"S": "CLUSTER#a"}, ":prefix": {"S": "FINDING#"}},
    }
    assert _queried_keys(params, "pk") == ["CLUSTER#a"]
    reversed_params = {"KeyConditionExpression": ":v = pk", "ExpressionAttributeValues": {":v": {"S": "ALERTGROUP"}}}
    assert _queried_keys(reversed_params, "pk") == ["ALERTGROUP"]


def test_derived_arns_are_checked_against_iams_resource_formats():
    assert conforms("dynamodb:Query", f"{TABLE}/index/by_node")
    assert conforms("ec2:DescribeVpcs", "*")  # the reference gives it no resource type
    assert not conforms("dynamodb:PutItem", "*")  # it has one: a table
    assert not conforms("sqs:SendMessage", TABLE)
