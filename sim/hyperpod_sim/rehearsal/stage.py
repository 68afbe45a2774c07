"""The rehearsal stage: the demo's simulated account, the synthesized stack created on it from its template,
and the stack's functions run as Lambda runs them.

    with rehearsal(cdk_out, host_layer=pathlib.Path("build/layer-x86_64")) as stage:
        run = stage.sweep()                       # the schedule's input, through moto's ASL interpreter
        stage.publish(node_health_event(...))     # through the deployed rules to the event function
        stage.settle()                            # queues, stream, alert groups, outbox, until quiet

What the operator adds beside the stack is added here too: the Slack webhook secret (pointing at a local
Slack sink) when the template names one, and a queue subscribed to the alert topic standing in for the
email inbox (the template's own subscriptions are email addresses).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_sim.demo import simulated_world
from hyperpod_sim.fake_k8s import FakeKubernetes
from hyperpod_sim.fake_ssm import FakeSsm
from hyperpod_sim.lambda_harness import Email, read_emails
from hyperpod_sim.rehearsal.deploy import ACCOUNT, Deployment, deploy
from hyperpod_sim.rehearsal.runtime import Invocation, LambdaService
from hyperpod_sim.rehearsal.sources import Delivery, EventBus, SqsMapping, StreamMapping
from hyperpod_sim.scenarios import REGION, Demo
from hyperpod_sim.server import SIM_ENV
from hyperpod_sim.slack_sink import SlackSink

STACK = "HyperPodNodeDebugger"
#: What EventBridge's schedule hands the state machine (the scheduled event itself: the target has no Input).
SCHEDULED_EVENT = {
    "version": "0",
    "id": "5c1a2f0e-0000-4000-8000-000000000000",
    "detail-type": "Scheduled Event",
    "source": "aws.events",
    "account": "123456789012",
    "region": REGION,
    "resources": [],
    "detail": {},
}


@dataclass
class SweepRun:
    execution_arn: str
    status: str
    output: Any
    history: list[dict[str, Any]]
    invocations: list[Invocation]
    error: str | None = None
    cause: str | None = None

    def states(self, event_type: str) -> list[dict[str, Any]]:
        return [e for e in self.history if e["type"] == event_type]


@dataclass
class Stage:
    clients: AwsClients
    demo: Demo
    ssm: FakeSsm
    kubernetes: FakeKubernetes
    deployment: Deployment
    lambdas: LambdaService
    slack: SlackSink
    inbox_url: str
    bus: EventBus = field(init=False)
    mappings: list[SqsMapping] = field(default_factory=list)
    stream: list[StreamMapping] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.bus = EventBus(self.deployment, self.lambdas)
        sqs = self.clients.client("sqs")
        for props in self.deployment.of_type("AWS::Lambda::EventSourceMapping").values():
            function = props["FunctionName"]
            source = props["EventSourceArn"]
            if ":sqs:" in source:
                url = sqs.get_queue_url(QueueName=source.rsplit(":", 1)[-1])["QueueUrl"]
                self.mappings.append(SqsMapping(self.lambdas, props, url, function))
            elif ":dynamodb:" in source:
                table = source.split(":table/", 1)[1].split("/", 1)[0]
                self.stream.append(StreamMapping(self.lambdas, props, table, function))
            else:
                raise NotImplementedError(f"event source {source} is not rehearsed")

    # ------------------------------------------------------------------ resources by role

    def ref(self, resource_type: str, prefix: str = "") -> Any:
        """The ``Ref`` of the one resource of ``resource_type`` whose logical id is ``prefix`` and CDK's 8-character
        hash (any, when ``prefix`` is empty)."""
        (logical,) = [k for k in self.deployment.template.of_type(resource_type) if not prefix or k[:-8] == prefix]
        return self.deployment.refs[logical]

    def queue_url(self, prefix: str) -> str:
        return str(self.ref("AWS::SQS::Queue", prefix))

    @property
    def findings_table(self) -> str:
        return str(self.ref("AWS::DynamoDB::GlobalTable", "FindingsStoreFindings"))

    @property
    def state_machine_arn(self) -> str:
        return str(self.ref("AWS::StepFunctions::StateMachine"))

    # ------------------------------------------------------------------ driving it

    def sweep(self, payload: dict[str, Any] | None = None, *, timeout_s: float = 240) -> SweepRun:
        """One execution of the deployed state machine, as the schedule starts it; waits for its end."""
        sfn = self.clients.client("stepfunctions")
        before = len(self.lambdas.invocations)
        arn = sfn.start_execution(stateMachineArn=self.state_machine_arn, input=json.dumps(payload or SCHEDULED_EVENT))[
            "executionArn"
        ]
        return self.wait_execution(arn, before, timeout_s=timeout_s)

    def wait_execution(self, arn: str, before: int = 0, *, timeout_s: float = 240) -> SweepRun:
        sfn = self.clients.client("stepfunctions")
        deadline = time.monotonic() + timeout_s
        while True:
            described = sfn.describe_execution(executionArn=arn)
            if described["status"] != "RUNNING" or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        history: list[dict[str, Any]] = []
        token = None
        while True:
            page = sfn.get_execution_history(
                executionArn=arn, maxResults=1000, **({"nextToken": token} if token else {})
            )
            history.extend(page["events"])
            token = page.get("nextToken")
            if not token:
                break
        output = json.loads(described["output"]) if described.get("output") else None
        return SweepRun(
            arn,
            described["status"],
            output,
            history,
            self.lambdas.invocations[before:],
            described.get("error"),
            described.get("cause"),
        )

    def publish(self, event: dict[str, Any]) -> list[Delivery]:
        """``PutEvents`` of a published-shape event onto the default bus, routed by the deployed rules."""
        return self.bus.put(event)

    def settle(self, *, timeout_s: float = 120, quiet_s: float = 1.0) -> None:
        """Run the event sources until every queue and the stream have been quiet for ``quiet_s`` with
        nothing delayed or in flight (delays are real: the alert group's wait, the window's)."""
        deadline = time.monotonic() + timeout_s
        quiet_since: float | None = None
        while time.monotonic() < deadline:
            worked = sum(m.drain() for m in self.stream)
            for mapping in self.mappings:
                while mapping.poll() is not None:
                    worked += 1
            if worked:
                quiet_since = None
            elif self._waiting():
                quiet_since = None
                time.sleep(0.5)
            else:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= quiet_s:
                    return
                time.sleep(0.2)
        raise TimeoutError(f"the stack did not settle within {timeout_s:g} s")

    def run_for(self, seconds: float) -> int:
        """Run the event sources for ``seconds`` whatever waits in the queues; the invocations made."""
        made = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            made += sum(m.drain() for m in self.stream)
            for mapping in self.mappings:
                while mapping.poll() is not None:
                    made += 1
            time.sleep(0.25)
        return made

    def expire_visibility(self, queue_url: str) -> int:
        """End the visibility timeout of every in-flight message of a queue, as the passing of that time
        would (moto's SQS keeps wall-clock time); how many were made visible."""
        from moto.sqs.models import sqs_backends

        queue = sqs_backends[ACCOUNT][self.deployment.region].queues[queue_url.rsplit("/", 1)[-1]]
        ended = 0
        for message in queue._messages:
            if not message.visible:
                message.change_visibility(0)
                ended += 1
        return ended

    def _waiting(self) -> bool:
        sqs = self.clients.client("sqs")
        names = ["ApproximateNumberOfMessagesDelayed", "ApproximateNumberOfMessagesNotVisible"]
        for mapping in self.mappings:
            attributes = sqs.get_queue_attributes(QueueUrl=mapping.queue_url, AttributeNames=names)["Attributes"]
            if any(int(attributes.get(n, 0)) for n in names):
                return True
        return False

    def emails(self) -> list[Email]:
        return read_emails(self.clients, self.inbox_url)

    def queue_messages(self, prefix: str) -> list[dict[str, Any]]:
        """Every message now visible in a deployed queue (left there: read, then made visible again)."""
        sqs = self.clients.client("sqs")
        url = self.queue_url(prefix)
        got = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"], MessageAttributeNames=["All"]
        ).get("Messages", [])
        for message in got:
            sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)
        return got


@contextlib.contextmanager
def _sfn_executes(port: int) -> Iterator[None]:
    """moto's Step Functions runs the definitions (its ASL interpreter) and reaches this moto server."""
    from moto.core.config import default_user_config

    saved_config = default_user_config.get("stepfunctions", {}).copy()
    saved_port = os.environ.get("MOTO_PORT")
    default_user_config.setdefault("stepfunctions", {})["execute_state_machine"] = True
    os.environ["MOTO_PORT"] = str(port)
    try:
        yield
    finally:
        default_user_config["stepfunctions"] = saved_config
        if saved_port is None:
            os.environ.pop("MOTO_PORT", None)
        else:
            os.environ["MOTO_PORT"] = saved_port


def _operator_additions(clients: AwsClients, deployment: Deployment, slack: SlackSink) -> str:
    """The Slack secret the README has the operator create, and an inbox queue on the alert topic."""
    secret_names = {
        v["Environment"]["Variables"].get("SLACK_SECRET_NAME")
        for v in deployment.of_type("AWS::Lambda::Function").values()
        if v.get("Environment", {}).get("Variables", {}).get("SLACK_SECRET_NAME")
    }
    for name in secret_names:
        clients.client("secretsmanager").create_secret(Name=name, SecretString=slack.url)
    sqs, sns = clients.client("sqs"), clients.client("sns")
    inbox = sqs.create_queue(QueueName="rehearsal-inbox")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=inbox, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    for topic in deployment.of_type("AWS::SNS::Topic"):
        if topic.startswith("NotificationsAlertTopic"):
            sns.subscribe(TopicArn=deployment.refs[topic], Protocol="sqs", Endpoint=arn)
    return inbox


def admit_access_entries(kubernetes: FakeKubernetes, deployment: Deployment) -> set[str]:
    """EKS authentication as deployed: the operator's own credentials (the cluster's creator) and the roles
    the template gives an access entry on this cluster; any other principal's token is refused (401)."""
    from moto.sts.models import sts_backends

    admitted = {
        str(p["PrincipalArn"])
        for p in deployment.of_type("AWS::EKS::AccessEntry").values()
        if p.get("ClusterName") == kubernetes.cluster_name
    }

    def secret(access_key: str) -> str | None:
        if access_key == SIM_ENV["AWS_ACCESS_KEY_ID"]:
            return SIM_ENV["AWS_SECRET_ACCESS_KEY"]
        for role in sts_backends[ACCOUNT]["aws"].assumed_roles:
            if role.access_key_id == access_key and role.role_arn in admitted:
                return str(role.secret_access_key)
        return None

    kubernetes.secret_key = secret
    return admitted


@contextlib.contextmanager
def rehearsal(cdk_out: pathlib.Path, *, host_layer: pathlib.Path, now: datetime | None = None) -> Iterator[Stage]:
    now = now or datetime.now(UTC)
    with simulated_world(now) as world, SlackSink() as slack:
        clients = world.clients
        endpoint = os.environ["AWS_ENDPOINT_URL"]
        with _sfn_executes(int(endpoint.rsplit(":", 1)[1])):
            deployment = deploy(cdk_out, STACK, REGION)
            inbox = _operator_additions(clients, deployment, slack)
            admit_access_entries(world.kubernetes, deployment)
            lambdas = LambdaService(
                deployment,
                host_layer_dir=host_layer,
                endpoints={"AWS_ENDPOINT_URL": endpoint, "AWS_ENDPOINT_URL_SSM": os.environ["AWS_ENDPOINT_URL_SSM"]},
            )
            with lambdas.serving():
                yield Stage(clients, world.demo, world.ssm, world.kubernetes, deployment, lambdas, slack, inbox)
