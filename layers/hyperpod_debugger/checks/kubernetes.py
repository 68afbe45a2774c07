"""Kubernetes view of an EKS-orchestrated HyperPod cluster: the health labels HyperPod's health
agent puts on its nodes (runbook F), deep health checks (G), the VPC CNI and the kube-system
networking pods (O) and the ``aws-hyperpod`` namespace (B.1).

Pure: every check reads ``obs.kubernetes`` only. Nodes without HyperPod labels (other node
groups, Fargate) are not assessed at all, and a DaemonSet problem is reported once, with the
pod-level view of it as evidence of that same finding.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from hyperpod_debugger.checks.base import Check, CheckContext, finding
from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag, trim_evidence
from hyperpod_debugger.domain.observations import ClusterObservation, NotApplicable
from hyperpod_debugger.domain.orchestrators import (
    ANNOTATION_FAULT_DETAILS,
    LABEL_DEEP_HEALTH,
    LABEL_FAULT_REASONS,
    LABEL_FAULT_TYPES,
    LABEL_HEALTH,
    K8sContainerStatus,
    K8sDaemonSet,
    K8sEvent,
    K8sNode,
    K8sPod,
    KubernetesObservation,
)
from hyperpod_debugger.probe.catalog import spec_for
from hyperpod_debugger.remediation.suggest import mutating, read_only

CHECK_NODE_HEALTH = "k8s.node_health"
CHECK_DEEP_HEALTH = "k8s.deep_health"
CHECK_CNI = "k8s.cni"
CHECK_SYSTEM_PODS = "k8s.system_pods"
CHECK_EFA_PLUGIN = "k8s.efa_device_plugin"
CHECK_NAMESPACE = "k8s.hyperpod_namespace"
CHECK_EFA_POD_ENV = "k8s.efa_pod_env"

LABEL_INSTANCE_GROUP = "sagemaker.amazonaws.com/instance-group-name"
HYPERPOD_NAMESPACE = "aws-hyperpod"
KUBE_SYSTEM = "kube-system"

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

#: Container states that mean the container keeps failing rather than starting up.
CRASH_REASONS = frozenset(
    {
        "CrashLoopBackOff",
        "Error",
        "ImagePullBackOff",
        "ErrImagePull",
        "RunContainerError",
        "CreateContainerError",
        "CreateContainerConfigError",
        "OOMKilled",
    }
)

AWS_NODE = "aws-node"
AWS_NODE_CONTAINER = "aws-node"
#: The sandbox-failure text of a CNI that does not answer (IPAMD listens on 127.0.0.1:50051).
_CNI_EVENT = re.compile(r"50051|\bcni\b|ipamd|aws-node|network plugin", re.I)

#: At most this many pods get their own commands in one finding.
_COMMAND_PODS = 3
_RAW_LIMIT = 300


def _require_eks(obs: ClusterObservation) -> KubernetesObservation:
    if obs.cluster.orchestrator != "EKS":
        raise NotApplicable("the cluster is not orchestrated by EKS")
    return obs.kubernetes.get()


def _hyperpod_nodes(nodes: list[K8sNode], ctx: CheckContext) -> tuple[list[K8sNode], int]:
    """HyperPod nodes in scope, and how many nodes without HyperPod labels were left out."""
    hyperpod = [n for n in nodes if n.is_hyperpod]
    ignored = len(nodes) - len(hyperpod)
    if ctx.scope_node:
        hyperpod = [n for n in hyperpod if ctx.scope_node in (n.instance_id, n.name)]
    return hyperpod, ignored


def _ignored_note(ignored: int) -> str:
    if not ignored:
        return ""
    return f"; {ignored} node(s) without HyperPod labels were not assessed"


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


def _shorten(text: str, limit: int = _RAW_LIMIT) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fault_details(node: K8sNode) -> list[str]:
    """Evidence lines of the fault-details annotation; never raises on a malformed value."""
    raw = node.annotations.get(ANNOTATION_FAULT_DETAILS)
    if raw is None or not raw.strip():
        return []
    try:
        parsed = json.loads(raw)
    except (ValueError, TypeError):
        return [f"unparseable fault-details: {_shorten(raw)}"]
    entries = parsed if isinstance(parsed, list) else [parsed]
    lines = []
    for entry in entries:
        if isinstance(entry, dict):
            ordered = [k for k in ("timestamp", "type", "reason", "message") if k in entry]
            ordered += [k for k in entry if k not in ordered]
            body = " ".join(f"{k}={_shorten(str(entry[k]), 200)}" for k in ordered)
        else:
            body = _shorten(json.dumps(entry))
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


def check_node_health(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """HyperPod's node-health-status label and the Ready condition of every HyperPod node."""
    k8s = _require_eks(obs)
    nodes, ignored = _hyperpod_nodes(k8s.nodes.get(), ctx)
    if not nodes:
        scope = f" matching {ctx.scope_node}" if ctx.scope_node else ""
        return [
            finding(
                obs,
                CHECK_NODE_HEALTH,
                Tag.INFO,
                f"No HyperPod-labelled node{scope} is registered in the EKS cluster{_ignored_note(ignored)}",
                section="F",
                evidence=[f"{len(k8s.nodes.get())} Kubernetes node(s) listed"],
            )
        ]

    out: list[Finding] = []
    for node in nodes:
        health = node.labels.get(LABEL_HEALTH)
        ready = _ready_status(node)
        if health == PENDING_REBOOT:
            out.append(
                _node_finding(
                    obs,
                    CHECK_NODE_HEALTH,
                    node,
                    Tag.WARN,
                    f"Node {node.name} is {PENDING_REBOOT}: HyperPod's recovery is rebooting it (Ready={ready})",
                    priority=Priority.P1,
                    section="F",
                    root_cause="HyperPod's health agent found a fault it treats as transient and asked for a "
                    "reboot; the node is NotReady while it restarts and returns Schedulable if the fault clears.",
                    node_action="investigate",
                    next_step="HyperPod is already rebooting this node: wait for it to come back Ready and "
                    "Schedulable and start no reboot or replacement of your own. If it stays PendingReboot, "
                    "read its health-agent log stream and check NodeRecovery.",
                )
            )
        elif health == PENDING_REPLACEMENT:
            out.append(
                _node_finding(
                    obs,
                    CHECK_NODE_HEALTH,
                    node,
                    Tag.WARN,
                    f"Node {node.name} is {PENDING_REPLACEMENT}: HyperPod is replacing it (Ready={ready})",
                    priority=Priority.P1,
                    section="F",
                    root_cause="HyperPod's health agent found a fault that needs new hardware; the node will "
                    "disappear and a new hyperpod-i-… node join, and data on its instance volumes is lost.",
                    node_action="investigate",
                    next_step="HyperPod is already replacing this node (normally about 20–30 minutes): start no "
                    "reboot or replacement of your own; its pods are rescheduled once the new node is Ready.",
                )
            )
        elif ready != "True":
            what = "has not reported a Ready condition" if ready == "absent" else f"is Ready={ready}"
            out.append(
                _node_finding(
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
            )
        elif health == UNSCHEDULABLE:
            dhc_running = node.labels.get(LABEL_DEEP_HEALTH) == DHC_IN_PROGRESS
            out.append(
                _node_finding(
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
            )
        elif health in (SCHEDULABLE, None):
            continue
        else:
            out.append(
                _node_finding(
                    obs,
                    CHECK_NODE_HEALTH,
                    node,
                    Tag.WARN,
                    f"Node {node.name} has an unrecognised {LABEL_HEALTH} value {health!r}",
                    priority=Priority.P2,
                    section="F",
                )
            )

    if not out:
        unlabelled = sum(1 for n in nodes if LABEL_HEALTH not in n.labels)
        evidence = [f"{len(nodes)} HyperPod node(s) Ready; {len(nodes) - unlabelled} labelled {SCHEDULABLE}"]
        if unlabelled:
            evidence.append(f"{unlabelled} HyperPod node(s) carry no {LABEL_HEALTH} label yet")
        out.append(
            finding(
                obs,
                CHECK_NODE_HEALTH,
                Tag.PASS,
                f"All {len(nodes)} HyperPod node(s) are Schedulable and Ready{_ignored_note(ignored)}",
                section="F",
                evidence=evidence,
            )
        )
    elif ignored:
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
    k8s = _require_eks(obs)
    nodes, _ = _hyperpod_nodes(k8s.nodes.get(), ctx)
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


# --------------------------------------------------------------------------- pods


def _crashing(container: K8sContainerStatus) -> bool:
    return container.state != "running" and (container.reason or "") in CRASH_REASONS


def _failing_containers(pod: K8sPod, *, not_ready_counts: bool) -> list[K8sContainerStatus]:
    if pod.phase == "Succeeded":
        return []
    return [c for c in pod.containers if _crashing(c) or (not_ready_counts and not c.ready and c.state == "running")]


def _container_line(pod: K8sPod, c: K8sContainerStatus) -> str:
    parts = [
        f"pod {pod.name} on {pod.node_name or '(unscheduled)'}: container {c.name}",
        f"{c.state}/{c.reason or ('not ready' if not c.ready else '-')}",
        f"restarts={c.restart_count}",
    ]
    if c.last_terminated_reason:
        parts.append(f"last terminated: {c.last_terminated_reason}")
    if c.message:
        parts.append(f"message: {_shorten(c.message, 200)}")
    return ", ".join(parts)


def _pods_with(pods: Iterable[K8sPod], app: str) -> list[K8sPod]:
    return [p for p in pods if p.namespace == KUBE_SYSTEM and p.labels.get("k8s-app") == app]


def _pod_commands(pod: K8sPod, container: str, tail: int = 100) -> list[SuggestedCommand]:
    return [
        read_only(
            ["kubectl", "-n", KUBE_SYSTEM, "describe", "pod", pod.name],
            f"Show the state, restart history and events of {pod.name}",
        ),
        read_only(
            ["kubectl", "-n", KUBE_SYSTEM, "logs", pod.name, "-c", container, "--previous", "--tail", str(tail)],
            f"Read why container {container} of {pod.name} last exited",
        ),
    ]


def _excerpt(message: str, limit: int = 240) -> str:
    """The message, cut to ``limit`` around the text that ties it to the CNI (the tail of a
    sandbox error, where 127.0.0.1:50051 sits, is the part worth keeping)."""
    text = " ".join(message.split())
    if len(text) <= limit:
        return text
    match = re.search(r"50051", text) or _CNI_EVENT.search(text)
    end = min(len(text), max(limit, (match.end() if match else limit) + limit // 3))
    start = max(0, end - limit)
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


def _sandbox_lines(k8s: KubernetesObservation) -> tuple[list[str], str | None]:
    """Evidence lines of CNI-related FailedCreatePodSandBox events, and why they are missing, if they are."""
    if not k8s.sandbox_events.available:
        failure = k8s.sandbox_events.failure
        return [], failure.describe() if failure else k8s.sandbox_events.skipped
    events: list[K8sEvent] = [e for e in k8s.sandbox_events.value or () if _CNI_EVENT.search(e.message)]
    return [
        f"event {e.reason} {e.namespace}/{e.object_name} x{e.count}"
        + (f" last {e.last_seen.isoformat()}" if e.last_seen else "")
        + f": {_excerpt(e.message)}"
        for e in events
    ], None


# --------------------------------------------------------------------------- k8s.cni


def check_cni(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """The aws-node (VPC CNI) DaemonSet and its pods, counted as one problem."""
    k8s = _require_eks(obs)
    ds: K8sDaemonSet | None = next(
        (d for d in k8s.daemonsets.get() if d.name == AWS_NODE and d.namespace == KUBE_SYSTEM), None
    )
    pods = _pods_with(k8s.system_pods.value or (), AWS_NODE) if k8s.system_pods.available else []
    failing = [(p, cs) for p in pods if (cs := _failing_containers(p, not_ready_counts=True))]
    events, events_missing = _sandbox_lines(k8s)

    if ds is None:
        return [
            finding(
                obs,
                CHECK_CNI,
                Tag.INFO,
                "No aws-node DaemonSet in kube-system: another CNI may be in use",
                section="O",
            )
        ]

    ds_line = (
        f"daemonset {KUBE_SYSTEM}/{AWS_NODE}: desired={ds.desired} ready={ds.ready} "
        f"available={ds.available} unavailable={ds.unavailable}"
    )
    ds_broken = ds.unavailable > 0 or ds.ready < ds.desired
    if ds_broken or failing:
        evidence = [ds_line] + [_container_line(p, c) for p, cs in failing for c in cs]
        if not k8s.system_pods.available:
            evidence.append("aws-node pods could not be listed")
        evidence += events
        if events_missing:
            evidence.append(f"sandbox events not read: {events_missing}")
        commands: list[SuggestedCommand] = []
        restarts: list[SuggestedCommand] = []
        for pod, containers in failing[:_COMMAND_PODS]:
            commands += _pod_commands(pod, containers[0].name)
            restarts.append(
                mutating(
                    ["kubectl", "-n", KUBE_SYSTEM, "delete", "pod", pod.name],
                    f"Restart {pod.name}: the DaemonSet recreates it on {pod.node_name or 'its node'}",
                    blast_radius=f"The CNI on {pod.node_name or 'that node'} is briefly unavailable: new pods "
                    "there wait for an IP until it is back; running pods keep their IPs.",
                    changes_configuration=False,
                    preconditions=[
                        "You read the pod's logs and the cause is transient (not missing node-role CNI "
                        "permissions, exhausted subnet IPs or an unreachable image registry).",
                    ],
                    step="change",
                )
            )
        if not failing:
            commands.append(
                read_only(
                    ["kubectl", "-n", KUBE_SYSTEM, "get", "pods", "-l", f"k8s-app={AWS_NODE}", "-o", "wide"],
                    "List the aws-node pods with their nodes, status and restarts",
                )
            )
        reasons = sorted({c.reason or "not ready" for _, cs in failing for c in cs})
        what = f"{ds.ready}/{ds.desired} ready" if ds_broken else f"{len(failing)} pod(s) failing"
        return [
            finding(
                obs,
                CHECK_CNI,
                Tag.FAIL,
                f"aws-node (VPC CNI) DaemonSet is unhealthy: {what}"
                + (f" ({', '.join(reasons)})" if reasons else "")
                + ": pods on the affected nodes get no network",
                priority=Priority.P0,
                section="O",
                evidence=trim_evidence(evidence, 25),
                root_cause="Without a running aws-node (IPAMD) on a node, new pods there fail with "
                "FailedCreatePodSandBox (gRPC 127.0.0.1:50051 refused). Its logs tell which: missing CNI "
                "permissions on the node role, ENI or subnet IP exhaustion, or an image it cannot pull.",
                suggested_commands=commands + restarts,
            )
        ]

    if events:
        return [
            finding(
                obs,
                CHECK_CNI,
                Tag.WARN,
                f"{len(events)} pod sandbox failure event(s) point at the CNI although aws-node looks healthy",
                priority=Priority.P1,
                section="O",
                evidence=trim_evidence([ds_line, *events]),
                root_cause="Pods could not get a network sandbox; aws-node may have been restarting at the "
                "time, or IPAMD may be out of IPs or ENIs on that node.",
                suggested_commands=[
                    read_only(
                        ["kubectl", "-n", KUBE_SYSTEM, "get", "pods", "-l", f"k8s-app={AWS_NODE}", "-o", "wide"],
                        "List the aws-node pods with their nodes, status and restarts",
                    )
                ],
            )
        ]

    if ds.desired == 0:
        return [
            finding(
                obs,
                CHECK_CNI,
                Tag.WARN,
                "aws-node DaemonSet schedules no pods (desired=0): no node has the VPC CNI",
                priority=Priority.P2,
                section="O",
                evidence=[ds_line],
            )
        ]

    evidence = [ds_line]
    if events_missing:
        evidence.append(f"sandbox events not read: {events_missing}")
    return [
        finding(
            obs,
            CHECK_CNI,
            Tag.PASS,
            f"aws-node (VPC CNI) is ready on all {ds.desired} node(s)",
            section="O",
            evidence=evidence,
        )
    ]


# --------------------------------------------------------------------------- k8s.system_pods

_COMPONENTS = (
    ("kube-proxy", "kube-proxy", "service networking (ClusterIP routing) is broken on the affected nodes"),
    ("kube-dns", "CoreDNS", "in-cluster DNS resolution fails"),
)


def check_system_pods(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """kube-proxy and CoreDNS pods in a crash state, one finding per component."""
    k8s = _require_eks(obs)
    system = k8s.system_pods.get()
    out: list[Finding] = []
    healthy: list[str] = []
    for app, label, impact in _COMPONENTS:
        pods = _pods_with(system, app)
        if not pods:
            out.append(
                finding(
                    obs,
                    CHECK_SYSTEM_PODS,
                    Tag.INFO,
                    f"No {label} pods (k8s-app={app}) in kube-system: a replacement may be in use",
                    section="O",
                )
            )
            continue
        failing = [(p, cs) for p in pods if (cs := _failing_containers(p, not_ready_counts=False))]
        if not failing:
            healthy.append(f"{label}: {len(pods)} pod(s) running")
            continue
        commands: list[SuggestedCommand] = []
        for pod, containers in failing[:_COMMAND_PODS]:
            commands += _pod_commands(pod, containers[0].name)
        out.append(
            finding(
                obs,
                CHECK_SYSTEM_PODS,
                Tag.FAIL,
                f"{label} is crashing ({len(failing)} of {len(pods)} pod(s)): {impact}",
                priority=Priority.P0,
                section="O",
                evidence=trim_evidence([_container_line(p, c) for p, cs in failing for c in cs]),
                suggested_commands=commands,
            )
        )
    if healthy and not any(f.tag is Tag.FAIL for f in out):
        out.append(
            finding(
                obs,
                CHECK_SYSTEM_PODS,
                Tag.PASS,
                "kube-system networking pods are healthy (" + ", ".join(h.split(":")[0] for h in healthy) + ")",
                section="O",
                evidence=healthy,
            )
        )
    return out


# --------------------------------------------------------------------------- k8s.hyperpod_namespace


def check_hyperpod_namespace(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """The aws-hyperpod namespace HyperPod's EKS components live in."""
    k8s = _require_eks(obs)
    namespaces = k8s.namespaces.get()
    if HYPERPOD_NAMESPACE in namespaces:
        return [
            finding(
                obs,
                CHECK_NAMESPACE,
                Tag.PASS,
                f"Namespace {HYPERPOD_NAMESPACE} exists",
                section="B.1",
                evidence=[f"{len(namespaces)} namespace(s) listed, {HYPERPOD_NAMESPACE} among them"],
            )
        ]
    eks_arn = obs.eks.value.arn if obs.eks.available and obs.eks.value is not None else obs.cluster.eks_cluster_arn
    target = eks_arn or "the EKS cluster of this HyperPod cluster"
    return [
        finding(
            obs,
            CHECK_NAMESPACE,
            Tag.FAIL,
            f"Namespace {HYPERPOD_NAMESPACE} is missing from the EKS cluster",
            priority=Priority.P1,
            section="B.1",
            evidence=trim_evidence([f"namespaces: {', '.join(sorted(namespaces)) or '(none)'}"]),
            root_cause=f"HyperPod's EKS components expect the {HYPERPOD_NAMESPACE} namespace; without it they "
            "cannot be installed or run.",
            suggested_commands=[
                read_only(
                    ["kubectl", "get", "namespace", HYPERPOD_NAMESPACE],
                    "Confirm the namespace is absent (NotFound), not hidden by RBAC (Forbidden)",
                ),
                mutating(
                    ["kubectl", "create", "namespace", HYPERPOD_NAMESPACE],
                    f"Create the {HYPERPOD_NAMESPACE} namespace",
                    blast_radius=f"Adds one empty namespace to {target}; nothing running changes. Reversible with "
                    f"`kubectl delete namespace {HYPERPOD_NAMESPACE}` while it is still empty.",
                    changes_configuration=True,
                    resource=eks_arn,
                    preconditions=[
                        f"`kubectl get namespace {HYPERPOD_NAMESPACE}` answers NotFound, not Forbidden: an RBAC "
                        "denial is not a missing namespace.",
                        f"kubectl points at {target}.",
                        "The namespace name is the one your HyperPod and Kubernetes versions expect.",
                    ],
                    step="change",
                ),
            ],
        )
    ]


# --------------------------------------------------------------------------- k8s.efa_device_plugin

EFA_RESOURCE = "vpc.amazonaws.com/efa"


def check_efa_device_plugin(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """EFA-capable HyperPod nodes must advertise ``vpc.amazonaws.com/efa``: the EFA device plugin does it.
    Without it no pod can request EFA and NCCL quietly falls back to TCP sockets (§ A)."""
    k8s = _require_eks(obs)
    nodes, _ = _hyperpod_nodes(k8s.nodes.get(), ctx)
    capable = []
    for node in nodes:
        spec = spec_for(node.instance_type or "")
        if spec is not None and spec.efa:
            capable.append((node, spec.efa))
    if not capable:
        raise NotApplicable("no HyperPod node of an EFA-capable instance type")
    judged = [(n, want) for n, want in capable if n.allocatable is not None]
    if not judged:
        raise NotApplicable("the nodes' status.allocatable was not returned")
    missing = [(n, want) for n, want in judged if _quantity(n.allocatable or {}, EFA_RESOURCE) in (None, 0)]
    plugins = [d for d in (k8s.daemonsets.value or ()) if "efa" in d.name.lower()] if k8s.daemonsets.available else []
    evidence = [
        f"node {n.name} ({n.instance_type}): {EFA_RESOURCE}={(n.allocatable or {}).get(EFA_RESOURCE, 'absent')}"
        f", {want} EFA interface(s) on this type"
        for n, want in missing[:10]
    ]
    evidence += [f"daemonset {d.namespace}/{d.name}: desired={d.desired} ready={d.ready}" for d in plugins]
    if not k8s.daemonsets.available:
        evidence.append("kube-system DaemonSets could not be listed")
    if not missing:
        return [
            finding(
                obs,
                CHECK_EFA_PLUGIN,
                Tag.PASS,
                f"Every EFA-capable HyperPod node ({len(judged)}) advertises {EFA_RESOURCE}",
                section="A",
                evidence=evidence,
            )
        ]
    if plugins and all(d.desired == 0 for d in plugins):
        why = (
            "the EFA device plugin DaemonSet schedules no pod (DESIRED 0): its node selector or tolerations "
            "miss these nodes"
        )
    elif k8s.daemonsets.available and not plugins:
        why = "no EFA device plugin DaemonSet in kube-system"
    else:
        why = "the EFA device plugin does not advertise the interfaces on them"
    return [
        finding(
            obs,
            CHECK_EFA_PLUGIN,
            Tag.FAIL,
            f"{len(missing)} of {len(judged)} EFA-capable HyperPod node(s) advertise no {EFA_RESOURCE}: {why}; "
            "pods cannot request EFA and NCCL falls back to TCP sockets (slow, and no error says so)",
            priority=Priority.P1,
            section="A",
            evidence=trim_evidence(evidence, 12),
            root_cause=(
                "On EKS, EFA reaches pods only as the extended resource vpc.amazonaws.com/efa, which the EFA "
                "Kubernetes device plugin advertises per node. A missing plugin, or one whose DaemonSet does not "
                "select these nodes (labels, taints), leaves training on TCP."
            ),
            suggested_commands=[
                read_only(
                    [
                        "kubectl",
                        "get",
                        "nodes",
                        "-o",
                        r"custom-columns=NAME:.metadata.name,EFA:.status.allocatable.vpc\.amazonaws\.com/efa",
                    ],
                    "List what each node advertises for EFA",
                ),
                read_only(
                    ["kubectl", "-n", "kube-system", "get", "daemonset", "-o", "wide"],
                    "Find the EFA device plugin DaemonSet and its selector",
                ),
            ],
            node_action="investigate",
        )
    ]


# --------------------------------------------------------------------------- k8s.efa_pod_env

#: (variable, value) every container that requests EFA should set; the second only on types with RDMA read
EFA_ENV = ("FI_PROVIDER", "efa")
RDMA_ENV = ("FI_EFA_USE_DEVICE_RDMA", "1")


def _rdma_capable(instance_type: str | None) -> bool:
    """GPUDirect RDMA types: the HGX/NVL GPU boards (p4d and later) and Trainium with EFA."""
    spec = spec_for(instance_type or "")
    return spec is not None and bool(spec.efa) and (spec.nvswitch is not None or bool(spec.neuron_devices))


def check_efa_pod_env(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """Pods that request ``vpc.amazonaws.com/efa`` should run with ``FI_PROVIDER=efa`` (and, on RDMA-capable
    types, ``FI_EFA_USE_DEVICE_RDMA=1``) in their environment (§ E). Only the pod spec is read: an image or an
    entrypoint may set them too, so a missing variable is a warning to look, not a fault."""
    k8s = _require_eks(obs)
    pods = k8s.efa_pods.get()
    types = {n.name: n.instance_type for n in (k8s.nodes.value or ())} if k8s.nodes.available else {}
    requesting = [p for p in pods if p.efa_containers and p.phase in ("Running", "Pending")]
    scope = f"pods on {len(k8s.efa_pod_nodes)} node(s) that advertise {EFA_RESOURCE}"
    if not requesting:
        raise NotApplicable(f"no running or pending pod requests {EFA_RESOURCE} ({scope})")
    lacking: dict[tuple[str, str], list[str]] = {}
    missing_vars: dict[tuple[str, str], set[str]] = {}
    for pod in requesting:
        wanted = [EFA_ENV] + ([RDMA_ENV] if _rdma_capable(types.get(pod.node_name or "")) else [])
        for container in pod.efa_containers:
            missing = [f"{var}={value}" for var, value in wanted if container.env.get(var) != value]
            if missing:
                owner = f"{pod.owner_kind} {pod.owner_name}" if pod.owner_kind and pod.owner_name else f"pod {pod.name}"
                key = (pod.namespace, owner)
                lacking.setdefault(key, []).append(
                    f"{pod.name}/{container.name} on {pod.node_name}: lacks {', '.join(missing)}"
                )
                missing_vars.setdefault(key, set()).update(missing)
    if not lacking:
        return [
            finding(
                obs,
                CHECK_EFA_POD_ENV,
                Tag.PASS,
                f"Every pod that requests {EFA_RESOURCE} ({len(requesting)}) sets the EFA environment in its spec",
                section="E",
                evidence=[scope],
            )
        ]
    out = []
    for (namespace, owner), unsorted in sorted(lacking.items()):
        lines = sorted(unsorted)
        first = lines[0].split("/", 1)[0]
        needed = ", ".join(sorted(missing_vars[(namespace, owner)]))
        out.append(
            finding(
                obs,
                CHECK_EFA_POD_ENV,
                Tag.WARN,
                f"{owner} in {namespace}: {len(lines)} container(s) request {EFA_RESOURCE} without {needed} in "
                "their pod spec",
                priority=Priority.P2,
                section="E",
                evidence=trim_evidence([*lines, scope], 12),
                root_cause=(
                    "Without FI_PROVIDER=efa libfabric may pick another provider, and without "
                    "FI_EFA_USE_DEVICE_RDMA=1 on RDMA-capable types NCCL may not use GPUDirect RDMA: collectives "
                    "then run slower or over TCP, with no error. The image or its entrypoint may set them: only the "
                    "pod spec was read."
                ),
                suggested_commands=[
                    read_only(
                        ["kubectl", "-n", namespace, "get", "pod", first, "-o", "jsonpath={.spec.containers[*].env}"],
                        "Read the environment the pod spec sets",
                    ),
                ],
                node_action="fix-workload",
                next_step="Set the variables in the job's manifest (or its chart's values), unless the image sets "
                "them; NCCL_DEBUG=INFO shows which provider NCCL selected.",
            )
        )
    return out


def _quantity(allocatable: dict[str, str], resource: str) -> int | None:
    raw = allocatable.get(resource)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


CHECKS: tuple[Check, ...] = (
    Check(CHECK_NODE_HEALTH, "F", "HyperPod node health labels", check_node_health),
    Check(CHECK_DEEP_HEALTH, "G", "Deep health checks", check_deep_health),
    Check(CHECK_CNI, "O", "VPC CNI (aws-node)", check_cni),
    Check(CHECK_SYSTEM_PODS, "O", "kube-proxy and CoreDNS", check_system_pods),
    Check(CHECK_NAMESPACE, "B.1", "aws-hyperpod namespace", check_hyperpod_namespace),
    Check(CHECK_EFA_PLUGIN, "A", "EFA device plugin coverage", check_efa_device_plugin),
    Check(CHECK_EFA_POD_ENV, "E", "EFA environment of pods requesting EFA", check_efa_pod_env),
)
