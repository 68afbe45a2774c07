"""A PyTorchJob read through the Kubernetes API (issue 33): the job object, its pods and their events turned into
the job and the orchestrator's own evidence about nodes. The objects have the shapes the Kubeflow training
operator (kubeflow.org/v1 PyTorchJob: conditions, replicaStatuses, startTime, completionTime, the
training.kubeflow.org/* pod labels) and the kubelet (graceful node shutdown's "Terminated" pod reason and its
message; a container's terminated state) write; expected values are read off the objects."""

from __future__ import annotations

from datetime import UTC, datetime

from hyperpod_debugger.aws.k8s import parse_event, parse_pod
from hyperpod_debugger.aws.k8s_jobs import NAME, PyTorchJobRead, as_training_job, instance_of_node, node_evidence
from hyperpod_debugger.domain.model import Tag
from hyperpod_debugger.domain.observations import Observed

W0, W1 = "i-0aaaaaaaaaaaaaa10", "i-0aaaaaaaaaaaaaa11"

JOB = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {"name": "llama-70b", "namespace": "training"},
    "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 1}}},
    "status": {
        "conditions": [
            {"type": "Created", "status": "True", "reason": "PyTorchJobCreated",
             "lastTransitionTime": "2026-11-30T02:39:50Z"},
            {"type": "Running", "status": "False", "reason": "PyTorchJobRunning",
             "lastTransitionTime": "2026-11-30T03:12:09Z"},
            {"type": "Failed", "status": "True", "reason": "PyTorchJobFailed",
             "message": "PyTorchJob training/llama-70b is failed because 1 Worker replica(s) failed.",
             "lastTransitionTime": "2026-11-30T03:12:09Z"},
        ],
        "replicaStatuses": {"Master": {"failed": 1}, "Worker": {"failed": 1}},
        "startTime": "2026-11-30T02:40:01Z",
        "completionTime": "2026-11-30T03:12:09Z",
    },
}  # fmt: skip


def pod(name: str, node: str, terminated: dict, *, pod_reason: str | None = None, message: str | None = None) -> dict:
    status: dict = {
        "phase": "Failed",
        "containerStatuses": [
            {"name": "pytorch", "ready": False, "restartCount": 0, "state": {"terminated": terminated}}
        ],
    }
    if pod_reason:
        status |= {"reason": pod_reason, "message": message}
    labels = {"training.kubeflow.org/job-name": "llama-70b", "training.kubeflow.org/replica-type": "worker"}
    return {
        "metadata": {"name": name, "namespace": "training", "labels": labels},
        "spec": {"nodeName": node},
        "status": status,
    }


def read(*pods: dict, events: list[dict] | None = None) -> PyTorchJobRead:
    return PyTorchJobRead(JOB, [parse_pod(p) for p in pods], Observed.ok([parse_event(e) for e in events or []]))


def resolve(node: str) -> str | None:
    return instance_of_node(node, {})


def test_the_job_reads_its_failed_condition_times_and_nodes():
    master = pod(
        "llama-70b-master-0", f"hyperpod-{W0}", {"exitCode": 1, "reason": "Error", "finishedAt": "2026-11-30T03:12:05Z"}
    )
    worker = pod(
        "llama-70b-worker-0",
        f"hyperpod-{W1}",
        {"exitCode": 137, "reason": "OOMKilled", "finishedAt": "2026-11-30T03:12:01Z"},
    )
    job = as_training_job(read(master, worker), "training", "llama-70b", resolve)
    assert (job.job_id, job.owner, job.state, job.exit_code) == ("training/llama-70b", "training", "Failed", "1")
    assert job.reason == "PyTorchJob training/llama-70b is failed because 1 Worker replica(s) failed."
    assert job.start == datetime(2026, 11, 30, 2, 40, 1, tzinfo=UTC)
    assert job.end == datetime(2026, 11, 30, 3, 12, 9, tzinfo=UTC)
    assert job.failed and job.ended and not job.node_ended_it
    assert [(n.name, n.instance_id, n.failed_here) for n in job.nodes] == [
        (f"hyperpod-{W0}", W0, True),
        (f"hyperpod-{W1}", W1, True),
    ]
    assert job.nodes[1].notes == ("pod llama-70b-worker-0 container pytorch terminated: OOMKilled, exit 137",)


def test_a_pod_the_node_shut_down_is_evidence_against_that_node():
    ended = pod(
        "llama-70b-worker-0",
        f"hyperpod-{W1}",
        {"exitCode": 143, "reason": "Error", "finishedAt": "2026-11-30T03:11:58Z"},
        pod_reason="Terminated",
        message="Pod was terminated in response to imminent node shutdown.",
    )
    [evidence] = node_evidence(read(ended), resolve)
    assert evidence.instance_id == W1 and evidence.tag is Tag.FAIL and evidence.source == "orchestrator"
    assert evidence.at == datetime(2026, 11, 30, 3, 11, 58, tzinfo=UTC) and evidence.instant
    assert "Terminated" in evidence.message and "imminent node shutdown" in evidence.message


def test_a_node_not_ready_event_on_a_pod_of_the_job_is_evidence_too():
    worker = pod("llama-70b-worker-0", f"hyperpod-{W1}", {"exitCode": 1, "reason": "Error"})
    event = {
        "metadata": {"name": "llama-70b-worker-0.17f", "namespace": "training"},
        "involvedObject": {"kind": "Pod", "name": "llama-70b-worker-0", "namespace": "training"},
        "reason": "NodeNotReady",
        "message": "Node is not ready",
        "type": "Warning",
        "count": 1,
        "lastTimestamp": "2026-11-30T03:11:40Z",
    }
    [evidence] = node_evidence(read(worker, events=[event]), resolve)
    assert evidence.instance_id == W1 and evidence.at == datetime(2026, 11, 30, 3, 11, 40, tzinfo=UTC)


def test_a_pod_that_failed_by_itself_is_not_evidence_against_its_node():
    worker = pod("llama-70b-worker-0", f"hyperpod-{W1}", {"exitCode": 137, "reason": "OOMKilled"})
    assert node_evidence(read(worker), resolve) == []


def test_node_names_resolve_through_the_node_list_first_and_hyperpods_naming_second():
    assert instance_of_node("ip-10-1-2-3.ec2.internal", {"ip-10-1-2-3.ec2.internal": W0}) == W0
    assert instance_of_node(f"hyperpod-{W1}", {}) == W1
    assert instance_of_node("some-other-node", {}) is None


def test_namespaces_and_names_are_dns_labels():
    assert all(NAME.match(n) for n in ("training", "llama-70b", "a"))
    assert not any(NAME.match(n) for n in ("Training", "-x", "x-", "a/b", "a b", "x" * 64, ""))
