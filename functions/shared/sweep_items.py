"""The sweep's inputs: the items of our own state machine's Maps (one cluster of the outer Map, one probe batch
of the inner one), as the cluster step and the probe step validate them. Each is built when first validated: a
function reads one of them, and the others import this module too."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class SweepItem(BaseModel):
    """One item of the sweep's outer Map: the cluster (ARN and/or name) and the sweep's id."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

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

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

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
