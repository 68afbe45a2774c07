"""Typed observations: what the collectors saw, and whether they could see it.

Collectors (``hyperpod_debugger.aws``) build these; checks read them. Each piece of the
picture is wrapped in :class:`Observed`, which holds either the value or the reason it is
missing (:class:`ApiFailure` when an API call failed, a skip reason when it was not asked
for). Checks call :meth:`Observed.get`, which raises :class:`Unobservable` instead of
handing them a silently empty value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Generic, Literal, TypeVar

if TYPE_CHECKING:
    from hyperpod_debugger.domain.orchestrators import KubernetesObservation, SlurmObservation

T = TypeVar("T")

FailureKind = Literal["denied", "throttled", "not_found", "malformed", "error", "endpoint", "timeout"]


@dataclass(frozen=True, slots=True)
class ApiFailure:
    """Why an observation is missing. ``action`` is the exact IAM action, e.g. ``ec2:DescribeVpcs``."""

    action: str
    kind: FailureKind
    message: str
    code: str | None = None

    def describe(self) -> str:
        if self.kind == "denied":
            return f"access denied for {self.action}"
        if self.kind == "throttled":
            return f"{self.action} still throttled after retries"
        if self.kind == "malformed":
            return f"{self.action} returned a malformed response: {self.message}"
        if self.kind == "endpoint":
            return f"could not reach the endpoint for {self.action}: {self.message}"
        if self.kind == "timeout":
            return f"{self.action} timed out"
        if self.kind == "not_found":
            return f"{self.action}: {self.message}"
        return f"{self.action} failed: {self.message}"


class Unobservable(Exception):
    """Raised by a check whose input could not be observed."""

    def __init__(self, failure: ApiFailure) -> None:
        super().__init__(failure.describe())
        self.failure = failure


class NotApplicable(Exception):
    """Raised by a check that does not apply to this cluster (for example an EKS check on Slurm)."""


@dataclass(slots=True)
class Observed(Generic[T]):
    value: T | None = None
    failure: ApiFailure | None = None
    skipped: str | None = None

    @classmethod
    def ok(cls, value: T) -> Observed[T]:
        return cls(value=value)

    @classmethod
    def failed(cls, failure: ApiFailure) -> Observed[T]:
        return cls(failure=failure)

    @classmethod
    def skip(cls, reason: str) -> Observed[T]:
        return cls(skipped=reason)

    @property
    def available(self) -> bool:
        return self.failure is None and self.skipped is None

    def get(self) -> T:
        if self.failure is not None:
            raise Unobservable(self.failure)
        if self.skipped is not None:
            raise NotApplicable(self.skipped)
        return self.value  # type: ignore[return-value]


# --------------------------------------------------------------------------- SageMaker


@dataclass(frozen=True, slots=True)
class VpcConfig:
    security_group_ids: tuple[str, ...]
    subnet_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class InstanceGroup:
    name: str
    instance_type: str
    current_count: int | None
    target_count: int | None
    threads_per_core: int | None
    status: str | None
    override_vpc: VpcConfig | None
    lifecycle_source: str | None
    lifecycle_on_create: str | None
    execution_role: str | None


@dataclass(frozen=True, slots=True)
class Cluster:
    arn: str
    name: str
    cluster_id: str
    region: str
    account_id: str
    status: str
    failure_message: str | None
    orchestrator: Literal["EKS", "Slurm", "Unknown"]
    orchestrator_raw: dict | None
    eks_cluster_arn: str | None
    node_recovery: str | None
    provisioning_mode: str | None
    vpc: VpcConfig | None
    instance_groups: tuple[InstanceGroup, ...]
    creation_time: datetime | None

    @property
    def log_group(self) -> str:
        # The cluster id is the last ARN segment, never the name (which an ARN-form --cluster is not).
        return f"/aws/sagemaker/Clusters/{self.name}/{self.cluster_id}"

    def group(self, name: str) -> InstanceGroup | None:
        return next((g for g in self.instance_groups if g.name == name), None)

    def all_vpc_configs(self) -> list[tuple[str | None, VpcConfig]]:
        """The cluster VpcConfig (group None) and every group's OverrideVpcConfig."""
        configs: list[tuple[str | None, VpcConfig]] = []
        if self.vpc is not None:
            configs.append((None, self.vpc))
        configs.extend((g.name, g.override_vpc) for g in self.instance_groups if g.override_vpc)
        return configs

    def security_group_ids(self) -> list[str]:
        seen: dict[str, None] = {}
        for _, cfg in self.all_vpc_configs():
            seen.update(dict.fromkeys(cfg.security_group_ids))
        return list(seen)

    def subnet_ids(self) -> list[str]:
        seen: dict[str, None] = {}
        for _, cfg in self.all_vpc_configs():
            seen.update(dict.fromkeys(cfg.subnet_ids))
        return list(seen)


@dataclass(frozen=True, slots=True)
class ClusterNode:
    instance_id: str
    group: str
    instance_type: str
    status: str
    message: str
    launch_time: datetime | None
    #: PrivateDnsHostname (``ip-10-1-2-3.<region>.compute.internal``); its first label is the Slurm node name
    hostname: str | None = None
    #: NodeLogicalId: listed for clusters in Continuous provisioning mode, where the batch reboot and replace
    #: calls take it (``--node-logical-ids``)
    logical_id: str | None = None

    @property
    def slurm_name(self) -> str | None:
        return self.hostname.split(".", 1)[0] if self.hostname else None

    @property
    def eks_name(self) -> str:
        """The Kubernetes node name HyperPod gives the node."""
        return f"hyperpod-{self.instance_id}"


@dataclass(frozen=True, slots=True)
class NodeDetail:
    """DescribeClusterNode for one node named with --node."""

    instance_id: str
    group: str
    instance_type: str
    status: str
    message: str
    launch_time: datetime | None
    private_dns_hostname: str | None
    private_ip: str | None
    threads_per_core: int | None


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    event_id: str
    time: datetime
    level: str | None  # Info | Warn | Error (None if the API omitted it)
    resource_type: str
    description: str
    instance_group: str | None
    instance_id: str | None
    #: every FailureMessage / reason found anywhere in EventDetails.EventMetadata (DescribeClusterEvent)
    failure_messages: tuple[str, ...] = ()
    described: bool = False


@dataclass(frozen=True, slots=True)
class NodeHealthReport:
    """HyperPod's own verdict on one node, as a Node Health Event states it (the health agent's summary).

    ``repair_action`` is what HyperPod itself does (``None``, ``Reboot``, ``Replace``; AWS publishes no
    list of values, so any text is kept); ``recommendation`` is its advice to the operator, verbatim.
    """

    instance_id: str
    status: str | None  # Unhealthy | Healthy | ...
    reason: str | None = None
    repair_action: str | None = None
    recommendation: str | None = None
    event_id: str | None = None
    at: datetime | None = None

    @property
    def unhealthy(self) -> bool:
        return (self.status or "").strip().lower() != "healthy"

    @property
    def hyperpod_acting(self) -> bool:
        """HyperPod is rebooting or replacing the node itself: no second action from us."""
        return (self.repair_action or "").strip().lower() in {"reboot", "replace"}


@dataclass(frozen=True, slots=True)
class EventWindow:
    start: datetime
    end: datetime
    events: tuple[ClusterEvent, ...]
    #: Warn/Error events not described (DescribeClusterEvent) because of the per-run cap.
    undescribed: int = 0


# --------------------------------------------------------------------------- EC2


@dataclass(frozen=True, slots=True)
class SgRule:
    protocol: str  # "-1" means all traffic
    from_port: int | None
    to_port: int | None
    ipv4_ranges: tuple[str, ...]
    ipv6_ranges: tuple[str, ...]
    group_ids: tuple[str, ...]
    prefix_lists: tuple[str, ...]

    @property
    def all_traffic(self) -> bool:
        return self.protocol == "-1"

    def covers_tcp_port(self, port: int) -> bool:
        if self.all_traffic:
            return True
        if self.protocol not in ("tcp", "6"):
            return False
        low = self.from_port if self.from_port is not None else 0
        high = self.to_port if self.to_port is not None else 65535
        return low <= port <= high


@dataclass(frozen=True, slots=True)
class SecurityGroup:
    group_id: str
    name: str
    vpc_id: str | None
    ingress: tuple[SgRule, ...]
    egress: tuple[SgRule, ...]
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Subnet:
    subnet_id: str
    vpc_id: str
    availability_zone: str
    availability_zone_id: str | None
    available_ips: int
    cidr: str | None
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Vpc:
    vpc_id: str
    dns_support: bool | None
    dns_hostnames: bool | None
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Route:
    destination: str  # CIDR or prefix-list id
    target: str  # igw-…, nat-…, vpce-…, tgw-…, local, …
    state: str | None


@dataclass(frozen=True, slots=True)
class RouteTable:
    route_table_id: str
    vpc_id: str
    main: bool
    subnet_ids: tuple[str, ...]
    routes: tuple[Route, ...]

    def default_routes(self) -> list[Route]:
        return [r for r in self.routes if r.destination in ("0.0.0.0/0", "::/0")]


@dataclass(frozen=True, slots=True)
class VpcEndpoint:
    endpoint_id: str
    service_name: str
    endpoint_type: str  # Interface | Gateway | GatewayLoadBalancer
    state: str
    route_table_ids: tuple[str, ...]
    private_dns: bool | None


@dataclass(frozen=True, slots=True)
class InstanceTypeInfo:
    instance_type: str  # EC2 name, without the "ml." prefix
    default_vcpus: int
    default_cores: int | None
    default_threads_per_core: int | None
    valid_threads_per_core: tuple[int, ...]
    efa_supported: bool | None
    gpus: int | None


@dataclass(frozen=True, slots=True)
class NetworkObservation:
    security_groups: Observed[dict[str, SecurityGroup]]
    missing_security_groups: tuple[str, ...]
    subnets: Observed[dict[str, Subnet]]
    vpcs: Observed[dict[str, Vpc]]
    route_tables: Observed[list[RouteTable]]
    endpoints: Observed[list[VpcEndpoint]]
    eni_count: Observed[int]
    eni_quota: Observed[float]


# --------------------------------------------------------------------------- EKS


@dataclass(frozen=True, slots=True)
class EksCluster:
    name: str
    arn: str
    status: str
    vpc_id: str | None
    security_group_ids: tuple[str, ...]
    cluster_security_group_id: str | None
    authentication_mode: str | None
    endpoint_public: bool | None
    endpoint_private: bool | None
    tags: dict[str, str] = field(default_factory=dict)
    #: API server URL and its CA bundle (base64 PEM), for the Kubernetes reads
    endpoint: str | None = None
    certificate_authority: str | None = None


# --------------------------------------------------------------------------- CloudWatch Logs


@dataclass(frozen=True, slots=True)
class LogEvent:
    stream: str
    timestamp: datetime
    message: str


@dataclass(frozen=True, slots=True)
class LogObservation:
    group_name: str
    group_exists: Observed[bool]
    #: events of LifecycleConfig/<group>/<instance> streams worth reading (failed nodes + error sweep)
    lifecycle_events: Observed[list[LogEvent]]
    #: HealthMonitoringAgentDetectionEvent records from SagemakerHealthMonitoringAgent/* streams
    hma_events: Observed[list[LogEvent]]


# --------------------------------------------------------------------------- everything


@dataclass(slots=True)
class ClusterObservation:
    """Everything one triage run collected about one cluster."""

    cluster: Cluster
    collected_at: datetime
    nodes: Observed[list[ClusterNode]]
    node_detail: Observed[NodeDetail] | None
    events: Observed[EventWindow]
    network: NetworkObservation
    eks: Observed[EksCluster]
    logs: LogObservation
    instance_types: Observed[dict[str, InstanceTypeInfo]]
    #: instance type (EC2 name) -> AZ names offering it
    offerings: Observed[dict[str, frozenset[str]]]
    #: the HyperPod cluster's own tags (ListTags), for IaC ownership
    cluster_tags: Observed[dict[str, str]] = field(default_factory=lambda: Observed.skip("not collected"))
    #: the EKS cluster's Kubernetes objects (EKS-orchestrated clusters)
    kubernetes: Observed[KubernetesObservation] = field(default_factory=lambda: Observed.skip("not collected"))
    #: what the Slurm controller reported (Slurm-orchestrated clusters)
    slurm: Observed[SlurmObservation] = field(default_factory=lambda: Observed.skip("not collected"))
    #: every failure seen while collecting, in order (drives the missing-permission findings)
    failures: list[ApiFailure] = field(default_factory=list)
