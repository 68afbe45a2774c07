"""Run the monitor's Lambda handlers in-process against the simulated account (moto), for the demo and tests.

What Lambda and the stack would provide, done locally:

* :class:`LambdaContext` / :func:`lambda_context`: the context object a handler receives.
* :func:`handler_environment`: the functions' environment variables (and Powertools settings) set
  for a block and restored afterwards, with the functions' cached settings cleared on both sides.
* :func:`provision_monitor`: the stack's resources on moto: the findings table (with its stream), the
  idempotency table (key ``id``, TTL ``expiration``), the Slack webhook secret pointing at a local
  sink, and the alert topic with an SQS queue subscribed (standing in for the email inbox).
* :class:`StreamReader`: the findings table's new stream records, shaped like the event Lambda's
  DynamoDB event source delivers. moto (5.2) records the stream but its Streams API does not answer
  current botocore, so the records come from moto's in-process backend.
* :func:`read_emails`: what SNS delivered to the queue, read back as subject and message.
* :func:`monitor_harness` / :class:`MonitorHarness`: all of the above together; ``invoke`` calls a
  handler with a fresh context and keeps the Powertools log lines and EMF metrics out of stdout
  (they are kept on the harness for inspection).

    with simulated_aws():
        clients = AwsClients(REGION)
        with monitor_harness(clients) as monitor:
            monitor.invoke(handlers.event_handler, event)
            monitor.invoke(handlers.stream_notifier, monitor.stream_event())
            assert monitor.sink.received and monitor.emails()

Nothing here imports the handlers: the caller passes them in, so the simulator still imports from an
installed package without the repository's ``functions/``.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.aws.store import create_table
from hyperpod_debugger.sim.slack_sink import SlackSink

FINDINGS_TABLE = "hyperpod-debugger-findings"
IDEMPOTENCY_TABLE = "hyperpod-debugger-idempotency"
SLACK_SECRET = "hyperpod-debugger/slack-webhook"
ALERT_TOPIC = "hyperpod-debugger-alerts"
MAILBOX_QUEUE = "hyperpod-debugger-alerts-mailbox"
#: The idempotency table's key and TTL attribute, as the stack creates it (Powertools' defaults).
IDEMPOTENCY_KEY = "id"
IDEMPOTENCY_TTL = "expiration"
#: The account moto answers for when no other is configured.
SIM_ACCOUNT = "123456789012"

#: Powertools settings for an in-process run: no X-Ray, the stack's service name and namespace.
POWERTOOLS_ENV: dict[str, str] = {
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_SERVICE_NAME": "hyperpod-monitor",
    "POWERTOOLS_METRICS_NAMESPACE": "HyperPodDebugger",
    "POWERTOOLS_LOG_LEVEL": "INFO",
}


# --------------------------------------------------------------------------- context


@dataclass
class LambdaContext:
    """The attributes of Lambda's context object that the handlers and Powertools read."""

    function_name: str = "hyperpod-monitor"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = f"arn:aws:lambda:us-west-2:{SIM_ACCOUNT}:function:hyperpod-monitor"
    aws_request_id: str = "00000000-0000-4000-8000-000000000000"
    log_group_name: str = "/aws/lambda/hyperpod-monitor"
    log_stream_name: str = "2026/01/01/[$LATEST]00000000000000000000000000000000"
    timeout_ms: int = 300_000

    def get_remaining_time_in_millis(self) -> int:
        return self.timeout_ms


def lambda_context(
    function_name: str = "hyperpod-monitor",
    *,
    region: str = "us-west-2",
    account: str = SIM_ACCOUNT,
    timeout_s: int = 300,
) -> LambdaContext:
    """A context for one invocation (a new request id each time)."""
    request = str(uuid.uuid4())
    return LambdaContext(
        function_name=function_name,
        invoked_function_arn=f"arn:aws:lambda:{region}:{account}:function:{function_name}",
        aws_request_id=request,
        log_group_name=f"/aws/lambda/{function_name}",
        log_stream_name=f"[$LATEST]{request.replace('-', '')}",
        timeout_ms=timeout_s * 1000,
    )


# --------------------------------------------------------------------------- environment


def _clear_function_caches() -> None:
    """Forget the functions' cached settings and clients (absent without a repository checkout)."""
    with contextlib.suppress(ImportError):
        from functions.shared.env import clear_env_cache

        clear_env_cache()
    with contextlib.suppress(ImportError):
        from functions.monitor.adapters import idempotency_store

        idempotency_store.cache_clear()


@contextlib.contextmanager
def handler_environment(values: Mapping[str, str | None], *, powertools: bool = True) -> Iterator[dict[str, str]]:
    """Set the handlers' environment for the block (``None`` unsets a variable), then restore it.

    With ``powertools`` the :data:`POWERTOOLS_ENV` defaults are set first (``values`` wins). The
    functions' cached settings are cleared on entry and on exit, so each block reads its own.
    Yields the variables that were set.
    """
    wanted: dict[str, str | None] = {**(POWERTOOLS_ENV if powertools else {}), **values}
    saved = {name: os.environ.get(name) for name in wanted}
    for name, value in wanted.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _clear_function_caches()
    try:
        yield {name: value for name, value in wanted.items() if value is not None}
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _clear_function_caches()


# --------------------------------------------------------------------------- resources


@dataclass(frozen=True)
class MonitorResources:
    """Names and ARNs of the monitor's resources on the simulated account."""

    region: str
    findings_table: str
    idempotency_table: str
    secret_name: str
    topic_arn: str
    queue_url: str

    def environment(self, **overrides: str | None) -> dict[str, str | None]:
        """The variables the event handler, the sweep and the notifier read, pointing at these resources."""
        env: dict[str, str | None] = {
            "AWS_REGION": self.region,
            "FINDINGS_TABLE": self.findings_table,
            "IDEMPOTENCY_TABLE": self.idempotency_table,
            "SLACK_SECRET_NAME": self.secret_name,
            "ALERT_TOPIC_ARN": self.topic_arn,
        }
        env.update(overrides)
        return env


def create_idempotency_table(clients: AwsClients, name: str) -> None:
    """The Powertools idempotency table as the stack creates it: on-demand, key ``id``, TTL ``expiration``."""
    ddb = clients.client("dynamodb")
    ddb.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": IDEMPOTENCY_KEY, "AttributeType": "S"}],
        KeySchema=[{"AttributeName": IDEMPOTENCY_KEY, "KeyType": "HASH"}],
    )
    ddb.update_time_to_live(
        TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": IDEMPOTENCY_TTL}
    )


def provision_monitor(
    clients: AwsClients,
    *,
    slack_url: str,
    findings_table: str = FINDINGS_TABLE,
    idempotency_table: str = IDEMPOTENCY_TABLE,
    secret_name: str = SLACK_SECRET,
    topic_name: str = ALERT_TOPIC,
    queue_name: str = MAILBOX_QUEUE,
) -> MonitorResources:
    """Create the monitor's tables, the Slack secret (the webhook URL ``slack_url``) and the alert
    topic with a queue subscribed (raw delivery off: each message body is the SNS envelope)."""
    create_table(clients, findings_table)
    create_idempotency_table(clients, idempotency_table)
    clients.client("secretsmanager").create_secret(Name=secret_name, SecretString=slack_url)
    sns, sqs = clients.client("sns"), clients.client("sqs")
    topic_arn = sns.create_topic(Name=topic_name)["TopicArn"]
    queue_url = sqs.create_queue(QueueName=queue_name)["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=queue_arn)
    return MonitorResources(
        region=clients.region,
        findings_table=findings_table,
        idempotency_table=idempotency_table,
        secret_name=secret_name,
        topic_arn=topic_arn,
        queue_url=queue_url,
    )


# --------------------------------------------------------------------------- stream


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return int(value.timestamp())
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bytes):
        return value.decode()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


class StreamReader:
    """New records of a table's stream, as the DynamoDB event source hands them to a Lambda function.

    Works while moto runs in this process (``mock_aws`` or the demo's in-process server).
    """

    def __init__(self, clients: AwsClients, table_name: str, *, from_latest: bool = False) -> None:
        described = clients.client("dynamodb").describe_table(TableName=table_name)["Table"]
        arn = described["TableArn"]
        self.table_name = table_name
        self.region = arn.split(":")[3]
        self.account = arn.split(":")[4]
        self.stream_arn: str | None = described.get("LatestStreamArn")
        self._last = -1
        if from_latest:
            records = self._shard_records()
            self._last = int(records[-1]["dynamodb"]["SequenceNumber"]) if records else -1

    def _shard_records(self) -> list[dict[str, Any]]:
        from moto.dynamodb.models import dynamodb_backends

        table = dynamodb_backends[self.account][self.region].tables[self.table_name]
        shard = table.stream_shard
        return [item.to_json() for item in shard.items] if shard is not None else []

    def read(self) -> dict[str, Any]:
        """``{"Records": [...]}`` with every record written since the last read (oldest first)."""
        fresh = [r for r in self._shard_records() if int(r["dynamodb"]["SequenceNumber"]) > self._last]
        if fresh:
            self._last = int(fresh[-1]["dynamodb"]["SequenceNumber"])
        records = []
        for raw in fresh:
            record = copy.deepcopy(raw)
            record["awsRegion"] = self.region
            record["eventSourceARN"] = self.stream_arn
            records.append(record)
        return json.loads(json.dumps({"Records": records}, default=_json_default))


# --------------------------------------------------------------------------- email


@dataclass(frozen=True)
class Email:
    """One SNS message as an email subscriber would get it."""

    subject: str
    message: str
    envelope: dict[str, Any]


def read_emails(clients: AwsClients, queue_url: str) -> list[Email]:
    """Drain the queue subscribed to the alert topic (raw delivery off) and unwrap each SNS envelope."""
    sqs = clients.client("sqs")
    out: list[Email] = []
    while True:
        got = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])
        if not got:
            return out
        for message in got:
            envelope = json.loads(message["Body"])
            out.append(Email(str(envelope.get("Subject") or ""), str(envelope.get("Message") or ""), envelope))
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])


# --------------------------------------------------------------------------- Powertools output


@dataclass
class CapturedOutput:
    """Powertools' structured log lines and EMF metric blobs written during invocations."""

    lines: list[str] = field(default_factory=list)

    def _json(self) -> list[dict[str, Any]]:
        out = []
        for line in self.lines:
            with contextlib.suppress(ValueError):
                item = json.loads(line)
                if isinstance(item, dict):
                    out.append(item)
        return out

    @property
    def logs(self) -> list[dict[str, Any]]:
        return [item for item in self._json() if "_aws" not in item]

    @property
    def metrics(self) -> list[dict[str, Any]]:
        return [item for item in self._json() if "_aws" in item]


@contextlib.contextmanager
def captured_powertools(into: CapturedOutput) -> Iterator[None]:
    """Send Powertools loggers' output and the EMF blobs printed to stdout into ``into`` for the block.

    The loggers' stream handlers are pointed at a buffer (they keep the stdout they were created
    with, so swapping ``sys.stdout`` alone would miss them); metrics are printed, so stdout is
    redirected too. Nothing else writes to stdout while a handler runs in the demo or the tests.
    """
    buffer = io.StringIO()
    swapped: list[tuple[logging.StreamHandler[Any], Any]] = []
    for candidate in list(logging.Logger.manager.loggerDict.values()):
        handler = getattr(candidate, "powertools_handler", None)
        if isinstance(handler, logging.StreamHandler):
            swapped.append((handler, handler.setStream(buffer)))
    try:
        with contextlib.redirect_stdout(buffer):
            yield
    finally:
        for handler, stream in swapped:
            handler.setStream(stream)
        into.lines.extend(line for line in buffer.getvalue().splitlines() if line.strip())


# --------------------------------------------------------------------------- together


@dataclass
class MonitorHarness:
    """The monitor's resources on moto, a Slack sink, the stream reader and the mailbox."""

    clients: AwsClients
    resources: MonitorResources
    sink: SlackSink
    stream: StreamReader
    output: CapturedOutput = field(default_factory=CapturedOutput)
    invocations: int = 0

    def invoke(self, handler: Callable[[Any, Any], Any], event: Any, *, function_name: str | None = None) -> Any:
        """Call ``handler(event, context)`` as Lambda would, with its Powertools output captured."""
        name = function_name or "hyperpod-" + getattr(handler, "__name__", "handler").replace("_", "-")
        context = lambda_context(name, region=self.resources.region, account=self.stream.account)
        self.invocations += 1
        with captured_powertools(self.output):
            return handler(event, context)

    def stream_event(self) -> dict[str, Any]:
        """The findings table's stream records written since the last call, as a Lambda event."""
        return self.stream.read()

    def emails(self) -> list[Email]:
        """The alert emails delivered since the last call (the queue is drained)."""
        return read_emails(self.clients, self.resources.queue_url)

    @property
    def logs(self) -> list[dict[str, Any]]:
        return self.output.logs

    @property
    def metrics(self) -> list[dict[str, Any]]:
        return self.output.metrics


@contextlib.contextmanager
def monitor_harness(
    clients: AwsClients,
    *,
    sink: SlackSink | None = None,
    env: Mapping[str, str | None] | None = None,
    **names: str,
) -> Iterator[MonitorHarness]:
    """Provision the monitor on the simulated account and set the handlers' environment for the block.

    ``sink``: the Slack webhook stand-in (one is started and stopped here when not given).
    ``env``: extra or overriding variables (``PROBE_ENABLED``, ``START_SESSION_RATE``, ...).
    ``names``: resource names for :func:`provision_monitor`.
    """
    with contextlib.ExitStack() as stack:
        if sink is None:
            sink = stack.enter_context(SlackSink())
        resources = provision_monitor(clients, slack_url=sink.url, **names)
        stack.enter_context(handler_environment(resources.environment(**dict(env or {}))))
        yield MonitorHarness(clients, resources, sink, StreamReader(clients, resources.findings_table))


__all__ = [
    "POWERTOOLS_ENV",
    "CapturedOutput",
    "Email",
    "LambdaContext",
    "MonitorHarness",
    "MonitorResources",
    "StreamReader",
    "captured_powertools",
    "create_idempotency_table",
    "handler_environment",
    "lambda_context",
    "monitor_harness",
    "provision_monitor",
    "read_emails",
]
