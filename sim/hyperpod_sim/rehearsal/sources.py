"""What Lambda and EventBridge do between the deployed resources, applied from the template.

* :class:`SqsMapping`: an SQS event source mapping (``BatchSize``, ``FilterCriteria``,
  ``FunctionResponseTypes``): receive a batch with every attribute, drop what the filters do not match (as
  Lambda deletes it), invoke synchronously, then delete what succeeded. A function error deletes nothing:
  the queue's visibility timeout and redrive policy take over. With ``ReportBatchItemFailures`` only the
  reported messages stay; a response naming a message that was not in the batch fails the whole batch.
  ``ScalingConfig.MaximumConcurrency`` (2 at least) holds by construction: one batch is in flight at a time.
* :class:`StreamMapping`: the DynamoDB stream event source (``BatchSize``, ``FilterCriteria``,
  ``BisectBatchOnFunctionError``, ``MaximumRetryAttempts``, ``DestinationConfig.OnFailure``,
  ``ReportBatchItemFailures``): records in order, a failed batch split in two and retried (a split does not
  count as a retry), a record out of retries sent to the on-failure queue as Lambda's batch-info record,
  and a reported failure retried from that record on.
* :class:`EventBus`: ``PutEvents`` on the default bus as EventBridge routes it: each deployed rule's pattern
  (moto's EventBridge pattern matcher) and its targets (a Lambda function asynchronously, a state machine,
  a queue), the whole event as the input unless the target says otherwise.

The filters use the same matcher as the rules: Lambda's filter syntax is EventBridge's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import boto3
from moto.events.models import EventPattern

from hyperpod_sim.lambda_harness import StreamReader, sqs_record
from hyperpod_sim.rehearsal.deploy import ACCOUNT, Deployment
from hyperpod_sim.rehearsal.runtime import Invocation, LambdaService


def _filters(props: dict[str, Any]) -> list[EventPattern]:
    return [EventPattern.load(f["Pattern"]) for f in props.get("FilterCriteria", {}).get("Filters", [])]


def _matches(filters: list[EventPattern], record: dict[str, Any]) -> bool:
    # moto hints matches_event with its EventBridge TypedDict; the matcher takes any JSON object
    return not filters or any(f.matches_event(record) for f in filters)  # type: ignore[arg-type]


def _reported(payload: Any) -> list[str] | None:
    """The ``itemIdentifier``s of a partial-batch response; None when the response is not one."""
    if not isinstance(payload, dict) or "batchItemFailures" not in payload:
        return []
    failures = payload["batchItemFailures"]
    if not isinstance(failures, list):
        return None
    ids = [f.get("itemIdentifier") if isinstance(f, dict) else None for f in failures]
    named = [i for i in ids if isinstance(i, str) and i]
    return named if len(named) == len(ids) else None


@dataclass
class SqsMapping:
    service: LambdaService
    props: dict[str, Any]
    queue_url: str
    function: str
    sqs: Any = None
    invocations: list[Invocation] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Lambda polls the queue with the function's execution role
        self.sqs = self.sqs or self.service.client_as(self.function, "sqs")
        self.arn = self.props["EventSourceArn"]
        self.batch_size = int(self.props.get("BatchSize", 10))
        self.partial = "ReportBatchItemFailures" in self.props.get("FunctionResponseTypes", [])
        self.filters = _filters(self.props)

    def poll(self) -> Invocation | None:
        """One receive and, when it got anything the filters let through, one invocation."""
        messages = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=min(self.batch_size, 10),
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
            WaitTimeSeconds=0,
        ).get("Messages", [])
        records = []
        for message in messages:
            record = sqs_record(message, self.arn, self.service.deployment.region)
            if _matches(self.filters, record):
                records.append(record)
            else:  # Lambda deletes what its filters drop
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        if not records:
            return None
        event = {"Records": records}
        invocation = self.service.invoke(self.function, event)
        self.invocations.append(invocation)
        if not invocation.ok:
            return invocation  # nothing deleted: visible again after the visibility timeout
        failed = _reported(invocation.payload) if self.partial else []
        ids = {r["messageId"] for r in records}
        if failed is None or any(i not in ids for i in failed):
            return invocation  # an unusable response fails the whole batch
        for record in records:
            if record["messageId"] not in failed:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=record["receiptHandle"])
        return invocation


@dataclass
class _Pending:
    records: list[dict[str, Any]]
    retries: int = 0


@dataclass
class StreamMapping:
    service: LambdaService
    props: dict[str, Any]
    table: str
    function: str
    invocations: list[Invocation] = field(default_factory=list)
    failed_batches: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        from hyperpod_debugger.aws.clients import AwsClients

        self.reader = StreamReader(AwsClients(self.service.deployment.region), self.table)
        self.batch_size = int(self.props.get("BatchSize", 100))
        self.partial = "ReportBatchItemFailures" in self.props.get("FunctionResponseTypes", [])
        self.bisect = bool(self.props.get("BisectBatchOnFunctionError", False))
        self.max_retries = int(self.props.get("MaximumRetryAttempts", -1))
        self.filters = _filters(self.props)
        self._queue: list[_Pending] = []

    def _batches(self) -> Iterator[_Pending]:
        fresh = [r for r in self.reader.read()["Records"] if _matches(self.filters, r)]
        for start in range(0, len(fresh), self.batch_size):
            self._queue.append(_Pending(fresh[start : start + self.batch_size]))
        while self._queue:
            yield self._queue.pop(0)

    def drain(self) -> int:
        """Hand every record written so far to the function, as the event source would; invocations made."""
        made = 0
        for pending in self._batches():
            made += 1
            invocation = self.service.invoke(self.function, {"Records": pending.records})
            self.invocations.append(invocation)
            if invocation.ok:
                failed = _reported(invocation.payload) if self.partial else []
                if not failed:
                    continue
                numbers = {r["dynamodb"]["SequenceNumber"]: i for i, r in enumerate(pending.records)}
                if failed is None or any(f not in numbers for f in failed):
                    retry = pending.records  # unusable response: the whole batch again
                else:
                    retry = pending.records[min(numbers[f] for f in failed) :]
                self._again(_Pending(retry, pending.retries + 1))
            elif self.bisect and len(pending.records) > 1:
                half = len(pending.records) // 2
                self._queue[:0] = [
                    _Pending(pending.records[:half], pending.retries),
                    _Pending(pending.records[half:], pending.retries),
                ]
            else:
                self._again(_Pending(pending.records, pending.retries + 1))
        return made

    def _again(self, pending: _Pending) -> None:
        if self.max_retries >= 0 and pending.retries > self.max_retries:
            self._give_up(pending)
        else:
            self._queue.insert(0, pending)

    def _give_up(self, pending: _Pending) -> None:
        first, last = pending.records[0], pending.records[-1]
        record = {
            "requestContext": {
                "requestId": self.invocations[-1].request_id,
                "functionArn": f"arn:aws:lambda:{self.service.deployment.region}:{ACCOUNT}:function:{self.function}",
                "condition": "RetryAttemptsExhausted",
                "approximateInvokeCount": pending.retries,
            },
            "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
            "version": "1.0",
            "timestamp": datetime.now(UTC).isoformat(),
            "DDBStreamBatchInfo": {
                "shardId": "shardId-00000000000000000000-rehearsal",
                "startSequenceNumber": first["dynamodb"]["SequenceNumber"],
                "endSequenceNumber": last["dynamodb"]["SequenceNumber"],
                "approximateArrivalOfFirstRecord": datetime.now(UTC).isoformat(),
                "approximateArrivalOfLastRecord": datetime.now(UTC).isoformat(),
                "batchSize": len(pending.records),
                "streamArn": self.props["EventSourceArn"],
            },
        }
        self.failed_batches.append(record)
        destination = self.props.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
        if destination:
            self.service.send_to_queue(destination, record, function=self.function)


@dataclass
class Delivery:
    rule: str
    target: str
    invocation: Invocation | None = None
    execution_arn: str | None = None


class EventBus:
    """The default bus's rules, as deployed, routing published events."""

    def __init__(self, deployment: Deployment, service: LambdaService) -> None:
        self.deployment = deployment
        self.service = service

    def _rules(self) -> list[Any]:
        from moto.events.models import events_backends

        bus = events_backends[ACCOUNT][self.deployment.region].event_buses["default"]
        return [r for r in bus.rules.values() if r.state == "ENABLED" and r.event_pattern.get_pattern()]

    def put(self, event: dict[str, Any]) -> list[Delivery]:
        deliveries = []
        for rule in self._rules():
            if not rule.event_pattern.matches_event(event):
                continue
            for target in rule.targets:
                deliveries.append(self._deliver(rule.name, target, event))
        return deliveries

    def _deliver(self, rule: str, target: dict[str, Any], event: dict[str, Any]) -> Delivery:
        if "InputTransformer" in target or "InputPath" in target:
            raise NotImplementedError(f"rule {rule}: input transformers are not rehearsed yet")
        payload = json.loads(target["Input"]) if "Input" in target else event
        arn = target["Arn"]
        delivery = Delivery(rule, arn)
        if ":lambda:" in arn:
            delivery.invocation = self.service.invoke(arn, payload, invocation_type="Event")
        elif ":states:" in arn:
            sfn = boto3.client("stepfunctions", region_name=self.deployment.region)
            delivery.execution_arn = sfn.start_execution(stateMachineArn=arn, input=json.dumps(payload))["executionArn"]
        elif ":sqs:" in arn:
            self.service.send_to_queue(arn, payload)
        else:
            raise NotImplementedError(f"rule {rule}: target {arn} is not rehearsed")
        return delivery
