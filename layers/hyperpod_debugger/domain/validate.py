"""Validation of command-line identifiers. Invalid input is refused before any API call."""

from __future__ import annotations

import re

CLUSTER_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
CLUSTER_ARN_RE = re.compile(
    r"^arn:(?P<partition>aws[a-z-]*):sagemaker:(?P<region>[a-z]{2,5}(-[a-z]+)+-\d+):\d{12}:cluster/[a-z0-9]{12}$"
)
REGION_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
INSTANCE_ID_RE = re.compile(r"^i-[0-9a-f]{8}([0-9a-f]{9})?$")
TABLE_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{3,255}$")


class InvalidArgument(ValueError):
    pass


def cluster(value: str) -> str:
    if CLUSTER_ARN_RE.match(value) or CLUSTER_NAME_RE.match(value):
        return value
    raise InvalidArgument(
        f"--cluster {value!r} is neither a HyperPod cluster name (letters, digits, hyphens; max 63) "
        "nor a cluster ARN (arn:aws:sagemaker:<region>:<account>:cluster/<12-char id>)"
    )


def region(value: str) -> str:
    if REGION_RE.match(value):
        return value
    raise InvalidArgument(f"--region {value!r} is not a Region name such as us-west-2 or us-gov-west-1")


def instance_id(value: str) -> str:
    if INSTANCE_ID_RE.match(value):
        return value
    raise InvalidArgument(f"--node {value!r} is not an EC2 instance id (i- followed by 8 or 17 hex digits)")


def table(value: str) -> str:
    """``value`` when it can be a DynamoDB table name (the monitor's findings table)."""
    if TABLE_NAME_RE.match(value):
        return value
    raise InvalidArgument(f"--table {value!r} is not a DynamoDB table name")


def region_of_arn(value: str) -> str | None:
    match = CLUSTER_ARN_RE.match(value)
    return match["region"] if match else None


def partition_of_arn(value: str) -> str | None:
    match = CLUSTER_ARN_RE.match(value)
    return match["partition"] if match else None
