"""What every cluster-level check shares: the run context, and a finding builder that fills in the cluster.
The check descriptor and the finding builder under it are :mod:`hyperpod_debugger.domain.checking`, which
the probe's evaluators share."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from hyperpod_debugger.domain.checking import make_finding

if TYPE_CHECKING:
    from hyperpod_debugger.domain.model import Finding, Tag
    from hyperpod_debugger.domain.observations import ClusterObservation


@dataclass(frozen=True, slots=True)
class CheckContext:
    """Inputs a check may need besides the observation. Checks never read the clock themselves."""

    now: datetime
    scope_node: str | None = None
    event_window: timedelta = timedelta(hours=24)
    log_window: timedelta = timedelta(days=7)
    #: hardware Xid codes seen this many times on one instance within the log window -> replace
    xid_repeat_threshold: int = 2


def finding(
    obs: ClusterObservation,
    check: str,
    tag: Tag,
    message: str,
    *,
    instance_id: str | None = None,
    instance_group: str | None = None,
    **fields: Any,
) -> Finding:
    """Build a finding with the cluster identity filled in from the observation."""
    identity = {
        "cluster_arn": obs.cluster.arn,
        "cluster_name": obs.cluster.name,
        "instance_id": instance_id,
        "instance_group": instance_group,
    }
    return make_finding(identity, check, tag, message, **fields)
