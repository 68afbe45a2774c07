"""What the CLI's commands share."""

from __future__ import annotations

import os
from collections.abc import Mapping

from hyperpod_debugger.domain import validate


def region_for(cluster: str | None, region: str | None, environ: Mapping[str, str] = os.environ) -> str:
    """The Region to call: ``--region``, else the cluster ARN's, else ``AWS_DEFAULT_REGION`` / ``AWS_REGION``.

    Raises :class:`validate.InvalidArgument` when there is none, when it is not a Region name, and when
    ``--region`` contradicts the cluster ARN (a call there would not find the cluster).
    """
    from_arn = validate.region_of_arn(cluster) if cluster else None
    chosen = region or from_arn or environ.get("AWS_DEFAULT_REGION") or environ.get("AWS_REGION")
    if not chosen:
        raise validate.InvalidArgument("no Region: pass --region or set AWS_DEFAULT_REGION")
    chosen = validate.region(chosen)
    if from_arn and from_arn != chosen:
        raise validate.InvalidArgument(f"the cluster ARN is in {from_arn} but --region is {chosen}")
    return chosen
