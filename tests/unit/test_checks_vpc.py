"""VPC checks: alignment, free IPs, DNS, routing, endpoints, ENI quota (runbook § B.1–B.4)."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import pytest

from hyperpod_debugger.checks.vpc import (
    CHECKS,
    check_alignment,
    check_dns,
    check_endpoints,
    check_eni_quota,
    check_routing,
    check_subnet_ips,
)
from hyperpod_debugger.domain.model import Finding, Priority, Tag
from hyperpod_debugger.domain.observations import (
    ApiFailure,
    NotApplicable,
    Observed,
    Route,
    RouteTable,
    Unobservable,
    Vpc,
    VpcConfig,
    VpcEndpoint,
)
from tests.builders import (
    REGION,
    SG,
    SUBNET,
    VPC,
    cluster,
    context,
    endpoint,
    group,
    network,
    observation,
    route_table,
    self_ref_sg,
    subnet,
)

SUBNET_B = "subnet-0bbbbbbbbbbbbbbb1"
VPC_B = "vpc-0bbbbbbbbbbbbbbb1"
SG_B = "sg-0bbbbbbbbbbbbbbb1"

INTERFACE_SERVICES = (
    "ecr.api",
    "ecr.dkr",
    "sts",
    "ssm",
    "ssmmessages",
    "ec2messages",
    "ec2",
    "sagemaker.api",
    "sagemaker.runtime",
    "logs",
)


# --------------------------------------------------------------------------- helpers


def obs_with(*, cluster_overrides: dict | None = None, **network_overrides):
    return observation(cluster=cluster(**(cluster_overrides or {})), network=network(**network_overrides))


def two_subnet_cluster() -> dict:
    return {"vpc": VpcConfig(security_group_ids=(SG,), subnet_ids=(SUBNET, SUBNET_B))}


def tags(findings: list[Finding]) -> list[tuple[Tag, Priority | None]]:
    return [(f.tag, f.priority) for f in findings]


def isolated_table(rtb: str = "rtb-0abc") -> RouteTable:
    return replace(route_table(default_target=None), route_table_id=rtb)


def all_endpoints(*extra: str, s3_rtbs: tuple[str, ...] = ("rtb-0abc",)) -> list[VpcEndpoint]:
    return [
        endpoint("s3", "Gateway", s3_rtbs),
        *(endpoint(s) for s in INTERFACE_SERVICES),
        *(endpoint(s) for s in extra),
    ]


def assert_shell_safe(findings: list[Finding], hostile: str) -> None:
    commands = [c.command for f in findings for c in f.suggested_commands]
    assert commands, "expected at least one suggested command"
    carrying = 0
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "aws"
        whole = [a for a in argv if a == hostile or a.endswith("=" + hostile)]
        # a token that holds only part of the value would mean the shell split it
        partial = [a for a in argv if hostile[:6] in a and a not in whole]
        assert not partial, command
        carrying += bool(whole)
    assert carrying, "no command carried the hostile value"


# --------------------------------------------------------------------------- registration


def test_vpc_checks_are_registered_with_their_sections() -> None:
    # GIVEN / WHEN the exported checks
    pairs = {c.id: c.section for c in CHECKS}
    # THEN
    assert pairs == {
        "vpc.alignment": "B.1",
        "vpc.subnet_ips": "B.1",
        "vpc.dns": "B.2",
        "vpc.routing": "B.3",
        "vpc.endpoints": "B.4",
        "vpc.eni_quota": "B.1",
    }


def test_every_vpc_check_passes_once_on_a_healthy_cluster() -> None:
    # GIVEN the default healthy observation
    obs = observation()
    for check in CHECKS:
        # WHEN each check runs
        findings = check.run(obs, context())
        # THEN exactly one PASS without priority
        assert tags(findings) == [(Tag.PASS, None)], check.id


# --------------------------------------------------------------------------- alignment


def test_alignment_subnets_in_two_vpcs_fail_p0_with_subnet_vpc_evidence() -> None:
    # GIVEN two subnets of one VpcConfig in different VPCs
    subnets = {SUBNET: subnet(), SUBNET_B: subnet(SUBNET_B, VPC_B)}
    obs = obs_with(cluster_overrides=two_subnet_cluster(), subnets=Observed.ok(subnets))
    # WHEN
    findings = check_alignment(obs, context())
    # THEN
    assert tags(findings) == [(Tag.FAIL, Priority.P0)]
    assert findings[0].section == "B.1"
    assert f"{SUBNET} {VPC}" in findings[0].evidence
    assert f"{SUBNET_B} {VPC_B}" in findings[0].evidence


def test_alignment_sg_in_another_vpc_fails_p0() -> None:
    # GIVEN the cluster SG lives in another VPC than the subnets
    obs = obs_with(security_groups=Observed.ok({SG: self_ref_sg(vpc_id=VPC_B)}))
    # WHEN
    findings = check_alignment(obs, context())
    # THEN
    assert tags(findings) == [(Tag.FAIL, Priority.P0)]
    assert SG in findings[0].message and VPC in findings[0].message
    assert f"{SG} {VPC_B}" in findings[0].evidence


def test_alignment_checks_override_configs_separately() -> None:
    # GIVEN an override config whose subnet is in VPC_B but whose SG is in VPC
    override = VpcConfig(security_group_ids=(SG,), subnet_ids=(SUBNET_B,))
    obs = obs_with(
        cluster_overrides={"instance_groups": (group(), group("gpu-b", override_vpc=override))},
        subnets=Observed.ok({SUBNET: subnet(), SUBNET_B: subnet(SUBNET_B, VPC_B)}),
    )
    # WHEN
    findings = check_alignment(obs, context())
    # THEN the override is flagged; the cluster config itself is fine
    assert tags(findings) == [(Tag.FAIL, Priority.P0)]
    assert "gpu-b" in findings[0].message


def test_no_vpc_config_warns_instead_of_crashing() -> None:
    # GIVEN a cluster without VpcConfig and without overrides
    obs = observation(cluster=cluster(vpc=None))
    # WHEN
    findings = check_alignment(obs, context())
    # THEN one WARN P2 in B.1
    assert tags(findings) == [(Tag.WARN, Priority.P2)]
    assert findings[0].section == "B.1"
    assert "VpcConfig" in findings[0].message


def test_vpc_config_without_subnets_warns() -> None:
    # GIVEN a VpcConfig with SGs but no subnets
    obs = observation(cluster=cluster(vpc=VpcConfig(security_group_ids=(SG,), subnet_ids=())))
    # WHEN
    findings = check_alignment(obs, context())
    # THEN a WARN, and the other subnet-based checks skip instead of raising something else
    assert tags(findings) == [(Tag.WARN, Priority.P2)]
    for check in (check_subnet_ips, check_dns, check_routing, check_endpoints):
        with pytest.raises(NotApplicable):
            check(obs, context())


def test_alignment_subnet_not_described_is_unknown() -> None:
    # GIVEN the config names a subnet that DescribeSubnets did not return
    obs = obs_with(cluster_overrides=two_subnet_cluster())
    # WHEN
    findings = check_alignment(obs, context())
    # THEN
    assert tags(findings) == [(Tag.UNKNOWN, Priority.P2)]
    assert SUBNET_B in findings[0].message


def test_alignment_propagates_unreadable_subnets() -> None:
    # GIVEN DescribeSubnets failed
    obs = obs_with(subnets=Observed.failed(ApiFailure("ec2:DescribeSubnets", "throttled", "Throttling")))
    # WHEN / THEN
    with pytest.raises(Unobservable):
        check_alignment(obs, context())


# --------------------------------------------------------------------------- free IPs


@pytest.mark.parametrize(
    ("free", "expected"),
    [
        (0, (Tag.FAIL, Priority.P1)),
        (4, (Tag.FAIL, Priority.P1)),
        (5, (Tag.WARN, Priority.P2)),
        (49, (Tag.WARN, Priority.P2)),
        (50, (Tag.PASS, None)),
    ],
)
def test_subnet_ips_thresholds(free: int, expected: tuple) -> None:
    # GIVEN the cluster subnet has `free` addresses left
    obs = obs_with(subnets=Observed.ok({SUBNET: subnet(free=free)}))
    # WHEN
    findings = check_subnet_ips(obs, context())
    # THEN
    assert tags(findings) == [expected]
    assert findings[0].section == "B.1"


def test_subnet_ips_evidence_names_subnet_az_count_and_cidr() -> None:
    # GIVEN one low subnet among two
    subnets = {SUBNET: subnet(free=3), SUBNET_B: subnet(SUBNET_B, az="us-west-2b")}
    obs = obs_with(cluster_overrides=two_subnet_cluster(), subnets=Observed.ok(subnets))
    # WHEN
    findings = check_subnet_ips(obs, context())
    # THEN only the low subnet is reported, with all its facts
    assert len(findings) == 1
    line = findings[0].evidence[0]
    for part in (SUBNET, "us-west-2a", "free_ips=3", "10.0.0.0/24"):
        assert part in line


# --------------------------------------------------------------------------- DNS


def test_dns_support_off_fails_p0_with_modify_command() -> None:
    # GIVEN DNS support is disabled
    obs = obs_with(vpcs=Observed.ok({VPC: Vpc(VPC, False, True)}))
    # WHEN
    findings = check_dns(obs, context())
    # THEN
    assert tags(findings) == [(Tag.FAIL, Priority.P0)]
    assert findings[0].section == "B.2"
    describe, fix = findings[0].suggested_commands
    assert not describe.mutates
    assert fix.mutates and fix.iac_warning and VPC in (fix.blast_radius or "")
    assert any("RAM" in p for p in fix.preconditions)
    assert shlex.split(fix.command) == [
        "aws",
        "ec2",
        "modify-vpc-attribute",
        "--region",
        REGION,
        "--vpc-id",
        VPC,
        "--enable-dns-support",
        '{"Value":true}',
    ]
    assert "'{\"Value\":true}'" in fix.command


def test_dns_hostnames_off_fails_p1() -> None:
    # GIVEN DNS hostnames are disabled
    obs = obs_with(vpcs=Observed.ok({VPC: Vpc(VPC, True, False)}))
    # WHEN
    findings = check_dns(obs, context())
    # THEN
    assert tags(findings) == [(Tag.FAIL, Priority.P1)]
    assert "--enable-dns-hostnames" in findings[0].suggested_commands[1].command


def test_dns_attribute_not_read_is_unknown_p2_with_read_only_commands() -> None:
    # GIVEN neither attribute could be read
    obs = obs_with(vpcs=Observed.ok({VPC: Vpc(VPC, None, None)}))
    # WHEN
    findings = check_dns(obs, context())
    # THEN
    assert tags(findings) == [(Tag.UNKNOWN, Priority.P2)] * 2
    assert all("could not read attribute" in f.message.lower() for f in findings)
    assert all(not c.mutates for f in findings for c in f.suggested_commands)


def test_dns_vpc_not_described_is_unknown() -> None:
    # GIVEN the VPC is absent from DescribeVpcs output
    obs = obs_with(vpcs=Observed.ok({}))
    # WHEN / THEN
    assert tags(check_dns(obs, context())) == [(Tag.UNKNOWN, Priority.P2)]


def test_dns_commands_are_shell_safe_with_hostile_vpc_id() -> None:
    # GIVEN a hostile VPC id
    hostile = "vpc-1;rm -rf /"
    obs = obs_with(
        subnets=Observed.ok({SUBNET: subnet(vpc_id=hostile)}),
        vpcs=Observed.ok({hostile: Vpc(hostile, False, False)}),
    )
    # WHEN / THEN
    assert_shell_safe(check_dns(obs, context()), hostile)


# --------------------------------------------------------------------------- routing


def test_igw_default_route_is_a_p0_fail() -> None:
    # GIVEN the subnet's explicit route table sends 0.0.0.0/0 to an internet gateway
    obs = obs_with(route_tables=Observed.ok([route_table(default_target="igw-0abc")]))
    # WHEN
    findings = check_routing(obs, context())
    # THEN a FAIL P0 in B.3 is returned, not just printed
    assert tags(findings) == [(Tag.FAIL, Priority.P0)]
    assert findings[0].section == "B.3"
    assert "igw-0abc" in findings[0].message and SUBNET in findings[0].message
    assert all(not c.mutates for c in findings[0].suggested_commands)


def test_igw_on_implied_main_table_fails() -> None:
    # GIVEN the subnet has no explicit association; the VPC's main table routes to an IGW
    main = replace(route_table(subnets=(), default_target="igw-0main", main=True), route_table_id="rtb-main")
    obs = obs_with(route_tables=Observed.ok([main]))
    # WHEN
    findings = check_routing(obs, context())
    # THEN the main table is used and flagged
    assert tags(findings) == [(Tag.FAIL, Priority.P0)]
    assert any("implied" in line for line in findings[0].evidence)


def test_explicit_association_wins_over_main_table() -> None:
    # GIVEN a public main table and an explicit private table for the subnet
    main = replace(route_table(subnets=(), default_target="igw-0main", main=True), route_table_id="rtb-main")
    obs = obs_with(route_tables=Observed.ok([main, route_table(default_target="nat-0abc")]))
    # WHEN / THEN
    assert tags(check_routing(obs, context())) == [(Tag.PASS, None)]


def test_ipv6_default_route_to_igw_fails_but_egress_only_igw_passes() -> None:
    # GIVEN ::/0 to an IGW versus ::/0 to an egress-only IGW
    base = route_table(default_target="nat-0abc")
    to_igw = replace(base, routes=(*base.routes, Route("::/0", "igw-0v6", "active")))
    to_eigw = replace(base, routes=(*base.routes, Route("::/0", "eigw-0v6", "active")))
    # WHEN / THEN
    assert tags(check_routing(obs_with(route_tables=Observed.ok([to_igw])), context())) == [(Tag.FAIL, Priority.P0)]
    assert tags(check_routing(obs_with(route_tables=Observed.ok([to_eigw])), context())) == [(Tag.PASS, None)]


def test_blackhole_igw_route_is_not_counted() -> None:
    # GIVEN a default route to a deleted IGW (blackhole)
    table = replace(
        route_table(default_target=None),
        routes=(Route("10.0.0.0/16", "local", "active"), Route("0.0.0.0/0", "igw-0gone", "blackhole")),
    )
    # WHEN / THEN
    assert tags(check_routing(obs_with(route_tables=Observed.ok([table])), context())) == [(Tag.PASS, None)]


def test_routing_without_any_table_is_unknown_p2() -> None:
    # GIVEN no explicit association and no main table of the subnet's VPC (only another VPC's)
    other_main = replace(route_table(subnets=(), main=True), vpc_id=VPC_B)
    obs = obs_with(route_tables=Observed.ok([other_main]))
    # WHEN / THEN
    findings = check_routing(obs, context())
    assert tags(findings) == [(Tag.UNKNOWN, Priority.P2)]
    assert findings[0].section == "B.3"


def test_routing_groups_subnets_sharing_a_public_table() -> None:
    # GIVEN two subnets in one public table
    table = route_table(subnets=(SUBNET, SUBNET_B), default_target="igw-0abc")
    obs = obs_with(
        cluster_overrides=two_subnet_cluster(),
        subnets=Observed.ok({SUBNET: subnet(), SUBNET_B: subnet(SUBNET_B)}),
        route_tables=Observed.ok([table]),
    )
    # WHEN
    findings = check_routing(obs, context())
    # THEN one finding per table naming both subnets
    assert len(findings) == 1
    assert SUBNET in findings[0].message and SUBNET_B in findings[0].message


def test_routing_commands_are_shell_safe_with_hostile_table_id() -> None:
    # GIVEN a hostile route table id
    hostile = "rtb-$(reboot)"
    table = replace(route_table(default_target="igw-0abc"), route_table_id=hostile)
    # WHEN / THEN
    assert_shell_safe(check_routing(obs_with(route_tables=Observed.ok([table])), context()), hostile)


# --------------------------------------------------------------------------- endpoints


def test_endpoints_not_required_when_nat_exists() -> None:
    # GIVEN NAT egress and an endpoint lookup that even failed
    failure = ApiFailure("ec2:DescribeVpcEndpoints", "denied", "AccessDenied")
    obs = obs_with(endpoints=Observed.failed(failure))
    # WHEN
    findings = check_endpoints(obs, context())
    # THEN one PASS and no WARN noise; the endpoint list is never needed
    assert tags(findings) == [(Tag.PASS, None)]
    assert "NAT egress present" in findings[0].message


def test_transit_gateway_egress_is_assumed() -> None:
    # GIVEN a default route to a transit gateway
    obs = obs_with(route_tables=Observed.ok([route_table(default_target="tgw-0abc")]))
    # WHEN
    findings = check_endpoints(obs, context())
    # THEN
    assert tags(findings) == [(Tag.PASS, None)]
    assert "transit gateway, assumed" in findings[0].message


def test_isolated_subnet_with_all_endpoints_passes_and_mentions_fsx_as_info() -> None:
    # GIVEN an isolated subnet with every required endpoint (EKS cluster) but no fsx
    obs = obs_with(route_tables=Observed.ok([isolated_table()]), endpoints=Observed.ok(all_endpoints("eks")))
    # WHEN
    findings = check_endpoints(obs, context())
    # THEN one PASS plus an INFO about fsx, nothing else
    assert tags(findings) == [(Tag.PASS, None), (Tag.INFO, None)]
    assert "fsx" in findings[1].message


def test_isolated_subnet_with_fsx_endpoint_has_no_info() -> None:
    # GIVEN every endpoint including fsx
    obs = obs_with(route_tables=Observed.ok([isolated_table()]), endpoints=Observed.ok(all_endpoints("eks", "fsx")))
    # WHEN / THEN
    assert tags(check_endpoints(obs, context())) == [(Tag.PASS, None)]


def test_isolated_subnet_missing_endpoints_fails_p1_listing_each() -> None:
    # GIVEN an isolated subnet with only the S3 gateway endpoint
    endpoints = [endpoint("s3", "Gateway", ("rtb-0abc",)), endpoint("fsx")]
    obs = obs_with(route_tables=Observed.ok([isolated_table()]), endpoints=Observed.ok(endpoints))
    # WHEN
    findings = check_endpoints(obs, context())
    # THEN one FAIL P1 whose evidence lists every missing service, eks included on EKS
    fails = [f for f in findings if f.tag is Tag.FAIL]
    assert tags(fails) == [(Tag.FAIL, Priority.P1)]
    assert fails[0].section == "B.4"
    for svc in (*INTERFACE_SERVICES, "eks"):
        assert f"missing: com.amazonaws.{REGION}.{svc}" in fails[0].evidence
    assert not any(line.endswith(".s3") for line in fails[0].evidence)
    # AND the create commands are mutating, one subnet per AZ, with a read-only look first
    commands = fails[0].suggested_commands
    assert not commands[0].mutates
    assert all(c.mutates and c.iac_warning for c in commands[1:])
    assert len(commands) == 1 + len(INTERFACE_SERVICES) + 1


def test_slurm_cluster_does_not_require_eks_endpoint() -> None:
    # GIVEN a Slurm cluster, isolated subnet, every endpoint but eks
    obs = obs_with(
        cluster_overrides={"orchestrator": "Slurm"},
        route_tables=Observed.ok([isolated_table()]),
        endpoints=Observed.ok(all_endpoints("fsx")),
    )
    # WHEN / THEN
    assert tags(check_endpoints(obs, context())) == [(Tag.PASS, None)]


def test_eks_cluster_requires_eks_endpoint() -> None:
    # GIVEN an EKS cluster missing only the eks endpoint
    obs = obs_with(route_tables=Observed.ok([isolated_table()]), endpoints=Observed.ok(all_endpoints("fsx")))
    # WHEN
    fails = [f for f in check_endpoints(obs, context()) if f.tag is Tag.FAIL]
    # THEN
    assert len(fails) == 1
    assert fails[0].message.endswith("eks")


def test_endpoint_suffix_match_is_exact() -> None:
    # GIVEN ssmmessages and ecr.dkr exist but ssm and ecr.api do not
    endpoints = [e for e in all_endpoints("eks", "fsx") if not e.service_name.endswith((".ssm", ".ecr.api"))]
    obs = obs_with(route_tables=Observed.ok([isolated_table()]), endpoints=Observed.ok(endpoints))
    # WHEN
    fails = [f for f in check_endpoints(obs, context()) if f.tag is Tag.FAIL]
    # THEN only those two are missing
    missing = sorted(line for line in fails[0].evidence if line.startswith("missing:"))
    assert missing == [f"missing: com.amazonaws.{REGION}.ecr.api", f"missing: com.amazonaws.{REGION}.ssm"]


def test_endpoint_not_available_does_not_count() -> None:
    # GIVEN the sts endpoint is still pending
    endpoints = [
        replace(e, state="pending") if e.service_name.endswith(".sts") else e for e in all_endpoints("eks", "fsx")
    ]
    obs = obs_with(route_tables=Observed.ok([isolated_table()]), endpoints=Observed.ok(endpoints))
    # WHEN
    fails = [f for f in check_endpoints(obs, context()) if f.tag is Tag.FAIL]
    # THEN
    assert len(fails) == 1 and "sts" in fails[0].message


def test_s3_gateway_not_on_isolated_route_table_fails_p1() -> None:
    # GIVEN the S3 gateway endpoint is attached to another route table only
    obs = obs_with(
        route_tables=Observed.ok([isolated_table()]),
        endpoints=Observed.ok(all_endpoints("eks", "fsx", s3_rtbs=("rtb-other",))),
    )
    # WHEN
    findings = check_endpoints(obs, context())
    # THEN one FAIL P1 with a modify-vpc-endpoint fix
    assert tags(findings) == [(Tag.FAIL, Priority.P1)]
    assert "rtb-0abc" in findings[0].message
    fix = findings[0].suggested_commands[0]
    assert fix.mutates and fix.iac_warning
    assert shlex.split(fix.command)[-2:] == ["--add-route-table-ids", "rtb-0abc"]


def test_missing_s3_gateway_suggests_gateway_endpoint_on_isolated_tables() -> None:
    # GIVEN no S3 endpoint at all
    endpoints = [e for e in all_endpoints("eks", "fsx") if not e.service_name.endswith(".s3")]
    obs = obs_with(route_tables=Observed.ok([isolated_table()]), endpoints=Observed.ok(endpoints))
    # WHEN
    findings = check_endpoints(obs, context())
    # THEN
    assert tags(findings) == [(Tag.FAIL, Priority.P1)]
    create = [c for c in findings[0].suggested_commands if "Gateway" in c.command]
    assert len(create) == 1
    argv = shlex.split(create[0].command)
    assert argv[argv.index("--route-table-ids") + 1] == "rtb-0abc"
    assert argv[argv.index("--service-name") + 1] == f"com.amazonaws.{REGION}.s3"


def test_interface_endpoint_without_private_dns_warns() -> None:
    # GIVEN the sts endpoint has private DNS off
    endpoints = [
        replace(e, private_dns=False) if e.service_name.endswith(".sts") else e for e in all_endpoints("eks", "fsx")
    ]
    obs = obs_with(route_tables=Observed.ok([isolated_table()]), endpoints=Observed.ok(endpoints))
    # WHEN / THEN
    findings = check_endpoints(obs, context())
    assert tags(findings) == [(Tag.WARN, Priority.P2)]
    assert "vpce-sts" in findings[0].message


def test_isolated_subnets_unobservable_endpoints_propagate() -> None:
    # GIVEN an isolated subnet and a failed endpoint lookup
    failure = ApiFailure("ec2:DescribeVpcEndpoints", "timeout", "timed out")
    obs = obs_with(route_tables=Observed.ok([isolated_table()]), endpoints=Observed.failed(failure))
    # WHEN / THEN
    with pytest.raises(Unobservable):
        check_endpoints(obs, context())


def test_endpoint_commands_are_shell_safe_with_hostile_subnet_id() -> None:
    # GIVEN a hostile subnet id in an isolated subnet without endpoints
    hostile = "subnet-1 `id`"
    obs = obs_with(
        cluster_overrides={"vpc": VpcConfig(security_group_ids=(SG,), subnet_ids=(hostile,))},
        subnets=Observed.ok({hostile: subnet(hostile)}),
        route_tables=Observed.ok([replace(isolated_table(), subnet_ids=(hostile,))]),
        endpoints=Observed.ok([]),
    )
    # WHEN
    findings = check_endpoints(obs, context())
    # THEN every interface create command keeps the id as one argument
    creates = [c.command for f in findings for c in f.suggested_commands if "Interface" in c.command]
    assert creates
    for command in creates:
        argv = shlex.split(command)
        assert argv[argv.index("--subnet-ids") + 1] == hostile


# --------------------------------------------------------------------------- ENI quota


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        (3999, (Tag.PASS, None)),
        (4000, (Tag.WARN, Priority.P2)),
        (4749, (Tag.WARN, Priority.P2)),
        (4750, (Tag.FAIL, Priority.P1)),
        (5200, (Tag.FAIL, Priority.P1)),
    ],
)
def test_eni_quota_thresholds(count: int, expected: tuple) -> None:
    # GIVEN `count` ENIs against a quota of 5000
    obs = obs_with(eni_count=Observed.ok(count), eni_quota=Observed.ok(5000.0))
    # WHEN
    findings = check_eni_quota(obs, context())
    # THEN
    assert tags(findings) == [expected]
    assert findings[0].section == "B.1"
    assert f"network interfaces in use: {count}" in findings[0].evidence


def test_eni_quota_fail_suggests_quota_lookup_and_increase() -> None:
    # GIVEN usage at 98 %
    obs = obs_with(eni_count=Observed.ok(4900), eni_quota=Observed.ok(5000.0))
    # WHEN
    lookup, increase = check_eni_quota(obs, context())[0].suggested_commands
    # THEN
    assert not lookup.mutates and "L-DF5E4CA3" in lookup.command
    assert increase.mutates and increase.blast_radius
    assert "request-service-quota-increase" in increase.command


def test_eni_quota_zero_is_unknown() -> None:
    # GIVEN a nonsensical quota
    obs = obs_with(eni_quota=Observed.ok(0.0))
    # WHEN / THEN
    assert tags(check_eni_quota(obs, context())) == [(Tag.UNKNOWN, Priority.P2)]


def test_eni_quota_unreadable_propagates() -> None:
    # GIVEN the quota could not be read
    failure = ApiFailure("servicequotas:GetServiceQuota", "denied", "AccessDenied")
    obs = obs_with(eni_quota=Observed.failed(failure))
    # WHEN / THEN
    with pytest.raises(Unobservable):
        check_eni_quota(obs, context())


def test_vpc_findings_round_trip_through_the_model() -> None:
    # GIVEN a badly broken network
    obs = obs_with(
        vpcs=Observed.ok({VPC: Vpc(VPC, False, False)}),
        route_tables=Observed.ok([route_table(default_target="igw-0abc")]),
        subnets=Observed.ok({SUBNET: subnet(free=1)}),
        security_groups=Observed.ok({SG: self_ref_sg(vpc_id=VPC_B), SG_B: self_ref_sg(SG_B)}),
    )
    # WHEN every check runs
    findings = [f for check in CHECKS for f in check.run(obs, context())]
    # THEN all are valid, attributed and JSON-serialisable
    assert {f.tag for f in findings} >= {Tag.FAIL}
    for f in findings:
        assert f.cluster_name == "demo-cluster"
        assert Finding.model_validate(json.loads(f.model_dump_json())) == f
