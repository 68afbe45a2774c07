"""§ B.2: the VPC's DNS attributes."""

from __future__ import annotations

from hyperpod_debugger.checks.base import CheckContext, finding
from hyperpod_debugger.checks.vpc.common import (
    CHECK_DNS,
    require_subnet_ids,
)
from hyperpod_debugger.domain.commands import aws_argv, json_arg, mutating, read_only
from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag
from hyperpod_debugger.domain.observations import (
    ClusterObservation,
    NotApplicable,
)


def _dns_commands(obs: ClusterObservation, vpc_id: str, flag: str, attribute: str) -> list[SuggestedCommand]:
    region = obs.cluster.region
    return [
        read_only(
            aws_argv("ec2", "describe-vpc-attribute", region, "--vpc-id", vpc_id, "--attribute", attribute),
            f"Confirm the current value of {attribute}.",
        ),
        mutating(
            aws_argv("ec2", "modify-vpc-attribute", region, "--vpc-id", vpc_id, flag, json_arg({"Value": True})),
            f"Turn on {attribute} for {vpc_id}.",
            blast_radius=f"Affects name resolution for every instance and service in {vpc_id}, not only "
            "HyperPod nodes; enabling is additive. Reversible with the same command and "
            '{"Value":false}, but turning it off on a live cluster breaks EKS and Slurm naming.',
            changes_configuration=True,
            resource=vpc_id,
            preconditions=[
                f"{vpc_id} is owned by account {obs.cluster.account_id}; a VPC shared through AWS RAM can "
                "only be modified by its owner.",
                f"{attribute} is currently false.",
            ],
        ),
    ]


def check_dns(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """enableDnsSupport and enableDnsHostnames on every HyperPod VPC."""
    subnet_ids = require_subnet_ids(obs)
    subnets = obs.network.subnets.get()
    vpc_ids = list(dict.fromkeys(subnets[s].vpc_id for s in subnet_ids if s in subnets))
    if not vpc_ids:
        raise NotApplicable("the VPC of the cluster's subnets is unknown (reported by vpc.alignment)")
    vpcs = obs.network.vpcs.get()
    findings: list[Finding] = []
    for vpc_id in vpc_ids:
        vpc = vpcs.get(vpc_id)
        if vpc is None:
            findings.append(
                finding(
                    obs,
                    CHECK_DNS,
                    Tag.UNKNOWN,
                    f"Could not read the DNS attributes of {vpc_id}",
                    priority=Priority.P2,
                    section="B.2",
                    evidence=[f"{vpc_id}: not described"],
                )
            )
            continue
        attrs = (
            (
                "enableDnsSupport",
                "--enable-dns-support",
                vpc.dns_support,
                Priority.P0,
                "the Amazon-provided DNS server is off, so nodes cannot resolve AWS endpoints or each other",
            ),
            (
                "enableDnsHostnames",
                "--enable-dns-hostnames",
                vpc.dns_hostnames,
                Priority.P1,
                "instances get no private DNS hostnames, which EKS node names and Slurm host names rely on",
            ),
        )
        for attribute, flag, value, priority, effect in attrs:
            if value is None:
                findings.append(
                    finding(
                        obs,
                        CHECK_DNS,
                        Tag.UNKNOWN,
                        f"Could not read attribute {attribute} of {vpc_id}",
                        priority=Priority.P2,
                        section="B.2",
                        evidence=[f"{vpc_id} {attribute}=unknown"],
                        suggested_commands=_dns_commands(obs, vpc_id, flag, attribute)[:1],
                    )
                )
            elif value is False:
                findings.append(
                    finding(
                        obs,
                        CHECK_DNS,
                        Tag.FAIL,
                        f"{attribute} is disabled on {vpc_id}",
                        priority=priority,
                        section="B.2",
                        evidence=[f"{vpc_id} {attribute}=false"],
                        root_cause=f"With {attribute} off, {effect}.",
                        suggested_commands=_dns_commands(obs, vpc_id, flag, attribute),
                    )
                )
    if not findings:
        findings.append(
            finding(
                obs,
                CHECK_DNS,
                Tag.PASS,
                f"DNS support and DNS hostnames are enabled on {', '.join(vpc_ids)}",
                section="B.2",
                evidence=[f"{v} enableDnsSupport=true enableDnsHostnames=true" for v in vpc_ids],
            )
        )
    return findings
