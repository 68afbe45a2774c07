"""The Region to call, in the AWS CLI's order: ``--region``, the cluster ARN's, the environment, the profile's;
checked against the SDK's Regions and the ARN's partition. Shared by the CLI and the agent interface."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from hyperpod_debugger.domain import validate

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


def region_for(
    cluster: str | None,
    region: str | None,
    environ: Mapping[str, str] = os.environ,
    *,
    profile: str | None = None,
    profile_region: Callable[[str | None], str | None] | None = None,
    partition_of: Callable[[str], str | None] | None = None,
) -> str:
    """The Region to call: ``--region``, else the cluster ARN's, else ``AWS_REGION`` / ``AWS_DEFAULT_REGION``,
    else the profile's configured Region (``--profile`` or ``AWS_PROFILE``).

    Raises :class:`validate.InvalidArgument` when there is none, when it is not a Region the SDK knows,
    when ``--region`` contradicts the cluster ARN, and when the ARN's partition is not the Region's
    (``arn:aws:`` with ``cn-north-1`` would be sent to the wrong endpoints).
    """
    if profile_region is None or partition_of is None:
        from hyperpod_debugger.aws import profiles

        profile_region = profile_region or profiles.profile_region
        partition_of = partition_of or profiles.partition_of
    from_arn = validate.region_of_arn(cluster) if cluster else None
    configured = profile_region(profile)  # also refuses a profile that does not exist
    chosen = region or from_arn or environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or configured
    if not chosen:
        where = f"profile {profile!r}" if profile else "the default profile"
        raise validate.InvalidArgument(
            f"no Region: pass --region, set AWS_REGION, or add `region = ...` to {where} in ~/.aws/config"
        )
    chosen = validate.region(chosen)
    partition = partition_of(chosen)
    if partition is None:
        from hyperpod_debugger.aws.profiles import known_region

        known_region(chosen)  # raises with the closest names
    if from_arn and from_arn != chosen:
        raise validate.InvalidArgument(f"the cluster ARN is in {from_arn} but --region is {chosen}")
    arn_partition = validate.partition_of_arn(cluster) if cluster else None
    if arn_partition and partition and arn_partition != partition:
        raise validate.InvalidArgument(
            f"the cluster ARN's partition is {arn_partition!r} but {chosen} is in the {partition!r} partition: "
            f"an ARN in {chosen} starts with arn:{partition}:"
        )
    return chosen
