"""SageMaker HyperPod control-plane reads (describe/list only)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from hyperpod_debugger.aws.errors import ApiCallError, call
from hyperpod_debugger.aws.paginate import collect_all, pages
from hyperpod_debugger.domain.observations import (
    ApiFailure,
    Cluster,
    ClusterEvent,
    ClusterNode,
    InstanceGroup,
    NodeDetail,
    VpcConfig,
)

if TYPE_CHECKING:
    from hyperpod_debugger.aws.clients import AwsClients

SERVICE = "sagemaker"
ARN_RE = re.compile(
    r"^arn:(?P<partition>aws[a-z-]*):sagemaker:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):cluster/(?P<id>[a-z0-9]+)$"
)


class ClusterNotFound(Exception):
    pass


def _ts(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value / 1000 if value > 1e11 else value, tz=UTC)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def _vpc(raw: Any) -> VpcConfig | None:
    if not isinstance(raw, dict):
        return None
    sgs = tuple(str(s) for s in raw.get("SecurityGroupIds") or ())
    subnets = tuple(str(s) for s in raw.get("Subnets") or ())
    if not sgs and not subnets:
        return None
    return VpcConfig(security_group_ids=sgs, subnet_ids=subnets)


def _orchestrator(raw: Any) -> tuple[str, str | None]:
    """(orchestrator, EKS cluster ARN). Slurm clusters may carry no Orchestrator at all."""
    if raw is None or raw == {}:
        return "Slurm", None
    if not isinstance(raw, dict):
        return "Unknown", None
    if "Eks" in raw:
        eks = raw.get("Eks") or {}
        return "EKS", (eks.get("ClusterArn") if isinstance(eks, dict) else None)
    if "Slurm" in raw:
        return "Slurm", None
    return "Unknown", None


def parse_cluster(raw: dict[str, Any], region: str) -> Cluster:
    arn = str(raw.get("ClusterArn") or "")
    match = ARN_RE.match(arn)
    if not match:
        raise ApiCallError(ApiFailure("sagemaker:DescribeCluster", "malformed", f"unexpected ClusterArn {arn!r}"))
    orchestrator, eks_arn = _orchestrator(raw.get("Orchestrator"))
    groups = []
    for g in raw.get("InstanceGroups") or []:
        if not isinstance(g, dict):
            continue
        lcc = g.get("LifeCycleConfig") or {}
        groups.append(
            InstanceGroup(
                name=str(g.get("InstanceGroupName", "")),
                instance_type=str(g.get("InstanceType", "")),
                current_count=g.get("CurrentCount"),
                target_count=g.get("TargetCount"),
                threads_per_core=g.get("ThreadsPerCore"),
                status=g.get("Status"),
                override_vpc=_vpc(g.get("OverrideVpcConfig")),
                lifecycle_source=lcc.get("SourceS3Uri"),
                lifecycle_on_create=lcc.get("OnCreate"),
                execution_role=g.get("ExecutionRole"),
            )
        )
    return Cluster(
        arn=arn,
        name=str(raw.get("ClusterName") or ""),
        cluster_id=match["id"],
        region=match["region"] or region,
        account_id=match["account"],
        status=str(raw.get("ClusterStatus") or "Unknown"),
        failure_message=raw.get("FailureMessage") or None,
        orchestrator=orchestrator,  # type: ignore[arg-type]
        orchestrator_raw=raw.get("Orchestrator"),
        eks_cluster_arn=eks_arn,
        node_recovery=raw.get("NodeRecovery"),
        provisioning_mode=raw.get("NodeProvisioningMode"),
        vpc=_vpc(raw.get("VpcConfig")),
        instance_groups=tuple(groups),
        creation_time=_ts(raw.get("CreationTime")),
    )


def describe_cluster(clients: AwsClients, name_or_arn: str) -> Cluster:
    client = clients.client(SERVICE)
    try:
        raw = call(client, "sagemaker:DescribeCluster", "describe_cluster", ClusterName=name_or_arn)
    except ApiCallError as exc:
        if exc.failure.kind == "not_found" or (
            exc.failure.code == "ValidationException" and "not found" in exc.failure.message.lower()
        ):
            raise ClusterNotFound(exc.failure.message) from exc
        raise
    return parse_cluster(raw, clients.region)


def list_clusters(clients: AwsClients) -> list[dict[str, Any]]:
    client = clients.client(SERVICE)
    return collect_all(client, "sagemaker:ListClusters", "list_clusters", "ClusterSummaries", MaxResults=100)


def _node(raw: dict[str, Any]) -> ClusterNode:
    status = raw.get("InstanceStatus") or {}
    return ClusterNode(
        instance_id=str(raw.get("InstanceId", "")),
        group=str(raw.get("InstanceGroupName", "")),
        instance_type=str(raw.get("InstanceType", "")),
        status=str(status.get("Status", "")),
        message=str(status.get("Message") or ""),
        launch_time=_ts(raw.get("LaunchTime")),
        hostname=raw.get("PrivateDnsHostname") or None,
        logical_id=str(raw["NodeLogicalId"]) if raw.get("NodeLogicalId") else None,
    )


def list_cluster_nodes(clients: AwsClients, cluster: Cluster) -> list[ClusterNode]:
    """Every node of the cluster with an instance: one call per 100 nodes, nothing per node.

    In Continuous provisioning mode each node's NodeLogicalId is asked for too (the reboot and replace
    calls take it); nodes listed without an InstanceId (still being provisioned) are left out, as the
    default listing leaves them out: there is nothing on them to probe, drain, reboot or replace yet."""
    client = clients.client(SERVICE)
    extra: dict[str, Any] = {"IncludeNodeLogicalIds": True} if cluster.provisioning_mode == "Continuous" else {}
    nodes: list[ClusterNode] = []
    for page in pages(
        client,
        "sagemaker:ListClusterNodes",
        "list_cluster_nodes",
        "ClusterNodeSummaries",
        ClusterName=cluster.arn,
        MaxResults=100,
        **extra,
    ):
        nodes.extend(_node(item) for item in page if isinstance(item, dict) and item.get("InstanceId"))
    return nodes


def describe_cluster_node(clients: AwsClients, cluster: Cluster, node_id: str) -> NodeDetail:
    client = clients.client(SERVICE)
    raw = call(
        client, "sagemaker:DescribeClusterNode", "describe_cluster_node", ClusterName=cluster.arn, NodeId=node_id
    )
    details = raw.get("NodeDetails")
    if not isinstance(details, dict):
        raise ApiCallError(ApiFailure("sagemaker:DescribeClusterNode", "malformed", "no NodeDetails"))
    status = details.get("InstanceStatus") or {}
    return NodeDetail(
        instance_id=str(details.get("InstanceId", node_id)),
        group=str(details.get("InstanceGroupName", "")),
        instance_type=str(details.get("InstanceType", "")),
        status=str(status.get("Status", "")),
        message=str(status.get("Message") or ""),
        launch_time=_ts(details.get("LaunchTime")),
        private_dns_hostname=details.get("PrivateDnsHostname"),
        private_ip=details.get("PrivatePrimaryIp"),
        threads_per_core=details.get("ThreadsPerCore"),
    )


def _event(raw: dict[str, Any]) -> ClusterEvent | None:
    when = _ts(raw.get("EventTime"))
    event_id = raw.get("EventId")
    if when is None or not event_id:
        return None
    return ClusterEvent(
        event_id=str(event_id),
        time=when,
        level=raw.get("EventLevel"),
        resource_type=str(raw.get("ResourceType") or ""),
        description=str(raw.get("Description") or ""),
        instance_group=raw.get("InstanceGroupName"),
        instance_id=raw.get("InstanceId"),
    )


def list_cluster_events(
    clients: AwsClients, cluster: Cluster, start: datetime, end: datetime, node_id: str | None = None
) -> list[ClusterEvent]:
    """All events in [start, end], newest first; filtered by node on the server when asked."""
    client = clients.client(SERVICE)
    params: dict[str, Any] = {
        "ClusterName": cluster.arn,
        "EventTimeAfter": start,
        "EventTimeBefore": end,
        "SortBy": "EventTime",
        "SortOrder": "Descending",
        "MaxResults": 100,
    }
    if node_id:
        params["NodeId"] = node_id
    events: list[ClusterEvent] = []
    for page in pages(client, "sagemaker:ListClusterEvents", "list_cluster_events", "Events", required=False, **params):
        for item in page:
            if isinstance(item, dict) and (event := _event(item)) is not None:
                events.append(event)
    return events


def failure_texts(metadata: Any) -> list[str]:
    """Every FailureMessage / Reason string anywhere under EventMetadata (all its subtrees)."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("FailureMessage", "Reason") and isinstance(value, str) and value.strip():
                    found.append(value.strip())
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(metadata)
    return found


def describe_cluster_event(clients: AwsClients, cluster: Cluster, event_id: str) -> list[str]:
    client = clients.client(SERVICE)
    raw = call(
        client, "sagemaker:DescribeClusterEvent", "describe_cluster_event", ClusterName=cluster.arn, EventId=event_id
    )
    details = raw.get("EventDetails") or {}
    return failure_texts((details.get("EventDetails") or {}).get("EventMetadata"))


def list_tags(clients: AwsClients, cluster: Cluster) -> dict[str, str]:
    tags: dict[str, str] = {}
    for page in pages(
        clients.client(SERVICE),
        "sagemaker:ListTags",
        "list_tags",
        "Tags",
        required=False,
        ResourceArn=cluster.arn,
        MaxResults=100,
    ):
        tags.update({str(t.get("Key")): str(t.get("Value", "")) for t in page if isinstance(t, dict)})
    return tags
