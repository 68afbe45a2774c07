"""HyperPod's view of its EKS nodes: the node-health-status label and the Ready condition of every
HyperPod node (runbook F), and the deep health checks run on them (G).

Pure: every check reads ``obs.kubernetes`` only. Nodes without HyperPod labels (other node groups,
Fargate) are not assessed at all.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from hyperpod_debugger.checks.base import CheckContext, finding
from hyperpod_debugger.checks.k8s_common import hyperpod_nodes, require_eks, shorten
from hyperpod_debugger.domain.commands import read_only
from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag, trim_evidence
from hyperpod_debugger.domain.orchestrators import (
    ANNOTATION_FAULT_DETAILS,
    LABEL_DEEP_HEALTH,
    LABEL_FAULT_REASONS,
    LABEL_FAULT_TYPES,
    LABEL_HEALTH,
    K8sNode,
    KubernetesObservation,
)

if TYPE_CHECKING:
    from hyperpod_debugger.domain.observations import ClusterObservation

CHECK_NODE_HEALTH = "k8s.node_health"
CHECK_DEEP_HEALTH = "k8s.deep_health"

LABEL_INSTANCE_GROUP = "sagemaker.amazonaws.com/instance-group-name"

SCHEDULABLE = "Schedulable"
UNSCHEDULABLE = "Unschedulable"
PENDING_REBOOT = "UnschedulablePendingReboot"
PENDING_REPLACEMENT = "UnschedulablePendingReplacement"
PENDING = (PENDING_REBOOT, PENDING_REPLACEMENT)

DHC_FAILED = "Failed"
DHC_IN_PROGRESS = "InProgress"
DHC_PASSED = "Passed"

#: Node condition types kubelet always reports; any other type with status True is a fault
#: condition (HyperPod's health agent adds one per fault type).
STANDARD_CONDITIONS = frozenset({"Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"})


# --------------------------------------------------------------------------- node facts


def _condition(node: K8sNode, kind: str) -> dict[str, Any] | None:
    return next((c for c in node.conditions if c.get("type") == kind), None)


def _ready_status(node: K8sNode) -> str:
    """``True``, ``False``, ``Unknown``, or ``absent`` when kubelet never reported it."""
    ready = _condition(node, "Ready")
    return str(ready.get("status")) if ready and ready.get("status") is not None else "absent"


def _condition_line(c: dict[str, Any]) -> str:
    parts = [f"condition {c.get('type')}={c.get('status')}"]
    for key in ("reason", "message", "lastTransitionTime"):
        if c.get(key):
            parts.append(f"{key}={c[key]}")
    return " ".join(str(p) for p in parts)


def fault_details(node: K8sNode) -> list[str]:
    """Evidence lines of the fault-details annotation; never raises on a malformed value."""
    raw = node.annotations.get(ANNOTATION_FAULT_DETAILS)
    if raw is None or not raw.strip():
        return []
    try:
        parsed = json.loads(raw)
    except (ValueError, TypeError):
        return [f"unparseable fault-details: {shorten(raw)}"]
    entries = parsed if isinstance(parsed, list) else [parsed]
    lines = []
    for entry in entries:
        if isinstance(entry, dict):
            ordered = [k for k in ("timestamp", "type", "reason", "message") if k in entry]
            ordered += [k for k in entry if k not in ordered]
            body = " ".join(f"{k}={shorten(str(entry[k]), 200)}" for k in ordered)
        else:
            body = shorten(json.dumps(entry))
        lines.append(f"fault-details: {body}")
    return lines


def _node_evidence(node: K8sNode) -> list[str]:
    lines = [f"node {node.name}"]
    for key in (LABEL_HEALTH, LABEL_FAULT_TYPES, LABEL_FAULT_REASONS, LABEL_DEEP_HEALTH):
        if key in node.labels:
            lines.append(f"label {key}={node.labels[key]}")
    for taint in node.taints:
        value = f"={taint['value']}" if taint.get("value") else ""
        lines.append(f"taint {taint.get('key')}{value}:{taint.get('effect')}")
    if node.unschedulable:
        lines.append("spec.unschedulable=true (cordoned)")
    lines.extend(fault_details(node))
    for c in node.conditions:
        kind = c.get("type")
        if kind == "Ready":
            if str(c.get("status")) != "True":
                lines.append(_condition_line(c))
        elif kind not in STANDARD_CONDITIONS and str(c.get("status")) == "True":
            lines.append(_condition_line(c))
    if _condition(node, "Ready") is None:
        lines.append("no Ready condition reported")
    return trim_evidence(lines, 25)


def _describe_node(node: K8sNode) -> SuggestedCommand:
    return read_only(
        ["kubectl", "describe", "node", node.name],
        "Show the node's conditions, taints, HyperPod labels and fault annotation, and recent events",
    )


def _node_finding(obs: ClusterObservation, check: str, node: K8sNode, tag: Tag, message: str, **kw: Any) -> Finding:
    return finding(
        obs,
        check,
        tag,
        message,
        instance_id=node.instance_id,
        instance_group=node.labels.get(LABEL_INSTANCE_GROUP),
        evidence=_node_evidence(node),
        suggested_commands=[_describe_node(node)],
        **kw,
    )


# --------------------------------------------------------------------------- k8s.node_health

#: HyperPod's own recovery of a node, by its health label: what it is doing, why, and what to do meanwhile
_RECOVERY: dict[str, tuple[str, str, str]] = {
    PENDING_REBOOT: (
        "HyperPod's recovery is rebooting it",
        "HyperPod's health agent found a fault it treats as transient and asked for a "
        "reboot; the node is NotReady while it restarts and returns Schedulable if the fault clears.",
        "HyperPod is already rebooting this node: wait for it to come back Ready and "
        "Schedulable and start no reboot or replacement of your own. If it stays PendingReboot, "
        "read its health-agent log stream and check NodeRecovery.",
    ),
    PENDING_REPLACEMENT: (
        "HyperPod is replacing it",
        "HyperPod's health agent found a fault that needs new hardware; the node will "
        "disappear and a new hyperpod-i-… node join, and data on its instance volumes is lost.",
        "HyperPod is already replacing this node (normally about 20–30 minutes): start no "
        "reboot or replacement of your own; its pods are rescheduled once the new node is Ready.",
    ),
}


def check_node_health(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """HyperPod's node-health-status label and the Ready condition of every HyperPod node."""
    k8s = require_eks(obs)
    nodes, ignored = hyperpod_nodes(k8s.nodes.get(), ctx)
    if not nodes:
        return [_no_hyperpod_node(obs, ctx, k8s, ignored)]
    out = [problem for node in nodes if (problem := _node_health_problem(obs, node)) is not None]
    if not out:
        return [_all_nodes_healthy(obs, nodes, ignored)]
    if ignored:
        out.append(
            finding(
                obs,
                CHECK_NODE_HEALTH,
                Tag.INFO,
                f"{ignored} node(s) without HyperPod labels were not assessed (not HyperPod nodes)",
                section="F",
            )
        )
    return out


def _node_health_problem(obs: ClusterObservation, node: K8sNode) -> Finding | None:
    """The verdict on one node: None when it is Ready and Schedulable (or not labelled yet)."""
    health = node.labels.get(LABEL_HEALTH)
    ready = _ready_status(node)
    if health in _RECOVERY:
        return _recovery_under_way(obs, node, health, ready)
    if ready != "True":
        return _not_ready(obs, node, health, ready)
    if health == UNSCHEDULABLE:
        return _held_unschedulable(obs, node)
    if health in (SCHEDULABLE, None):
        return None
    return _node_finding(
        obs,
        CHECK_NODE_HEALTH,
        node,
        Tag.WARN,
        f"Node {node.name} has an unrecognised {LABEL_HEALTH} value {health!r}",
        priority=Priority.P2,
        section="F",
    )


def _recovery_under_way(obs: ClusterObservation, node: K8sNode, health: str, ready: str) -> Finding:
    doing, root_cause, next_step = _RECOVERY[health]
    return _node_finding(
        obs,
        CHECK_NODE_HEALTH,
        node,
        Tag.WARN,
        f"Node {node.name} is {health}: {doing} (Ready={ready})",
        priority=Priority.P1,
        section="F",
        root_cause=root_cause,
        node_action="investigate",
        next_step=next_step,
    )


def _not_ready(obs: ClusterObservation, node: K8sNode, health: str | None, ready: str) -> Finding:
    what = "has not reported a Ready condition" if ready == "absent" else f"is Ready={ready}"
    return _node_finding(
        obs,
        CHECK_NODE_HEALTH,
        node,
        Tag.FAIL,
        f"Node {node.name} {what} and HyperPod has not scheduled a reboot or replacement "
        f"({LABEL_HEALTH}={health or '(absent)'})",
        priority=Priority.P1,
        section="F",
        root_cause="kubelet on the node is not reporting healthy to the EKS control plane; common "
        "causes are lost API-server connectivity, a failed container runtime or CNI, or a hung host.",
        node_action="investigate",
    )


def _held_unschedulable(obs: ClusterObservation, node: K8sNode) -> Finding:
    dhc_running = node.labels.get(LABEL_DEEP_HEALTH) == DHC_IN_PROGRESS
    return _node_finding(
        obs,
        CHECK_NODE_HEALTH,
        node,
        Tag.INFO if dhc_running else Tag.WARN,
        f"Node {node.name} is Unschedulable: "
        + (
            "deep health checks are running on it"
            if dhc_running
            else "deep health checks are running or the node is held by HyperPod"
        ),
        priority=Priority.P2,
        section="F",
        root_cause="HyperPod keeps a node Unschedulable while its deep health checks (stress tests "
        "that can take a couple of hours) run, and while a detected fault is being handled.",
        next_step="Expected during deep health checks: check again later. If it stays Unschedulable "
        "with no deep health check in progress, read its fault labels and health-agent log stream.",
    )


def _ignored_note(ignored: int) -> str:
    if not ignored:
        return ""
    return f"; {ignored} node(s) without HyperPod labels were not assessed"


def _no_hyperpod_node(obs: ClusterObservation, ctx: CheckContext, k8s: KubernetesObservation, ignored: int) -> Finding:
    scope = f" matching {ctx.scope_node}" if ctx.scope_node else ""
    return finding(
        obs,
        CHECK_NODE_HEALTH,
        Tag.INFO,
        f"No HyperPod-labelled node{scope} is registered in the EKS cluster{_ignored_note(ignored)}",
        section="F",
        evidence=[f"{len(k8s.nodes.get())} Kubernetes node(s) listed"],
    )


def _all_nodes_healthy(obs: ClusterObservation, nodes: list[K8sNode], ignored: int) -> Finding:
    unlabelled = sum(1 for n in nodes if LABEL_HEALTH not in n.labels)
    evidence = [f"{len(nodes)} HyperPod node(s) Ready; {len(nodes) - unlabelled} labelled {SCHEDULABLE}"]
    if unlabelled:
        evidence.append(f"{unlabelled} HyperPod node(s) carry no {LABEL_HEALTH} label yet")
    return finding(
        obs,
        CHECK_NODE_HEALTH,
        Tag.PASS,
        f"All {len(nodes)} HyperPod node(s) are Schedulable and Ready{_ignored_note(ignored)}",
        section="F",
        evidence=evidence,
    )


def pending_recovery(obs: ClusterObservation) -> dict[str, str]:
    """instance id -> why HyperPod is already rebooting or replacing it, from the EKS health label.

    Pure and forgiving: an empty map when the cluster is not EKS or its nodes could not be read."""
    if obs.cluster.orchestrator != "EKS" or not obs.kubernetes.available or obs.kubernetes.value is None:
        return {}
    k8s = obs.kubernetes.value
    if not k8s.nodes.available or not k8s.nodes.value:
        return {}
    found: dict[str, str] = {}
    for node in k8s.nodes.value:
        health = node.labels.get(LABEL_HEALTH)
        if health in PENDING and node.is_hyperpod and node.instance_id:
            found[node.instance_id] = f"EKS node {node.name} is labelled {LABEL_HEALTH}={health}"
    return found


# --------------------------------------------------------------------------- k8s.deep_health


def check_deep_health(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """HyperPod's deep-health-check-status label: a failure is a real finding, not a printout."""
    k8s = require_eks(obs)
    nodes, _ = hyperpod_nodes(k8s.nodes.get(), ctx)
    out: list[Finding] = []
    counts = {DHC_PASSED: 0, "not run": 0}
    for node in nodes:
        status = node.labels.get(LABEL_DEEP_HEALTH)
        health = node.labels.get(LABEL_HEALTH)
        if status == DHC_FAILED:
            already = f" HyperPod is already acting on it ({health})." if health in PENDING else ""
            out.append(
                _node_finding(
                    obs,
                    CHECK_DEEP_HEALTH,
                    node,
                    Tag.FAIL,
                    f"Deep health checks failed on node {node.name}",
                    priority=Priority.P1,
                    section="G",
                    root_cause="HyperPod's deep health checks (GPU/accelerator stress and diagnostics, "
                    "interconnect tests) found a fault on this node." + already,
                    node_action="investigate",
                    next_step="HyperPod reboots or replaces nodes that fail deep health checks itself: read the "
                    "fault labels and fault-details, and check node-health-status before acting yourself.",
                )
            )
        elif status == DHC_IN_PROGRESS:
            out.append(
                _node_finding(
                    obs,
                    CHECK_DEEP_HEALTH,
                    node,
                    Tag.INFO,
                    f"Deep health checks are running on node {node.name}; it stays Unschedulable until they end",
                    section="G",
                )
            )
        elif status == DHC_PASSED:
            counts[DHC_PASSED] += 1
        else:
            counts["not run"] += 1
    if not any(f.tag is Tag.FAIL for f in out):
        out.append(
            finding(
                obs,
                CHECK_DEEP_HEALTH,
                Tag.PASS,
                f"No HyperPod node has failed deep health checks ({len(nodes)} node(s))",
                section="G",
                evidence=[f"{counts[DHC_PASSED]} Passed, {counts['not run']} without a deep health check result"],
            )
        )
    return out
