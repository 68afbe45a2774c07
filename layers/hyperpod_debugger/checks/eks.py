"""EKS prerequisites of an EKS-orchestrated HyperPod cluster (runbook B.5, with B.1 and B.4)."""

from __future__ import annotations

import ipaddress

from hyperpod_debugger.checks.base import CheckContext, finding
from hyperpod_debugger.domain.checking import Check
from hyperpod_debugger.domain.commands import aws_argv, json_arg, mutating, read_only
from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag
from hyperpod_debugger.domain.observations import (
    ClusterObservation,
    EksCluster,
    NotApplicable,
    SecurityGroup,
    SgRule,
    Subnet,
)

CHECK_PREREQUISITES = "eks.prerequisites"

#: authentication modes that support EKS access entries, which HyperPod uses
ACCESS_ENTRY_MODES = ("API", "API_AND_CONFIG_MAP")
API_PORT = 443
RULE_DESCRIPTION = "HyperPod nodes to EKS control plane"


def _describe_eks(obs: ClusterObservation, eks: EksCluster) -> SuggestedCommand:
    return read_only(
        aws_argv("eks", "describe-cluster", obs.cluster.region, "--name", eks.name),
        "Show the EKS cluster status, VPC, security groups, access config and endpoint access.",
    )


def check_prerequisites(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """Status, VPC, control-plane security group, authentication mode and endpoint access of EKS."""
    if obs.cluster.orchestrator != "EKS":
        raise NotApplicable("the cluster is not orchestrated by EKS")
    eks = obs.eks.get()
    findings: list[Finding] = []

    if eks.status != "ACTIVE":
        findings.append(
            finding(
                obs,
                CHECK_PREREQUISITES,
                Tag.FAIL,
                f"EKS cluster {eks.name} is {eks.status}, not ACTIVE",
                priority=Priority.P0,
                section="B.5",
                evidence=[f"{eks.arn} status={eks.status}"],
                root_cause="HyperPod nodes join the EKS cluster at bootstrap; a control plane that is not "
                "ACTIVE cannot register them.",
                suggested_commands=[_describe_eks(obs, eks)],
            )
        )

    subnets: dict[str, Subnet] | None = None
    if obs.network.subnets.available:
        subnets = obs.network.subnets.get()
    findings.extend(_vpc_alignment(obs, eks, subnets))
    findings.extend(_control_plane_sg(obs, eks, subnets))
    findings.extend(_authentication_mode(obs, eks))

    if eks.endpoint_public is False and eks.endpoint_private is True:
        findings.append(
            finding(
                obs,
                CHECK_PREREQUISITES,
                Tag.WARN,
                f"EKS cluster {eks.name} has a private-only API endpoint; HyperPod subnets need a "
                "route to it and isolated subnets an eks VPC endpoint",
                priority=Priority.P2,
                section="B.4",
                evidence=[f"{eks.name} endpointPublicAccess=false endpointPrivateAccess=true"],
                root_cause="With public access off, nodes reach the API server only through the "
                "control-plane ENIs in the EKS VPC over TCP 443.",
                suggested_commands=[_describe_eks(obs, eks)],
            )
        )

    if not findings:
        findings.append(
            finding(
                obs,
                CHECK_PREREQUISITES,
                Tag.PASS,
                f"EKS cluster {eks.name} is ACTIVE, shares the HyperPod VPC, admits the HyperPod nodes and "
                "uses access entries",
                section="B.5",
                evidence=[
                    f"{eks.name} status={eks.status} vpc={eks.vpc_id}",
                    f"authenticationMode={eks.authentication_mode}",
                    f"endpointPublicAccess={eks.endpoint_public} endpointPrivateAccess={eks.endpoint_private}",
                ],
            )
        )
    return findings


def _vpc_alignment(obs: ClusterObservation, eks: EksCluster, subnets: dict[str, Subnet] | None) -> list[Finding]:
    subnet_ids = obs.cluster.subnet_ids()
    if not subnet_ids:
        return []  # vpc.alignment reports a cluster without subnets
    if subnets is None or eks.vpc_id is None:
        what = "the HyperPod subnets could not be described" if subnets is None else "EKS reported no VPC"
        return [
            finding(
                obs,
                CHECK_PREREQUISITES,
                Tag.UNKNOWN,
                f"Could not compare the EKS and HyperPod VPCs: {what}",
                priority=Priority.P2,
                section="B.5",
            )
        ]
    lines = [f"{s} {subnets[s].vpc_id}" for s in subnet_ids if s in subnets]
    outside = [s for s in subnet_ids if s in subnets and subnets[s].vpc_id != eks.vpc_id]
    if not outside:
        return []
    return [
        finding(
            obs,
            CHECK_PREREQUISITES,
            Tag.FAIL,
            f"HyperPod subnet(s) {', '.join(outside)} are not in {eks.vpc_id}, the VPC of EKS cluster {eks.name}",
            priority=Priority.P0,
            section="B.5",
            evidence=[f"EKS {eks.name} {eks.vpc_id}", *lines],
            root_cause="HyperPod nodes must run in the VPC of the EKS cluster that orchestrates them.",
            suggested_commands=[_describe_eks(obs, eks)],
        )
    ]


def _admits_api_traffic(rule: SgRule, hp_sgs: set[str], hp_cidrs: list[str]) -> bool:
    """An ingress rule admitting the HyperPod nodes on TCP 443, by SG reference or by covering CIDRs."""
    if not rule.covers_tcp_port(API_PORT):
        return False
    if hp_sgs.intersection(rule.group_ids):
        return True
    if not hp_cidrs:
        return False
    try:
        ranges = [ipaddress.ip_network(c, strict=False) for c in rule.ipv4_ranges]
        nodes = [ipaddress.ip_network(c, strict=False) for c in hp_cidrs]
    except ValueError:
        return False
    return bool(ranges) and all(
        any(n.version == r.version and n.subnet_of(r) for r in ranges)  # type: ignore[arg-type]
        for n in nodes
    )


def _subnet_cidrs(subnet_ids: list[str], subnets: dict[str, Subnet] | None) -> list[str]:
    """The CIDRs of every HyperPod subnet, or nothing when any one of them is unknown."""
    cidrs: list[str] = []
    for subnet_id in subnet_ids:
        sn = subnets.get(subnet_id) if subnets else None
        if sn is None or not sn.cidr:
            return []
        cidrs.append(sn.cidr)
    return cidrs


def _control_plane_sg(obs: ClusterObservation, eks: EksCluster, subnets: dict[str, Subnet] | None) -> list[Finding]:
    """The EKS control plane admits the HyperPod nodes on TCP 443: a HyperPod security group is attached
    to EKS, or an inbound rule of an EKS security group admits them."""
    hp_sgs = obs.cluster.security_group_ids()
    if not hp_sgs:
        return []  # network.efa_sg / vpc.alignment report a cluster without security groups
    candidates = [*eks.security_group_ids, eks.cluster_security_group_id]
    eks_sgs = [g for g in dict.fromkeys(candidates) if g]
    if set(hp_sgs).intersection(eks_sgs):
        return []
    described: dict[str, SecurityGroup] = {}
    if obs.network.security_groups.available:
        described = obs.network.security_groups.get()
    visible = [described[g] for g in eks_sgs if g in described]
    hp_cidrs = _subnet_cidrs(obs.cluster.subnet_ids(), subnets)
    hp_set = set(hp_sgs)
    if any(_admits_api_traffic(r, hp_set, hp_cidrs) for sg in visible for r in sg.ingress):
        return []
    target = eks.cluster_security_group_id or (eks_sgs[0] if eks_sgs else None)
    evidence = [
        f"HyperPod security groups: {', '.join(hp_sgs)}",
        f"EKS security groups: {', '.join(eks_sgs) or '-'} (cluster SG {eks.cluster_security_group_id or '-'})",
        *(_ingress_line(sg, r) for sg in visible for r in sg.ingress),
    ]
    if target is None or len(visible) < len(eks_sgs):
        unseen = [g for g in eks_sgs if g not in described]
        return [_control_plane_unverified(obs, eks, unseen, evidence)]
    return [_control_plane_closed(obs, target, hp_sgs, evidence)]


def _ingress_line(sg: SecurityGroup, r: SgRule) -> str:
    peers = [*(f"sg:{g}" for g in r.group_ids), *r.ipv4_ranges, *r.ipv6_ranges]
    proto = "all" if r.all_traffic else f"{r.protocol} {r.from_port}-{r.to_port}"
    return f"{sg.group_id} inbound proto={proto} source={','.join(peers) or '-'}"


def _control_plane_unverified(
    obs: ClusterObservation, eks: EksCluster, unseen: list[str], evidence: list[str]
) -> Finding:
    return finding(
        obs,
        CHECK_PREREQUISITES,
        Tag.UNKNOWN,
        "Could not verify that the EKS control plane admits the HyperPod nodes on TCP 443: "
        + (f"{', '.join(unseen)} not described" if unseen else "EKS reported no security group"),
        priority=Priority.P2,
        section="B.5",
        evidence=evidence,
        suggested_commands=[
            read_only(
                aws_argv(
                    "ec2",
                    "describe-security-group-rules",
                    obs.cluster.region,
                    "--filters",
                    f"Name=group-id,Values={','.join(unseen)}",
                ),
                "List the inbound rules of the EKS security groups.",
            )
        ]
        if unseen
        else [_describe_eks(obs, eks)],
    )


def _control_plane_closed(obs: ClusterObservation, target: str, hp_sgs: list[str], evidence: list[str]) -> Finding:
    return finding(
        obs,
        CHECK_PREREQUISITES,
        Tag.FAIL,
        f"EKS control-plane security group {target} does not admit HyperPod security group(s) "
        f"{', '.join(hp_sgs)} on TCP 443, and no HyperPod security group is attached to EKS",
        priority=Priority.P1,
        section="B.5",
        evidence=evidence,
        root_cause="Nodes talk to the API server through the control-plane ENIs; unless a HyperPod "
        "security group is attached to the EKS cluster or an EKS security group allows inbound "
        "TCP 443 from it, kubelet cannot register or report health.",
        suggested_commands=_admit_nodes_commands(obs.cluster.region, target, hp_sgs[0]),
    )


def _admit_nodes_commands(region: str, target: str, source: str) -> list[SuggestedCommand]:
    """Read the inbound rules of the control-plane security group, then admit ``source`` into it."""
    payload = json_arg(
        [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": source, "Description": RULE_DESCRIPTION}]}]
    )
    return [
        read_only(
            aws_argv(
                "ec2",
                "describe-security-group-rules",
                region,
                "--filters",
                f"Name=group-id,Values={target}",
            ),
            f"List the inbound rules of {target}.",
        ),
        mutating(
            aws_argv(
                "ec2",
                "authorize-security-group-ingress",
                region,
                "--group-id",
                target,
                "--ip-permissions",
                payload,
            ),
            f"Allow traffic from {source} into the EKS control-plane security group {target}.",
            blast_radius=f"Every network interface carrying {target} (the EKS control-plane ENIs "
            "and any managed node group using the cluster security group) accepts all protocols "
            f"from interfaces carrying {source}; nothing is opened to the internet. Reversible with "
            "`aws ec2 revoke-security-group-ingress` and the same --ip-permissions payload.",
            changes_configuration=True,
            resource=target,
            preconditions=[
                f"{target} is the EKS cluster security group (clusterSecurityGroupId), not a worker security group.",
                f"{source} is a security group of this HyperPod cluster's VpcConfig.",
                "An InvalidPermission.Duplicate error means the rule already exists.",
            ],
        ),
    ]


def _authentication_mode(obs: ClusterObservation, eks: EksCluster) -> list[Finding]:
    mode = eks.authentication_mode
    if mode in ACCESS_ENTRY_MODES:
        return []
    if mode is None:
        return [
            finding(
                obs,
                CHECK_PREREQUISITES,
                Tag.UNKNOWN,
                f"EKS did not report accessConfig for {eks.name}; the authentication mode is unknown",
                priority=Priority.P2,
                section="B.1",
                suggested_commands=[_describe_eks(obs, eks)],
            )
        ]
    if mode != "CONFIG_MAP":
        return [
            finding(
                obs,
                CHECK_PREREQUISITES,
                Tag.UNKNOWN,
                f"EKS cluster {eks.name} reports an unrecognised authentication mode {mode}",
                priority=Priority.P2,
                section="B.1",
                evidence=[f"authenticationMode={mode}"],
                suggested_commands=[_describe_eks(obs, eks)],
            )
        ]
    return [
        finding(
            obs,
            CHECK_PREREQUISITES,
            Tag.FAIL,
            f"EKS cluster {eks.name} uses authentication mode CONFIG_MAP; HyperPod needs access entries "
            "(API or API_AND_CONFIG_MAP)",
            priority=Priority.P1,
            section="B.1",
            evidence=[f"authenticationMode={mode}"],
            root_cause="HyperPod grants its nodes access to the cluster through EKS access entries, "
            "which the CONFIG_MAP mode does not support.",
            suggested_commands=[
                _describe_eks(obs, eks),
                mutating(
                    aws_argv(
                        "eks",
                        "update-cluster-config",
                        obs.cluster.region,
                        "--name",
                        eks.name,
                        "--access-config",
                        "authenticationMode=API_AND_CONFIG_MAP",
                    ),
                    "Enable access entries while keeping the aws-auth ConfigMap working.",
                    blast_radius=f"Changes how every principal authenticates to EKS cluster {eks.name}; "
                    "existing aws-auth mappings keep working. One-way: EKS does not allow switching back "
                    "to CONFIG_MAP.",
                    changes_configuration=True,
                    resource=eks.arn,
                    preconditions=[
                        f"{eks.name} is ACTIVE with no other update in progress.",
                        "The cluster's platform version supports access entries.",
                    ],
                ),
            ],
        )
    ]


CHECKS: tuple[Check, ...] = (
    Check(id=CHECK_PREREQUISITES, section="B.5", title="EKS prerequisites for HyperPod", run=check_prerequisites),
)
