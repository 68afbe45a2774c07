"""§ E on EKS: pods that request ``vpc.amazonaws.com/efa`` and the EFA environment their spec sets.

The pod object follows what the API server returns for a Kubeflow PyTorchJob worker (``spec.containers[]``
with ``resources.limits`` and ``env`` name/value pairs, ``valueFrom`` for references); the variables are the
ones AWS's EFA-on-EKS guidance sets (``FI_PROVIDER=efa``, ``FI_EFA_USE_DEVICE_RDMA=1`` on RDMA-capable types).
"""

from __future__ import annotations

from typing import Any

import pytest

from hyperpod_debugger.aws.k8s import parse_pod
from hyperpod_debugger.checks.kubernetes import CHECK_EFA_POD_ENV, check_efa_pod_env
from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.domain.observations import ApiFailure, NotApplicable, Observed, Unobservable
from hyperpod_debugger.domain.orchestrators import K8sNode
from tests.unit.test_checks_kubernetes import kobs

P5_NODE = "hyperpod-i-0a1b2c3d4e5f60718"
G5_NODE = "hyperpod-i-0f1e2d3c4b5a69788"


def node(name: str, itype: str) -> K8sNode:
    return K8sNode(
        name,
        {"node.kubernetes.io/instance-type": itype, "sagemaker.amazonaws.com/instance-group-name": "workers"},
        {},
        (),
        ({"type": "Ready", "status": "True"},),
        allocatable={"vpc.amazonaws.com/efa": "32"},
    )


def pod_json(name: str, node_name: str, env: list[dict[str, Any]], *, efa: str | None = "32") -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}}
    if efa is not None:
        resources["limits"]["vpc.amazonaws.com/efa"] = efa
        resources["requests"]["vpc.amazonaws.com/efa"] = efa
    return {
        "metadata": {
            "name": name,
            "namespace": "training",
            "ownerReferences": [
                {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "llama", "controller": True}
            ],
        },
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "pytorch", "image": "pytorch-training:2.5.1", "env": env, "resources": resources}],
        },
        "status": {"phase": "Running"},
    }


FULL_ENV = [
    {"name": "FI_PROVIDER", "value": "efa"},
    {"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"},
    {"name": "NCCL_DEBUG", "value": "INFO"},
    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
]


def obs_with(pods: list[dict[str, Any]], nodes: list[K8sNode] | None = None):
    nodes = nodes or [node(P5_NODE, "ml.p5.48xlarge"), node(G5_NODE, "ml.g5.48xlarge")]
    k8s = kobs(nodes=nodes).kubernetes.get()
    from dataclasses import replace

    k8s = replace(k8s, efa_pods=Observed.ok([parse_pod(p) for p in pods]), efa_pod_nodes=tuple(n.name for n in nodes))
    from tests import builders as b

    return b.observation(kubernetes=Observed.ok(k8s))


def test_parse_pod_keeps_the_efa_containers_and_their_literal_env():
    parsed = parse_pod(pod_json("w-0", P5_NODE, FULL_ENV))
    [c] = parsed.efa_containers
    assert (c.name, c.efa) == ("pytorch", "32")
    assert c.env == {
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
        "NCCL_DEBUG": "INFO",
        "POD_IP": "(from a reference)",
    }
    assert parse_pod(pod_json("w-1", P5_NODE, FULL_ENV, efa=None)).efa_containers == ()


def test_pods_with_the_efa_environment_pass():
    [ok] = check_efa_pod_env(obs_with([pod_json("w-0", P5_NODE, FULL_ENV)]), None)
    assert ok.tag is Tag.PASS and ok.check == CHECK_EFA_POD_ENV and ok.section == "E"


def test_a_job_without_fi_provider_is_one_warning_naming_its_pods():
    env = [{"name": "NCCL_DEBUG", "value": "INFO"}]
    findings = check_efa_pod_env(obs_with([pod_json("w-0", P5_NODE, env), pod_json("w-1", P5_NODE, env)]), None)
    [warn] = findings
    assert warn.tag is Tag.WARN and warn.priority is Priority.P2 and warn.section == "E"
    assert warn.message == (
        "PyTorchJob llama in training: 2 container(s) request vpc.amazonaws.com/efa without "
        "FI_EFA_USE_DEVICE_RDMA=1, FI_PROVIDER=efa in their pod spec"
    )
    assert any(e.startswith("w-0/pytorch on ") for e in warn.evidence)
    assert all(not c.mutates for c in warn.suggested_commands)


def test_rdma_is_asked_only_on_rdma_capable_types():
    env = [{"name": "FI_PROVIDER", "value": "efa"}]
    [ok] = check_efa_pod_env(obs_with([pod_json("w-0", G5_NODE, env)]), None)
    assert ok.tag is Tag.PASS
    [warn] = check_efa_pod_env(obs_with([pod_json("w-0", P5_NODE, env)]), None)
    assert "FI_EFA_USE_DEVICE_RDMA=1" in warn.message and "FI_PROVIDER" not in warn.message


def test_no_pod_requesting_efa_is_not_applicable_and_an_unread_list_is_unknown():
    with pytest.raises(NotApplicable):
        check_efa_pod_env(obs_with([pod_json("w-0", P5_NODE, [], efa=None)]), None)
    obs = obs_with([])
    from dataclasses import replace

    from tests import builders as b

    k8s = replace(obs.kubernetes.get(), efa_pods=Observed.failed(ApiFailure("eks:AccessKubernetesApi", "denied", "x")))
    with pytest.raises(Unobservable):
        check_efa_pod_env(b.observation(kubernetes=Observed.ok(k8s)), None)
