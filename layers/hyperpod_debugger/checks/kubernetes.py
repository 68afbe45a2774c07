"""Kubernetes view of an EKS-orchestrated HyperPod cluster: the health labels HyperPod's health
agent puts on its nodes (runbook F) and deep health checks (G), in :mod:`.k8s_nodes`; the VPC CNI
and the kube-system networking pods (O), in :mod:`.k8s_networking`; here the ``aws-hyperpod``
namespace (B.1), EFA device plugin coverage (A) and the EFA environment of the pods that request
EFA (E), and the ordered list of all of them.

Pure: every check reads ``obs.kubernetes`` only.
"""

from __future__ import annotations

from hyperpod_debugger.checks.base import CheckContext, finding
from hyperpod_debugger.checks.k8s_common import hyperpod_nodes, require_eks
from hyperpod_debugger.checks.k8s_networking import CHECK_CNI, CHECK_SYSTEM_PODS, check_cni, check_system_pods
from hyperpod_debugger.checks.k8s_nodes import (
    CHECK_DEEP_HEALTH,
    CHECK_NODE_HEALTH,
    check_deep_health,
    check_node_health,
)
from hyperpod_debugger.domain.catalog import spec_for
from hyperpod_debugger.domain.checking import Check
from hyperpod_debugger.domain.commands import mutating, read_only
from hyperpod_debugger.domain.model import Finding, Priority, Tag, trim_evidence
from hyperpod_debugger.domain.observations import ClusterObservation, NotApplicable

CHECK_EFA_PLUGIN = "k8s.efa_device_plugin"
CHECK_NAMESPACE = "k8s.hyperpod_namespace"
CHECK_EFA_POD_ENV = "k8s.efa_pod_env"

HYPERPOD_NAMESPACE = "aws-hyperpod"


# --------------------------------------------------------------------------- k8s.hyperpod_namespace


def check_hyperpod_namespace(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """The aws-hyperpod namespace HyperPod's EKS components live in."""
    k8s = require_eks(obs)
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
    k8s = require_eks(obs)
    nodes, _ = hyperpod_nodes(k8s.nodes.get(), ctx)
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
    k8s = require_eks(obs)
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
