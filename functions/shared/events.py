"""Parser models of the EventBridge events the monitor receives (Powertools ``EventBridgeModel``).

Shapes follow the SageMaker HyperPod documentation ("Events that Amazon SageMaker AI sends to Amazon
EventBridge" and "SageMaker HyperPod cluster events reference"). Fields we do not use are allowed
and ignored, so a new field in AWS's payload never breaks parsing; fields we rely on are required.
A real cluster ARN ends with the 12-character cluster id, which is not the cluster name.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

CLUSTER_EVENT = "SageMaker HyperPod Cluster Event"
STATE_CHANGE = "SageMaker HyperPod Cluster State Change"
NODE_HEALTH = "SageMaker HyperPod Cluster Node Health Event"
SCHEDULED = "Scheduled Event"

ClusterArn = Annotated[str, Field(pattern=r"^arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]+:\d{12}:cluster/[A-Za-z0-9\-]+$")]


class _Detail(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


# --- SageMaker HyperPod Cluster Event ------------------------------------------------------


class ClusterEventDetails(_Detail):
    EventId: str
    ClusterArn: ClusterArn
    ClusterName: str
    InstanceGroupName: str | None = None
    InstanceId: str | None = None
    ResourceType: str | None = None
    EventTime: int | None = None  # epoch milliseconds
    EventLevel: Literal["Info", "Warn", "Error"]
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
    ClusterArn: ClusterArn
    ClusterName: str
    ClusterStatus: str
    FailureMessage: str | None = None
    CreationTime: int | None = None


class ClusterStateChange(EventBridgeModel):
    source: Literal["aws.sagemaker"]
    detail_type: Literal["SageMaker HyperPod Cluster State Change"] = Field(alias="detail-type")
    detail: StateChangeDetail


# --- SageMaker HyperPod Cluster Node Health Event ------------------------------------------


class HealthSummary(_Detail):
    HealthStatus: str
    HealthStatusReason: str | None = None
    RepairAction: str | None = None
    Recommendation: str | None = None


class NodeHealthDetail(_Detail):
    ClusterArn: ClusterArn
    ClusterName: str
    InstanceId: Annotated[str, Field(pattern=r"^i-[0-9a-f]{8,17}$")]
    HealthSummary: HealthSummary
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


# --- the sweep's probe batch (our own state machine's Map item) ----------------------------


class ProbeBatch(BaseModel):
    """One item of the sweep's inner Map, as ``sweep_cluster`` plans it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    cluster_arn: ClusterArn
    cluster_name: str = ""
    sweep_id: str = ""
    nodes: list[dict[str, Any]] = Field(min_length=1, max_length=500)


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
