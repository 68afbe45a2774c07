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

from typing import Annotated, Any, Literal

from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from functions.shared.sweep_items import PROBE_ITEM_SELECTOR as PROBE_ITEM_SELECTOR  # infra, bench/ read it here
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
