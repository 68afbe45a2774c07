"""Parser models of the EventBridge events the monitor receives (Powertools ``EventBridgeModel``).

Shapes follow what AWS publishes: the SageMaker service model (``ClusterEventDetail``: EventId,
ClusterArn, ClusterName, ResourceType and EventTime required, ``EventLevel`` optional) and the
examples in "Events that Amazon SageMaker AI sends to Amazon EventBridge" and the HyperPod cluster
events reference (copies in ``tests/events/published/``). Only what the monitor cannot work
without is required; everything else is optional and unknown fields are kept, so a field AWS adds
or leaves out never loses an event. Identifiers are validated where they are used (the cluster
ARN when the signal is built, an instance id before it goes into a command), not here: an event
with an odd instance id still triages its cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Literal

from aws_lambda_powertools.shared.dynamodb_deserializer import TypeDeserializer
from aws_lambda_powertools.utilities.parser.models import (
    DynamoDBStreamChangedRecordModel,
    DynamoDBStreamRecordModel,
    EventBridgeModel,
)
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

from hyperpod_debugger.domain import eventbridge

CLUSTER_EVENT = eventbridge.CLUSTER_EVENT
STATE_CHANGE = eventbridge.STATE_CHANGE
NODE_HEALTH = eventbridge.NODE_HEALTH
SCHEDULED = "Scheduled Event"

Text = Annotated[str, Field(min_length=1, max_length=2048)]


class _Detail(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


# --- SageMaker HyperPod Cluster Event ------------------------------------------------------


class ClusterEventDetails(_Detail):
    EventId: str | None = None
    ClusterArn: Text
    ClusterName: Text
    InstanceGroupName: str | None = None
    InstanceId: str | None = None
    ResourceType: str | None = None
    EventTime: int | float | str | None = None  # epoch milliseconds in the published examples
    #: Info | Warn | Error; absent on older events (read through eventbridge.effective_level)
    EventLevel: str | None = None
    Description: str | None = None
    EventDetails: dict[str, Any] | None = None


class ClusterEventDetail(_Detail):
    EventDetails: ClusterEventDetails


class ClusterEvent(EventBridgeModel):
    source: Literal["aws.sagemaker"]
    detail_type: Literal["SageMaker HyperPod Cluster Event"] = Field(alias="detail-type")
    detail: ClusterEventDetail


# --- SageMaker HyperPod Cluster State Change -----------------------------------------------


class StateChangeDetail(_Detail):
    ClusterArn: Text
    ClusterName: Text
    ClusterStatus: str | None = None
    FailureMessage: str | None = None
    CreationTime: int | float | str | None = None


class ClusterStateChange(EventBridgeModel):
    source: Literal["aws.sagemaker"]
    detail_type: Literal["SageMaker HyperPod Cluster State Change"] = Field(alias="detail-type")
    detail: StateChangeDetail


# --- SageMaker HyperPod Cluster Node Health Event ------------------------------------------


class NodeHealthSummary(_Detail):
    HealthStatus: str | None = None
    HealthStatusReason: str | None = None
    #: what HyperPod itself does about it: None, Reboot, Replace (no published enum)
    RepairAction: str | None = None
    Recommendation: str | None = None


class NodeHealthDetail(_Detail):
    ClusterArn: Text
    ClusterName: Text
    InstanceId: Text
    HealthSummary: NodeHealthSummary = Field(default_factory=NodeHealthSummary)
    EventTime: int | float | str | None = None
    Tags: dict[str, Any] | None = None


class NodeHealthEvent(EventBridgeModel):
    source: Literal["aws.sagemaker"]
    detail_type: Literal["SageMaker HyperPod Cluster Node Health Event"] = Field(alias="detail-type")
    detail: NodeHealthDetail


# --- the schedule (EventBridge Scheduler / rule) -------------------------------------------


class ScheduleEvent(EventBridgeModel):
    source: Literal["aws.events", "aws.scheduler"]
    detail_type: Literal["Scheduled Event"] = Field(alias="detail-type")
    detail: dict[str, Any] = Field(default_factory=dict)


# --- the sweep's inputs (our own state machine's Map items) -------------------------------


class SweepItem(BaseModel):
    """One item of the sweep's outer Map: the cluster (ARN and/or name) and the sweep's id."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    cluster_arn: str = ""
    cluster_name: str = ""
    sweep_id: str = ""
    #: how many clusters this sweep covers (the ListClusters page's length): the StartSession budget is
    #: shared among them
    clusters: int = Field(default=1, ge=1)
    #: when the sweep's execution started: the probe rounds run until shortly before the next one
    sweep_started: datetime | None = None

    @model_validator(mode="after")
    def _names_a_cluster(self) -> SweepItem:
        if not (self.cluster_arn or self.cluster_name):
            raise ValueError("the sweep input names no cluster")
        return self

    @property
    def cluster(self) -> str:
        return self.cluster_arn or self.cluster_name


ClusterArn = Annotated[str, Field(pattern=r"^arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]+:\d{12}:cluster/[A-Za-z0-9\-]+$")]


class ProbeBatch(BaseModel):
    """One item of the sweep's inner Map: a reference to one batch of the plan the cluster step stored
    (``sweep_id`` and ``batch``), or, for a direct invocation, the node descriptors themselves."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    cluster_arn: ClusterArn
    cluster_name: str = ""
    sweep_id: str = ""
    batch: int | None = Field(default=None, ge=0)
    #: when the batch's round opens (the state machine waits for it before invoking the probe step)
    start_at: str | None = None
    nodes: list[dict[str, Any]] | None = Field(default=None, min_length=1, max_length=500)

    @model_validator(mode="after")
    def _names_its_nodes(self) -> ProbeBatch:
        if (self.batch is None) == (self.nodes is None):
            raise ValueError("a probe batch names either a stored plan batch (sweep_id and batch) or its nodes")
        if self.batch is not None and not self.sweep_id:
            raise ValueError("a stored plan batch needs the sweep_id that wrote it")
        return self


#: How the sweep's inner Map turns each batch number of the cluster step's output into a probe input: the
#: state carries only numbers, never node lists (the state machine's ``ItemSelector``; the simulator applies
#: the same one).
PROBE_ITEM_SELECTOR: dict[str, str] = {
    "batch.$": "$$.Map.Item.Value.batch",
    "start_at.$": "$$.Map.Item.Value.at",
    "cluster_arn.$": "$.cluster_arn",
    "cluster_name.$": "$.cluster",
    "sweep_id.$": "$.sweep_id",
}


# --- the findings table's stream (what the DynamoDB event source hands the notifier) ---------


_DESERIALIZER = TypeDeserializer()


class StreamImages(DynamoDBStreamChangedRecordModel):
    """Powertools' model of a record's ``dynamodb`` part, with the images read into plain values.

    The parent's validator assumes a map; here an image that is not one, or an attribute value
    DynamoDB could not have written, is a validation error with its reason (the record is set aside).
    """

    @field_validator("Keys", "NewImage", "OldImage", mode="before")
    @classmethod
    def deserialize_field(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, dict):
            raise ValueError(f"is a {type(value).__name__}, not a map")
        try:
            return {key: _DESERIALIZER.deserialize(typed) for key, typed in value.items()}
        except (TypeError, ValueError, AttributeError, KeyError, ArithmeticError) as exc:
            raise ValueError(f"an attribute is not a DynamoDB value ({type(exc).__name__})") from None


class StreamRecord(DynamoDBStreamRecordModel):
    """One DynamoDB stream record, as Lambda's event source delivers it."""

    dynamodb: StreamImages


def parse_stream_record(raw: Any) -> StreamRecord:
    """Raises ``pydantic.ValidationError`` for a record that is not a DynamoDB stream record."""
    return StreamRecord.model_validate(raw)


HyperPodEvent = Annotated[ClusterEvent | ClusterStateChange | NodeHealthEvent, Field(discriminator="detail_type")]
MonitorEvent = Annotated[
    ClusterEvent | ClusterStateChange | NodeHealthEvent | ScheduleEvent, Field(discriminator="detail_type")
]

_HYPERPOD = TypeAdapter(HyperPodEvent)
_ANY = TypeAdapter(MonitorEvent)


def parse_hyperpod_event(event: Any) -> ClusterEvent | ClusterStateChange | NodeHealthEvent:
    """Raises ``pydantic.ValidationError`` for anything but one of the three HyperPod detail-types."""
    return _HYPERPOD.validate_python(event)


def parse_monitor_event(event: Any) -> ClusterEvent | ClusterStateChange | NodeHealthEvent | ScheduleEvent:
    return _ANY.validate_python(event)


# --- odd input: lone surrogates, batches whose records carry no id ---------------------------------

_SURROGATE = re.compile("[\ud800-\udfff]")
#: What a lone surrogate becomes: a visible U+FFFD, so the text can be encoded, logged, stored and sent.
REPLACEMENT = "\ufffd"
_MAX_DEPTH = 64


def _clean_text(text: str) -> str:
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub(REPLACEMENT, text)
    return text


def without_surrogates(value: Any, _depth: int = 0) -> Any:
    """``value`` with every lone surrogate (``"\\ud800"``: what a JSON ``\\ud800`` escape decodes to; no UTF-8
    encoder takes it) in its strings and keys replaced by U+FFFD; the same object when it holds none.

    Lambda's runtime hands a handler such strings as they came; SQS, DynamoDB, the logs and ``str.encode``
    refuse them, so every entry point cleans its input first. Past a nesting of 64 the rest is kept as text.
    """
    if isinstance(value, str):
        return _clean_text(value)
    if isinstance(value, dict | list | tuple) and _depth >= _MAX_DEPTH:
        return _clean_text(ascii(value)[:2048])
    if isinstance(value, dict):
        items = [(without_surrogates(k, _depth + 1), without_surrogates(v, _depth + 1)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items(), strict=True)):
            return value
        return dict(items)
    if isinstance(value, list | tuple):
        cleaned = [without_surrogates(v, _depth + 1) for v in value]
        if all(c is v for c, v in zip(cleaned, value, strict=True)):
            return value
        return type(value)(cleaned)
    return value


@dataclass(frozen=True)
class BatchRecords:
    """A batch event's records that can be named in a partial batch response, and those that cannot (with
    why): a record without its id can be neither retried alone nor reported as failed (an identifier Lambda
    does not find in the batch fails the whole batch), so it is set aside, never processed or reported."""

    records: list[dict[str, Any]] = field(default_factory=list)
    set_aside: list[tuple[Any, str]] = field(default_factory=list)


def sqs_message_id(record: Any) -> str:
    """An SQS record's ``messageId`` (what a partial batch response names), or ""."""
    value = record.get("messageId") if isinstance(record, dict) else None
    return value if isinstance(value, str) else ""


def stream_sequence_number(record: Any) -> str:
    """A DynamoDB stream record's ``dynamodb.SequenceNumber`` (what a partial batch response names), or ""."""
    images = record.get("dynamodb") if isinstance(record, dict) else None
    value = images.get("SequenceNumber") if isinstance(images, dict) else None
    return value if isinstance(value, str) else ""


def batch_records(event: Any, id_of: Any = sqs_message_id) -> BatchRecords:
    """The records of a batch event (``{"Records": [...]}``) split by whether ``id_of`` finds their id; a
    repeated id is set aside too (a response naming it would name two records)."""
    raw = event.get("Records") if isinstance(event, dict) else None
    out = BatchRecords()
    if not isinstance(raw, list):
        return out
    seen: set[str] = set()
    for record in raw:
        rid = id_of(record)
        if not isinstance(record, dict):
            out.set_aside.append((record, f"the record is a {type(record).__name__}, not an object"))
        elif not rid.strip():
            out.set_aside.append((record, "the record has no id to name it by"))
        elif rid in seen:
            out.set_aside.append((record, f"the record repeats the id {ascii(rid[:80])} of another record"))
        else:
            seen.add(rid)
            out.records.append(record)
    return out
