"""Training jobs that died, on simulated Slurm clusters, each for a reason the scenario itself fixes (issue 33).

* ``ml-slurm-jobs`` (a controller and four GPU workers, healthy network, automatic recovery):
  - job **4123** ``llama-70b-pretrain`` (alice) ran on all four workers and ended ``NODE_FAIL`` nine hours ago,
    two minutes after worker 2's health agent logged Xid 79 (the GPU fell off the bus): **worker 2 did it**;
  - job **4131** ``sft-ablation`` (bob) ran on workers 0 and 1 and ended ``OUT_OF_MEMORY`` twenty minutes ago;
    both nodes are healthy: **the job's own fault**.
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
from hyperpod_sim.scenarios import REGION, _route_table, _self_ref, _sg, _subnet
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


def jobs(now: datetime) -> list[Job]:
    """The scenario's jobs, their times relative to ``now``."""
    crash = now - timedelta(hours=9) + timedelta(minutes=2)
    return [
        Job(
            JOBS_CLUSTER,
            "4123",
            "llama-70b-pretrain",
            "alice",
            "NODE_FAIL",
            "0:0",
            (0, 1, 2, 3),
            now - timedelta(hours=10),
            crash,
            "node",
            culprit=2,
        ),  # fmt: skip
        Job(
            JOBS_CLUSTER,
            "4131",
            "sft-ablation",
            "bob",
            "OUT_OF_MEMORY",
            "0:125",
            (0, 1),
            now - timedelta(minutes=50),
            now - timedelta(minutes=20),
            "own",
        ),  # fmt: skip
        Job(
            EFA_CLUSTER,
            "77",
            "nccl-allreduce-test",
            "carol",
            "FAILED",
            "1:0",
            (0, 1),
            now - timedelta(minutes=25),
            now - timedelta(minutes=12),
            "cluster",
        ),  # fmt: skip
    ]


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
    vpc = ec2.create_vpc(CidrBlock=f"{net}.0.0/16")["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
    public = _subnet(ec2, vpc, f"{net}.0.0/24", "us-west-2a")
    private = _subnet(ec2, vpc, f"{net}.16.0/20", "us-west-2a")
    igw = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
    _route_table(ec2, vpc, public, GatewayId=igw)
    eip = ec2.allocate_address(Domain="vpc")["AllocationId"]
    nat = ec2.create_nat_gateway(SubnetId=public, AllocationId=eip)["NatGateway"]["NatGatewayId"]
    _route_table(ec2, vpc, private, NatGatewayId=nat)
    sg = _sg(ec2, vpc, f"{name}-efa")
    if efa_self_ingress:
        ec2.authorize_security_group_ingress(GroupId=sg, IpPermissions=_self_ref(sg))
    ec2.revoke_security_group_egress(
        GroupId=sg, IpPermissions=[{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]
    )
    ec2.authorize_security_group_egress(GroupId=sg, IpPermissions=_self_ref(sg))
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
