"""Training jobs that died on a simulated EKS cluster, each for a reason the scenario itself fixes (issue 33): the
EKS counterpart of :mod:`hyperpod_sim.job_scenarios`.

``ml-eks-jobs`` (EKS cluster ``ml-eks-jobs-eks``; four ml.p5.48xlarge GPU workers and a system node; a private
subnet behind a NAT gateway, the EFA security group open to itself both ways, automatic node recovery,
continuous provisioning) runs Kubeflow's training operator. Three PyTorchJobs in namespace ``training`` failed,
each with one pod per node (the master's on the job's first node, a worker's on each other):

* ``llama-70b`` ran on all four workers and failed eight hours ago, two minutes after worker 2's health agent
  logged Xid 79 (the GPU fell off the bus); its pod on worker 2 ended ``Error`` (exit 1) at the failure, the
  others a few minutes later when their collectives lost it: **worker 2 did it**;
* ``sft-ablation`` ran on workers 0 and 1 and failed twenty minutes ago: its master pod on worker 0 was
  ``OOMKilled`` (exit 137); both nodes are healthy: **the job's own fault**;
* ``nccl-allreduce`` ran on workers 2 and 3 and failed twelve minutes ago: worker 2 runs an older NVIDIA driver
  than worker 3 (§ E), and the job's ranks disagree: **a cause common to the job's nodes**, not one node's fault.
  Worker 2's Xid 79 came hours before this job started.

Everything goes through the normal AWS APIs against moto, the fake Session Manager service
(:func:`register_eks_job_nodes`) and the fake Kubernetes API server (:func:`kubernetes_objects`)::

    with FakeKubernetes(cluster_name=EKS_NAME) as kube:
        world = seed_eks_jobs(clients, now)
        register_eks_job_nodes(ssm, world, now)
        kube.objects = kubernetes_objects(world, now)
        seed.set_eks_api(REGION, EKS_NAME, kube.endpoint, kube.ca_data)
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_sim import seed
from hyperpod_sim.fake_k8s import FakeKubernetes, _container_status, _daemonset, _hp_labels, _node, _pod
from hyperpod_sim.fake_ssm import FakeSsm
from hyperpod_sim.scenarios import REGION, _sg, create_eks, efa_group, private_network
from hyperpod_sim.seed import GroupSpec, SeededCluster
from hyperpod_sim.server import simulated_aws

EKS_JOBS_CLUSTER = "ml-eks-jobs"
EKS_NAME = f"{EKS_JOBS_CLUSTER}-eks"
WORKERS = "gpu-workers"
SYSTEM = "system"
WORKER_TYPE = "ml.p5.48xlarge"
SYSTEM_TYPE = "ml.m5.2xlarge"
NAMESPACE = "training"
AZ = "us-west-2a"
#: the probe faults of the job nodes, by gpu-workers index: workers 2 and 3 were left on the older driver
#: on-node faults by worker index: worker 2 lags its group on the NVIDIA driver (a skew the job's ranks feel)
PROBE_FAULTS: dict[int, tuple[str, ...]] = {2: ("old_driver",)}

_IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-ec2"
_CNI = "602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon-k8s-cni:v1.19.2-eksbuild.1"
_NODE_AGENT = "602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon/aws-network-policy-agent:v1.1.6-eksbuild.1"
_PROXY = "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/kube-proxy:v1.32.6-minimal-eksbuild.2"
_DNS = "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/coredns:v1.11.4-eksbuild.2"
_OPERATOR = "pytorchjob-controller"
_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system", "aws-hyperpod", "kubeflow", NAMESPACE)
#: the HyperPod nodes were launched this long before ``now`` (and joined Kubernetes then)
_LAUNCHED = timedelta(days=10)


@dataclass(frozen=True)
class EksJob:
    """One PyTorchJob as the scenario fixes it, and the answer the diagnosis must give."""

    namespace: str
    name: str
    #: gpu-workers indexes, one pod on each: the master's on the first, a worker replica on each other
    workers: tuple[int, ...]
    start: datetime
    end: datetime
    #: what the diagnosis must say: "node" (with the worker index that did it), "cluster" or "own"
    expected: str
    #: the gpu-workers index of the node whose pod failed first (and failed the job), and how it ended
    failed_worker: int
    reason: str
    exit_code: int
    culprit: int | None = None

    def replica(self, worker: int) -> tuple[str, int]:
        """The replica type and index of the job's pod on gpu-workers ``worker``."""
        position = self.workers.index(worker)
        return ("Master", 0) if position == 0 else ("Worker", position - 1)

    def pod_name(self, worker: int) -> str:
        kind, index = self.replica(worker)
        return f"{self.name}-{kind.lower()}-{index}"


def eks_jobs(now: datetime) -> list[EksJob]:
    """The scenario's jobs, their times relative to ``now``."""
    ago = lambda **kw: now - timedelta(**kw)  # noqa: E731
    return [
        EksJob(NAMESPACE, "llama-70b", (0, 1, 2, 3), start=ago(hours=9), end=ago(hours=8), expected="node",
               failed_worker=2, reason="Error", exit_code=1, culprit=2),
        EksJob(NAMESPACE, "sft-ablation", (0, 1), start=ago(minutes=50), end=ago(minutes=20), expected="own",
               failed_worker=0, reason="OOMKilled", exit_code=137),
        EksJob(NAMESPACE, "nccl-allreduce", (2, 3), start=ago(minutes=25), end=ago(minutes=12), expected="cluster",
               failed_worker=3, reason="Error", exit_code=1),
    ]  # fmt: skip


@dataclass
class EksJobWorld:
    cluster: SeededCluster
    jobs: list[EksJob]

    def worker(self, job: EksJob, index: int) -> str:
        """The instance id of gpu-workers ``index`` (as :attr:`EksJob.workers` and :attr:`EksJob.culprit` count)."""
        return self.cluster.nodes[WORKERS][index]


def node_name(instance_id: str) -> str:
    """The Kubernetes name of a HyperPod node."""
    return f"hyperpod-{instance_id}"


def seed_eks_jobs(clients: AwsClients, now: datetime) -> EksJobWorld:
    """The healthy EKS cluster, and the health agent's Xid 79 on each culprit two minutes before its job failed
    (worker 2, ``llama-70b``)."""
    cluster = _cluster(clients, now)
    world = EksJobWorld(cluster, eks_jobs(now))
    for job in world.jobs:
        if job.culprit is None:
            continue
        xid_at = job.end - timedelta(minutes=2)
        seed.put_log_lines(
            clients.client("logs"),
            cluster.log_group,
            f"SagemakerHealthMonitoringAgent/{WORKERS}/{world.worker(job, job.culprit)}",
            [(xid_at, seed.hma_record(xid_at, 79, detail="GPU has fallen off the bus"))],
        )
    return world


@contextmanager
def simulated_eks_jobs(now: datetime) -> Iterator[tuple[EksJobWorld, FakeSsm, FakeKubernetes, str]]:
    """The jobs cluster on a simulated account: moto in-process, the fake Session Manager service with every
    node behind it, and the fake EKS API server serving :func:`kubernetes_objects`. Yields the world, the two
    fakes and moto's endpoint (for ``AWS_ENDPOINT_URL``; ``AWS_ENDPOINT_URL_SSM`` is ``ssm.endpoint_url``)."""
    with (
        simulated_aws() as endpoint,
        FakeSsm(start_session_rate=50.0) as ssm,
        FakeKubernetes(cluster_name=EKS_NAME) as kube,
    ):
        world = seed_eks_jobs(AwsClients(REGION, max_attempts=1), now)
        register_eks_job_nodes(ssm, world, now)
        kube.objects = kubernetes_objects(world, now)
        seed.set_eks_api(REGION, EKS_NAME, kube.endpoint, kube.ca_data)
        yield world, ssm, kube, endpoint


def _cluster(clients: AwsClients, now: datetime) -> SeededCluster:
    """VPC (DNS hostnames on; private subnets routed through a NAT gateway), the nodes' security group open to
    itself both ways and the EKS control plane's admitting it on TCP 443, the EKS cluster (access entries) and
    the HyperPod cluster orchestrated by it."""
    ec2, eks, sagemaker = clients.client("ec2"), clients.client("eks"), clients.client("sagemaker")
    # EKS wants its control plane in two zones
    vpc, (private, private_b) = private_network(ec2, "10.50", (AZ, "us-west-2b"))
    nodes_sg = efa_group(ec2, vpc, f"{EKS_JOBS_CLUSTER}-nodes")
    eks_sg = _sg(ec2, vpc, f"eks-cluster-sg-{EKS_NAME}")
    ec2.authorize_security_group_ingress(
        GroupId=eks_sg,
        IpPermissions=[
            {
                "IpProtocol": "tcp",
                "FromPort": 443,
                "ToPort": 443,
                "UserIdGroupPairs": [{"GroupId": nodes_sg, "Description": "HyperPod nodes to EKS control plane"}],
            }
        ],
    )

    create_eks(eks, EKS_NAME, vpc, [private, private_b], eks_sg)
    return seed.create_cluster(
        sagemaker,
        REGION,
        EKS_JOBS_CLUSTER,
        [
            GroupSpec(WORKERS, WORKER_TYPE, count=4, threads_per_core=2),
            GroupSpec(SYSTEM, SYSTEM_TYPE, count=1, threads_per_core=2),
        ],
        {"sgs": [nodes_sg], "subnets": [private]},
        orchestrator={"Eks": {"ClusterArn": f"arn:aws:eks:{REGION}:{seed.ACCOUNT}:cluster/{EKS_NAME}"}},
        node_recovery="Automatic",
        provisioning_mode="Continuous",
        launch_time=now - _LAUNCHED,
    )


def register_eks_job_nodes(ssm: Any, world: EksJobWorld, now: datetime) -> list[str]:
    """Every node of the cluster behind the fake Session Manager service, with healthy probe documents but for
    :data:`PROBE_FAULTS`; returns their session targets."""
    from hyperpod_sim.nodes import add_probe_node

    seeded = world.cluster
    targets = []
    for group, instance_type in ((WORKERS, WORKER_TYPE), (SYSTEM, SYSTEM_TYPE)):
        for index, iid in enumerate(seeded.nodes[group]):
            targets.append(
                add_probe_node(
                    ssm,
                    cluster_arn=seeded.arn,
                    group=group,
                    instance_id=iid,
                    instance_type=instance_type,
                    hostname=seed.node_hostname(seeded, iid),
                    now=now,
                    orchestrator="EKS",
                    faults=PROBE_FAULTS.get(index, ()) if group == WORKERS else (),
                )
            )
    return targets


# --------------------------------------------------------------------------- Kubernetes objects


def kubernetes_objects(world: EksJobWorld, now: datetime) -> dict[str, list[dict[str, Any]]]:
    """What the EKS API server holds: the HyperPod nodes (Ready, schedulable), kube-system's aws-node, kube-proxy
    and coredns pods running and their DaemonSets fully available, the namespaces, and the PyTorchJobs with
    their pods (for ``FakeKubernetes(cluster_name=EKS_NAME, objects=...)``). The nodes were created when the
    seeder launched them, :data:`_LAUNCHED` before ``now``."""
    members = [(iid, WORKERS, WORKER_TYPE) for iid in world.cluster.nodes[WORKERS]]
    members += [(iid, SYSTEM, SYSTEM_TYPE) for iid in world.cluster.nodes[SYSTEM]]
    names = [node_name(iid) for iid, _, _ in members]
    system = node_name(world.cluster.nodes[SYSTEM][0])
    pods = [pod for name in names for pod in _node_pods(name)]
    pods += [_coredns(system, tail) for tail in ("5kq8w", "x2r7d")]
    for job in world.jobs:
        pods += [_job_pod(world, job, worker) for worker in job.workers]
    return {
        "nodes": [_hyperpod_node(iid, group, itype, now - _LAUNCHED) for iid, group, itype in members],
        "pods": pods,
        "daemonsets": [_daemonset("aws-node", len(names)), _daemonset("kube-proxy", len(names))],
        "namespaces": [_namespace(ns) for ns in _NAMESPACES],
        "events": [],
        "pytorchjobs": [_pytorchjob(job, [p for p in pods if _job_of(p) == job.name]) for job in world.jobs],
    }


def _hyperpod_node(instance_id: str, group: str, instance_type: str, created: datetime) -> dict[str, Any]:
    """A Ready, schedulable HyperPod node with HyperPod's labels (deep health check passed)."""
    name = node_name(instance_id)
    labels = _hp_labels(name, group, instance_type, AZ, "Schedulable")
    labels["sagemaker.amazonaws.com/cluster-name"] = EKS_JOBS_CLUSTER
    node = _node(instance_id, name, labels, AZ)
    node["metadata"]["creationTimestamp"] = _ts(created)
    return node


def _suffix(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()[:5]


def _node_pods(node: str) -> list[dict[str, Any]]:
    """The node's aws-node and kube-proxy pods, running."""
    return [
        _pod(
            f"aws-node-{_suffix(node)}",
            node,
            "aws-node",
            "Running",
            [_container_status("aws-node", _CNI), _container_status("aws-eks-nodeagent", _NODE_AGENT)],
        ),
        _pod(f"kube-proxy-{_suffix(node)}", node, "kube-proxy", "Running", [_container_status("kube-proxy", _PROXY)]),
    ]


def _coredns(node: str, tail: str) -> dict[str, Any]:
    return _pod(
        f"coredns-6d8c4b7f9d-{tail}",
        node,
        "kube-dns",
        "Running",
        [_container_status("coredns", _DNS)],
        owner=("apps/v1", "ReplicaSet", "coredns-6d8c4b7f9d"),
        labels={"k8s-app": "kube-dns", "pod-template-hash": "6d8c4b7f9d"},
    )


def _namespace(name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": "2026-11-02T16:02:11Z",
            "labels": {"kubernetes.io/metadata.name": name},
        },
        "status": {"phase": "Active"},
    }


def _ts(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _job_labels(job: EksJob) -> dict[str, str]:
    return {"training.kubeflow.org/job-name": job.name, "training.kubeflow.org/operator-name": _OPERATOR}


def _job_of(pod: dict[str, Any]) -> str | None:
    return pod["metadata"]["labels"].get("training.kubeflow.org/job-name")


def _finished(job: EksJob, worker: int) -> tuple[str, int, datetime]:
    """How and when the job's container on gpu-workers ``worker`` ended: the failing pod at the job's failure,
    the others when their collectives lost it, a few minutes later."""
    if worker == job.failed_worker:
        return job.reason, job.exit_code, job.end
    return "Error", 1, job.end + timedelta(minutes=2 + job.workers.index(worker))


def _container_spec() -> dict[str, Any]:
    """The training container: every GPU and EFA interface of a p5, with the EFA environment set."""
    wanted = {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"}
    return {
        "name": "pytorch",
        "image": _IMAGE,
        "command": ["torchrun", "--nproc-per-node=8", "/workspace/train.py"],
        "resources": {"limits": dict(wanted), "requests": dict(wanted)},
        "env": [
            {"name": "FI_PROVIDER", "value": "efa"},
            {"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"},
            {"name": "NCCL_DEBUG", "value": "WARN"},
        ],
    }


def _job_pod(world: EksJobWorld, job: EksJob, worker: int) -> dict[str, Any]:
    """The job's pod on gpu-workers ``worker``, terminated (Failed, or Succeeded on exit 0)."""
    kind, index = job.replica(worker)
    reason, code, finished = _finished(job, worker)
    started = job.start + timedelta(seconds=20)
    state = {
        "terminated": {
            "reason": reason,
            "exitCode": code,
            "startedAt": _ts(started),
            "finishedAt": _ts(finished),
            "containerID": f"containerd://{hashlib.sha256(job.pod_name(worker).encode()).hexdigest()}",
        }
    }
    pod = _pod(
        job.pod_name(worker),
        node_name(world.worker(job, worker)),
        job.name,
        "Succeeded" if code == 0 else "Failed",
        [_container_status("pytorch", _IMAGE, ready=False, state=state)],
        owner=("kubeflow.org/v1", "PyTorchJob", job.name),
        namespace=job.namespace,
        labels={
            **_job_labels(job),
            "training.kubeflow.org/replica-type": kind.lower(),
            "training.kubeflow.org/replica-index": str(index),
            **({"training.kubeflow.org/job-role": "master"} if kind == "Master" else {}),
        },
    )
    pod["metadata"]["creationTimestamp"] = _ts(job.start)
    pod["spec"].update({"containers": [_container_spec()], "restartPolicy": "Never"})
    pod["status"]["startTime"] = _ts(job.start + timedelta(seconds=2))
    return pod


def _pytorchjob(job: EksJob, pods: list[dict[str, Any]]) -> dict[str, Any]:
    """The PyTorchJob as the training operator (v1) leaves it after a replica failed: Created, Running (now
    False) and Failed conditions, the replicas' final counts."""
    kind, _ = job.replica(job.failed_worker)
    template = {"spec": {"containers": [_container_spec()]}}
    counts: dict[str, dict[str, Any]] = {}
    for pod in pods:
        replica = pod["metadata"]["labels"]["training.kubeflow.org/replica-type"].title()
        entry = counts.setdefault(replica, {"selector": _selector(job, replica)})
        outcome = "succeeded" if pod["status"]["phase"] == "Succeeded" else "failed"
        entry[outcome] = entry.get(outcome, 0) + 1
    created, running, failed = _ts(job.start - timedelta(seconds=5)), _ts(job.start), _ts(job.end)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": job.name,
            "namespace": job.namespace,
            "uid": hashlib.md5(f"PyTorchJob/{job.name}".encode(), usedforsecurity=False).hexdigest(),
            "generation": 1,
            "creationTimestamp": created,
        },
        "spec": {
            "runPolicy": {"cleanPodPolicy": "None", "suspend": False},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "Never", "template": template},
                "Worker": {"replicas": len(job.workers) - 1, "restartPolicy": "Never", "template": template},
            },
        },
        "status": {
            "conditions": [
                _condition("Created", "True", job, "is created.", created),
                _condition("Running", "False", job, "is running.", running),
                _condition("Failed", "True", job, f"is failed because 1 {kind} replica(s) failed.", failed),
            ],
            "replicaStatuses": counts,
            "startTime": _ts(job.start),
            "completionTime": failed,
            "lastReconcileTime": failed,
        },
    }


def _selector(job: EksJob, replica: str) -> str:
    labels = {**_job_labels(job), "training.kubeflow.org/replica-type": replica.lower()}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _condition(kind: str, status: str, job: EksJob, says: str, at: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": status,
        "reason": f"PyTorchJob{kind}",
        "message": f"PyTorchJob {job.namespace}/{job.name} {says}",
        "lastUpdateTime": at,
        "lastTransitionTime": at,
    }
