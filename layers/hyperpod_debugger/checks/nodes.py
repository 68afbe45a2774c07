"""Node status from ListClusterNodes, and the node named with --node.

``Pending``, ``SystemUpdating``, ``DeepHealthCheckInProgress`` and the attach/detach/shutdown
states are the service doing its job, not failures.
"""

from __future__ import annotations

from collections import Counter

from hyperpod_debugger.checks.base import CheckContext, finding
from hyperpod_debugger.checks.classify import HARDWARE, OTHER, classify
from hyperpod_debugger.domain.checking import Check
from hyperpod_debugger.domain.commands import aws_argv, describe_node, read_only, tail_log_stream
from hyperpod_debugger.domain.model import Finding, NodeAction, Priority, SuggestedCommand, Tag
from hyperpod_debugger.domain.observations import ClusterNode, ClusterObservation, NotApplicable

IN_PROGRESS = frozenset(
    {"Pending", "SystemUpdating", "DeepHealthCheckInProgress", "AttachInProgress", "DetachInProgress", "ShuttingDown"}
)


def _failed_node_commands(obs: ClusterObservation, n: ClusterNode, section: str) -> list[SuggestedCommand]:
    c = obs.cluster
    commands = [describe_node(c, n.instance_id, "Read the node's status message and details")]
    if section == "D":
        commands.append(tail_log_stream(c.region, c.log_group, f"LifecycleConfig/{n.group}/{n.instance_id}"))
    return commands


def _action_for(node_recovery: str | None, section: str) -> NodeAction:
    """Reboot a failed node only when nothing else will: HyperPod's recovery acts when it is on,
    and provisioning faults (lifecycle, capacity, network) are fixed elsewhere, not by a reboot."""
    if section in (HARDWARE.section, OTHER.section) and node_recovery != "Automatic":
        return "reboot"
    return "investigate"


def check_node_status(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    nodes = obs.nodes.get()
    c = obs.cluster
    scoped = [n for n in nodes if n.instance_id == ctx.scope_node] if ctx.scope_node else nodes
    counts = Counter(n.status for n in scoped)
    out: list[Finding] = []
    for n in scoped:
        if n.status == "Running" or n.status in IN_PROGRESS:
            continue
        if n.status == "Failure":
            cause = classify(n.message)
            recovery = (
                " HyperPod's automatic recovery should act on it; a replacement takes about 20–30 minutes."
                if c.node_recovery == "Automatic" and cause.section in (HARDWARE.section, OTHER.section)
                else ""
            )
            out.append(
                finding(
                    obs,
                    "nodes.status",
                    Tag.FAIL,
                    f"Node {n.instance_id} ({n.group}, {n.instance_type}) is in Failure: {cause.label}",
                    priority=Priority.P1,
                    section=cause.section,
                    instance_id=n.instance_id,
                    instance_group=n.group,
                    evidence=[f"InstanceStatus: Failure — {n.message or '(no message)'}"],
                    root_cause=cause.root_cause + recovery,
                    suggested_commands=_failed_node_commands(obs, n, cause.section),
                    node_action=_action_for(c.node_recovery, cause.section),
                )
            )
        else:
            out.append(
                finding(
                    obs,
                    "nodes.status",
                    Tag.WARN,
                    f"Node {n.instance_id} ({n.group}) has status {n.status or '(empty)'}",
                    priority=Priority.P1,
                    section="F",
                    instance_id=n.instance_id,
                    instance_group=n.group,
                    evidence=[f"InstanceStatus: {n.status} — {n.message or '(no message)'}"],
                    suggested_commands=_failed_node_commands(obs, n, "K"),
                )
            )
    busy = {s: k for s, k in counts.items() if s in IN_PROGRESS}
    if busy:
        out.append(
            finding(
                obs,
                "nodes.status",
                Tag.INFO,
                "Nodes in progress (not failures): " + ", ".join(f"{k} {s}" for s, k in sorted(busy.items())),
            )
        )
    if not any(f.is_problem for f in out):
        running = counts.get("Running", 0)
        what = f"node {ctx.scope_node}" if ctx.scope_node else f"{len(scoped)} node(s)"
        out.insert(
            0,
            finding(obs, "nodes.status", Tag.PASS, f"{running} of {what} Running, none failed", section="F"),
        )
    return out


def check_focus_node(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    if not ctx.scope_node or obs.node_detail is None:
        raise NotApplicable("no --node given")
    c = obs.cluster
    detail_obs = obs.node_detail
    if detail_obs.failure is not None and detail_obs.failure.kind == "not_found":
        # Never fall back to probing some other node: the operator asked about this one.
        return [
            finding(
                obs,
                "nodes.focus",
                Tag.FAIL,
                f"Node {ctx.scope_node} is not part of cluster {c.name}",
                priority=Priority.P0,
                section="F",
                instance_id=ctx.scope_node,
                evidence=[detail_obs.failure.message],
                root_cause="The instance id or the cluster name/Region given is wrong, or the node was replaced.",
                suggested_commands=[
                    read_only(
                        aws_argv("sagemaker", "list-cluster-nodes", c.region, "--cluster-name", c.name),
                        "List the cluster's nodes and their instance ids",
                    )
                ],
            )
        ]
    d = detail_obs.get()
    return [
        finding(
            obs,
            "nodes.focus",
            Tag.INFO,
            f"Node {d.instance_id} ({d.group}, {d.instance_type}) status {d.status}",
            instance_id=d.instance_id,
            instance_group=d.group,
            evidence=[
                f"Status: {d.status} — {d.message or '(no message)'}",
                f"LaunchTime: {d.launch_time.isoformat() if d.launch_time else '(unknown)'}",
                f"PrivateDnsHostname: {d.private_dns_hostname or '(unknown)'}",
                f"PrivatePrimaryIp: {d.private_ip or '(unknown)'}",
            ],
        )
    ]


CHECKS: tuple[Check, ...] = (
    Check("nodes.status", "F", "Node status", check_node_status),
    Check("nodes.focus", "F", "The node named with --node", check_focus_node),
)
