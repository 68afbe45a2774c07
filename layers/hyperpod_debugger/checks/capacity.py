"""Capacity: is each group's instance type offered in the AZs of the group's subnets (section C)."""

from __future__ import annotations

from hyperpod_debugger.checks.base import CheckContext, finding
from hyperpod_debugger.domain import commands
from hyperpod_debugger.domain.aws_types import ec2_type
from hyperpod_debugger.domain.checking import Check
from hyperpod_debugger.domain.model import Finding, Priority, Tag
from hyperpod_debugger.domain.observations import ClusterObservation, NotApplicable


def check_offerings(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    c = obs.cluster
    if c.vpc is None and not any(g.override_vpc for g in c.instance_groups):
        raise NotApplicable("the cluster has no VpcConfig, so there are no subnet AZs to compare")
    offerings = obs.offerings.get()
    subnets = obs.network.subnets.get()
    out: list[Finding] = []
    for g in c.instance_groups:
        cfg = g.override_vpc or c.vpc
        if cfg is None:
            continue
        azs = sorted({subnets[s].availability_zone for s in cfg.subnet_ids if s in subnets})
        offered = offerings.get(ec2_type(g.instance_type), frozenset())
        usable = [az for az in azs if az in offered]
        if azs and not usable:
            out.append(
                finding(
                    obs,
                    "capacity.offerings",
                    Tag.FAIL,
                    f"{g.instance_type} is not offered in any AZ of group {g.name}'s subnets ({', '.join(azs)})",
                    priority=Priority.P1,
                    section="C",
                    instance_group=g.name,
                    evidence=[
                        f"subnet AZs: {', '.join(azs)}",
                        f"AZs offering {ec2_type(g.instance_type)}: {', '.join(sorted(offered)) or '(none)'}",
                    ],
                    root_cause="Nodes can only launch in an AZ that offers the instance type.",
                    suggested_commands=[commands.offerings(c, g.instance_type)],
                )
            )
    if not out:
        out.append(
            finding(
                obs,
                "capacity.offerings",
                Tag.PASS,
                "Every group's instance type is offered in at least one AZ of its subnets",
                section="C",
            )
        )
    return out


CHECKS: tuple[Check, ...] = (Check("capacity.offerings", "C", "Instance type offered in subnet AZs", check_offerings),)
