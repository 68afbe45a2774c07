"""Builders for observations, so unit tests state only what matters to them."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from hyperpod_debugger.checks.base import CheckContext
from hyperpod_debugger.domain.observations import (
    Cluster,
    ClusterNode,
    ClusterObservation,
    EksCluster,
    EventWindow,
    InstanceGroup,
    InstanceTypeInfo,
    LogObservation,
    NetworkObservation,
    Observed,
    Route,
    RouteTable,
    SecurityGroup,
    SgRule,
    Subnet,
    Vpc,
    VpcConfig,
    VpcEndpoint,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
REGION = "us-west-2"
ACCOUNT = "123456789012"
CLUSTER_ID = "abcd1234efgh"
SG = "sg-0a1b2c3d4e5f60718"
SUBNET = "subnet-0a1b2c3d4e5f60718"
VPC = "vpc-0a1b2c3d4e5f60718"


def rule(
    protocol: str = "-1",
    *,
    groups: tuple[str, ...] = (),
    ipv4: tuple[str, ...] = (),
    ipv6: tuple[str, ...] = (),
    ports: tuple[int | None, int | None] = (None, None),
) -> SgRule:
    return SgRule(protocol, ports[0], ports[1], ipv4, ipv6, groups, ())


def self_ref_sg(group_id: str = SG, vpc_id: str = VPC, **overrides: Any) -> SecurityGroup:
    sg = SecurityGroup(
        group_id=group_id,
        name=f"name-{group_id}",
        vpc_id=vpc_id,
        ingress=(rule(groups=(group_id,)),),
        egress=(rule(groups=(group_id,)),),
    )
    return replace(sg, **overrides)


def group(name: str = "workers", instance_type: str = "ml.p5.48xlarge", **overrides: Any) -> InstanceGroup:
    base = InstanceGroup(
        name=name,
        instance_type=instance_type,
        current_count=2,
        target_count=2,
        threads_per_core=2,
        status="InService",
        override_vpc=None,
        lifecycle_source="s3://sagemaker-lifecycle/scripts/",
        lifecycle_on_create="on_create.sh",
        execution_role=f"arn:aws:iam::{ACCOUNT}:role/hyperpod-exec",
    )
    return replace(base, **overrides)


def cluster(**overrides: Any) -> Cluster:
    base = Cluster(
        arn=f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/{CLUSTER_ID}",
        name="demo-cluster",
        cluster_id=CLUSTER_ID,
        region=REGION,
        account_id=ACCOUNT,
        status="InService",
        failure_message=None,
        orchestrator="EKS",
        orchestrator_raw={"Eks": {"ClusterArn": f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/demo-eks"}},
        eks_cluster_arn=f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/demo-eks",
        node_recovery="Automatic",
        provisioning_mode="Continuous",
        vpc=VpcConfig(security_group_ids=(SG,), subnet_ids=(SUBNET,)),
        instance_groups=(group(),),
        creation_time=NOW,
    )
    return replace(base, **overrides)


def node(
    instance_id: str = "i-0123456789abcdef0",
    group_name: str = "workers",
    status: str = "Running",
    message: str = "",
    instance_type: str = "ml.p5.48xlarge",
) -> ClusterNode:
    return ClusterNode(instance_id, group_name, instance_type, status, message, NOW)


def subnet(subnet_id: str = SUBNET, vpc_id: str = VPC, az: str = "us-west-2a", free: int = 200) -> Subnet:
    return Subnet(subnet_id, vpc_id, az, "usw2-az1", free, "10.0.0.0/24")


def route_table(
    *, subnets: tuple[str, ...] = (SUBNET,), default_target: str | None = "nat-0abc", main: bool = False
) -> RouteTable:
    routes = [Route("10.0.0.0/16", "local", "active")]
    if default_target:
        routes.append(Route("0.0.0.0/0", default_target, "active"))
    return RouteTable("rtb-0abc", VPC, main, subnets, tuple(routes))


def endpoint(service: str, kind: str = "Interface", rtbs: tuple[str, ...] = ()) -> VpcEndpoint:
    return VpcEndpoint(
        f"vpce-{service.replace('.', '')}", f"com.amazonaws.{REGION}.{service}", kind, "available", rtbs, True
    )


def network(**overrides: Any) -> NetworkObservation:
    base = NetworkObservation(
        security_groups=Observed.ok({SG: self_ref_sg()}),
        missing_security_groups=(),
        subnets=Observed.ok({SUBNET: subnet()}),
        vpcs=Observed.ok({VPC: Vpc(VPC, True, True)}),
        route_tables=Observed.ok([route_table()]),
        endpoints=Observed.ok([]),
        eni_count=Observed.ok(100),
        eni_quota=Observed.ok(5000.0),
    )
    return replace(base, **overrides)


def eks(**overrides: Any) -> EksCluster:
    base = EksCluster(
        name="demo-eks",
        arn=f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/demo-eks",
        status="ACTIVE",
        vpc_id=VPC,
        security_group_ids=(SG,),
        cluster_security_group_id="sg-0eksclustersg0001",
        authentication_mode="API_AND_CONFIG_MAP",
        endpoint_public=True,
        endpoint_private=True,
    )
    return replace(base, **overrides)


def logs(**overrides: Any) -> LogObservation:
    base = LogObservation(
        group_name=f"/aws/sagemaker/Clusters/demo-cluster/{CLUSTER_ID}",
        group_exists=Observed.ok(True),
        lifecycle_events=Observed.ok([]),
        hma_events=Observed.ok([]),
    )
    return replace(base, **overrides)


P5 = InstanceTypeInfo("p5.48xlarge", 192, 96, 2, (1, 2), True, 8)


def observation(**overrides: Any) -> ClusterObservation:
    base = ClusterObservation(
        cluster=cluster(),
        collected_at=NOW,
        nodes=Observed.ok([node()]),
        node_detail=None,
        events=Observed.ok(EventWindow(NOW, NOW, ())),
        network=network(),
        eks=Observed.ok(eks()),
        logs=logs(),
        instance_types=Observed.ok({"p5.48xlarge": P5}),
        offerings=Observed.ok({"p5.48xlarge": frozenset({"us-west-2a"})}),
    )
    for key, value in overrides.items():
        setattr(base, key, value)
    return base


def context(**overrides: Any) -> CheckContext:
    return replace(CheckContext(now=NOW), **overrides)
