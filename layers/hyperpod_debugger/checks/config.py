"""Instance-group configuration: ThreadsPerCore against the instance type's vCPUs (section J)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperpod_debugger.checks.base import CheckContext, finding
from hyperpod_debugger.domain import commands
from hyperpod_debugger.domain.aws_types import ec2_type
from hyperpod_debugger.domain.checking import Check
from hyperpod_debugger.domain.commands import mutating, read_only
from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag

if TYPE_CHECKING:
    from hyperpod_debugger.domain.observations import Cluster, ClusterObservation, InstanceGroup, InstanceTypeInfo


def check_threads_per_core(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """ThreadsPerCore of every instance group against what its instance type supports and offers."""
    types = obs.instance_types.get()
    out: list[Finding] = []
    for g in obs.cluster.instance_groups:
        problem = _group_threads(obs, g, types.get(ec2_type(g.instance_type)))
        if problem is not None:
            out.append(problem)
    if not any(f.is_problem for f in out):
        out.append(
            finding(
                obs,
                "config.threads_per_core",
                Tag.PASS,
                "Every instance group uses all vCPUs of its instance type",
                section="J",
            )
        )
    return out


def _group_threads(obs: ClusterObservation, g: InstanceGroup, info: InstanceTypeInfo | None) -> Finding | None:
    """The verdict on one group: its type unknown to EC2, an unsupported ThreadsPerCore, or fewer vCPUs
    than the type offers; None when it uses them all (or sets no ThreadsPerCore)."""
    if info is None:
        return finding(
            obs,
            "config.threads_per_core",
            Tag.UNKNOWN,
            f"EC2 does not describe {g.instance_type}; the vCPU count of group {g.name} cannot be checked",
            priority=Priority.P2,
            section="J",
            instance_group=g.name,
        )
    if g.threads_per_core is None or not info.default_cores:
        return None
    vcpus = info.default_cores * g.threads_per_core
    evidence = [
        f"InstanceGroup {g.name}: InstanceType={g.instance_type} ThreadsPerCore={g.threads_per_core}",
        f"EC2 {info.instance_type}: DefaultVCpus={info.default_vcpus} DefaultCores={info.default_cores} "
        f"ValidThreadsPerCore={list(info.valid_threads_per_core)}",
    ]
    if info.valid_threads_per_core and g.threads_per_core not in info.valid_threads_per_core:
        return finding(
            obs,
            "config.threads_per_core",
            Tag.FAIL,
            f"Group {g.name} sets ThreadsPerCore={g.threads_per_core}, which {g.instance_type} does not support",
            priority=Priority.P1,
            section="J",
            instance_group=g.name,
            evidence=evidence,
        )
    if vcpus < info.default_vcpus:
        return finding(
            obs,
            "config.threads_per_core",
            Tag.WARN,
            f"Group {g.name} runs {g.instance_type} with {vcpus} of {info.default_vcpus} vCPUs "
            f"(ThreadsPerCore={g.threads_per_core})",
            priority=Priority.P2,
            section="J",
            instance_group=g.name,
            evidence=evidence,
            root_cause="Hyper-threading is off for this group (ThreadsPerCore=1), often a console default.",
            suggested_commands=_enable_hyperthreading(obs.cluster, g, info),
        )
    return None


def _enable_hyperthreading(c: Cluster, g: InstanceGroup, info: InstanceTypeInfo) -> list[SuggestedCommand]:
    """Save every group's definition, then update the cluster with the type's default ThreadsPerCore."""
    return [
        read_only(
            commands.sagemaker_argv(c, "describe-cluster", "--query", "InstanceGroups"),
            "Save the current definition of every instance group",
        ),
        mutating(
            commands.sagemaker_argv(c, "update-cluster", "--instance-groups", "file://instance-groups.json"),
            f"Set ThreadsPerCore={info.default_threads_per_core or 2} on group {g.name}",
            blast_radius=(
                f"Every node of group {g.name} is replaced to apply the change: their root and "
                "secondary volumes are destroyed and running jobs stop."
            ),
            changes_configuration=True,
            resource=c.arn,
            preconditions=[
                "instance-groups.json holds the complete definition of every instance group "
                "you keep, copied field by field from describe-cluster; do not rely on "
                "leaving a group out (use the API's explicit delete for that).",
                f"Only ThreadsPerCore of group {g.name} differs from the current definition.",
                "Data on the group's node volumes is saved elsewhere.",
            ],
        ),
    ]


CHECKS: tuple[Check, ...] = (
    Check("config.threads_per_core", "J", "ThreadsPerCore and vCPU count", check_threads_per_core),
)
