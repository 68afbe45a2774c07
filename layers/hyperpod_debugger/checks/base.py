"""What every check shares: the run context, the check descriptor and a finding builder."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag
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


CheckFn = Callable[[ClusterObservation, CheckContext], list[Finding]]

Observation = TypeVar("Observation")
Context = TypeVar("Context")


@dataclass(frozen=True, slots=True)
class Check(Generic[Observation, Context]):
    """A check: a stable id, its runbook section, a title and the pure function that runs it, over a
    cluster observation (``checks/``) or a node's probe document (``probe/``)."""

    id: str
    section: str
    title: str
    run: Callable[[Observation, Context], list[Finding]]


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


def make_finding(
    identity: dict[str, str | None],
    check: str,
    tag: Tag,
    message: str,
    *,
    priority: Priority | None = None,
    section: str | None = None,
    evidence: list[str] | None = None,
    root_cause: str | None = None,
    suggested_commands: list[SuggestedCommand] | None = None,
    **extra: Any,
) -> Finding:
    """A finding for the cluster/node in ``identity`` (cluster_arn, cluster_name, instance_id, instance_group)."""
    return Finding(
        tag=tag,
        priority=priority,
        check=check,
        section=section,
        message=message,
        evidence=evidence or [],
        root_cause=root_cause,
        suggested_commands=suggested_commands or [],
        **identity,
        **extra,
    )
