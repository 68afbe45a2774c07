"""Read-only Kubernetes access for the functions that triage EKS-orchestrated clusters.

The triage reads nodes, pods and DaemonSets through the EKS API server with an STS-presigned token;
IAM alone does not grant that. For each EKS cluster named in context ``eksClusters`` this creates one
EKS access entry per reading function's role, with the AWS-managed ``AmazonEKSAdminViewPolicy``
(get/list/watch, no write verb) at cluster scope: nodes are cluster-scoped, so a namespace scope would
hide them. The EKS cluster must accept access entries (authentication mode ``API`` or
``API_AND_CONFIG_MAP``); the triage itself reports a ``CONFIG_MAP``-only cluster (§ B.1).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import aws_cdk as cdk
from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

VIEW_POLICY = "AmazonEKSAdminViewPolicy"
#: botocore's EKS cluster name pattern (1-100 characters).
EKS_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$")


def validate_eks_clusters(names: Sequence[str]) -> list[str]:
    """Names as given, de-duplicated; an entry that is not an EKS cluster name stops the synth."""
    bad = [n for n in names if not EKS_CLUSTER_NAME.match(n)]
    if bad:
        raise ValueError(
            "eksClusters takes EKS cluster names (the Orchestrator.Eks.ClusterArn's last part), "
            f"not {', '.join(repr(b) for b in bad)}"
        )
    return list(dict.fromkeys(names))


class KubernetesReadAccess(Construct):
    """Exposes `entries`: (EKS cluster name, role construct id) → the access entry."""

    def __init__(
        self, scope: Construct, construct_id: str, *, eks_clusters: Sequence[str], readers: Mapping[str, iam.IRole]
    ) -> None:
        super().__init__(scope, construct_id)
        policy_arn = f"arn:{cdk.Aws.PARTITION}:eks::aws:cluster-access-policy/{VIEW_POLICY}"
        self.entries: dict[tuple[str, str], eks.CfnAccessEntry] = {}
        for index, cluster in enumerate(validate_eks_clusters(eks_clusters)):
            for reader, role in readers.items():
                self.entries[(cluster, reader)] = eks.CfnAccessEntry(
                    self,
                    f"{reader}Cluster{index}",
                    cluster_name=cluster,
                    principal_arn=role.role_arn,
                    type="STANDARD",
                    access_policies=[
                        eks.CfnAccessEntry.AccessPolicyProperty(
                            policy_arn=policy_arn,
                            access_scope=eks.CfnAccessEntry.AccessScopeProperty(type="cluster"),
                        )
                    ],
                )
