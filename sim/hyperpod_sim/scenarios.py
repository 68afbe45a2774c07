"""The demo's two clusters: an EKS cluster with seeded faults in sections A, B.1–B.5, C, D, F,
G and J, and a Slurm cluster that is mostly healthy (its PASS lines show what good looks like)
with automatic recovery off and one failed node.

Everything goes through the normal AWS APIs against moto (clients come from the product's own
client factory), except the HyperPod fields moto cannot store, which ``seed`` injects.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from moto.eks.models import eks_backends

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_sim import seed
from hyperpod_sim.seed import GroupSpec, NodeState, SeededCluster
from hyperpod_sim.slurm_outputs import controller_reply

REGION = "us-west-2"
EKS_CLUSTER = "ml-eks-prod"
SLURM_CLUSTER = "ml-slurm-train"


@dataclass
class Demo:
    eks: SeededCluster
    slurm: SeededCluster


def _sg(ec2: Any, vpc_id: str, name: str) -> str:
    return ec2.create_security_group(GroupName=name, Description=f"{name} (demo)", VpcId=vpc_id)["GroupId"]


def _self_ref(group_id: str) -> list[dict[str, Any]]:
    return [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group_id, "Description": "node to node"}]}]


def _route_table(ec2: Any, vpc_id: str, subnet_id: str, **default_route: str) -> str:
    rtb = ec2.create_route_table(VpcId=vpc_id)["RouteTable"]["RouteTableId"]
    ec2.associate_route_table(RouteTableId=rtb, SubnetId=subnet_id)
    if default_route:
        ec2.create_route(RouteTableId=rtb, DestinationCidrBlock="0.0.0.0/0", **default_route)
    return rtb


def _subnet(ec2: Any, vpc_id: str, cidr: str, az: str) -> str:
    return ec2.create_subnet(VpcId=vpc_id, CidrBlock=cidr, AvailabilityZone=az)["Subnet"]["SubnetId"]


def private_network(ec2: Any, net: str, zones: tuple[str, ...] = ("us-west-2a",)) -> tuple[str, list[str]]:
    """A VPC ``<net>.0.0/16`` with DNS hostnames on, a public subnet holding a NAT gateway, and one private
    subnet per zone routed through it (where HyperPod wants its nodes). Returns the VPC and the private subnets."""
    vpc = ec2.create_vpc(CidrBlock=f"{net}.0.0/16")["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
    public = _subnet(ec2, vpc, f"{net}.0.0/24", zones[0])
    private = [_subnet(ec2, vpc, f"{net}.{16 * (index + 1)}.0/20", zone) for index, zone in enumerate(zones)]
    igw = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
    _route_table(ec2, vpc, public, GatewayId=igw)
    eip = ec2.allocate_address(Domain="vpc")["AllocationId"]
    nat = ec2.create_nat_gateway(SubnetId=public, AllocationId=eip)["NatGateway"]["NatGatewayId"]
    for subnet in private:
        _route_table(ec2, vpc, subnet, NatGatewayId=nat)
    return vpc, private


def efa_group(ec2: Any, vpc_id: str, name: str, *, self_ingress: bool = True) -> str:
    """A security group whose only traffic is to and from itself, as EFA needs (``self_ingress=False``: its
    inbound rule lost, the § A fault)."""
    group = _sg(ec2, vpc_id, name)
    if self_ingress:
        ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=_self_ref(group))
    ec2.revoke_security_group_egress(
        GroupId=group, IpPermissions=[{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]
    )
    ec2.authorize_security_group_egress(GroupId=group, IpPermissions=_self_ref(group))
    return group


def create_eks(eks: Any, name: str, vpc_id: str, subnets: list[str], cluster_sg: str) -> None:
    """An EKS cluster in moto, with the VPC fields and endpoint access moto leaves out, and access entries on."""
    eks.create_cluster(
        name=name,
        roleArn=f"arn:aws:iam::{seed.ACCOUNT}:role/eks-cluster-role",
        resourcesVpcConfig={"subnetIds": subnets, "securityGroupIds": []},
    )
    moto_eks = eks_backends[seed.ACCOUNT][REGION].clusters[name]
    moto_eks.resources_vpc_config = {
        **moto_eks.resources_vpc_config,
        "vpcId": vpc_id,
        "clusterSecurityGroupId": cluster_sg,
        "endpointPublicAccess": True,
        "endpointPrivateAccess": True,
    }
    seed.set_eks_access(REGION, name, "API_AND_CONFIG_MAP")


def seed_eks_cluster(clients: AwsClients, now: datetime) -> SeededCluster:
    ec2, eks, logs = clients.client("ec2"), clients.client("eks"), clients.client("logs")
    sagemaker = clients.client("sagemaker")

    vpc = ec2.create_vpc(CidrBlock="10.10.0.0/16")["Vpc"]["VpcId"]  # enableDnsHostnames stays false (B.2)
    isolated = _subnet(ec2, vpc, "10.10.1.0/24", "us-west-2a")
    public = _subnet(ec2, vpc, "10.10.2.0/24", "us-west-2b")
    tiny = _subnet(ec2, vpc, "10.10.3.0/28", "us-west-2c")  # 11 free addresses (B.1); main route table
    igw = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
    isolated_rtb = _route_table(ec2, vpc, isolated)
    public_rtb = _route_table(ec2, vpc, public, GatewayId=igw)  # a public subnet (B.3)
    # Some endpoints exist, but not all that isolated subnets need, and the S3 gateway is only
    # routed from the public table (B.4).
    ec2.create_vpc_endpoint(
        VpcId=vpc, ServiceName=f"com.amazonaws.{REGION}.s3", VpcEndpointType="Gateway", RouteTableIds=[public_rtb]
    )
    for service in ("ssm", "ssmmessages", "ec2messages", "logs"):
        ec2.create_vpc_endpoint(
            VpcId=vpc,
            ServiceName=f"com.amazonaws.{REGION}.{service}",
            VpcEndpointType="Interface",
            SubnetIds=[isolated],
        )
    _ = isolated_rtb

    nodes_sg = _sg(ec2, vpc, "ml-eks-prod-nodes")
    # Owned by a CloudFormation stack: the drift note names it.
    ec2.create_tags(
        Resources=[nodes_sg],
        Tags=[{"Key": "aws:cloudformation:stack-name", "Value": "ml-eks-prod-network"}],
    )
    # Ingress self-reference only; the default all-traffic egress to 0.0.0.0/0 remains (A).
    ec2.authorize_security_group_ingress(GroupId=nodes_sg, IpPermissions=_self_ref(nodes_sg))
    eks_sg = _sg(ec2, vpc, "eks-cluster-sg-ml-eks-prod")
    # The EKS cluster SG admits the nodes on the kubelet port only, not on 443 (B.5).
    ec2.authorize_security_group_ingress(
        GroupId=eks_sg,
        IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": 10250, "ToPort": 10250, "UserIdGroupPairs": [{"GroupId": nodes_sg}]}
        ],
    )

    eks_name = f"{EKS_CLUSTER}-eks"
    create_eks(eks, eks_name, vpc, [isolated, public], eks_sg)

    groups = [
        GroupSpec("gpu-workers", "ml.p5.48xlarge", count=4, target=6, threads_per_core=1),
        GroupSpec("system", "ml.m5.2xlarge", count=1, threads_per_core=2),
    ]
    lifecycle_failure = (
        'Instance {iid} failed to provision with the following error: "Lifecycle scripts did not run '
        "successfully. Ensure the scripts exist in provided S3 path, are accessible, and run without errors. "
        'Please see CloudWatch logs for lifecycle script execution details." Note that multiple instances may '
        "be impacted."
    )
    failed_iid = seed.instance_id(f"{EKS_CLUSTER}/gpu-workers/2")
    cluster = seed.create_cluster(
        sagemaker,
        REGION,
        EKS_CLUSTER,
        groups,
        {"sgs": [nodes_sg], "subnets": [isolated, public, tiny]},
        orchestrator={"Eks": {"ClusterArn": f"arn:aws:eks:{REGION}:{seed.ACCOUNT}:cluster/{eks_name}"}},
        node_recovery="Automatic",
        provisioning_mode="Continuous",
        launch_time=now - timedelta(days=3),
        node_states={
            ("gpu-workers", 2): NodeState("Failure", lifecycle_failure.format(iid=failed_iid)),
            ("gpu-workers", 3): NodeState("DeepHealthCheckInProgress", "Deep health checks are running"),
        },
    )
    workers = cluster.nodes["gpu-workers"]

    capacity = "We currently do not have sufficient capacity to launch new ml.p5.48xlarge instances. Please try again."
    provision = f"Failed to provision EC2 Instance in Cluster {EKS_CLUSTER} and InstanceGroup gpu-workers"
    for hours in (5, 2):
        seed.add_event(
            cluster,
            when=now - timedelta(hours=hours),
            level="Error",
            description=provision,
            group="gpu-workers",
            failure_message=capacity,
        )
    seed.add_event(
        cluster,
        when=now - timedelta(hours=6),
        level="Error",
        group="gpu-workers",
        instance=failed_iid,
        description=f"Instance lifecycle script execution for EC2 Instance {failed_iid} has Failed. To view "
        f"lifecycle script logs, visit log group {cluster.log_group}.",
    )
    for index, iid in enumerate(workers[:2]):
        seed.add_event(
            cluster,
            when=now - timedelta(hours=7, minutes=index),
            level="Info",
            group="gpu-workers",
            instance=iid,
            description=f"Instance lifecycle script execution for EC2 Instance {iid} has Succeeded.",
        )
    seed.add_event(
        cluster,
        when=now - timedelta(days=3),
        level="Error",
        group="gpu-workers",
        description=provision,
        failure_message=capacity,
    )  # outside the 24 h window

    s3_timeout = (
        'fatal error: Connect timeout on endpoint URL: "https://sagemaker-ml-eks-prod-lifecycle.s3.'
        f'{REGION}.amazonaws.com/?list-type=2&prefix=&encoding-type=url"'
    )
    started = now - timedelta(hours=6, minutes=5)
    seed.put_log_lines(
        logs,
        cluster.log_group,
        f"LifecycleConfig/gpu-workers/{failed_iid}",
        [
            (started, "[start] on_create.sh"),
            (started + timedelta(seconds=1), "+ aws s3 sync s3://sagemaker-ml-eks-prod-lifecycle/ /tmp/lcs"),
            (started + timedelta(seconds=61), s3_timeout),
            (started + timedelta(seconds=62), "[error] on_create.sh exited with status 1"),
        ],
    )
    seed.put_log_lines(
        logs,
        cluster.log_group,
        f"LifecycleConfig/gpu-workers/{workers[0]}",
        [
            (started, "[start] on_create.sh"),
            (started + timedelta(seconds=1), "+ DISK_FOR_CONTAINERD_KUBELET=/opt/sagemaker"),
            (started + timedelta(seconds=2), "[done] on_create.sh"),
        ],
    )
    seed.put_log_lines(
        logs,
        cluster.log_group,
        f"SagemakerHealthMonitoringAgent/gpu-workers/{workers[1]}",
        [
            (
                now - timedelta(days=2),
                seed.hma_record(now - timedelta(days=2), 79, detail="GPU has fallen off the bus"),
            ),
            (
                now - timedelta(hours=5),
                seed.hma_record(now - timedelta(hours=5), 79, detail="GPU has fallen off the bus"),
            ),
        ],
    )
    seed.put_log_lines(
        logs,
        cluster.log_group,
        f"SagemakerHealthMonitoringAgent/gpu-workers/{workers[0]}",
        [
            (
                now - timedelta(hours=3),
                seed.hma_record(
                    now - timedelta(hours=3), 13, pci="0000:53:00", detail="Graphics Exception: ESR 0x514648=0x1"
                ),
            ),
        ],
    )
    return cluster


def seed_slurm_cluster(clients: AwsClients, now: datetime) -> SeededCluster:
    ec2, logs, sagemaker = clients.client("ec2"), clients.client("logs"), clients.client("sagemaker")
    vpc, (private,) = private_network(ec2, "10.20")
    sg = efa_group(ec2, vpc, "ml-slurm-train-efa")

    groups = [
        GroupSpec("controller-machine", "ml.c5.xlarge", count=1, threads_per_core=2),
        GroupSpec("worker-group-1", "ml.g5.48xlarge", count=2, threads_per_core=2),
    ]
    cluster = seed.create_cluster(
        sagemaker,
        REGION,
        SLURM_CLUSTER,
        groups,
        {"sgs": [sg], "subnets": [private]},
        orchestrator=None,
        node_recovery="None",
        provisioning_mode=None,
        launch_time=now - timedelta(days=10),
        node_states={
            ("worker-group-1", 1): NodeState("Failure", "Node failed health checks: hardware failure detected")
        },
        tags={"ManagedBy": "Terraform", "team": "ml-platform"},
    )
    worker = cluster.nodes["worker-group-1"][0]
    seed.put_log_lines(
        logs,
        cluster.log_group,
        f"SagemakerHealthMonitoringAgent/worker-group-1/{worker}",
        [
            (now - timedelta(hours=9), seed.slurm_hma_record(now - timedelta(hours=9), 79)),
        ],
    )
    return cluster


def seed_demo(clients: AwsClients, now: datetime) -> Demo:
    return Demo(eks=seed_eks_cluster(clients, now), slurm=seed_slurm_cluster(clients, now))


#: On-node faults of the demo's nodes: (cluster, group, index) -> simulated faults. Nodes that are not
#: Running are not probed; the EKS "system" node is left out of the fake SSM service on purpose, so it
#: shows how an unreachable node is reported (UNKNOWN, § K, never a hardware verdict).
PROBE_FAULTS: dict[tuple[str, str, int], tuple[str, ...]] = {
    (EKS_CLUSTER, "gpu-workers", 0): ("xid13", "oom_job", "old_driver"),
    (EKS_CLUSTER, "gpu-workers", 1): ("xid79_twice", "gpu_missing"),
    (SLURM_CLUSTER, "controller-machine", 0): (),
    (SLURM_CLUSTER, "worker-group-1", 0): ("remap_pending", "root_full", "slurmd_down"),
}


#: What the demo's Slurm controller reports: worker 0 down after an unexpected reboot (its slurmd is
#: down, as its own probe shows), worker 1 drained after a failed task kill.
SLURM_CONTROLLER_FAULTS = frozenset({"node_down_unexpected_reboot", "drained_kill_task_failed"})


def register_probe_nodes(ssm: Any, demo: Demo, now: datetime) -> list[str]:
    """Put the demo's probe-able nodes behind the fake SSM service; returns their session targets."""
    from hyperpod_sim.nodes import add_probe_node

    targets = []
    specs = {EKS_CLUSTER: (demo.eks, "EKS"), SLURM_CLUSTER: (demo.slurm, "Slurm")}
    types = {"gpu-workers": "ml.p5.48xlarge", "controller-machine": "ml.c5.xlarge", "worker-group-1": "ml.g5.48xlarge"}
    workers = [seed.node_hostname(demo.slurm, iid) for iid in demo.slurm.nodes["worker-group-1"]]
    controller_output = controller_reply(workers, SLURM_CONTROLLER_FAULTS, now=now)
    for (cluster_name, group, index), faults in PROBE_FAULTS.items():
        seeded, orchestrator = specs[cluster_name]
        iid = seeded.nodes[group][index]
        targets.append(
            add_probe_node(
                ssm,
                cluster_arn=seeded.arn,
                group=group,
                instance_id=iid,
                instance_type=types[group],
                hostname=seed.node_hostname(seeded, iid),
                now=now,
                orchestrator=orchestrator,
                controller=group == "controller-machine",
                faults=faults,
                slurm_reply=controller_output if group == "controller-machine" else None,
            )
        )
    return targets


def register_kubernetes(fake: Any, demo: Demo) -> None:
    """Serve the demo EKS cluster's Kubernetes objects from the fake API server: gpu-workers 3 pending
    reboot, gpu-workers 2 with a failed deep health check, the system node running a crash-looping
    aws-node, gpu-workers 0 and 1 healthy (their faults are on the node itself, found by the probe)."""
    from hyperpod_sim.fake_k8s import demo_objects

    workers = demo.eks.nodes["gpu-workers"]
    ordered = {
        workers[3]: ("gpu-workers", "ml.p5.48xlarge"),
        workers[2]: ("gpu-workers", "ml.p5.48xlarge"),
        demo.eks.nodes["system"][0]: ("system", "ml.m5.2xlarge"),
        workers[0]: ("gpu-workers", "ml.p5.48xlarge"),
        workers[1]: ("gpu-workers", "ml.p5.48xlarge"),
    }
    fake.objects = demo_objects(ordered)
    seed.set_eks_api(REGION, f"{EKS_CLUSTER}-eks", fake.endpoint, fake.ca_data)
