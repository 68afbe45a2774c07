"""HyperPod's own verdict on a node (a Node Health Event), shown beside ours.

The monitor's event handler passes the event's health summary into the node's triage. The finding
keeps HyperPod's words verbatim (reason, repair action, recommendation) and says plainly who acts:
when HyperPod's repair action is Reboot or Replace, HyperPod is already acting and the ladder
suggests no second action; when it is None, the operator decides from the evidence of our checks.
A later event saying the node is healthy again resolves the finding.
"""

from __future__ import annotations

from textwrap import shorten
from typing import TYPE_CHECKING

from hyperpod_debugger.checks.base import finding
from hyperpod_debugger.domain.model import Finding, NodeAction, Priority, Tag

if TYPE_CHECKING:
    from hyperpod_debugger.domain.observations import ClusterObservation, NodeHealthReport

CHECK = "events.node_health"


def _said(value: str | None) -> str | None:
    text = " ".join((value or "").split())
    return text if text and text.lower() not in {"none", "null", "-"} else None


def health_event_findings(obs: ClusterObservation, report: NodeHealthReport) -> list[Finding]:
    """One finding for the node the event names: PASS when healthy, WARN P1 otherwise."""
    node = report.instance_id
    evidence = [
        f"HealthStatus: {report.status or '(not given)'}",
        f"HealthStatusReason: {report.reason or '(not given)'}",
        f"RepairAction: {report.repair_action or '(not given)'}",
        f"Recommendation: {report.recommendation or '(not given)'}",
    ]
    if report.event_id or report.at:
        when = report.at.isoformat() if report.at else "time not given"
        evidence.append(f"Node Health Event {report.event_id or '(no id)'} at {when}")
    if not report.unhealthy:
        message = f"HyperPod's health agent reports {node} healthy"
        return [finding(obs, CHECK, Tag.PASS, message, instance_id=node, evidence=evidence, section="F")]
    action = _said(report.repair_action)
    advice = _said(report.recommendation)
    reason = _said(report.reason)
    if report.status:
        message = f"HyperPod's health agent reports {node} {report.status}"
    else:
        message = f"HyperPod's health agent sent a health event for {node} without a status"
    if reason:
        message += f": {shorten(reason, 200, placeholder=' …')}"
    if report.hyperpod_acting:
        step = (
            f"HyperPod is already acting (repair action {action}): wait for it; do not reboot or replace "
            "the node yourself."
        )
        node_action: NodeAction | None = None
    else:
        step = (
            "HyperPod takes no repair action itself"
            + (f"; it recommends: {advice}" if advice else "")
            + (". Decide from this node's other findings (investigate → reboot → replace).")
        )
        node_action = "investigate"
    return [
        finding(
            obs,
            CHECK,
            Tag.WARN,
            message,
            instance_id=node,
            priority=Priority.P1,
            section="F",
            evidence=evidence,
            root_cause="HyperPod's Health Monitoring Agent found a fault on this node (its words are in the evidence).",
            node_action=node_action,
            next_step=step,
        )
    ]
