"""From a stored finding (the findings table) back to a :class:`Finding`: what the incidents are built from
(every run that reconciles them, and the stream notifier's finding events), the same everywhere."""

from __future__ import annotations

from typing import TYPE_CHECKING, get_args

from hyperpod_debugger.domain.model import Finding, NodeAction, SuggestedCommand

if TYPE_CHECKING:
    from hyperpod_debugger.lifecycle.findings import StoredFinding

#: the node actions a stored finding may carry (another value, from a newer layer, reads as none)
_ACTIONS = frozenset(get_args(NodeAction))


def cluster_label(cluster_arn: str, cluster_name: str | None = None) -> str:
    """The cluster as shown to people: its name when the store kept it, else the ARN's last part (the id)."""
    if cluster_name:
        return cluster_name
    return cluster_arn.rsplit("/", 1)[-1] if cluster_arn.startswith("arn:") else cluster_arn


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
        instance_group=stored.instance_group,
        evidence=list(stored.evidence),
        suggested_commands=[SuggestedCommand.model_validate(c) for c in stored.suggested_commands],
        node_action=stored.node_action if stored.node_action in _ACTIONS else None,
        next_step=stored.next_step,
        root_cause=stored.root_cause,
    )
