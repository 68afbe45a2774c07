"""§ B.1: the cluster's subnets and security groups in one VPC (and the EKS cluster's)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperpod_debugger.checks.base import CheckContext, finding
from hyperpod_debugger.checks.vpc.common import (
    CHECK_ALIGNMENT,
    distinct_configs,
)
from hyperpod_debugger.domain.commands import aws_argv, read_only
from hyperpod_debugger.domain.model import Finding, Priority, Tag, trim_evidence

if TYPE_CHECKING:
    from hyperpod_debugger.domain.observations import (
        ClusterObservation,
        SecurityGroup,
        Subnet,
        VpcConfig,
    )


def check_alignment(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """Subnets of one VpcConfig share one VPC, and the config's SGs live in that VPC."""
    configs = distinct_configs(obs)
    if not configs:
        return [
            finding(
                obs,
                CHECK_ALIGNMENT,
                Tag.WARN,
                "Cluster has no VpcConfig and no instance-group OverrideVpcConfig; VPC checks cannot run",
                priority=Priority.P2,
                section="B.1",
                root_cause="Without a customer VpcConfig the nodes use the service-managed network, so "
                "FSx, EFA security-group and private-subnet settings are not under your control.",
            )
        ]
    if not obs.cluster.subnet_ids():
        return [
            finding(
                obs,
                CHECK_ALIGNMENT,
                Tag.WARN,
                "Cluster VpcConfig lists no subnets; VPC alignment cannot be checked",
                priority=Priority.P2,
                section="B.1",
                evidence=[
                    f"{label}: security groups {', '.join(cfg.security_group_ids) or '-'}" for label, cfg in configs
                ],
            )
        ]
    subnets = obs.network.subnets.get()
    sgs = obs.network.security_groups.get()
    findings = [f for label, cfg in configs for f in _misalignments(obs, label, cfg, subnets, sgs)]
    if findings:
        return findings
    lines = [
        f"{label}: {', '.join(dict.fromkeys(subnets[s].vpc_id for s in cfg.subnet_ids))} "
        f"subnets={','.join(cfg.subnet_ids)} sgs={','.join(cfg.security_group_ids)}"
        for label, cfg in configs
    ]
    return [
        finding(
            obs,
            CHECK_ALIGNMENT,
            Tag.PASS,
            "Subnets and security groups of every VpcConfig share one VPC",
            section="B.1",
            evidence=trim_evidence(lines),
        )
    ]


def _misalignments(
    obs: ClusterObservation,
    label: str,
    cfg: VpcConfig,
    subnets: dict[str, Subnet],
    sgs: dict[str, SecurityGroup],
) -> list[Finding]:
    """One VpcConfig's problems: subnets not described, subnets in several VPCs, or security groups
    outside the VPC of its subnets."""
    findings: list[Finding] = []
    unseen = [s for s in dict.fromkeys(cfg.subnet_ids) if s not in subnets]
    if unseen:
        findings.append(_subnets_not_described(obs, label, unseen))
    known = [subnets[s] for s in dict.fromkeys(cfg.subnet_ids) if s in subnets]
    vpcs = list(dict.fromkeys(sn.vpc_id for sn in known))
    if len(vpcs) > 1:
        findings.append(_subnets_span_vpcs(obs, label, vpcs, known))
    elif vpcs:
        wrong = [
            sgs[g]
            for g in dict.fromkeys(cfg.security_group_ids)
            if g in sgs and sgs[g].vpc_id is not None and sgs[g].vpc_id != vpcs[0]
        ]
        if wrong:
            findings.append(_sgs_outside_vpc(obs, label, vpcs[0], known, wrong))
    return findings


def _subnets_not_described(obs: ClusterObservation, label: str, unseen: list[str]) -> Finding:
    return finding(
        obs,
        CHECK_ALIGNMENT,
        Tag.UNKNOWN,
        f"Subnet(s) {', '.join(unseen)} of {label} were not returned by ec2:DescribeSubnets",
        priority=Priority.P2,
        section="B.1",
        evidence=[f"{s}: not described" for s in unseen],
        suggested_commands=[
            read_only(
                aws_argv("ec2", "describe-subnets", obs.cluster.region, "--subnet-ids", *unseen),
                "Check whether the subnets still exist.",
            )
        ],
    )


def _subnets_span_vpcs(obs: ClusterObservation, label: str, vpcs: list[str], known: list[Subnet]) -> Finding:
    return finding(
        obs,
        CHECK_ALIGNMENT,
        Tag.FAIL,
        f"Subnets of {label} span {len(vpcs)} VPCs ({', '.join(vpcs)}); they must share one VPC",
        priority=Priority.P0,
        section="B.1",
        evidence=_subnet_lines(known),
        root_cause="A HyperPod VpcConfig places every node of its groups in one VPC; subnets "
        "from different VPCs cannot be used together.",
        suggested_commands=[
            read_only(
                aws_argv(
                    "ec2", "describe-subnets", obs.cluster.region, "--subnet-ids", *(sn.subnet_id for sn in known)
                ),
                "Show which VPC each subnet belongs to.",
            )
        ],
    )


def _sgs_outside_vpc(
    obs: ClusterObservation, label: str, vpc_id: str, known: list[Subnet], wrong: list[SecurityGroup]
) -> Finding:
    return finding(
        obs,
        CHECK_ALIGNMENT,
        Tag.FAIL,
        f"Security group(s) {', '.join(sg.group_id for sg in wrong)} of {label} are not in "
        f"{vpc_id}, the VPC of its subnets",
        priority=Priority.P0,
        section="B.1",
        evidence=[*_subnet_lines(known), *(f"{sg.group_id} {sg.vpc_id}" for sg in wrong)],
        root_cause="A security group can only be attached to network interfaces in its own VPC; "
        "nodes cannot launch with a security group from another VPC.",
        suggested_commands=[
            read_only(
                aws_argv(
                    "ec2", "describe-security-groups", obs.cluster.region, "--group-ids", *(sg.group_id for sg in wrong)
                ),
                "Show the VPC of each security group.",
            )
        ],
    )


def _subnet_lines(known: list[Subnet]) -> list[str]:
    return [f"{sn.subnet_id} {sn.vpc_id}" for sn in known]
