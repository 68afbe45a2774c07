"""Typed observations of the orchestrators: Kubernetes objects of the EKS cluster, and what the
Slurm controller reported. Collectors fill them (``aws/k8s.py``, the Slurm query over SSM); checks
read them (``checks/kubernetes.py``, ``checks/slurm.py``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hyperpod_debugger.domain.observations import Observed

#: HyperPod's label and annotation keys on EKS nodes.
LABEL_HEALTH = "sagemaker.amazonaws.com/node-health-status"
LABEL_DEEP_HEALTH = "sagemaker.amazonaws.com/deep-health-check-status"
LABEL_FAULT_TYPES = "sagemaker.amazonaws.com/fault-types"
LABEL_FAULT_REASONS = "sagemaker.amazonaws.com/fault-reasons"
ANNOTATION_FAULT_DETAILS = "sagemaker.amazonaws.com/fault-details"
_INSTANCE = re.compile(r"\bi-[0-9a-f]{8}(?:[0-9a-f]{9})?\b")


@dataclass(frozen=True, slots=True)
class K8sNode:
    name: str
    labels: dict[str, str]
    annotations: dict[str, str]
    taints: tuple[dict[str, Any], ...]
    #: status.conditions as the API returns them (type, status, reason, message, lastTransitionTime)
    conditions: tuple[dict[str, Any], ...]
    provider_id: str | None = None
    unschedulable: bool = False
    #: status.allocatable (resource name → quantity as the API prints it); None when the object has none
    allocatable: dict[str, str] | None = None

    @property
    def instance_type(self) -> str | None:
        return self.labels.get("node.kubernetes.io/instance-type") or self.labels.get(
            "beta.kubernetes.io/instance-type"
        )

    @property
    def instance_id(self) -> str | None:
        """From ``spec.providerID`` (``aws:///<az>/i-…``), else from the name (``hyperpod-i-…``)."""
        for source in (self.provider_id or "", self.name):
            match = _INSTANCE.search(source)
            if match:
                return match.group(0)
        return None

    @property
    def is_hyperpod(self) -> bool:
        return any(key.startswith("sagemaker.amazonaws.com/") for key in self.labels)


@dataclass(frozen=True, slots=True)
class K8sContainerStatus:
    name: str
    ready: bool
    restart_count: int
    #: "waiting" / "running" / "terminated" and its reason (e.g. CrashLoopBackOff, OOMKilled)
    state: str
    reason: str | None
    message: str | None
    last_terminated_reason: str | None = None
    #: a terminated container's exit code and when it ended (``state.terminated``)
    exit_code: int | None = None
    finished_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class K8sEfaContainer:
    """A container of a pod's spec that requests EFA interfaces (``vpc.amazonaws.com/efa``), with the
    environment its spec sets (literal values; a value taken from elsewhere reads ``(from a reference)``)."""

    name: str
    efa: str
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class K8sPod:
    namespace: str
    name: str
    labels: dict[str, str]
    node_name: str | None
    phase: str
    containers: tuple[K8sContainerStatus, ...]
    #: the controlling owner (metadata.ownerReferences, controller=true): kind and name, e.g. DaemonSet aws-node
    owner_kind: str | None = None
    owner_name: str | None = None
    #: the spec's containers that request EFA interfaces (§ E: their FI_* environment)
    efa_containers: tuple[K8sEfaContainer, ...] = ()
    #: the pod's own status reason and message (``Evicted``, ``NodeLost``, ``Shutdown``…), when it has one
    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class K8sDaemonSet:
    namespace: str
    name: str
    desired: int
    ready: int
    available: int
    unavailable: int


@dataclass(frozen=True, slots=True)
class K8sEvent:
    namespace: str
    reason: str
    message: str
    kind: str  # involvedObject.kind
    object_name: str  # involvedObject.name
    count: int
    last_seen: datetime | None
    type: str  # Normal | Warning


@dataclass(frozen=True, slots=True)
class KubernetesObservation:
    endpoint: str
    nodes: Observed[list[K8sNode]]
    #: pods of kube-system (aws-node, kube-proxy, coredns)
    system_pods: Observed[list[K8sPod]]
    #: DaemonSets of kube-system
    daemonsets: Observed[list[K8sDaemonSet]]
    namespaces: Observed[list[str]]
    #: Warning events with reason FailedCreatePodSandBox, all namespaces
    sandbox_events: Observed[list[K8sEvent]]
    #: the pods on the nodes that advertise EFA (up to a cap), and those nodes' names (§ E)
    efa_pods: Observed[list[K8sPod]] = field(default_factory=lambda: Observed.skip("not read"))
    efa_pod_nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SlurmController:
    instance_id: str
    group: str
    #: how we know: "scontrol ping" when confirmed on the node, "group name" when only guessed
    confirmed_by: str


@dataclass(frozen=True, slots=True)
class SlurmObservation:
    controller: SlurmController
    #: raw outputs of the read-only query run on the controller, by key: "ping", "config",
    #: "sinfo", "nodes" (scontrol show node --oneliner), "squeue", "services" (systemctl is-active)
    outputs: dict[str, str] = field(default_factory=dict)
    #: Slurm node name (ip-10-1-2-3) -> instance id, from PrivateDnsHostname / PrivatePrimaryIp
    node_instances: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One job that occupies nodes, from the Slurm query's ``jobs`` section (``%i|%T|%u|%D|%N|%j``; parsed by
    ``slurm/parse.py``)."""

    job_id: str
    state: str
    user: str
    #: squeue's node count (``%D``); None when it printed something else
    node_count: int | None
    #: every node the job holds (the hostlist expanded)
    nodes: tuple[str, ...]
    name: str
    line: str
