"""The read-only Kubernetes client (aws/k8s.py) against the fake EKS API server (sim/hyperpod_sim/fake_k8s.py), on loopback."""

from __future__ import annotations

import base64
import json
import socket
import ssl
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
import urllib3

from hyperpod_debugger.aws.k8s import (
    ACCESS_ACTION,
    TOKEN_PREFIX,
    KubeReader,
    collect_kubernetes,
    eks_token,
)
from hyperpod_debugger.domain.observations import EksCluster
from hyperpod_debugger.domain.orchestrators import ANNOTATION_FAULT_DETAILS, LABEL_DEEP_HEALTH, LABEL_HEALTH
from hyperpod_sim.fake_k8s import FakeKubernetes, demo_objects, make_ca, verify_token
from tests.conftest import FIXTURES

CLUSTER = "hp-eks-prod"
REGION = "us-east-2"
K8S = FIXTURES / "k8s"


def _items(name: str) -> list[dict]:
    return json.loads((K8S / name).read_text())["items"]


def recorded_objects() -> dict[str, list[dict]]:
    """The recorded lists, plus one Normal event that the reason selector must filter out."""
    normal = {
        "metadata": {"name": "llama-ft-worker-3.1878b2a4b1d0e2f3", "namespace": "training"},
        "involvedObject": {"kind": "Pod", "name": "llama-ft-worker-3", "namespace": "training"},
        "reason": "Scheduled",
        "message": "Successfully assigned training/llama-ft-worker-3 to hyperpod-i-0c52e8a6d19f07b43",
        "type": "Normal",
        "lastTimestamp": "2026-11-30T10:24:40Z",
        "count": 1,
    }
    return {
        "nodes": _items("nodes.json"),
        "pods": _items("kube-system-pods.json"),
        "daemonsets": _items("kube-system-daemonsets.json"),
        "namespaces": _items("namespaces.json"),
        "events": [normal, *_items("events-failed-sandbox.json")],
    }


def eks_for(fake: FakeKubernetes, **overrides) -> EksCluster:
    fields: dict[str, Any] = {
        "name": CLUSTER,
        "arn": f"arn:aws:eks:{REGION}:111122223333:cluster/{CLUSTER}",
        "status": "ACTIVE",
        "vpc_id": "vpc-0a1b2c3d4e5f60718",
        "security_group_ids": (),
        "cluster_security_group_id": None,
        "authentication_mode": "API_AND_CONFIG_MAP",
        "endpoint_public": True,
        "endpoint_private": True,
        "endpoint": fake.endpoint,
        "certificate_authority": fake.ca_data,
    }
    fields.update(overrides)
    return EksCluster(**fields)


def token_for(cluster: str = CLUSTER) -> str:
    return eks_token(boto3.session.Session(region_name=REGION), cluster, REGION)


@pytest.fixture
def fake():
    with FakeKubernetes(cluster_name=CLUSTER, objects=recorded_objects()) as server:
        yield server


# --------------------------------------------------------------------------- token


def test_token_is_a_presigned_get_caller_identity_url_signing_the_cluster_name():
    token = token_for()
    assert token.startswith(TOKEN_PREFIX)
    body = token[len(TOKEN_PREFIX) :]
    assert "=" not in body and "+" not in body and "/" not in body
    url = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    assert parts.scheme == "https" and parts.hostname == f"sts.{REGION}.amazonaws.com"
    assert query["Action"] == "GetCallerIdentity" and query["Version"] == "2011-06-15"
    assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert query["X-Amz-Expires"] == "60"
    assert query["X-Amz-SignedHeaders"].split(";") == ["host", "x-k8s-aws-id"]
    assert query["X-Amz-Credential"].endswith(f"/{REGION}/sts/aws4_request")
    assert CLUSTER not in url  # only the signature carries the cluster name
    # the fake's independent SigV4 check: valid for this cluster, not for another
    assert verify_token(f"Bearer {token}", CLUSTER, secret_key="testing") is None
    assert "signature" in verify_token(f"Bearer {token}", "other-cluster", secret_key="testing")


def test_token_from_an_sts_client_leaves_the_client_unchanged():
    sts = boto3.session.Session().client("sts", region_name=REGION)
    first = eks_token(sts, CLUSTER, REGION)
    assert verify_token(f"Bearer {first}", CLUSTER, secret_key="testing") is None
    # the header hook was removed again: a plain presign of the same client signs only host
    plain = sts.generate_presigned_url("get_caller_identity", ExpiresIn=60)
    assert "x-k8s-aws-id" not in plain


def test_token_check_rejects_expired_and_foreign_tokens():
    token = token_for()
    later = datetime.now(UTC).timestamp() + 120
    assert "expired" in verify_token(f"Bearer {token}", CLUSTER, secret_key="testing", now=later)
    assert verify_token("Bearer abc", CLUSTER, secret_key="testing") == "not a k8s-aws-v1 token"
    s3_url = base64.urlsafe_b64encode(b"https://s3.amazonaws.com/?Action=GetCallerIdentity").decode().rstrip("=")
    assert "not an STS URL" in verify_token(f"Bearer k8s-aws-v1.{s3_url}", CLUSTER, secret_key="testing")


# --------------------------------------------------------------------------- lists


def test_all_five_lists_are_read_and_mapped(fake, now):
    obs = collect_kubernetes(eks_for(fake), token_for(), now=now)
    assert obs.endpoint == fake.endpoint

    nodes = {n.name: n for n in obs.nodes.get()}
    assert len(nodes) == 6
    replacing = nodes["hyperpod-i-0b7d41e9c05a3f218"]
    assert replacing.instance_id == "i-0b7d41e9c05a3f218" and replacing.is_hyperpod
    assert replacing.labels[LABEL_HEALTH] == "UnschedulablePendingReplacement"
    assert [f["type"] for f in json.loads(replacing.annotations[ANNOTATION_FAULT_DETAILS])] == [
        "NvidiaErrorTerminate"
    ] * 2
    assert {t["key"] for t in replacing.taints} >= {"sagemaker.amazonaws.com/node-health-status"}
    assert any(c["type"] == "NvidiaErrorTerminate" and c["status"] == "True" for c in replacing.conditions)
    assert nodes["hyperpod-i-0d18b3f0a4c6e2971"].labels[LABEL_DEEP_HEALTH] == "Failed"
    system = nodes["ip-10-1-12-54.us-east-2.compute.internal"]
    assert not system.is_hyperpod and system.instance_id == "i-07f2a9c41e8b3d650"

    pods = {p.name: p for p in obs.system_pods.get()}
    assert len(pods) == 15 and all(p.namespace == "kube-system" for p in pods.values())
    crashing = pods["aws-node-c4rtw"]
    assert crashing.node_name == "hyperpod-i-0c52e8a6d19f07b43" and crashing.labels["k8s-app"] == "aws-node"
    aws_node, agent = crashing.containers  # the completed init container is left out
    assert (aws_node.name, aws_node.state, aws_node.reason, aws_node.restart_count) == (
        "aws-node",
        "waiting",
        "CrashLoopBackOff",
        9,
    )
    assert aws_node.last_terminated_reason == "Error" and not aws_node.ready
    assert agent.name == "aws-eks-nodeagent" and agent.ready and agent.state == "running"
    unscheduled = pods["coredns-7c9f5d8b6-zz8rd"]
    assert unscheduled.phase == "Pending" and unscheduled.node_name is None and unscheduled.containers == ()

    daemonsets = {d.name: d for d in obs.daemonsets.get()}
    assert (daemonsets["aws-node"].desired, daemonsets["aws-node"].ready, daemonsets["aws-node"].unavailable) == (
        6,
        4,
        2,
    )
    assert "aws-hyperpod" in obs.namespaces.get()

    events = obs.sandbox_events.get()
    assert {e.reason for e in events} == {"FailedCreatePodSandBox"}  # the Normal event was filtered by the server
    assert len(events) == 3
    refused = [e for e in events if "127.0.0.1:50051: connect: connection refused" in e.message]
    assert {e.object_name for e in refused} == {"llama-ft-worker-3", "llama-ft-worker-7"}
    assert refused[0].count in (41, 39) and refused[0].type == "Warning" and refused[0].kind == "Pod"
    assert refused[0].last_seen is not None and refused[0].last_seen.tzinfo is not None

    # only GETs were sent, each with a limit, and the events read carried the reason selector
    assert {r.method for r in fake.requests} == {"GET"}
    assert all(r.query.get("limit") == ["500"] for r in fake.requests)
    assert [r.query.get("fieldSelector") for r in fake.requests if r.path == "/api/v1/events"] == [
        ["reason=FailedCreatePodSandBox"]
    ]


def test_pagination_follows_continue_tokens(fake, now):
    reader = KubeReader(fake.endpoint, fake.ca_data, token_for(), page_limit=2)
    obs = collect_kubernetes(eks_for(fake), "unused", now=now, reader=reader)
    assert len(obs.nodes.get()) == 6 and len(obs.system_pods.get()) == 15
    node_calls = [r for r in fake.requests if r.path == "/api/v1/nodes"]
    assert len(node_calls) == 3
    assert "continue" not in node_calls[0].query and all("continue" in r.query for r in node_calls[1:])
    assert len([r for r in fake.requests if r.path == "/api/v1/namespaces/kube-system/pods"]) == 8
    assert len({n.name for n in obs.nodes.get()}) == 6  # no page read twice


def test_the_pods_of_the_nodes_that_advertise_efa_are_read_node_by_node(fake, now):
    # § E: the pods on the EFA nodes (their spec's EFA requests and environment), one selector-bound list per node
    obs = collect_kubernetes(eks_for(fake), token_for(), now=now)
    advertising = sorted(
        n.name for n in obs.nodes.get() if (n.allocatable or {}).get("vpc.amazonaws.com/efa", "0") != "0"
    )
    assert advertising  # the recorded cluster has EFA nodes (and one that advertises 0)
    assert list(obs.efa_pod_nodes) == advertising
    reads = [r for r in fake.requests if r.path == "/api/v1/pods"]
    assert [r.query.get("fieldSelector") for r in reads] == [[f"spec.nodeName={n}"] for n in advertising]
    assert obs.efa_pods.available
    assert {p.node_name for p in obs.efa_pods.get()} <= set(advertising)


def test_event_window_drops_old_sandbox_events(fake, now):
    obs = collect_kubernetes(eks_for(fake), token_for(), now=now, event_window=timedelta(hours=2))
    assert {e.object_name for e in obs.sandbox_events.get()} == {"llama-ft-worker-3", "llama-ft-worker-7"}


# --------------------------------------------------------------------------- failures


def test_wrong_ca_fails_tls_verification_without_crashing(fake, now):
    other_ca = make_ca("another-cluster").ca_data
    obs = collect_kubernetes(eks_for(fake, certificate_authority=other_ca), token_for(), now=now)
    failure = obs.nodes.failure
    assert failure is not None and failure.kind in ("endpoint", "error")
    assert "TLS verification" in failure.message and "cluster CA" in failure.message
    # once the endpoint failed, the other lists report the same failure instead of retrying
    assert obs.system_pods.failure == failure and obs.sandbox_events.failure == failure
    assert fake.requests == []


def test_token_for_another_cluster_is_refused_with_401(fake, now):
    obs = collect_kubernetes(eks_for(fake), token_for("some-other-cluster"), now=now)
    for observed in (obs.nodes, obs.system_pods, obs.daemonsets, obs.namespaces, obs.sandbox_events):
        assert observed.failure is not None
        assert observed.failure.kind == "denied" and observed.failure.action == ACCESS_ACTION
        assert observed.failure.code == "Unauthorized"
    assert "access entry" in obs.nodes.failure.message
    assert {r.status for r in fake.requests} == {401}


def test_rbac_denial_on_nodes_only_keeps_the_other_lists(fake, now):
    fake.forbid.add("nodes")
    obs = collect_kubernetes(eks_for(fake), token_for(), now=now)
    failure = obs.nodes.failure
    assert failure is not None and failure.kind == "denied" and failure.action == ACCESS_ACTION
    assert failure.message.startswith("Kubernetes RBAC: cannot list nodes")
    assert 'cannot list resource "nodes"' in failure.message and failure.code == "Forbidden"
    assert len(obs.system_pods.get()) == 15
    assert len(obs.daemonsets.get()) == 4
    assert len(obs.namespaces.get()) == 7
    assert len(obs.sandbox_events.get()) == 3
    # the EFA nodes' pods could not be chosen: unknown with the same cause, not "no EFA node"
    assert obs.efa_pods.failure == failure and obs.efa_pod_nodes == ()


def test_rbac_denial_on_cluster_wide_pods_makes_the_efa_pods_unknown(fake, now):
    fake.forbid.add("pods")
    obs = collect_kubernetes(eks_for(fake), token_for(), now=now)
    assert obs.nodes.available and obs.efa_pods.failure is not None and obs.efa_pods.failure.kind == "denied"


def test_namespaced_rbac_denial_names_the_namespace(fake, now):
    fake.forbid.add("daemonsets")
    obs = collect_kubernetes(eks_for(fake), token_for(), now=now)
    assert "daemonsets.apps" in obs.daemonsets.failure.message
    assert 'in the namespace "kube-system"' in obs.daemonsets.failure.message
    assert obs.nodes.available


def test_server_error_is_an_error_failure(fake, now):
    fake.fail.add("events")
    obs = collect_kubernetes(eks_for(fake), token_for(), now=now)
    assert obs.sandbox_events.failure.kind == "error" and "HTTP 500" in obs.sandbox_events.failure.message
    assert obs.nodes.available


def test_malformed_json_is_a_malformed_failure(fake, now):
    fake.malformed.add("pods")
    obs = collect_kubernetes(eks_for(fake), token_for(), now=now)
    assert obs.system_pods.failure.kind == "malformed"
    assert obs.nodes.available and obs.daemonsets.available


def test_server_down_is_an_endpoint_failure(now):
    with FakeKubernetes(cluster_name=CLUSTER) as server:
        eks = eks_for(server, endpoint_public=False, endpoint_private=True)
    # the server is stopped: nothing listens on its port any more
    obs = collect_kubernetes(eks, token_for(), now=now)
    failure = obs.nodes.failure
    assert failure is not None and failure.kind == "endpoint"
    assert "not reachable: private-only endpoint or no route" in failure.message
    assert "run from inside the cluster VPC" in failure.message
    assert obs.namespaces.failure == failure


def test_silent_server_is_a_timeout_not_a_hang(now):
    # the port accepts TCP connections (kernel backlog) but nothing ever answers the TLS handshake
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        reader = KubeReader(f"https://127.0.0.1:{port}", make_ca().ca_data, "t", connect_timeout=0.3, read_timeout=0.3)
        eks = EksCluster("c", "arn", "ACTIVE", None, (), None, None, True, False)
        obs = collect_kubernetes(eks, "t", now=now, reader=reader)
    failure = obs.nodes.failure
    assert failure is not None and failure.kind in ("endpoint", "timeout")
    assert obs.sandbox_events.failure == failure  # not five timeouts in a row


def test_missing_endpoint_or_ca_fails_every_list(now):
    eks = EksCluster("c", "arn", "ACTIVE", None, (), None, None, True, False)
    obs = collect_kubernetes(eks, "t", now=now)
    assert obs.nodes.failure.kind == "malformed" and obs.sandbox_events.failure == obs.nodes.failure


def test_reader_has_no_method_other_than_get():
    public = {name for name in dir(KubeReader) if not name.startswith("_")}
    assert public == {"get", "get_list", "close"}


def test_fake_refuses_other_methods_and_checks_tokens(fake):
    ca = base64.b64decode(fake.ca_data).decode()
    pool = urllib3.PoolManager(ssl_context=ssl.create_default_context(cadata=ca))
    headers = {"Authorization": f"Bearer {token_for()}"}
    assert pool.request("DELETE", fake.endpoint + "/api/v1/nodes", headers=headers).status == 405
    assert pool.request("GET", fake.endpoint + "/api/v1/nodes").status == 401
    assert pool.request("GET", fake.endpoint + "/api/v1/secrets", headers=headers).status == 404
    response = pool.request("GET", fake.endpoint + "/api/v1/nodes?limit=1&continue=bogus", headers=headers)
    assert response.status == 410 and json.loads(response.data)["reason"] == "Expired"


def test_closed_port_helper_is_really_closed():
    # guards test_server_down_is_an_endpoint_failure against a reused port
    with FakeKubernetes(cluster_name=CLUSTER) as server:
        port = int(server.endpoint.rsplit(":", 1)[1])
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0


# --------------------------------------------------------------------------- demo objects


def test_demo_objects_describe_the_demo_faults(now):
    instances = {
        "i-0aa1b2c3d4e5f6071": "workers",
        "i-0aa1b2c3d4e5f6072": ("workers", "ml.p5.48xlarge"),
        "i-0aa1b2c3d4e5f6073": "hyperpod-i-0aa1b2c3d4e5f6073",
        "i-0aa1b2c3d4e5f6074": {"group": "workers", "instance_type": "ml.g5.8xlarge"},
    }
    with FakeKubernetes(cluster_name=CLUSTER, objects=demo_objects(instances)) as server:
        obs = collect_kubernetes(eks_for(server), token_for(), now=now)
    nodes = {n.instance_id: n for n in obs.nodes.get()}
    assert len(nodes) == 5
    assert nodes["i-0aa1b2c3d4e5f6071"].labels[LABEL_HEALTH] == "UnschedulablePendingReboot"
    failed = nodes["i-0aa1b2c3d4e5f6072"]
    assert failed.labels[LABEL_DEEP_HEALTH] == "Failed"
    assert failed.labels["sagemaker.amazonaws.com/fault-types"] == "NvidiaErrorTerminate"
    assert {"timestamp", "type", "reason", "message"} <= set(
        json.loads(failed.annotations[ANNOTATION_FAULT_DETAILS])[0]
    )
    assert any(t["effect"] == "NoSchedule" for t in failed.taints)
    assert any(c["type"] == "NvidiaErrorTerminate" and c["status"] == "True" for c in failed.conditions)
    assert failed.provider_id.startswith("aws:///us-west-2") and failed.provider_id.endswith("/i-0aa1b2c3d4e5f6072")
    assert nodes["i-0aa1b2c3d4e5f6074"].labels[LABEL_HEALTH] == "Schedulable"
    assert sum(not n.is_hyperpod for n in nodes.values()) == 1

    aws_node = next(d for d in obs.daemonsets.get() if d.name == "aws-node")
    assert aws_node.unavailable == 1
    crashing = [p for p in obs.system_pods.get() if any(c.reason == "CrashLoopBackOff" for c in p.containers)]
    assert len(crashing) == 1 and crashing[0].node_name == "hyperpod-i-0aa1b2c3d4e5f6073"
    statuses = {c.name: c for c in crashing[0].containers}
    assert statuses["aws-node"].restart_count == 14 and statuses["aws-node"].last_terminated_reason == "Error"
    assert statuses["aws-eks-nodeagent"].ready
    other = [p for p in obs.system_pods.get() if p.labels["k8s-app"] in ("kube-proxy", "kube-dns")]
    assert other and all(c.ready for p in other for c in p.containers)
    assert "aws-hyperpod" in obs.namespaces.get()
    (event,) = obs.sandbox_events.get()
    assert "127.0.0.1:50051" in event.message and "connection refused" in event.message


# --------------------------------------------------------------------------- what runs on a node


def _training_pod(name: str, node: str) -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": "training",
            "ownerReferences": [
                {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "llama-ft", "controller": True}
            ],
        },
        "spec": {"nodeName": node},
        "status": {"phase": "Running"},
    }


def test_pods_on_a_node_are_listed_across_namespaces_by_field_selector(now):
    from hyperpod_debugger.aws.k8s import pods_on_nodes
    from hyperpod_debugger.domain.occupancy import from_pods

    node = "hyperpod-i-0c52e8a6d19f07b43"
    objects = recorded_objects()
    objects["pods"] = [
        *objects["pods"],
        _training_pod("llama-ft-worker-3", node),
        _training_pod("llama-ft-worker-4", node),
    ]
    with FakeKubernetes(cluster_name=CLUSTER, objects=objects) as server:
        listed = pods_on_nodes(eks_for(server), token_for(), [node, "hyperpod-i-0e96c7d25b3a1f804"])
        sent = [r for r in server.requests if r.path == "/api/v1/pods"]
    mine = listed[node].get()
    assert {p.name for p in mine} == {"aws-node-c4rtw", "kube-proxy-8nc4x", "llama-ft-worker-3", "llama-ft-worker-4"}
    assert from_pods("i-0c52e8a6d19f07b43", node, mine).summary() == "2 pods of training/llama-ft (PyTorchJob)"
    # the other node runs only DaemonSet pods: nothing a node action would stop
    other = from_pods(
        "i-0e96c7d25b3a1f804", "hyperpod-i-0e96c7d25b3a1f804", listed["hyperpod-i-0e96c7d25b3a1f804"].get()
    )
    assert not other.occupied
    assert [r.method for r in sent] == ["GET", "GET"]  # one read per node, nothing else
    assert [r.query["fieldSelector"] for r in sent] == [
        [f"spec.nodeName={node}"],
        ["spec.nodeName=hyperpod-i-0e96c7d25b3a1f804"],
    ]


def test_pods_on_nodes_denied_or_unreachable_is_a_failure_per_node(fake, now):
    from hyperpod_debugger.aws.k8s import pods_on_nodes

    fake.forbid.add("pods")
    denied = pods_on_nodes(eks_for(fake), token_for(), ["hyperpod-i-0c52e8a6d19f07b43"])
    failure = denied["hyperpod-i-0c52e8a6d19f07b43"].failure
    assert failure is not None and failure.kind == "denied" and "cannot list pods" in failure.message
    missing = pods_on_nodes(eks_for(fake, endpoint=None), token_for(), ["a", "b"])
    assert all(o.failure is not None and o.failure.kind == "malformed" for o in missing.values())
