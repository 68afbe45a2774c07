"""Seed realistic HyperPod clusters into moto: VPC resources through the normal EC2/EKS/Logs
APIs, and the HyperPod fields moto cannot express through the moto backend (documented in
:mod:`hyperpod_sim.moto_patches`).

Ids are derived from names with a hash so every demo run prints the same report.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from moto.core import DEFAULT_ACCOUNT_ID
from moto.eks.models import eks_backends
from moto.sagemaker.models import ClusterNode, sagemaker_backends

from hyperpod_sim import moto_patches

ACCOUNT = DEFAULT_ACCOUNT_ID


def hex_id(seed: str, length: int) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[:length]


def instance_id(seed: str) -> str:
    return "i-0" + hex_id(seed, 16)


def cluster_id(name: str) -> str:
    """A 12-character id in the real ARN alphabet ``[a-z0-9]``."""
    return hex_id("cluster/" + name, 12)


@dataclass
class GroupSpec:
    name: str
    instance_type: str
    count: int
    target: int | None = None
    threads_per_core: int = 2
    status: str | None = "InService"
    override_vpc: dict[str, list[str]] | None = None


@dataclass
class NodeState:
    status: str = "Running"
    message: str = ""


@dataclass
class SeededCluster:
    name: str
    arn: str
    cluster_id: str
    region: str
    nodes: dict[str, list[str]] = field(default_factory=dict)  # group -> instance ids

    @property
    def log_group(self) -> str:
        return f"/aws/sagemaker/Clusters/{self.name}/{self.cluster_id}"


def create_cluster(
    sagemaker: Any,
    region: str,
    name: str,
    groups: list[GroupSpec],
    vpc_config: dict[str, list[str]] | None,
    *,
    orchestrator: dict[str, Any] | None,
    node_recovery: str | None,
    provisioning_mode: str | None,
    launch_time: datetime,
    node_states: dict[tuple[str, int], NodeState] | None = None,
    tags: dict[str, str] | None = None,
) -> SeededCluster:
    """Create the cluster through the SageMaker API, then give it real-looking identity and nodes."""
    moto_patches.apply()
    request: dict[str, Any] = {
        "ClusterName": name,
        "InstanceGroups": [
            {
                "InstanceGroupName": g.name,
                "InstanceType": g.instance_type if g.instance_type in _MOTO_TYPES else "ml.c5.xlarge",
                "InstanceCount": 1,
                "LifeCycleConfig": {"SourceS3Uri": f"s3://sagemaker-{name}-lifecycle/", "OnCreate": "on_create.sh"},
                "ExecutionRole": f"arn:aws:iam::{ACCOUNT}:role/{name}-exec",
                "ThreadsPerCore": g.threads_per_core,
            }
            for g in groups
        ],
    }
    if vpc_config:
        request["VpcConfig"] = {"SecurityGroupIds": vpc_config["sgs"], "Subnets": vpc_config["subnets"]}
    if tags:
        request["Tags"] = [{"Key": k, "Value": v} for k, v in tags.items()]
    sagemaker.create_cluster(**request)

    # moto's Cluster and ClusterNodes carry our hp_* attributes too, which moto_patches serves
    moto_cluster: Any = sagemaker_backends[ACCOUNT][region].clusters[name]
    cid = cluster_id(name)
    moto_cluster.hp_cluster_id = cid
    moto_cluster.arn = f"arn:aws:sagemaker:{region}:{ACCOUNT}:cluster/{cid}"
    extra: dict[str, Any] = {}
    if orchestrator is not None:
        extra["Orchestrator"] = orchestrator
    if node_recovery is not None:
        extra["NodeRecovery"] = node_recovery
    if provisioning_mode is not None:
        extra["NodeProvisioningMode"] = provisioning_mode
    moto_cluster.hp_extra = extra
    moto_cluster.hp_group_status = {g.name: g.status for g in groups if g.status}
    moto_cluster.hp_events = []
    for spec, group in zip(groups, moto_cluster.instance_groups, strict=True):
        group["InstanceType"] = spec.instance_type  # types newer than moto's allowlist
        group["CurrentCount"] = spec.count
        group["TargetCount"] = spec.target if spec.target is not None else spec.count
        if spec.override_vpc:
            group["OverrideVpcConfig"] = {
                "SecurityGroupIds": spec.override_vpc["sgs"],
                "Subnets": spec.override_vpc["subnets"],
            }

    seeded = SeededCluster(name=name, arn=moto_cluster.arn, cluster_id=cid, region=region)
    moto_cluster.nodes = {}
    states = node_states or {}
    for spec in groups:
        ids = []
        for index in range(spec.count):
            iid = instance_id(f"{name}/{spec.name}/{index}")
            node: Any = ClusterNode(
                region_name=region,
                account_id=ACCOUNT,
                cluster_name=name,
                instance_group_name=spec.name,
                instance_type=spec.instance_type,
                life_cycle_config=request["InstanceGroups"][0]["LifeCycleConfig"],
                execution_role=f"arn:aws:iam::{ACCOUNT}:role/{name}-exec",
                node_id=iid,
                threads_per_core=spec.threads_per_core,
            )
            state = states.get((spec.name, index), NodeState())
            node.status = state.status
            node.hp_message = state.message
            node.launch_time = launch_time + timedelta(seconds=index)
            octets = hex_id(iid, 4)
            node.hp_ip = f"10.{int(octets[0:2], 16) % 250}.{int(octets[2:4], 16) % 250}.{index % 250 + 4}"
            node.hp_hostname = "ip-" + node.hp_ip.replace(".", "-")
            if provisioning_mode == "Continuous":
                node.hp_logical_id = hex_id("logical/" + iid, 32)
            moto_cluster.nodes[iid] = node
            ids.append(iid)
        seeded.nodes[spec.name] = ids
    return seeded


def add_event(
    seeded: SeededCluster,
    *,
    when: datetime,
    level: str,
    description: str,
    group: str | None = None,
    instance: str | None = None,
    failure_message: str | None = None,
) -> None:
    cluster: Any = sagemaker_backends[ACCOUNT][seeded.region].clusters[seeded.name]  # with hp_events
    metadata: dict[str, Any] = {}
    if failure_message is not None:
        metadata = {"Instance": {"FailureMessage": failure_message, "NodeLogicalId": hex_id(description, 32)}}
    event: dict[str, Any] = {
        "EventId": _uuid(f"{seeded.name}/{when.isoformat()}/{description}/{instance}"),
        "ClusterArn": seeded.arn,
        "ClusterName": seeded.name,
        "ResourceType": "Instance" if instance else ("InstanceGroup" if group else "Cluster"),
        "EventTime": when,
        "Description": description,
        "EventLevel": level,
    }
    if metadata:
        # EventMetadata is a union in the service model: exactly one member may be set.
        event["EventDetails"] = {"EventMetadata": metadata}
    if group:
        event["InstanceGroupName"] = group
    if instance:
        event["InstanceId"] = instance
    cluster.hp_events.append(event)


def set_eks_access(region: str, eks_name: str, mode: str) -> None:
    moto_patches.apply()
    cluster: Any = eks_backends[ACCOUNT][region].clusters[eks_name]  # moto's, given our hp_access_config
    cluster.hp_access_config = {"authenticationMode": mode}


def put_log_lines(logs: Any, group: str, stream: str, lines: list[tuple[datetime, str]]) -> None:
    try:
        logs.create_log_group(logGroupName=group)
    except logs.exceptions.ResourceAlreadyExistsException:
        pass
    logs.create_log_stream(logGroupName=group, logStreamName=stream)
    logs.put_log_events(
        logGroupName=group,
        logStreamName=stream,
        logEvents=[{"timestamp": int(ts.timestamp() * 1000), "message": msg} for ts, msg in lines],
    )


def hma_record(when: datetime, xid: int, pci: str = "0000:b9:00", detail: str = "") -> str:
    """An EKS-style HMA detection record, as the health agent writes it (one JSON per event)."""
    text = f"NVRM: Xid (PCI:{pci}): {xid}, pid=<unknown>, name=<unknown>{', ' + detail if detail else ''}"
    return json.dumps(
        {
            "level": "info",
            "ts": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "msg": "NPD caught event: %v",
            "details": {
                "severity": "warn",
                "timestamp": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "reason": "XidHardwareFailure" if xid not in (13, 31, 43) else "XidApplicationFault",
                "message": f"Node condition NvidiaErrorReboot is now: True, reason: XidHardwareFailure, message: "
                f'"{text}"',
            },
            "HealthMonitoringAgentDetectionEvent": "HealthEvent",
        }
    )


def slurm_hma_record(when: datetime, xid: int) -> str:
    """A Slurm-side HMA record: note the literal ``"condition: "`` / ``"data: "`` keys."""
    return json.dumps(
        {
            "level": "info",
            "ts": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "msg": "DCGM Policy Violation found ",
            "condition: ": "XID Error",
            "data: ": {"ErrNum": xid},
            "HealthMonitoringAgentDetectionEvent": "HealthEvent",
        }
    )


def _uuid(seed: str) -> str:
    h = hex_id(seed, 32)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


_MOTO_TYPES = frozenset(
    {
        "ml.p4d.24xlarge",
        "ml.p4de.24xlarge",
        "ml.p5.48xlarge",
        "ml.trn1.32xlarge",
        "ml.trn1n.32xlarge",
        "ml.g5.xlarge",
        "ml.g5.2xlarge",
        "ml.g5.4xlarge",
        "ml.g5.8xlarge",
        "ml.g5.12xlarge",
        "ml.g5.16xlarge",
        "ml.g5.24xlarge",
        "ml.g5.48xlarge",
        "ml.c5.large",
        "ml.c5.xlarge",
        "ml.c5.2xlarge",
        "ml.c5.4xlarge",
        "ml.m5.large",
        "ml.m5.xlarge",
        "ml.m5.2xlarge",
        "ml.m5.4xlarge",
        "ml.t3.medium",
    }
)


def node_hostname(seeded: SeededCluster, instance_id: str) -> str:
    """The PrivateDnsHostname first label the seeder gave a node (its Slurm node name)."""
    node: Any = sagemaker_backends[ACCOUNT][seeded.region].clusters[seeded.name].nodes[instance_id]
    return node.hp_hostname


def set_eks_api(region: str, eks_name: str, endpoint: str, ca_data: str) -> None:
    """Point the moto EKS cluster's API endpoint and CA at the fake Kubernetes API server."""
    cluster = eks_backends[ACCOUNT][region].clusters[eks_name]
    cluster.endpoint = endpoint
    cluster.certificate_authority = {"data": ca_data}
