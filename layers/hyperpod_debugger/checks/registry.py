"""The ordered list of cluster-level checks, and their run over a cluster observation.

Each check runs through :func:`~hyperpod_debugger.domain.checking.execute` (unknown, skipped, internal
error). Access denied on any API becomes one ``Missing IAM permission <action>`` finding per action,
pointing at the section of the check it blocked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperpod_debugger.checks import (
    capacity,
    cluster,
    config,
    eks,
    events,
    kubernetes,
    logs,
    network,
    nodes,
    slurm,
    vpc,
)
from hyperpod_debugger.domain.checking import execute, is_iam_action
from hyperpod_debugger.domain.model import Finding, Priority, Tag

if TYPE_CHECKING:
    from hyperpod_debugger.checks.base import CheckContext
    from hyperpod_debugger.domain.checking import Check
    from hyperpod_debugger.domain.model import CheckCoverage
    from hyperpod_debugger.domain.observations import ClusterObservation

ALL_CHECKS: tuple[Check, ...] = (
    *cluster.CHECKS,
    *nodes.CHECKS,
    *events.CHECKS,
    *network.CHECKS,
    *vpc.CHECKS,
    *eks.CHECKS,
    *capacity.CHECKS,
    *config.CHECKS,
    *logs.CHECKS,
    *kubernetes.CHECKS,
    *slurm.CHECKS,
)

#: Where a missing permission points when no check claimed it (every action we call is listed).
ACTION_SECTIONS: dict[str, str] = {
    "sagemaker:DescribeCluster": "F",
    "sagemaker:ListClusters": "F",
    "sagemaker:ListClusterNodes": "F",
    "sagemaker:DescribeClusterNode": "F",
    "sagemaker:ListClusterEvents": "F",
    "sagemaker:DescribeClusterEvent": "F",
    "sagemaker:ListTags": "J",
    "ec2:DescribeSecurityGroups": "A",
    "ec2:DescribeSubnets": "B.1",
    "ec2:DescribeVpcs": "B.2",
    "ec2:DescribeVpcAttribute": "B.2",
    "ec2:DescribeRouteTables": "B.3",
    "ec2:DescribeVpcEndpoints": "B.4",
    "ec2:DescribeNetworkInterfaces": "B.1",
    "ec2:DescribeInstanceTypes": "J",
    "ec2:DescribeInstanceTypeOfferings": "C",
    "servicequotas:GetServiceQuota": "B.1",
    "eks:DescribeCluster": "B.5",
    "logs:DescribeLogGroups": "L",
    "logs:FilterLogEvents": "D",
    "logs:GetLogEvents": "D",
    "sts:GetCallerIdentity": "K",
}


def run_checks(
    obs: ClusterObservation, ctx: CheckContext, checks: tuple[Check, ...] = ALL_CHECKS
) -> tuple[list[Finding], list[CheckCoverage]]:
    identity: dict[str, str | None] = {"cluster_arn": obs.cluster.arn, "cluster_name": obs.cluster.name}
    findings, coverage, denied_by = execute(checks, obs, ctx, identity, ctx.scope_node)
    return _permission_findings(obs, denied_by) + findings, coverage


def _permission_findings(obs: ClusterObservation, denied_by: dict[str, Check]) -> list[Finding]:
    actions = dict.fromkeys(
        [*denied_by, *(f.action for f in obs.failures if f.kind == "denied" and is_iam_action(f.action))]
    )
    out = []
    for action in actions:
        check = denied_by.get(action)
        blocked = f" (blocked: {check.title.lower()})" if check else ""
        out.append(
            Finding(
                tag=Tag.WARN,
                priority=Priority.P1,
                check="iam.permission",
                section=check.section if check else ACTION_SECTIONS.get(action, "K"),
                message=f"Missing IAM permission {action}{blocked}",
                cluster_arn=obs.cluster.arn,
                cluster_name=obs.cluster.name,
                evidence=[next(f.message for f in obs.failures if f.action == action and f.kind == "denied")]
                if any(f.action == action and f.kind == "denied" for f in obs.failures)
                else [],
                root_cause=f"The identity running the triage is not allowed to call {action}.",
            )
        )
    return out
