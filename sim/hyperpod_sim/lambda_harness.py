"""Run the monitor's Lambda handlers in-process against the simulated account (moto), for the demo and tests.

What Lambda and the stack would provide, done locally:

* :class:`LambdaContext` / :func:`lambda_context`: the context object a handler receives.
* :func:`handler_environment`: the functions' environment variables (and Powertools settings) set
  for a block and restored afterwards, with the functions' cached settings cleared on both sides.
* :func:`provision_monitor`: the stack's resources on moto: the findings table (with its stream), the
  idempotency table (key ``id``, TTL ``expiration``), the Slack webhook secret pointing at a local
  sink, the alert topic with an SQS queue subscribed (standing in for the email inbox), the queue of
  unprocessed events, and the pinned Session documents (created through whatever answers SSM: the
  fake Session Manager in the demo, moto elsewhere).
* :class:`StreamReader`: the findings table's new stream records, shaped like the event Lambda's
  DynamoDB event source delivers. moto (5.2) records the stream but its Streams API does not answer
  current botocore, so the records come from moto's in-process backend.
* :func:`read_emails`: what SNS delivered to the queue, read back as subject and message.
* :class:`SqsEventSource`: Lambda's SQS event source for the outbox (FIFO): receive a batch, invoke,
  delete what succeeded, leave what failed to the queue's visibility and redrive rules.
* :class:`SqsClock`: moves moto's SQS clock forward (visibility, retention, receive counts follow),
  so hours of retries run in a test without waiting for them.
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
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, ClassVar

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.store.findings import create_table
from hyperpod_sim.slack_sink import SlackSink

FINDINGS_TABLE = "hyperpod-debugger-findings"
IDEMPOTENCY_TABLE = "hyperpod-debugger-idempotency"
SLACK_SECRET = "hyperpod-debugger/slack-webhook"
ALERT_TOPIC = "hyperpod-debugger-alerts"
MAILBOX_QUEUE = "hyperpod-debugger-alerts-mailbox"
UNPROCESSED_QUEUE = "hyperpod-debugger-unprocessed-events"
OUTBOX_QUEUE = "hyperpod-debugger-outbox.fifo"
WINDOW_QUEUE = "hyperpod-debugger-event-windows"
ALERT_GROUP_QUEUE = "hyperpod-debugger-alert-groups"
#: The stream's batch size as the stack deploys the notifier's event source (infra/constants.py).
STREAM_BATCH_SIZE = 10
OUTBOX_DLQ = "hyperpod-debugger-outbox-dlq.fifo"
#: The stack's outbox settings (infra/constructs/notifications.py): visibility 6 minutes (6 × the
#: courier's timeout), 200 receives before the dead-letter queue, four days of retention.
OUTBOX_VISIBILITY_S = 360
OUTBOX_MAX_RECEIVES = 200
OUTBOX_RETENTION_S = 4 * 24 * 3600
#: The pinned Session documents, by kind (the stack lets CloudFormation name them).
SESSION_DOCUMENT_NAMES = {
    "probe": "HyperPodDebugger-Probe",
    "slurm": "HyperPodDebugger-SlurmQuery",
    "jobs": "HyperPodDebugger-SlurmJobs",
}
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

    #: when the invocation started (time.monotonic()); set by :func:`lambda_context`
    started: float | None = None

    def get_remaining_time_in_millis(self) -> int:
        """Counts down from the timeout, as Lambda's does."""
        if self.started is None:
            return self.timeout_ms
        return max(0, self.timeout_ms - int((time.monotonic() - self.started) * 1000))


def lambda_context(
    function_name: str = "hyperpod-monitor",
    *,
    region: str = "us-west-2",
    account: str = SIM_ACCOUNT,
    timeout_s: float = 300,
) -> LambdaContext:
    """A context for one invocation (a new request id each time)."""
    request = str(uuid.uuid4())
    return LambdaContext(
        function_name=function_name,
        invoked_function_arn=f"arn:aws:lambda:{region}:{account}:function:{function_name}",
        aws_request_id=request,
        log_group_name=f"/aws/lambda/{function_name}",
        log_stream_name=f"[$LATEST]{request.replace('-', '')}",
        timeout_ms=int(timeout_s * 1000),
        started=time.monotonic(),
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
    unprocessed_queue_url: str = ""
    session_documents: dict[str, str] = field(default_factory=dict)
    outbox_url: str = ""
    outbox_dlq_url: str = ""
    window_queue_url: str = ""
    alert_group_queue_url: str = ""

    def environment(self, **overrides: str | None) -> dict[str, str | None]:
        """The variables the event handler, the sweep and the notifier read, pointing at these resources."""
        env: dict[str, str | None] = {
            "AWS_REGION": self.region,
            "FINDINGS_TABLE": self.findings_table,
            "IDEMPOTENCY_TABLE": self.idempotency_table,
            "SLACK_SECRET_NAME": self.secret_name,
            "ALERT_TOPIC_ARN": self.topic_arn,
            "UNPROCESSED_QUEUE_URL": self.unprocessed_queue_url or None,
            "OUTBOX_QUEUE_URL": self.outbox_url or None,
            "OUTBOX_DLQ_URL": self.outbox_dlq_url or None,
            "ALERT_GROUP_QUEUE_URL": self.alert_group_queue_url or None,
            "SESSION_DOCUMENTS": json.dumps(self.session_documents) if self.session_documents else None,
            # the stack's default (context findingsEventBus): finding events go on the account's default bus
            "EVENT_BUS_NAME": "default",
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
    ddb.update_time_to_live(TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": IDEMPOTENCY_TTL})


def create_session_documents(clients: AwsClients, names: Mapping[str, str] = SESSION_DOCUMENT_NAMES) -> dict[str, str]:
    """The pinned Session documents as the stack creates them (content from the core, the tag the
    roles' Deny looks for). Returns kind -> name."""
    from hyperpod_debugger.aws import ssm_documents
    from hyperpod_debugger.probe.pinned import command_of

    ssm = clients.client("ssm")
    for kind, name in names.items():
        ssm.create_document(
            Name=name,
            Content=json.dumps(ssm_documents.document_content(kind, command_of(kind))),
            DocumentType="Session",
            DocumentFormat="JSON",
            Tags=[{"Key": ssm_documents.TAG_KEY, "Value": ssm_documents.TAG_VALUE}],
        )
    return dict(names)


def provision_monitor(
    clients: AwsClients,
    *,
    slack_url: str,
    findings_table: str = FINDINGS_TABLE,
    idempotency_table: str = IDEMPOTENCY_TABLE,
    secret_name: str = SLACK_SECRET,
    topic_name: str = ALERT_TOPIC,
    queue_name: str = MAILBOX_QUEUE,
    unprocessed_queue: str = UNPROCESSED_QUEUE,
    session_documents: bool = True,
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
    unprocessed_url = sqs.create_queue(QueueName=unprocessed_queue)["QueueUrl"]
    outbox_url, outbox_dlq_url = create_outbox(clients)
    window_queue_url = sqs.create_queue(QueueName=WINDOW_QUEUE, Attributes={"VisibilityTimeout": "1800"})["QueueUrl"]
    alert_group_url = sqs.create_queue(QueueName=ALERT_GROUP_QUEUE, Attributes={"VisibilityTimeout": "360"})["QueueUrl"]
    return MonitorResources(
        region=clients.region,
        findings_table=findings_table,
        idempotency_table=idempotency_table,
        secret_name=secret_name,
        topic_arn=topic_arn,
        queue_url=queue_url,
        unprocessed_queue_url=unprocessed_url,
        session_documents=create_session_documents(clients) if session_documents else {},
        outbox_url=outbox_url,
        outbox_dlq_url=outbox_dlq_url,
        window_queue_url=window_queue_url,
        alert_group_queue_url=alert_group_url,
    )


def create_outbox(clients: AwsClients, name: str = OUTBOX_QUEUE, dlq_name: str = OUTBOX_DLQ) -> tuple[str, str]:
    """The outbox FIFO queue and its FIFO dead-letter queue, as the stack creates them."""
    sqs = clients.client("sqs")
    dlq_url = sqs.create_queue(
        QueueName=dlq_name, Attributes={"FifoQueue": "true", "MessageRetentionPeriod": str(14 * 24 * 3600)}
    )["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = sqs.create_queue(
        QueueName=name,
        Attributes={
            "FifoQueue": "true",
            "VisibilityTimeout": str(OUTBOX_VISIBILITY_S),
            "MessageRetentionPeriod": str(OUTBOX_RETENTION_S),
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": OUTBOX_MAX_RECEIVES}),
        },
    )["QueueUrl"]
    return url, dlq_url


# --------------------------------------------------------------------------- SQS event source and clock


class SqsClock:
    """Moto's SQS clock, moved forward on demand (only SQS: everything else keeps the real time).

    Works while moto runs in this process. ``advance(seconds)`` makes in-flight messages visible again
    and ages messages as hours passing would.
    """

    def __init__(self, *, frozen: bool = False) -> None:
        import moto.sqs.models as sqs_models

        self._models = sqs_models
        self._real = (sqs_models.unix_time, sqs_models.unix_time_millis)
        self.offset = 0.0
        #: with ``frozen``, SQS's time moves only by :meth:`advance` (a fully simulated clock)
        self._base: float | None = sqs_models.unix_time() if frozen else None

    def now(self) -> float:
        """SQS's time now (epoch seconds)."""
        return self._models.unix_time()

    def __enter__(self) -> SqsClock:
        real_time, real_millis = self._real

        def shifted(dt: Any = None) -> float:
            if dt is not None:
                return real_time(dt)
            return (self._base if self._base is not None else real_time()) + self.offset

        def shifted_millis(dt: Any = None) -> float:
            if dt is not None:
                return real_millis(dt)
            return shifted() * 1000.0

        self._models.unix_time, self._models.unix_time_millis = shifted, shifted_millis
        return self

    def __exit__(self, *exc: object) -> None:
        self._models.unix_time, self._models.unix_time_millis = self._real

    def advance(self, seconds: float) -> None:
        self.offset += seconds


def sqs_record(message: dict[str, Any], queue_arn: str, region: str) -> dict[str, Any]:
    """A received SQS message as Lambda's SQS event source puts it in the event's ``Records``."""
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": dict(message.get("Attributes") or {}),
        "messageAttributes": {
            name: {
                "stringValue": value.get("StringValue"),
                "stringListValues": [],
                "binaryListValues": [],
                "dataType": value.get("DataType"),
            }
            for name, value in (message.get("MessageAttributes") or {}).items()
        },
        "md5OfBody": message.get("MD5OfBody"),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }


class SqsEventSource:
    """Lambda's event source mapping for an SQS queue, run by hand: :meth:`poll` receives a batch as
    Lambda does (all attributes, the queue's visibility timeout) and shapes the event; :meth:`settle`
    deletes the records the function did not report in ``batchItemFailures``."""

    def __init__(self, clients: AwsClients, queue_url: str, *, batch_size: int = 10) -> None:
        self._sqs = clients.client("sqs")
        self.queue_url = queue_url
        self.batch_size = batch_size
        attributes = self._sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]
        self.arn = attributes["QueueArn"]
        self.region = self.arn.split(":")[3]

    def poll(self) -> dict[str, Any] | None:
        got = self._sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=self.batch_size,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
            WaitTimeSeconds=0,
        ).get("Messages", [])
        if not got:
            return None
        return {"Records": [sqs_record(m, self.arn, self.region) for m in got]}

    def settle(self, event: dict[str, Any], response: Any) -> tuple[int, int]:
        """Delete what succeeded. Returns (deleted, failed)."""
        failures = {f.get("itemIdentifier") for f in (response or {}).get("batchItemFailures", [])}
        deleted = 0
        for record in event["Records"]:
            if record["messageId"] in failures:
                continue
            self._sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=record["receiptHandle"])
            deleted += 1
        return deleted, len(failures)

    def depth(self) -> int:
        """Messages in the queue: visible, in flight or delayed."""
        names = [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ]
        attributes = self._sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=names)["Attributes"]
        return sum(int(attributes.get(name, 0)) for name in names)


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

    moto keeps every record of the shard (each with the item's new and old images) for as long as the table
    lives, and copies the whole table, shard included, on every ``TransactWriteItems``. With ``trim`` a read
    also drops the records that every live reader of the shard has read (:meth:`trim_read`): a long simulation
    then holds only what is still to be handed over. Off by default: a reader created later starts from what
    is left, so trimming is for a simulation whose readers all exist from the start.
    """

    #: every live reader (trimming keeps what any reader of the same shard has not read yet)
    _readers: ClassVar[weakref.WeakSet[StreamReader]] = weakref.WeakSet()

    def __init__(self, clients: AwsClients, table_name: str, *, from_latest: bool = False, trim: bool = False) -> None:
        described = clients.client("dynamodb").describe_table(TableName=table_name)["Table"]
        arn = described["TableArn"]
        self.table_name = table_name
        self.region = arn.split(":")[3]
        self.account = arn.split(":")[4]
        self.stream_arn: str | None = described.get("LatestStreamArn")
        self.trim = trim
        self._last = -1
        if from_latest:
            records = self._shard_records()
            self._last = int(records[-1]["dynamodb"]["SequenceNumber"]) if records else -1
        StreamReader._readers.add(self)

    def _shard(self) -> Any:
        """moto's shard of the table's stream (None: no stream)."""
        from moto.dynamodb.models import dynamodb_backends

        table = dynamodb_backends[self.account][self.region].tables[self.table_name]
        return table.stream_shard

    def _shard_records(self) -> list[dict[str, Any]]:
        """The shard's records not read yet (the shard only grows, so the items before the last one read are
        skipped without being converted: a long simulation reads thousands of times)."""
        shard = self._shard()
        if shard is None:
            return []
        items = shard.items
        start = len(items)
        while start > 0 and int(items[start - 1].to_json()["dynamodb"]["SequenceNumber"]) > self._last:
            start -= 1
        return [item.to_json() for item in items[start:]]

    def trim_read(self) -> int:
        """Drop the shard's records that every live reader of it has read; how many were dropped.

        moto numbers a new record by its place in the shard (``starting_sequence_number`` + index), so the
        shard's starting number moves up by as many as are dropped: later records keep the numbers they would
        have had, and a record's sequence number never repeats."""
        shard = self._shard()
        if shard is None or not shard.items:
            return 0
        same = [
            r
            for r in list(StreamReader._readers)
            if (r.account, r.region, r.table_name) == (self.account, self.region, self.table_name)
        ]
        read_by_all = min(r._last for r in same)
        drop = max(0, min(read_by_all - int(shard.starting_sequence_number) + 1, len(shard.items)))
        if drop:
            del shard.items[:drop]
            shard.starting_sequence_number += drop
        return drop

    def batches(self, size: int = STREAM_BATCH_SIZE, *, shuffle: Any = None) -> list[dict[str, Any]]:
        """The records written since the last read as the event source hands them over: ``size`` per
        invocation (the stack's batch size), optionally in an order shuffled by ``shuffle`` (a
        ``random.Random``), to show that what people receive does not depend on either."""
        records = self.read()["Records"]
        if shuffle is not None:
            shuffle.shuffle(records)
        return [{"Records": records[i : i + size]} for i in range(0, len(records), size)]

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
        event = json.loads(json.dumps({"Records": records}, default=_json_default))
        if self.trim:
            self.trim_read()
        return event


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
    """Powertools' structured log lines and EMF metric blobs written during invocations.

    ``keep``: only the latest ``keep`` lines are kept (None: every line). A simulation of thousands of
    invocations that reads none of them sets it, so they do not pile up."""

    lines: list[str] = field(default_factory=list)
    keep: int | None = None

    def add(self, text: str) -> None:
        """The non-blank lines of ``text``, then only the latest :attr:`keep` of all."""
        self.lines.extend(line for line in text.splitlines() if line.strip())
        if self.keep is not None and len(self.lines) > self.keep:
            del self.lines[: len(self.lines) - self.keep]

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
        into.add(buffer.getvalue())


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
    _outbox: SqsEventSource | None = None
    _windows: SqsEventSource | None = None
    _alert_groups: SqsEventSource | None = None

    def invoke(
        self,
        handler: Callable[[Any, Any], Any],
        event: Any,
        *,
        function_name: str | None = None,
        timeout_s: float = 300,
    ) -> Any:
        """Call ``handler(event, context)`` as Lambda would, with its Powertools output captured."""
        name = function_name or "hyperpod-" + getattr(handler, "__name__", "handler").replace("_", "-")
        context = lambda_context(name, region=self.resources.region, account=self.stream.account, timeout_s=timeout_s)
        self.invocations += 1
        with captured_powertools(self.output):
            return handler(event, context)

    @property
    def outbox(self) -> SqsEventSource:
        if self._outbox is None:
            self._outbox = SqsEventSource(self.clients, self.resources.outbox_url)
        return self._outbox

    def deliver_outbox(
        self, courier: Callable[[Any, Any], Any], *, rounds: int = 50, timeout_s: float = 60
    ) -> list[Any]:
        """Run the courier on the outbox as its event source would until nothing visible is left
        (or ``rounds`` batches); returns the courier's responses."""
        responses = []
        for _ in range(rounds):
            event = self.outbox.poll()
            if event is None:
                break
            response = self.invoke(courier, event, timeout_s=timeout_s)
            self.outbox.settle(event, response)
            responses.append(response)
        return responses

    @property
    def windows(self) -> SqsEventSource:
        """The event-window queue, one message per batch (the stack's batch size)."""
        if self._windows is None:
            self._windows = SqsEventSource(self.clients, self.resources.window_queue_url, batch_size=1)
        return self._windows

    def run_windows(self, handler: Callable[[Any, Any], Any], *, rounds: int = 20) -> list[Any]:
        """Run the window function on every window message visible now (move an :class:`SqsClock` past the
        windows' delay first), as its event source would; returns the responses."""
        responses = []
        for _ in range(rounds):
            event = self.windows.poll()
            if event is None:
                break
            response = self.invoke(handler, event, function_name="hyperpod-event-window")
            self.windows.settle(event, response)
            responses.append(response)
        return responses

    @property
    def alert_groups(self) -> SqsEventSource:
        """The alert-group queue, one message per invocation (the stack's batch size)."""
        if self._alert_groups is None:
            self._alert_groups = SqsEventSource(self.clients, self.resources.alert_group_queue_url, batch_size=1)
        return self._alert_groups

    def run_alert_groups(self, handler: Callable[[Any, Any], Any], *, rounds: int = 50) -> list[Any]:
        """Run the alert-group function on every flush message visible now (move an :class:`SqsClock` past the
        groups' delay first), as its event source would; returns the responses."""
        responses = []
        for _ in range(rounds):
            event = self.alert_groups.poll()
            if event is None:
                break
            response = self.invoke(handler, event, function_name="hyperpod-alert-groups")
            self.alert_groups.settle(event, response)
            responses.append(response)
        return responses

    def notify_stream(
        self, notifier: Callable[[Any, Any], Any], *, size: int = STREAM_BATCH_SIZE, shuffle: Any = None
    ) -> list[Any]:
        """Hand the findings table's new stream records to the notifier as the stack's event source does
        (``size`` per invocation, in stream order unless ``shuffle``); returns the responses."""
        return [
            self.invoke(notifier, event, function_name="hyperpod-stream-notifier")
            for event in self.stream.batches(size, shuffle=shuffle)
        ]

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
    coalesce: bool = False,
    **names: Any,
) -> Iterator[MonitorHarness]:
    """Provision the monitor on the simulated account and set the handlers' environment for the block.

    ``sink``: the Slack webhook stand-in (one is started and stopped here when not given).
    ``env``: extra or overriding variables (``PROBE_ENABLED``, ``START_SESSION_RATE``, ...).
    ``coalesce``: events go through their cluster's window, as the stack deploys them (the window queue's
    URL is set); off, each event is triaged at once by the function that received it.
    ``names``: resource names for :func:`provision_monitor`.
    """
    with contextlib.ExitStack() as stack:
        if sink is None:
            sink = stack.enter_context(SlackSink())
        resources = provision_monitor(clients, slack_url=sink.url, **names)
        windowed = {"EVENT_WINDOW_QUEUE_URL": resources.window_queue_url} if coalesce else {}
        stack.enter_context(handler_environment(resources.environment(**windowed, **dict(env or {}))))
        yield MonitorHarness(clients, resources, sink, StreamReader(clients, resources.findings_table))


__all__ = [
    "POWERTOOLS_ENV",
    "CapturedOutput",
    "Email",
    "LambdaContext",
    "MonitorHarness",
    "MonitorResources",
    "SqsClock",
    "SqsEventSource",
    "StreamReader",
    "captured_powertools",
    "create_idempotency_table",
    "create_outbox",
    "create_session_documents",
    "handler_environment",
    "lambda_context",
    "monitor_harness",
    "provision_monitor",
    "read_emails",
]


# --------------------------------------------------------------------------- Step Functions' Map, locally


def map_items(
    state_input: Mapping[str, Any], items_path: str, item_selector: Mapping[str, str]
) -> list[dict[str, Any]]:
    """What a Step Functions ``Map`` state hands each iteration: ``item_selector`` applied to every item at
    ``items_path`` of the Map's input. Only the JSONPath forms the stack uses are understood: ``$.<key>`` (a
    key of the Map's input), ``$$.Map.Item.Value`` (or a key of it, ``$$.Map.Item.Value.<key>``) and
    ``$$.Map.Item.Index``; anything else raises, so a
    selector the stack changes cannot silently mean something else here."""
    if not items_path.startswith("$."):
        raise ValueError(f"unsupported ItemsPath {items_path!r}")
    items = state_input.get(items_path[2:]) or []

    def resolve(path: str, index: int, item: Any) -> Any:
        if path == "$$.Map.Item.Value":
            return item
        if path.startswith("$$.Map.Item.Value.") and isinstance(item, Mapping):
            key = path.removeprefix("$$.Map.Item.Value.")
            if "." in key or key not in item:
                raise KeyError(f"the Map's item has no {key!r} (States.Runtime on AWS)")
            return item[key]
        if path == "$$.Map.Item.Index":
            return index
        if path.startswith("$.") and "." not in path[2:]:
            if path[2:] not in state_input:
                raise KeyError(f"the Map's input has no {path[2:]!r} (States.Runtime on AWS)")
            return state_input[path[2:]]
        raise ValueError(f"unsupported JSONPath {path!r} in ItemSelector")

    out = []
    for index, item in enumerate(items):
        selected: dict[str, Any] = {}
        for key, value in item_selector.items():
            if key.endswith(".$"):
                selected[key[:-2]] = resolve(value, index, item)
            else:
                selected[key] = value
        out.append(selected)
    return out
