"""Types shared by the Session Manager client, the fleet fan-out, the Slurm query and the fake SSM service."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

#: Per-node outcome of one probe attempt.
Outcome = Literal["OK", "UNREACHABLE", "TIMEOUT", "THROTTLED", "DENIED", "ENCRYPTION_REQUIRED", "ERROR"]

DOCUMENT = "AWS-StartNonInteractiveCommand"
_GROUP = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62})$")
_INSTANCE = re.compile(r"^i-[0-9a-f]{8}(?:[0-9a-f]{9})?$")
_CLUSTER_ARN = re.compile(r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:cluster/(?P<id>[a-z0-9]{12})$")


class TargetError(ValueError):
    pass


def session_target(cluster_arn: str, instance_group: str, instance_id: str) -> str:
    """``sagemaker-cluster:<cluster-id>_<instance-group>-<instance-id>``, validated.

    The cluster id is the last segment of the cluster ARN, never the cluster name (a name is not
    an id, and SSM answers ``TargetNotConnected`` for it).
    """
    match = _CLUSTER_ARN.match(cluster_arn)
    if not match:
        raise TargetError(f"not a HyperPod cluster ARN with a 12-character id: {cluster_arn!r}")
    if not _GROUP.match(instance_group):
        raise TargetError(f"instance group name {instance_group!r} cannot be part of a session target")
    if not _INSTANCE.match(instance_id):
        raise TargetError(f"not an EC2 instance id: {instance_id!r}")
    return f"sagemaker-cluster:{match['id']}_{instance_group}-{instance_id}"


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What one non-interactive command returned."""

    exit_code: int | None  # None when the agent did not report it and no marker was found
    stdout: bytes
    stderr: bytes
    #: output beyond the client's size limit was dropped
    truncated: bool = False
    #: stdout and stderr arrived apart (separateOutputStream); False means merged, exit code from the marker
    separated: bool = True


class SessionError(Exception):
    """A session that did not produce a command result; ``outcome`` says how it failed."""

    def __init__(self, outcome: Outcome, message: str) -> None:
        super().__init__(message)
        self.outcome: Outcome = outcome
        self.message = message


#: How a command reaches a node: (session target, command) → its result, or :class:`SessionError`.
Runner = Callable[[str, str], Awaitable[CommandResult]]
