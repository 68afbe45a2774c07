"""Session Manager access in the synthesized stack: pinned documents, and grants that allow nothing else.

What AWS documents (sources in references/decisions.md, 2026-12-01): StartSession is authorised on the
document it names (``arn:aws:ssm:<region>:<account>:document/<name>``, AWS-owned ones with no account),
``ssm:SessionDocumentAccessCheck`` makes a call without a document be checked against the default
shell document, TerminateSession can be limited to one's own sessions with the
``aws:ssmmessages:session-id`` tag, and no resource ARN is documented for ``sagemaker-cluster:`` targets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from aws_cdk.assertions import Template

from hyperpod_debugger.aws import ssm_documents
from hyperpod_debugger.probe.pinned import command_of
from infra import constants as c
from tests.infrastructure.conftest import synth
from tests.infrastructure.test_iam_reality import role_statements

PROBING = (c.EVENT_WINDOW_HANDLER, c.SWEEP_HANDLER, c.PROBE_BATCH_HANDLER)


def documents(template: Template) -> Mapping[str, Mapping[str, Any]]:
    return template.find_resources("AWS::SSM::Document")


def test_three_pinned_session_documents_carry_the_cores_commands(template: Template):
    # the probe, the Slurm controller's query, and its jobs (the job diagnosis)
    docs = list(documents(template).values())
    assert len(docs) == 3
    contents = sorted((d["Properties"]["Content"] for d in docs), key=json.dumps)
    assert contents == sorted(
        (ssm_documents.document_content(k, command_of(k)) for k in ssm_documents.KINDS), key=json.dumps
    )
    for doc in docs:
        props = doc["Properties"]
        assert props["DocumentType"] == "Session" and props["DocumentFormat"] == "JSON"
        assert {"Key": ssm_documents.TAG_KEY, "Value": ssm_documents.TAG_VALUE} in props["Tags"]
        content = props["Content"]
        # a fixed command: nothing a caller could pass changes what runs
        assert content["sessionType"] == "NonInteractiveCommands" and "parameters" not in content
        assert "{{" not in content["properties"]["linux"]["commands"]


def test_the_documents_run_exactly_what_the_client_expects(template: Template):
    by_command = {d["Properties"]["Content"]["properties"]["linux"]["commands"] for d in documents(template).values()}
    assert by_command == {ssm_documents.pinned_line(command_of(k)) for k in ssm_documents.KINDS}


def _function(template: Template, handler: str) -> Mapping[str, Any]:
    (found,) = [
        f for f in template.find_resources("AWS::Lambda::Function").values() if f["Properties"]["Handler"] == handler
    ]
    return found


@pytest.mark.parametrize("handler", PROBING)
def test_probing_functions_are_told_the_document_names(every_setting: Template, handler):
    setting = json.dumps(
        _function(every_setting, handler)["Properties"]["Environment"]["Variables"]["SESSION_DOCUMENTS"]
    )
    assert "ProbeDocument" in setting and "SlurmDocument" in setting and "JobsDocument" in setting


@pytest.mark.parametrize("handler", PROBING)
def test_start_session_is_denied_for_every_document_but_the_pinned_ones(every_setting: Template, handler):
    resources = every_setting.to_json()["Resources"]
    role = _function(every_setting, handler)["Properties"]["Role"]["Fn::GetAtt"][0]
    statements = [
        s
        for r in resources.values()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role} in r["Properties"].get("Roles", [])
        for s in r["Properties"]["PolicyDocument"]["Statement"]
    ]
    allows = [s for s in statements if s["Effect"] == "Allow" and "ssm:StartSession" in json.dumps(s["Action"])]
    denies = [s for s in statements if s["Effect"] == "Deny"]
    assert allows and all(
        s["Condition"] == {"BoolIfExists": {"ssm:SessionDocumentAccessCheck": "true"}} for s in allows
    )
    [deny] = denies
    assert deny["Action"] == "ssm:StartSession"
    rendered = json.dumps(deny["Resource"])
    assert ":ssm:*:*:document/*" in rendered and ":ssm:*::document/*" in rendered  # account's and AWS's own
    assert deny["Condition"] == {
        "StringNotEquals": {f"aws:ResourceTag/{ssm_documents.TAG_KEY}": ssm_documents.TAG_VALUE}
    }


@pytest.mark.parametrize("handler", PROBING)
def test_a_function_may_end_only_its_own_sessions(every_setting: Template, handler):
    [terminate] = [s for s in role_statements(every_setting, handler) if s.get("Sid") == "EndOwnSessions"]
    assert terminate["Action"] == "ssm:TerminateSession"
    assert terminate["Condition"] == {"StringLike": {"ssm:resourceTag/aws:ssmmessages:session-id": ["${aws:userid}"]}}
    assert ":session/*" in json.dumps(terminate["Resource"])


@pytest.mark.parametrize("handler", [c.STREAM_NOTIFIER_HANDLER, c.EVENT_HANDLER, c.LOG_SUBSCRIPTION_HANDLER])
def test_the_notifier_and_the_functions_that_only_keep_events_cannot_open_sessions(every_setting: Template, handler):
    actions = json.dumps([s["Action"] for s in role_statements(every_setting, handler)])
    assert "ssm:" not in actions and "ssmmessages:" not in actions
    if handler != c.STREAM_NOTIFIER_HANDLER:  # they keep events and schedule windows; they read no cluster
        assert "sagemaker:" not in actions and "ec2:" not in actions and "eks:" not in actions


def test_the_aws_document_fallback_creates_nothing_and_grants_no_document_deny(tmp_path_factory):
    template = synth(tmp_path_factory, sessionDocuments="aws")[1]
    assert documents(template) == {}
    for handler in PROBING[:3]:
        variables = _function(template, handler)["Properties"]["Environment"]["Variables"]
        assert "SESSION_DOCUMENTS" not in variables
        assert not [s for s in role_statements(template, handler) if s["Effect"] == "Deny"]


def test_an_unknown_session_mode_is_refused(tmp_path_factory):
    with pytest.raises(ValueError, match="sessionDocuments must be one of pinned, aws"):
        synth(tmp_path_factory, sessionDocuments="custom")
