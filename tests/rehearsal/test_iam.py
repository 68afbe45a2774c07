"""Every AWS call the deployed functions make, allowed by the role the template gives each of them, as IAM
evaluates it: the real resource ARNs and condition keys of each request (recorded where it arrives: moto
and the fake Session Manager, :mod:`hyperpod_sim.rehearsal.calls`), against the role's synthesized
policies (:mod:`hyperpod_sim.rehearsal.iam_eval`), explicit Deny and conditions included.

The run is a scheduled sweep (both clusters, probe batches) and an HMA node-health event through the rules,
the windows, the stream, the alert groups and the courier (what test_sweep.py and test_event_path.py drive).
"""

from __future__ import annotations

import copy
import dataclasses

import pytest

from hyperpod_sim.rehearsal.calls import (
    STATE_MACHINE,
    Analysis,
    CallRecorder,
    Verdict,
    analyse,
    check,
    recording,
    role_policies,
)
from hyperpod_sim.rehearsal.iam_eval import Request, evaluate
from hyperpod_sim.rehearsal.stage import SweepRun
from infra import constants as c
from tests.rehearsal.test_event_path import _on_demo

HMA_EVENT = "sagemaker-hyperpod-cluster-node-health-event--hma-nvidia-error-terminate.json"


@dataclasses.dataclass
class Run:
    sweep: SweepRun
    recorder: CallRecorder
    analysis: Analysis
    verdicts: list[Verdict]


@pytest.fixture(scope="module")
def run(stage) -> Run:
    with recording(stage) as recorder:
        sweep = stage.sweep()
        stage.publish(_on_demo(stage, HMA_EVENT))
        stage.settle()
    analysis = analyse(stage, recorder.calls)
    return Run(sweep, recorder, analysis, check(stage, analysis))


def _name(stage, handler: str) -> str:
    return stage.deployment.function_name(handler)


def _actions(run: Run, function: str) -> set[str]:
    return {n.request.action for n in run.analysis.needs if function in n.principal.functions}


def test_the_sweep_and_the_event_path_ran_without_a_failure(stage, run):
    assert run.sweep.status == "SUCCEEDED", (run.sweep.error, run.sweep.cause)
    failed = [(i.function, i.error) for i in stage.lambdas.invocations if not i.ok]
    assert failed == []


def test_the_recorder_saw_the_calls_of_every_function_that_ran(stage, run):
    assert run.recorder.errors == []
    ran = {i.function for i in stage.lambdas.invocations}
    # every function of the template ran: the sweep's two and the event path's five
    assert ran == {str(stage.deployment.refs[k]) for k in stage.deployment.template.of_type("AWS::Lambda::Function")}
    assert {f for f in ran if not _actions(run, f)} == set()
    assert run.analysis.functions() == ran | {STATE_MACHINE}
    # both servers: moto, and the fake Session Manager's API and data channel
    probes = _actions(run, _name(stage, c.PROBE_BATCH_HANDLER))
    assert {"ssm:StartSession", "ssm:TerminateSession", "ssmmessages:OpenDataChannel"} <= probes
    assert {"sagemaker:DescribeCluster", "dynamodb:PutItem"} <= probes
    assert {"sns:Publish", "secretsmanager:GetSecretValue", "events:PutEvents"} <= _actions(
        run, _name(stage, c.COURIER_HANDLER)
    )
    # what Lambda does with a function's role for it: poll its queue, delete what it handled
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage"} <= _actions(run, _name(stage, c.COURIER_HANDLER))
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage"} <= _actions(run, _name(stage, c.EVENT_WINDOW_HANDLER))
    assert "lambda:InvokeFunction" in {
        n.request.action for n in run.analysis.needs if STATE_MACHINE in n.principal.functions
    }


def test_every_call_is_signed_by_a_deployed_role_and_read_to_its_resources(run):
    assert [(str(c), c.access_key) for c in run.analysis.unattributed] == []
    assert [(str(c), why) for c, why in run.analysis.unresolved] == []


def test_every_call_each_function_made_is_allowed_by_its_role(run):
    denied = sorted({str(v) for v in run.verdicts if not v.decision.allowed})
    assert denied == [], "\n".join(denied)


# --------------------------------------------------------------------------- the check can fail


def _findings_arn(stage) -> str:
    return str(stage.deployment.attributes[stage.deployment.logical_of(stage.findings_table)]["Arn"])


def _without(policies: list, action: str, resource: str) -> list:
    """A copy of a role's policies in which no statement on ``resource`` grants ``action``."""
    out = copy.deepcopy(policies)
    for _, document in out:
        for statement in document["Statement"]:
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if statement["Effect"] == "Allow" and resource in resources and action in actions:
                statement["Action"] = [a for a in actions if a != action]
    return out


def test_without_the_findings_query_statement_the_alert_groups_queries_are_denied(stage, run):
    function = _name(stage, c.ALERT_GROUPS_HANDLER)
    (role,) = {n.principal.role_arn for n in run.analysis.needs if function in n.principal.functions}
    table = _findings_arn(stage)
    policies = role_policies(stage.deployment, role)
    verdicts = check(stage, run.analysis, {role: _without(policies, "dynamodb:Query", table)})
    mine = [v for v in verdicts if function in v.need.principal.functions]
    queries = [v for v in mine if v.need.request.action == "dynamodb:Query" and v.need.request.resource == table]
    assert queries and all(not v.decision.allowed for v in queries)
    assert all("no statement allows" in str(v) and function in str(v) and table in str(v) for v in queries)
    # nothing else changed
    assert all(v.decision.allowed for v in mine if v not in queries)


def test_the_templates_conditions_decide_with_the_requests_own_values(stage, run):
    probe = _name(stage, c.PROBE_BATCH_HANDLER)
    needs = [n for n in run.analysis.needs if probe in n.principal.functions]
    policies = role_policies(stage.deployment, needs[0].principal.role_arn)

    # TerminateSession: only a session this role started (EndOwnSessions: the session-id tag = aws:userid)
    (terminate, *_) = [n.request for n in needs if n.request.action == "ssm:TerminateSession"]
    assert evaluate(policies, terminate).allowed
    someone_else = {**terminate.context, "aws:userid": ["AROAOTHERROLE000000000:rehearsal"]}
    assert not evaluate(policies, dataclasses.replace(terminate, context=someone_else)).allowed

    # StartSession: a document without the pinned tag (AWS's default shell) meets the template's Deny
    (document, *_) = [
        n.request for n in needs if n.request.action == "ssm:StartSession" and ":document/" in n.request.resource
    ]
    assert evaluate(policies, document).allowed
    shell = Request("ssm:StartSession", f"arn:aws:ssm:{stage.deployment.region}::document/SSM-SessionManagerRunShell")
    decision = evaluate(policies, shell)
    assert not decision.allowed and "explicitly denied" in decision.reason and "OnlyPinnedDocuments" in decision.reason

    # the alert groups may touch only the ALERTGROUP and CLUSTER# partitions of the findings table
    groups = _name(stage, c.ALERT_GROUPS_HANDLER)
    (query_need, *_) = [
        n for n in run.analysis.needs if groups in n.principal.functions and n.request.action == "dynamodb:Query"
    ]
    group_policies = role_policies(stage.deployment, query_need.principal.role_arn)
    query = query_need.request
    assert evaluate(group_policies, query).allowed
    events = {**query.context, "dynamodb:LeadingKeys": ["EVENTS#" + stage.demo.eks.arn]}
    assert not evaluate(group_policies, dataclasses.replace(query, context=events)).allowed
