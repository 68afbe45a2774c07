"""§ B.1: free IP addresses per subnet, and network interfaces against the regional quota."""

from __future__ import annotations

import math

from hyperpod_debugger.checks.base import CheckContext, finding
from hyperpod_debugger.checks.vpc.common import (
    CHECK_ENI_QUOTA,
    CHECK_SUBNET_IPS,
    ENI_FAIL_RATIO,
    ENI_QUOTA_CODE,
    ENI_WARN_RATIO,
    IPS_CRITICAL,
    IPS_LOW,
    require_subnet_ids,
    subnet_line,
)
from hyperpod_debugger.domain.commands import aws_argv, mutating, read_only
from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag, trim_evidence
from hyperpod_debugger.domain.observations import (
    ClusterObservation,
    NotApplicable,
)


def check_subnet_ips(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """Free IPv4 addresses per HyperPod subnet."""
    subnet_ids = require_subnet_ids(obs)
    subnets = obs.network.subnets.get()
    known = [subnets[s] for s in subnet_ids if s in subnets]
    if not known:
        raise NotApplicable("none of the cluster's subnets was described (reported by vpc.alignment)")
    region = obs.cluster.region
    findings: list[Finding] = []
    for sn in known:
        if sn.available_ips >= IPS_LOW:
            continue
        critical = sn.available_ips < IPS_CRITICAL
        findings.append(
            finding(
                obs,
                CHECK_SUBNET_IPS,
                Tag.FAIL if critical else Tag.WARN,
                f"Subnet {sn.subnet_id} ({sn.availability_zone}) has only "
                f"{sn.available_ips} free IP address(es)"
                + ("; new nodes will fail to launch" if critical else "; consider a larger or additional subnet"),
                priority=Priority.P1 if critical else Priority.P2,
                section="B.1",
                evidence=[subnet_line(sn)],
                root_cause="Every node consumes addresses for its network interfaces (and, on EKS, for the "
                "pod addresses the VPC CNI keeps warm); an exhausted subnet blocks scaling and "
                "replacement.",
                suggested_commands=[
                    read_only(
                        aws_argv("ec2", "describe-subnets", region, "--subnet-ids", sn.subnet_id),
                        "Re-read the free address count of the subnet.",
                    )
                ],
            )
        )
    if not findings:
        findings.append(
            finding(
                obs,
                CHECK_SUBNET_IPS,
                Tag.PASS,
                f"All {len(known)} HyperPod subnet(s) have at least {IPS_LOW} free IP addresses",
                section="B.1",
                evidence=trim_evidence([subnet_line(sn) for sn in known]),
            )
        )
    return findings


# --------------------------------------------------------------------------- B.1 ENI quota


def check_eni_quota(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """Network interfaces in use against the regional quota."""
    count = obs.network.eni_count.get()
    quota = obs.network.eni_quota.get()
    region = obs.cluster.region
    if quota is None or quota <= 0:
        return [
            finding(
                obs,
                CHECK_ENI_QUOTA,
                Tag.UNKNOWN,
                f"Service Quotas returned no usable value for {ENI_QUOTA_CODE} (Network interfaces per Region)",
                priority=Priority.P2,
                section="B.1",
                evidence=[f"eni_count={count} quota={quota}"],
            )
        ]
    ratio = count / quota
    evidence = [
        f"network interfaces in use: {count}",
        f"quota {ENI_QUOTA_CODE} (Network interfaces per Region, {region}): {quota:g}",
        f"usage: {ratio:.0%}",
    ]
    if ratio < ENI_WARN_RATIO:
        return [
            finding(
                obs,
                CHECK_ENI_QUOTA,
                Tag.PASS,
                f"{count} of {quota:g} network interfaces in use ({ratio:.0%} of the regional quota)",
                section="B.1",
                evidence=evidence,
            )
        ]
    critical = ratio >= ENI_FAIL_RATIO
    return [
        finding(
            obs,
            CHECK_ENI_QUOTA,
            Tag.FAIL if critical else Tag.WARN,
            f"{count} of {quota:g} network interfaces in use ({ratio:.0%} of the regional quota)"
            + ("; new nodes may fail to launch" if critical else ""),
            priority=Priority.P1 if critical else Priority.P2,
            section="B.1",
            evidence=evidence,
            root_cause="Each node needs several network interfaces (more on EFA instance types); when the "
            "regional quota is reached, launches and replacements fail.",
            suggested_commands=_eni_quota_commands(region, math.ceil(max(quota, count) * 1.5)),
        )
    ]


def _eni_quota_commands(region: str, desired: int) -> list[SuggestedCommand]:
    """Read the regional network-interface quota, then ask for ``desired``."""
    return [
        read_only(
            aws_argv(
                "service-quotas",
                "get-service-quota",
                region,
                "--service-code",
                "ec2",
                "--quota-code",
                ENI_QUOTA_CODE,
            ),
            "Read the current regional network-interface quota.",
        ),
        mutating(
            aws_argv(
                "service-quotas",
                "request-service-quota-increase",
                region,
                "--service-code",
                "ec2",
                "--quota-code",
                ENI_QUOTA_CODE,
                "--desired-value",
                str(desired),
            ),
            "Ask AWS to raise the regional network-interface quota.",
            blast_radius=f"Raises a limit for the whole account in {region}; no resource changes. "
            "A granted increase cannot be withdrawn by request.",
            changes_configuration=False,
            step="change",
            iac_note="No infrastructure-as-code drift: a quota request changes an account limit, "
            "not a resource a template manages.",
            preconditions=[f"Adjust --desired-value ({desired}) to the growth you plan."],
        ),
    ]
