"""EFA security-group checks (runbook section A).

Every node of one VPC configuration carries all of that configuration's security groups on
its network interfaces, so the rules that matter are the union over the set, not the rules
of each group alone. EFA traffic is only admitted by rules that reference a security group
(an IP range does not count), in both directions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from hyperpod_debugger.checks.base import CheckContext, finding
from hyperpod_debugger.domain.checking import Check
from hyperpod_debugger.domain.commands import aws_argv, json_arg, mutating, read_only
from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag, trim_evidence
from hyperpod_debugger.domain.observations import (
    ClusterObservation,
    NotApplicable,
    SecurityGroup,
    SgRule,
)

CHECK_EFA_SG = "network.efa_sg"
SECTION = "A"

BROAD = ("0.0.0.0/0", "::/0")
RULE_DESCRIPTION = "HyperPod node-to-node (EFA)"


@dataclass(slots=True)
class SgSet:
    """One distinct set of security groups and who uses it."""

    ids: tuple[str, ...]
    #: True when this is the cluster-level VpcConfig's set
    cluster_level: bool = False
    #: instance groups whose nodes carry this set
    groups: list[str] = field(default_factory=list)

    @property
    def key(self) -> frozenset[str]:
        return frozenset(self.ids)

    def label(self) -> str:
        ids = ", ".join(self.ids)
        groups = ", ".join(self.groups) or "no instance group"
        origin = "cluster VpcConfig" if self.cluster_level else "OverrideVpcConfig"
        return f"security group(s) {ids} ({origin}; {groups})"

    def instance_group(self) -> str | None:
        """The single instance group this set belongs to, when it is one group's override."""
        if not self.cluster_level and len(self.groups) == 1:
            return self.groups[0]
        return None


def sg_sets(obs: ClusterObservation) -> list[SgSet]:
    """Distinct SG sets of the cluster, cluster-level first, each with the groups that carry it."""
    cluster = obs.cluster
    sets: dict[frozenset[str], SgSet] = {}
    for group_name, cfg in cluster.all_vpc_configs():
        key = frozenset(cfg.security_group_ids)
        entry = sets.get(key)
        if entry is None:
            entry = sets[key] = SgSet(ids=tuple(dict.fromkeys(cfg.security_group_ids)))
        if group_name is None:
            entry.cluster_level = True
        elif group_name not in entry.groups:
            entry.groups.append(group_name)
    if cluster.vpc is not None:
        cluster_set = sets[frozenset(cluster.vpc.security_group_ids)]
        for g in cluster.instance_groups:
            if g.override_vpc is None and g.name not in cluster_set.groups:
                cluster_set.groups.append(g.name)
    return list(sets.values())


def describe_rules_argv(region: str, sg_ids: Iterable[str]) -> list[str]:
    ids = ",".join(dict.fromkeys(sg_ids))
    filters = f"Name=group-id,Values={ids}"
    return aws_argv("ec2", "describe-security-group-rules", region, "--filters", filters)


def _is_broad(r: SgRule) -> bool:
    return any(c in BROAD for c in (*r.ipv4_ranges, *r.ipv6_ranges))


def rules_admit_groups(rules: Iterable[SgRule], group_ids: Iterable[str]) -> bool:
    """True when some all-traffic rule references one of ``group_ids``."""
    wanted = set(group_ids)
    return any(r.all_traffic and wanted.intersection(r.group_ids) for r in rules)


def format_rule(sg_id: str, direction: str, r: SgRule) -> str:
    proto = "all" if r.all_traffic else r.protocol
    ports = ""
    if not r.all_traffic and (r.from_port is not None or r.to_port is not None):
        ports = f" ports={r.from_port}-{r.to_port}"
    peers = [f"sg:{g}" for g in r.group_ids] + list(r.ipv4_ranges) + list(r.ipv6_ranges)
    peers += [f"pl:{p}" for p in r.prefix_lists]
    side = "source" if direction == "inbound" else "dest"
    return f"{sg_id} {direction} proto={proto}{ports} {side}={','.join(peers) or '-'}"


def rule_lines(sgs: Iterable[SecurityGroup]) -> list[str]:
    lines: list[str] = []
    for sg in sgs:
        lines.append(f"{sg.group_id} name={sg.name} vpc={sg.vpc_id or '-'}")
        lines.extend(format_rule(sg.group_id, "inbound", r) for r in sg.ingress)
        lines.extend(format_rule(sg.group_id, "outbound", r) for r in sg.egress)
        if not sg.ingress:
            lines.append(f"{sg.group_id} inbound: no rules")
        if not sg.egress:
            lines.append(f"{sg.group_id} outbound: no rules")
    return lines


def _self_reference_commands(region: str, sg_id: str, direction: str) -> list[SuggestedCommand]:
    op = "authorize-security-group-egress" if direction == "outbound" else "authorize-security-group-ingress"
    revoke = "revoke-security-group-egress" if direction == "outbound" else "revoke-security-group-ingress"
    pair = {"GroupId": sg_id, "Description": RULE_DESCRIPTION}
    payload = json_arg([{"IpProtocol": "-1", "UserIdGroupPairs": [pair]}])
    return [
        read_only(
            describe_rules_argv(region, [sg_id]),
            f"List every rule of {sg_id} to confirm the {direction} self-reference is absent.",
        ),
        mutating(
            aws_argv("ec2", op, region, "--group-id", sg_id, "--ip-permissions", payload),
            f"Allow all {direction} traffic between network interfaces that carry {sg_id}.",
            blast_radius=(
                f"Opens all protocols and ports only between network interfaces that carry {sg_id}; "
                "nothing is opened to or from the internet or any other security group. "
                f"Reversible with `aws ec2 {revoke}` and the same --ip-permissions payload."
            ),
            changes_configuration=True,
            resource=sg_id,
            preconditions=[
                f"{sg_id} is listed in this cluster's VpcConfig or an instance group's OverrideVpcConfig.",
                "This check reported the rule missing; an InvalidPermission.Duplicate error means it "
                "already exists and nothing was changed.",
                "One self-referencing rule on one security group of the set is enough, because every "
                "node carries all groups of its set.",
            ],
        ),
    ]


#: direction -> what a set without its all-traffic self-reference misses, and why that matters
_MISSING_SELF_REFERENCE = {
    "inbound": (
        "missing inbound all-traffic rule from its own security group(s); node-to-node EFA traffic is dropped",
        "No inbound rule with protocol -1 references a security group of this set, "
        "so nodes cannot receive traffic from each other.",
    ),
    "outbound": (
        "missing outbound all-traffic rule to its own security group(s); EFA health checks fail",
        "No outbound rule with protocol -1 references a security group of this set. "
        "The outbound self-reference is the usual cause of a failed EFA health check; "
        "a 0.0.0.0/0 rule does not replace it.",
    ),
}


def check_efa_sg(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """Node-to-node all-traffic rules for every SG set, plus missing SGs and broad egress."""
    sets = sg_sets(obs)
    if not sets:
        raise NotApplicable("the cluster has no VpcConfig and no instance-group OverrideVpcConfig")
    described = obs.network.security_groups.get()
    missing = set(obs.network.missing_security_groups)
    findings = [
        _sg_not_found(obs, sets, sg_id) for sg_id in dict.fromkeys(sg for s in sets for sg in s.ids) if sg_id in missing
    ]
    unread: list[SgSet] = []
    for s in sets:
        present = [described[i] for i in s.ids if i in described]
        unseen = [i for i in s.ids if i not in described and i not in missing]
        if present:
            findings += _self_reference_gaps(obs, s, present, unseen)
        elif unseen:
            unread.append(s)  # when every SG of the set is missing, that was reported above
    findings += [
        finding(
            obs,
            CHECK_EFA_SG,
            Tag.UNKNOWN,
            f"Could not read the rules of {s.label()}",
            priority=Priority.P2,
            section=SECTION,
            instance_group=s.instance_group(),
            evidence=[f"{i}: not described" for i in s.ids],
        )
        for s in unread
    ]
    findings.extend(_broad_egress(obs, sets, described))
    findings.extend(_cross_set(obs, sets, described))
    if not findings:
        evidence = trim_evidence(
            [f"{s.label()}: inbound and outbound all-traffic rules reference the set" for s in sets]
        )
        findings.append(
            finding(
                obs,
                CHECK_EFA_SG,
                Tag.PASS,
                f"EFA security-group rules in place for {len(sets)} security-group set(s)",
                section=SECTION,
                evidence=evidence,
            )
        )
    return findings


def _sg_not_found(obs: ClusterObservation, sets: list[SgSet], sg_id: str) -> Finding:
    users = [s for s in sets if sg_id in s.ids]
    groups = sorted({g for s in users for g in s.groups})
    return finding(
        obs,
        CHECK_EFA_SG,
        Tag.FAIL,
        f"Security group {sg_id} does not exist, but the cluster references it",
        priority=Priority.P0,
        section=SECTION,
        instance_group=users[0].instance_group() if len(users) == 1 else None,
        evidence=[
            f"{sg_id}: not returned by ec2:DescribeSecurityGroups",
            f"instance groups using it: {', '.join(groups) or '-'}",
        ],
        root_cause="The security group was deleted or belongs to another account or "
        "Region; new nodes cannot be launched with it.",
        suggested_commands=[
            read_only(
                aws_argv("ec2", "describe-security-groups", obs.cluster.region, "--group-ids", sg_id),
                f"Confirm that {sg_id} is gone (expect InvalidGroup.NotFound).",
            )
        ],
    )


def _self_reference_gaps(
    obs: ClusterObservation, s: SgSet, present: list[SecurityGroup], unseen: list[str]
) -> list[Finding]:
    """Each direction in which no all-traffic rule of the set references the set: a FAIL, or UNKNOWN
    when some of its groups could not be described."""
    evidence = trim_evidence(rule_lines(present), 40)
    findings: list[Finding] = []
    for direction in ("inbound", "outbound"):
        rules = [r for sg in present for r in (sg.ingress if direction == "inbound" else sg.egress)]
        if rules_admit_groups(rules, s.ids):
            continue
        if unseen:
            findings.append(
                finding(
                    obs,
                    CHECK_EFA_SG,
                    Tag.UNKNOWN,
                    f"Could not verify the {direction} all-traffic self-reference of {s.label()}: "
                    f"{', '.join(unseen)} not described",
                    priority=Priority.P2,
                    section=SECTION,
                    instance_group=s.instance_group(),
                    evidence=evidence,
                )
            )
            continue
        what, root_cause = _MISSING_SELF_REFERENCE[direction]
        findings.append(
            finding(
                obs,
                CHECK_EFA_SG,
                Tag.FAIL,
                f"{s.label()[:1].upper() + s.label()[1:]}: {what}",
                priority=Priority.P0,
                section=SECTION,
                instance_group=s.instance_group(),
                evidence=evidence,
                root_cause=root_cause,
                suggested_commands=_self_reference_commands(obs.cluster.region, present[0].group_id, direction),
            )
        )
    return findings


def _broad_egress(obs: ClusterObservation, sets: list[SgSet], described: dict[str, SecurityGroup]) -> list[Finding]:
    findings: list[Finding] = []
    for sg_id in dict.fromkeys(sg for s in sets for sg in s.ids):
        sg = described.get(sg_id)
        if sg is None:
            continue
        broad = [r for r in sg.egress if r.all_traffic and _is_broad(r)]
        if not broad:
            continue
        users = [s for s in sets if sg_id in s.ids]
        ranges = sorted({c for r in broad for c in (*r.ipv4_ranges, *r.ipv6_ranges) if c in BROAD})
        findings.append(
            finding(
                obs,
                CHECK_EFA_SG,
                Tag.WARN,
                f"Security group {sg_id} allows all outbound traffic to {' and '.join(ranges)}; "
                "HyperPod advises against broad egress on the EFA security group",
                priority=Priority.P2,
                section=SECTION,
                instance_group=users[0].instance_group() if len(users) == 1 else None,
                evidence=[format_rule(sg_id, "outbound", r) for r in broad],
                root_cause="Broad egress on the security group used for EFA is outside the HyperPod "
                "prerequisites; give the subnets internet access through a NAT gateway, or "
                "AWS service access through VPC endpoints, instead.",
                suggested_commands=[
                    read_only(
                        describe_rules_argv(obs.cluster.region, [sg_id]),
                        f"Review the outbound rules of {sg_id} before narrowing them.",
                    )
                ],
            )
        )
    return findings


def _cross_set(obs: ClusterObservation, sets: list[SgSet], described: dict[str, SecurityGroup]) -> list[Finding]:
    """Instance groups on different SG sets must admit each other's traffic."""
    used = [s for s in sets if s.groups]
    findings: list[Finding] = []
    for i, a in enumerate(used):
        for b in used[i + 1 :]:
            blocked: list[str] = []
            evidence: list[str] = []
            for dst, src in ((a, b), (b, a)):
                present = [described[x] for x in dst.ids if x in described]
                if len(present) < len(dst.ids):
                    continue  # cannot judge a set we could not fully read; reported elsewhere
                rules = [r for sg in present for r in sg.ingress]
                if not rules_admit_groups(rules, src.ids):
                    blocked.append(f"{', '.join(src.groups)} -> {', '.join(dst.groups)}")
                    evidence.append(
                        f"inbound of {', '.join(dst.ids)} has no all-traffic rule from any of {', '.join(src.ids)}"
                    )
            if not blocked:
                continue
            findings.append(
                finding(
                    obs,
                    CHECK_EFA_SG,
                    Tag.WARN,
                    f"Instance groups {', '.join(a.groups)} and {', '.join(b.groups)} use different security "
                    f"groups that do not admit each other ({'; '.join(blocked)})",
                    priority=Priority.P1,
                    section=SECTION,
                    evidence=evidence,
                    root_cause="Nodes of different instance groups carry different security-group sets; "
                    "unless each set allows all inbound traffic from the other, jobs that span "
                    "these groups cannot communicate over EFA.",
                    suggested_commands=[
                        read_only(
                            describe_rules_argv(obs.cluster.region, [*a.ids, *b.ids]),
                            "List the rules of both security-group sets.",
                        )
                    ],
                )
            )
    return findings


CHECKS: tuple[Check, ...] = (
    Check(id=CHECK_EFA_SG, section=SECTION, title="EFA security-group rules", run=check_efa_sg),
)
