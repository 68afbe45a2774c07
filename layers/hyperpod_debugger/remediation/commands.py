"""Suggested commands that several checks offer, built in one place."""

from __future__ import annotations

from hyperpod_debugger.domain.aws_types import ec2_type
from hyperpod_debugger.domain.model import SuggestedCommand
from hyperpod_debugger.domain.observations import Cluster
from hyperpod_debugger.remediation.suggest import aws_argv, read_only


def sagemaker_argv(cluster: Cluster, operation: str, *args: str) -> list[str]:
    """``aws sagemaker <operation> --region R --cluster-name N …`` for this cluster."""
    return aws_argv("sagemaker", operation, cluster.region, "--cluster-name", cluster.name, *args)


def describe_node(cluster: Cluster, instance_id: str, purpose: str) -> SuggestedCommand:
    return read_only(sagemaker_argv(cluster, "describe-cluster-node", "--node-id", instance_id), purpose)


def offerings(cluster: Cluster, instance_type: str) -> SuggestedCommand:
    return read_only(
        aws_argv(
            "ec2",
            "describe-instance-type-offerings",
            cluster.region,
            "--location-type",
            "availability-zone",
            "--filters",
            f"Name=instance-type,Values={ec2_type(instance_type)}",
        ),
        "List the Availability Zones that offer this instance type",
    )


def tail_log_stream(region: str, group_name: str, stream: str) -> SuggestedCommand:
    return read_only(
        aws_argv(
            "logs",
            "get-log-events",
            region,
            "--log-group-name",
            group_name,
            "--log-stream-name",
            stream,
            "--limit",
            "100",
            "--no-start-from-head",
        ),
        "Read the last 100 lines of this log stream.",
    )
