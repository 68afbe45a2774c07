"""Training jobs that died, on simulated Slurm clusters, each for a reason the scenario itself fixes (issue 33).

* ``ml-slurm-jobs`` (a controller and four GPU workers, healthy network, automatic recovery):
  - job **4123** ``llama-70b-pretrain`` (alice) ran on all four workers and ended ``NODE_FAIL`` nine hours ago,
    two minutes after worker 2's health agent logged Xid 79 (the GPU fell off the bus): **worker 2 did it**;
  - job **4131** ``sft-ablation`` (bob) ran on workers 0 and 1 and ended ``OUT_OF_MEMORY`` twenty minutes ago;
    both nodes are healthy: **the job's own fault**;
  - job **4140** ``eval-harness`` (dave) failed with exit 1 five hours ago on workers 0 and 1; only the monitor's
    findings history knows why: worker 1 had a pending GPU row remap from half an hour before the job ended
    until a reboot two hours after (:func:`seed_history`): **worker 1 did it**, and without the table nothing says so.
* ``ml-slurm-efa`` (a controller and two workers) lost the EFA security group's rule that lets the group's
  own traffic in:
  - job **77** ``nccl-allreduce-test`` (carol) failed with exit 1 twelve minutes ago on both workers, neither of
    which shows anything wrong: **the cluster's network** (§ A), common to every node.

Everything goes through the normal AWS APIs against moto and the fake Session Manager service; the controller
answers the Slurm query and the jobs command as a real one prints them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.slurm.parse import MARKER
from hyperpod_sim import seed
from hyperpod_sim.scenarios import REGION, efa_group, private_network
from hyperpod_sim.seed import GroupSpec, SeededCluster
from hyperpod_sim.slurm_outputs import controller_reply

JOBS_CLUSTER = "ml-slurm-jobs"
EFA_CLUSTER = "ml-slurm-efa"
WORKERS = "gpu-workers"
CONTROLLER = "controller-machine"
WORKER_TYPE = "ml.g5.48xlarge"


@dataclass(frozen=True)
class Job:
    """One job as the scenario fixes it, and the answer the diagnosis must give."""

    cluster: str
    job_id: str
    name: str
    user: str
    state: str
    exit_code: str
    workers: tuple[int, ...]
    start: datetime
    end: datetime
    #: what the diagnosis must say: "node" (with the worker index that did it), "cluster" or "own"
    expected: str
    culprit: int | None = None
    #: only the monitor's findings history explains it (``--table``)
    needs_table: bool = False


def jobs(now: datetime) -> list[Job]:
    """The scenario's jobs, their times relative to ``now``."""
    ago = lambda **kw: now - timedelta(**kw)  # noqa: E731
    return [
        Job(JOBS_CLUSTER, "4123", "llama-70b-pretrain", "alice", "NODE_FAIL", "0:0", workers=(0, 1, 2, 3),
            start=ago(hours=10), end=ago(hours=9) + timedelta(minutes=2), expected="node", culprit=2),
        Job(JOBS_CLUSTER, "4131", "sft-ablation", "bob", "OUT_OF_MEMORY", "0:125", workers=(0, 1),
            start=ago(minutes=50), end=ago(minutes=20), expected="own"),
        Job(EFA_CLUSTER, "77", "nccl-allreduce-test", "carol", "FAILED", "1:0", workers=(0, 1),
            start=ago(minutes=25), end=ago(minutes=12), expected="cluster"),
        Job(JOBS_CLUSTER, "4140", "eval-harness", "dave", "FAILED", "1:0", workers=(0, 1),
            start=ago(hours=6), end=ago(hours=5), expected="node", culprit=1, needs_table=True),
    ]  # fmt: skip


@dataclass
class JobWorld:
    clusters: dict[str, SeededCluster]
    jobs: list[Job]

    def worker(self, job: Job, index: int) -> str:
        return self.clusters[job.cluster].nodes[WORKERS][index]


def seed_jobs(clients: AwsClients, now: datetime) -> JobWorld:
    ec2, logs, sagemaker = clients.client("ec2"), clients.client("logs"), clients.client("sagemaker")
    clusters = {
        JOBS_CLUSTER: _cluster(ec2, sagemaker, JOBS_CLUSTER, "10.30", workers=4, efa_self_ingress=True, now=now),
        EFA_CLUSTER: _cluster(ec2, sagemaker, EFA_CLUSTER, "10.40", workers=2, efa_self_ingress=False, now=now),
    }
    sick = clusters[JOBS_CLUSTER].nodes[WORKERS][2]
    xid_at = now - timedelta(hours=9)
    seed.put_log_lines(
        logs,
        clusters[JOBS_CLUSTER].log_group,
        f"SagemakerHealthMonitoringAgent/{WORKERS}/{sick}",
        [(xid_at, seed.slurm_hma_record(xid_at, 79))],
    )
    return JobWorld(clusters, jobs(now))


def _cluster(
    ec2: Any, sagemaker: Any, name: str, net: str, *, workers: int, efa_self_ingress: bool, now: datetime
) -> SeededCluster:
    vpc, (private,) = private_network(ec2, net)
    sg = efa_group(ec2, vpc, f"{name}-efa", self_ingress=efa_self_ingress)
    groups = [
        GroupSpec(CONTROLLER, "ml.c5.xlarge", count=1, threads_per_core=2),
        GroupSpec(WORKERS, WORKER_TYPE, count=workers, threads_per_core=2),
    ]
    return seed.create_cluster(
        sagemaker,
        REGION,
        name,
        groups,
        {"sgs": [sg], "subnets": [private]},
        orchestrator=None,
        node_recovery="Automatic",
        provisioning_mode=None,
        launch_time=now - timedelta(days=10),
    )


def jobs_reply(world: JobWorld, cluster: str) -> str:
    """What the cluster's controller prints for the jobs command: no job held any more, and accounting's rows."""
    seeded = world.clusters[cluster]
    rows = []
    for job in world.jobs:
        if job.cluster != cluster:
            continue
        names = ",".join(seed.node_hostname(seeded, world.worker(job, i)) for i in job.workers)
        rows.append(
            "|".join(
                [job.job_id, job.user, job.state, job.exit_code, _ts(job.start), _ts(job.end), names, "None", job.name]
            )
        )
    return "\n".join(
        [MARKER.format(key="jobs_live"), "No jobs in the system", MARKER.format(key="jobs_history"), *rows, ""]
    )


def register_job_nodes(ssm: Any, world: JobWorld, now: datetime) -> list[str]:
    """Every node of the job clusters behind the fake Session Manager service: healthy probe documents, and the
    controller answering the Slurm query and the jobs command."""
    from hyperpod_sim.nodes import add_probe_node

    targets = []
    for name, seeded in world.clusters.items():
        hostnames = [seed.node_hostname(seeded, iid) for iid in seeded.nodes[WORKERS]]
        query = controller_reply(hostnames, frozenset(), now=now)
        for group, instance_type in ((CONTROLLER, "ml.c5.xlarge"), (WORKERS, WORKER_TYPE)):
            for iid in seeded.nodes[group]:
                targets.append(
                    add_probe_node(
                        ssm,
                        cluster_arn=seeded.arn,
                        group=group,
                        instance_id=iid,
                        instance_type=instance_type,
                        hostname=seed.node_hostname(seeded, iid),
                        now=now,
                        orchestrator="Slurm",
                        controller=group == CONTROLLER,
                        slurm_reply=query if group == CONTROLLER else None,
                        jobs_reply=jobs_reply(world, name) if group == CONTROLLER else None,
                    )
                )
    return targets


def _ts(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S")


def seed_history(clients: AwsClients, world: JobWorld, now: datetime, table: str) -> str:
    """The monitor's findings table for job 4140: worker 1's pending row remap, found by a sweep half an hour
    before the job ended and gone after a reboot two hours after it. Returns the table's name."""
    from hyperpod_debugger.domain.model import (
        CheckCoverage,
        CheckStatus,
        ClusterRef,
        Coverage,
        Finding,
        Priority,
        Tag,
        TriageReport,
    )
    from hyperpod_debugger.lifecycle.findings import plan_sweep
    from hyperpod_debugger.store.findings import FindingStore, create_table

    job = next(j for j in world.jobs if j.job_id == "4140")
    cluster = world.clusters[job.cluster]
    node = world.worker(job, 1)
    create_table(clients, table)
    store = FindingStore(clients, table)
    remap = Finding(
        tag=Tag.FAIL,
        priority=Priority.P0,
        check="probe.gpu_remap",
        section="G.1.a",
        cluster_arn=cluster.arn,
        cluster_name=cluster.name,
        instance_id=node,
        instance_group=WORKERS,
        message="GPU 5 has a row remap pending: reboot the node to apply it",
        evidence=["GPU 00000000:97:00.0: Pending: Yes"],
        node_action="reboot",
    )
    for when, found in ((job.end - timedelta(minutes=30), True), (job.end + timedelta(hours=2), False)):
        report = TriageReport(
            tool_version="0",
            generated_at=when.isoformat(),
            cluster=ClusterRef(name=cluster.name, arn=cluster.arn, region=cluster.region),
            scope_node=node,
            findings=[remap] if found else [],
            coverage=Coverage(
                checks=[CheckCoverage(check="probe.gpu_remap", status=CheckStatus.RAN)], probed_nodes=[node]
            ),
            exit_code=1 if found else 0,
        )
        store.apply(plan_sweep(store.open_findings(cluster.arn, include_resolved=True), report, when), when)
    return table
