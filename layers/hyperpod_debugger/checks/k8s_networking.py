"""The Kubernetes networking of an EKS-orchestrated HyperPod cluster (runbook O): the VPC CNI
(the ``aws-node`` DaemonSet, its pods and the pod-sandbox failures that point at it) and the
kube-proxy and CoreDNS pods of ``kube-system``.

Pure: every check reads ``obs.kubernetes`` only. A DaemonSet problem is reported once, with the
pod-level view of it as evidence of that same finding.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from hyperpod_debugger.checks.base import CheckContext, finding
from hyperpod_debugger.checks.k8s_common import KUBE_SYSTEM, require_eks, shorten
from hyperpod_debugger.domain.commands import mutating, read_only
from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag, trim_evidence
from hyperpod_debugger.domain.orchestrators import (
    K8sContainerStatus,
    K8sDaemonSet,
    K8sEvent,
    K8sPod,
    KubernetesObservation,
)

if TYPE_CHECKING:
    from hyperpod_debugger.domain.observations import ClusterObservation

CHECK_CNI = "k8s.cni"
CHECK_SYSTEM_PODS = "k8s.system_pods"

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
#: The sandbox-failure text of a CNI that does not answer (IPAMD listens on 127.0.0.1:50051).
_CNI_EVENT = re.compile(r"50051|\bcni\b|ipamd|aws-node|network plugin", re.I)

#: At most this many pods get their own commands in one finding.
_COMMAND_PODS = 3

#: Pods with the containers of each that keep failing.
_FailingPods = list[tuple[K8sPod, list[K8sContainerStatus]]]


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
        parts.append(f"message: {shorten(c.message, 200)}")
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
    k8s = require_eks(obs)
    ds: K8sDaemonSet | None = next(
        (d for d in k8s.daemonsets.get() if d.name == AWS_NODE and d.namespace == KUBE_SYSTEM), None
    )
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
    pods = _pods_with(k8s.system_pods.value or (), AWS_NODE) if k8s.system_pods.available else []
    failing = [(p, cs) for p in pods if (cs := _failing_containers(p, not_ready_counts=True))]
    events, events_missing = _sandbox_lines(k8s)
    ds_line = (
        f"daemonset {KUBE_SYSTEM}/{AWS_NODE}: desired={ds.desired} ready={ds.ready} "
        f"available={ds.available} unavailable={ds.unavailable}"
    )
    events_unread = [f"sandbox events not read: {events_missing}"] if events_missing else []

    if _daemonset_short(ds) or failing:
        evidence = [ds_line, *(_container_line(p, c) for p, cs in failing for c in cs)]
        if not k8s.system_pods.available:
            evidence.append("aws-node pods could not be listed")
        return [_cni_unhealthy(obs, ds, failing, [*evidence, *events, *events_unread])]
    if events:
        return [_cni_sandbox_failures(obs, ds_line, events)]
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
    return [
        finding(
            obs,
            CHECK_CNI,
            Tag.PASS,
            f"aws-node (VPC CNI) is ready on all {ds.desired} node(s)",
            section="O",
            evidence=[ds_line, *events_unread],
        )
    ]


def _daemonset_short(ds: K8sDaemonSet) -> bool:
    """Whether the DaemonSet has fewer ready pods than it wants."""
    return ds.unavailable > 0 or ds.ready < ds.desired


def _cni_unhealthy(obs: ClusterObservation, ds: K8sDaemonSet, failing: _FailingPods, evidence: list[str]) -> Finding:
    reasons = sorted({c.reason or "not ready" for _, cs in failing for c in cs})
    what = f"{ds.ready}/{ds.desired} ready" if _daemonset_short(ds) else f"{len(failing)} pod(s) failing"
    return finding(
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
        suggested_commands=_cni_commands(failing),
    )


def _cni_commands(failing: _FailingPods) -> list[SuggestedCommand]:
    """Read why the first failing pods exited, then restart them; list the pods when none is failing."""
    if not failing:
        return [_list_aws_node_pods()]
    shown = failing[:_COMMAND_PODS]
    reads = [command for pod, containers in shown for command in _pod_commands(pod, containers[0].name)]
    return reads + [_restart_aws_node_pod(pod) for pod, _ in shown]


def _restart_aws_node_pod(pod: K8sPod) -> SuggestedCommand:
    return mutating(
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


def _list_aws_node_pods() -> SuggestedCommand:
    return read_only(
        ["kubectl", "-n", KUBE_SYSTEM, "get", "pods", "-l", f"k8s-app={AWS_NODE}", "-o", "wide"],
        "List the aws-node pods with their nodes, status and restarts",
    )


def _cni_sandbox_failures(obs: ClusterObservation, ds_line: str, events: list[str]) -> Finding:
    return finding(
        obs,
        CHECK_CNI,
        Tag.WARN,
        f"{len(events)} pod sandbox failure event(s) point at the CNI although aws-node looks healthy",
        priority=Priority.P1,
        section="O",
        evidence=trim_evidence([ds_line, *events]),
        root_cause="Pods could not get a network sandbox; aws-node may have been restarting at the "
        "time, or IPAMD may be out of IPs or ENIs on that node.",
        suggested_commands=[_list_aws_node_pods()],
    )


# --------------------------------------------------------------------------- k8s.system_pods

_COMPONENTS = (
    ("kube-proxy", "kube-proxy", "service networking (ClusterIP routing) is broken on the affected nodes"),
    ("kube-dns", "CoreDNS", "in-cluster DNS resolution fails"),
)


def check_system_pods(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """kube-proxy and CoreDNS pods in a crash state, one finding per component."""
    k8s = require_eks(obs)
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
