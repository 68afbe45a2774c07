"""Suggested commands: built from argv lists, every value shell-quoted, never run by us; and the read-only
commands several checks offer, built in one place.

Checks describe what an operator may run; nothing in this package executes these strings.
Building a command from a list of arguments and quoting each one keeps hostile names (an
instance group called ``g1;rm -rf /`` or ``$(id)``) inert when the text is pasted into a shell.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from hyperpod_debugger.domain.aws_types import ec2_type
from hyperpod_debugger.domain.model import Step, SuggestedCommand

if TYPE_CHECKING:
    from hyperpod_debugger.domain.observations import Cluster

#: SageMaker accepts at most this many node ids per BatchReboot/BatchReplaceClusterNodes call.
BATCH_NODE_LIMIT = 25

IAC_WARNING = (
    "If this resource is managed as code (CloudFormation, CDK, Terraform, Pulumi), change the "
    "template and deploy it instead: a direct change drifts from the template and the next "
    "deployment may silently revert it. If you must apply it now, record the drift and reconcile "
    "the template afterwards."
)

#: The drift note of commands that act on a node or inside it, not on template-managed configuration.
NODE_ACTION_NOTE = (
    "No infrastructure-as-code drift: this acts on a node, not on the cluster, VPC, security-group or "
    "EKS configuration a template manages."
)


def shell_join(argv: Sequence[str]) -> str:
    """Join an argv list into one shell-safe command line."""
    return " ".join(shlex.quote(str(arg)) for arg in argv)


def json_arg(value: object) -> str:
    """Compact JSON for a CLI argument (quoted later by :func:`shell_join`)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=False)


def read_only(argv: Sequence[str], purpose: str) -> SuggestedCommand:
    return SuggestedCommand(command=shell_join(argv), purpose=purpose, mutates=False)


def mutating(
    argv: Sequence[str],
    purpose: str,
    *,
    blast_radius: str,
    changes_configuration: bool,
    preconditions: Iterable[str] = (),
    resource: str | None = None,
    step: Step = "change",
    iac_note: str | None = None,
) -> SuggestedCommand:
    """A state-changing command. ``changes_configuration`` (cluster, VPC, security group, subnet
    or EKS configuration) gets the IaC drift warning, which the suggestion engine later names
    the owning stack in when ``resource`` carries IaC tags; node actions get the no-drift note."""
    return SuggestedCommand(
        command=shell_join(argv),
        purpose=purpose,
        mutates=True,
        blast_radius=blast_radius,
        iac_warning=iac_note or (IAC_WARNING if changes_configuration else NODE_ACTION_NOTE),
        preconditions=list(preconditions),
        resource=resource,
        step=step,
    )


def batches(ids: Sequence[str], size: int = BATCH_NODE_LIMIT) -> Iterator[list[str]]:
    for start in range(0, len(ids), size):
        yield list(ids[start : start + size])


def aws_argv(service: str, operation: str, region: str, *args: str) -> list[str]:
    return ["aws", service, operation, "--region", region, *args]


# --------------------------------------------------------------------------- offered by several checks


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
