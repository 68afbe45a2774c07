"""From a stored finding (the findings table) back to what the renderers take: shared by the stream
notifier Lambda and the demo, so both show exactly the same messages."""

from __future__ import annotations

from hyperpod_debugger.domain.model import Finding, SuggestedCommand
from hyperpod_debugger.domain.validate import region_of_arn
from hyperpod_debugger.lifecycle.findings import NOTIFYING, StoredFinding, TransitionKind, parse_iso
from hyperpod_debugger.notify.messages import Notice


def cluster_label(cluster_arn: str, cluster_name: str | None = None) -> str:
    """The cluster as shown to people: its name when the store kept it, else the ARN's last part (the id)."""
    if cluster_name:
        return cluster_name
    return cluster_arn.rsplit("/", 1)[-1] if cluster_arn.startswith("arn:") else cluster_arn


def region_of(cluster_arn: str, default: str) -> str:
    return region_of_arn(cluster_arn) or default


def to_finding(stored: StoredFinding) -> Finding:
    return Finding(
        tag=stored.tag,
        priority=stored.priority,
        check=stored.check,
        section=stored.section,
        message=stored.message or stored.check,
        cluster_arn=stored.cluster_arn,
        cluster_name=cluster_label(stored.cluster_arn, stored.cluster_name),
        instance_id=stored.instance_id,
        evidence=list(stored.evidence),
        suggested_commands=[SuggestedCommand.model_validate(c) for c in stored.suggested_commands],
    )


def notice_of(kind: TransitionKind, at: str, stored: StoredFinding, region: str) -> Notice:
    """The notice for one notifying transition (NEW, ESCALATED, RESOLVED, REOPENED) of a stored finding."""
    if kind not in NOTIFYING:
        raise ValueError(f"{kind.value} transitions are not notified")
    return Notice(
        transition=kind.value,  # type: ignore[arg-type]  # NOTIFYING kinds only
        finding=to_finding(stored),
        first_seen=parse_iso(stored.first_seen),
        last_seen=parse_iso(stored.last_seen),
        count=stored.count,
        cluster_name=cluster_label(stored.cluster_arn, stored.cluster_name),
        region=region_of(stored.cluster_arn, region),
        resolved_at=parse_iso(at) if kind is TransitionKind.RESOLVED else None,
        trigger=stored.trigger,
        trigger_kind=stored.trigger_kind,
        trigger_node=stored.trigger_node,
    )
