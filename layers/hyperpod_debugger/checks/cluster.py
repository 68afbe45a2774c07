"""Cluster identity, status, orchestrator, NodeRecovery and instance-group state."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperpod_debugger.checks.base import CheckContext, finding
from hyperpod_debugger.checks.classify import CAPACITY, classify
from hyperpod_debugger.domain import commands
from hyperpod_debugger.domain.checking import Check
from hyperpod_debugger.domain.commands import mutating, read_only
from hyperpod_debugger.domain.model import Finding, Priority, Tag

if TYPE_CHECKING:
    from hyperpod_debugger.domain.observations import ClusterObservation

#: Statuses in which change is expected and nothing is wrong yet.
TRANSITIONAL_STATUSES = frozenset({"Creating", "Updating", "SystemUpdating"})


def _describe(obs: ClusterObservation) -> list[str]:
    return commands.sagemaker_argv(obs.cluster, "describe-cluster")


def check_identity(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    c = obs.cluster
    orchestrator = c.orchestrator
    evidence = [
        f"ClusterArn: {c.arn}",
        f"ClusterId: {c.cluster_id}",
        f"Orchestrator: {c.orchestrator_raw if c.orchestrator_raw is not None else '(absent)'}",
        f"NodeProvisioningMode: {c.provisioning_mode or '(not set)'}",
    ]
    if orchestrator == "Unknown":
        return [
            finding(
                obs,
                "cluster.identity",
                Tag.WARN,
                f"Cluster {c.name} reports an orchestrator this tool does not recognise; "
                "orchestrator-specific checks are skipped",
                priority=Priority.P2,
                section="J",
                evidence=evidence,
            )
        ]
    detail = f"EKS ({c.eks_cluster_arn})" if orchestrator == "EKS" else "Slurm"
    if orchestrator == "Slurm" and not c.orchestrator_raw:
        detail = "Slurm (no Orchestrator block: clusters without one are Slurm-orchestrated)"
    return [
        finding(
            obs,
            "cluster.identity",
            Tag.INFO,
            f"Cluster {c.name} (id {c.cluster_id}) in {c.region}, orchestrator {detail}",
            evidence=evidence,
        )
    ]


def check_status(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    c = obs.cluster
    if c.status == "InService":
        return [finding(obs, "cluster.status", Tag.PASS, f"Cluster {c.name} is InService", section="F")]
    if c.status in TRANSITIONAL_STATUSES:
        return [
            finding(
                obs,
                "cluster.status",
                Tag.INFO,
                f"Cluster {c.name} is {c.status}: node changes are expected until the operation ends",
                section="F",
            )
        ]
    evidence = [f"ClusterStatus: {c.status}"]
    if c.failure_message:
        evidence.append(f"FailureMessage: {c.failure_message}")
    if c.status in ("Failed", "RollingBack"):
        cause = classify(c.failure_message)
        return [
            finding(
                obs,
                "cluster.status",
                Tag.FAIL,
                f"Cluster {c.name} is {c.status}: {cause.label}",
                priority=Priority.P0,
                section=cause.section,
                evidence=evidence,
                root_cause=cause.root_cause,
                suggested_commands=[read_only(_describe(obs), "Read the cluster's status and FailureMessage")],
            )
        ]
    return [
        finding(
            obs,
            "cluster.status",
            Tag.WARN,
            f"Cluster {c.name} is {c.status}",
            priority=Priority.P1,
            section="F",
            evidence=evidence,
        )
    ]


def check_node_recovery(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    c = obs.cluster
    # NodeRecovery is a cluster-level field of DescribeCluster (values Automatic | None).
    if c.node_recovery == "Automatic":
        return [
            finding(
                obs,
                "cluster.node_recovery",
                Tag.PASS,
                "NodeRecovery is Automatic: HyperPod reboots or replaces faulty nodes itself",
                section="F",
            )
        ]
    if c.node_recovery is None:
        return [
            finding(
                obs,
                "cluster.node_recovery",
                Tag.UNKNOWN,
                "DescribeCluster did not report NodeRecovery; whether faulty nodes are recovered "
                "automatically is not known",
                priority=Priority.P2,
                section="F",
                evidence=["NodeRecovery: (absent)"],
                suggested_commands=[read_only([*_describe(obs), "--query", "NodeRecovery"], "Read NodeRecovery")],
            )
        ]
    return [
        finding(
            obs,
            "cluster.node_recovery",
            Tag.WARN,
            f"NodeRecovery is {c.node_recovery}: faulty nodes stay faulty until someone reboots or replaces them",
            priority=Priority.P1,
            section="F",
            evidence=[f"NodeRecovery: {c.node_recovery}"],
            root_cause="Automatic node recovery is turned off for this cluster.",
            suggested_commands=[
                mutating(
                    commands.sagemaker_argv(c, "update-cluster", "--node-recovery", "Automatic"),
                    "Let HyperPod reboot or replace nodes its health checks find faulty",
                    blast_radius=(
                        "Cluster-wide setting: from then on HyperPod may reboot or replace any node it finds "
                        "faulty, interrupting the jobs on that node. Reversible by setting it back to None."
                    ),
                    changes_configuration=True,
                    resource=c.arn,
                    preconditions=["Your team accepts automatic reboots and replacements of faulty nodes."],
                )
            ],
        )
    ]


def check_instance_groups(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    c = obs.cluster
    out: list[Finding] = []
    for g in c.instance_groups:
        evidence = [
            f"InstanceGroup {g.name}: Status={g.status or '(absent)'} InstanceType={g.instance_type} "
            f"CurrentCount={g.current_count} TargetCount={g.target_count}"
        ]
        if g.status in ("Failed", "Degraded"):
            out.append(
                finding(
                    obs,
                    "cluster.instance_groups",
                    Tag.FAIL,
                    f"Instance group {g.name} is {g.status}",
                    priority=Priority.P1,
                    section="F",
                    instance_group=g.name,
                    evidence=evidence,
                    suggested_commands=[read_only(_describe(obs), "Read the group's status")],
                )
            )
        elif (
            g.current_count is not None
            and g.target_count is not None
            and g.current_count < g.target_count
            and c.status not in TRANSITIONAL_STATUSES
            and g.status not in TRANSITIONAL_STATUSES
        ):
            out.append(
                finding(
                    obs,
                    "cluster.instance_groups",
                    Tag.WARN,
                    f"Instance group {g.name} has {g.current_count} of {g.target_count} nodes",
                    priority=Priority.P1,
                    section=CAPACITY.section,
                    instance_group=g.name,
                    evidence=evidence,
                    root_cause="Nodes could not be provisioned; capacity is the usual reason (see the events).",
                    suggested_commands=[commands.offerings(c, g.instance_type)],
                )
            )
    if not out:
        out.append(
            finding(
                obs,
                "cluster.instance_groups",
                Tag.PASS,
                f"All {len(c.instance_groups)} instance group(s) are at their target size",
                section="F",
            )
        )
    return out


CHECKS: tuple[Check, ...] = (
    Check("cluster.identity", "J", "Cluster identity and orchestrator", check_identity),
    Check("cluster.status", "F", "Cluster status", check_status),
    Check("cluster.node_recovery", "F", "Automatic node recovery", check_node_recovery),
    Check("cluster.instance_groups", "F", "Instance group state", check_instance_groups),
)
