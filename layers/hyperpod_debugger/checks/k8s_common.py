"""What the Kubernetes checks (:mod:`.kubernetes`, :mod:`.k8s_nodes`, :mod:`.k8s_networking`) share:
the EKS guard, the HyperPod nodes in scope and the text shortener of their evidence."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperpod_debugger.domain.observations import ClusterObservation, NotApplicable

if TYPE_CHECKING:
    from hyperpod_debugger.checks.base import CheckContext
    from hyperpod_debugger.domain.orchestrators import K8sNode, KubernetesObservation

KUBE_SYSTEM = "kube-system"

_RAW_LIMIT = 300


def require_eks(obs: ClusterObservation) -> KubernetesObservation:
    if obs.cluster.orchestrator != "EKS":
        raise NotApplicable("the cluster is not orchestrated by EKS")
    return obs.kubernetes.get()


def hyperpod_nodes(nodes: list[K8sNode], ctx: CheckContext) -> tuple[list[K8sNode], int]:
    """HyperPod nodes in scope, and how many nodes without HyperPod labels were left out."""
    hyperpod = [n for n in nodes if n.is_hyperpod]
    ignored = len(nodes) - len(hyperpod)
    if ctx.scope_node:
        hyperpod = [n for n in hyperpod if ctx.scope_node in (n.instance_id, n.name)]
    return hyperpod, ignored


def shorten(text: str, limit: int = _RAW_LIMIT) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
