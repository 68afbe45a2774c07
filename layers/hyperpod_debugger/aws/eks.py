"""EKS reads: describe the cluster named by the HyperPod cluster's Orchestrator (never a kube-context)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperpod_debugger.aws.errors import ApiCallError, call
from hyperpod_debugger.domain.observations import ApiFailure, EksCluster

if TYPE_CHECKING:
    from hyperpod_debugger.aws.clients import AwsClients


def parse_eks_arn(arn: str) -> tuple[str, str]:
    """(region, cluster name) from ``arn:aws:eks:<region>:<account>:cluster/<name>``."""
    parts = arn.split(":", 5)
    if len(parts) != 6 or parts[2] != "eks" or not parts[5].startswith("cluster/"):
        raise ApiCallError(ApiFailure("eks:DescribeCluster", "malformed", f"not an EKS cluster ARN: {arn!r}"))
    return parts[3], parts[5].split("/", 1)[1]


def describe_cluster(clients: AwsClients, eks_arn: str) -> EksCluster:
    region, name = parse_eks_arn(eks_arn)
    raw = call(clients.client("eks", region), "eks:DescribeCluster", "describe_cluster", name=name)
    cluster = raw.get("cluster")
    if not isinstance(cluster, dict):
        raise ApiCallError(ApiFailure("eks:DescribeCluster", "malformed", "no 'cluster' object"))
    vpc = cluster.get("resourcesVpcConfig") or {}
    access = cluster.get("accessConfig") or {}
    return EksCluster(
        name=str(cluster.get("name", name)),
        arn=str(cluster.get("arn", eks_arn)),
        status=str(cluster.get("status", "")),
        vpc_id=vpc.get("vpcId"),
        security_group_ids=tuple(vpc.get("securityGroupIds") or ()),
        cluster_security_group_id=vpc.get("clusterSecurityGroupId"),
        authentication_mode=access.get("authenticationMode"),
        endpoint_public=vpc.get("endpointPublicAccess"),
        endpoint_private=vpc.get("endpointPrivateAccess"),
        tags={str(k): str(v) for k, v in (cluster.get("tags") or {}).items()},
        endpoint=cluster.get("endpoint"),
        certificate_authority=(cluster.get("certificateAuthority") or {}).get("data"),
    )
