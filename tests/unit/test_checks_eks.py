"""eks.prerequisites: EKS status, VPC, control-plane SG, auth mode, endpoint access (§ B.5, B.1, B.4)."""

from __future__ import annotations

import json
import shlex

import pytest

from hyperpod_debugger.checks.eks import CHECKS, check_prerequisites
from hyperpod_debugger.domain.model import Finding, Priority, Tag
from hyperpod_debugger.domain.observations import (
    ApiFailure,
    NotApplicable,
    Observed,
    SecurityGroup,
    SgRule,
    Unobservable,
    VpcConfig,
)
from tests.builders import (
    REGION,
    SG,
    SUBNET,
    VPC,
    cluster,
    context,
    eks,
    network,
    observation,
    rule,
    self_ref_sg,
    subnet,
)

EKS_SG = "sg-0eksclustersg0001"
VPC_B = "vpc-0bbbbbbbbbbbbbbb1"


# --------------------------------------------------------------------------- helpers


def run(eks_overrides: dict | None = None, *, cluster_overrides: dict | None = None, **network_overrides):
    obs = observation(
        cluster=cluster(**(cluster_overrides or {})),
        eks=Observed.ok(eks(**(eks_overrides or {}))),
        network=network(**network_overrides),
    )
    return check_prerequisites(obs, context())


def detached(*cluster_sg_ingress: SgRule) -> dict:
    """EKS without the HyperPod SG attached; its cluster SG described with the given inbound rules."""
    control_plane = SecurityGroup(EKS_SG, "eks-cluster-sg", VPC, tuple(cluster_sg_ingress), ())
    return {
        "eks_overrides": {"security_group_ids": ()},
        "security_groups": Observed.ok({SG: self_ref_sg(), EKS_SG: control_plane}),
    }


def run_detached(*rules: SgRule, **extra):
    spec = detached(*rules)
    return run(spec["eks_overrides"], security_groups=spec["security_groups"], **extra)


def tagged(findings: list[Finding]) -> list[tuple[Tag, Priority | None, str | None]]:
    return [(f.tag, f.priority, f.section) for f in findings]


# --------------------------------------------------------------------------- applicability


def test_check_is_registered_under_b5() -> None:
    # GIVEN / WHEN / THEN
    assert [(c.id, c.section) for c in CHECKS] == [("eks.prerequisites", "B.5")]


def test_slurm_cluster_is_not_applicable() -> None:
    # GIVEN a Slurm cluster
    obs = observation(cluster=cluster(orchestrator="Slurm"))
    # WHEN / THEN
    with pytest.raises(NotApplicable):
        check_prerequisites(obs, context())


def test_unreadable_eks_cluster_propagates() -> None:
    # GIVEN eks:DescribeCluster was denied
    failure = ApiFailure("eks:DescribeCluster", "denied", "AccessDenied")
    obs = observation(eks=Observed.failed(failure))
    # WHEN / THEN
    with pytest.raises(Unobservable):
        check_prerequisites(obs, context())


def test_healthy_eks_passes_once() -> None:
    # GIVEN the default EKS cluster: ACTIVE, same VPC, HyperPod SG attached, access entries
    findings = run()
    # WHEN / THEN
    assert tagged(findings) == [(Tag.PASS, None, "B.5")]


# --------------------------------------------------------------------------- status and VPC


def test_eks_not_active_fails_p0() -> None:
    # GIVEN EKS is still creating
    findings = run({"status": "CREATING"})
    # WHEN / THEN
    assert tagged(findings) == [(Tag.FAIL, Priority.P0, "B.5")]
    assert "CREATING" in findings[0].message


def test_eks_in_another_vpc_fails_p0() -> None:
    # GIVEN EKS lives in another VPC
    findings = run({"vpc_id": VPC_B})
    # WHEN / THEN
    assert tagged(findings) == [(Tag.FAIL, Priority.P0, "B.5")]
    assert VPC_B in findings[0].message and SUBNET in findings[0].message
    assert f"{SUBNET} {VPC}" in findings[0].evidence


def test_unreadable_subnets_make_vpc_comparison_unknown_without_hiding_other_results() -> None:
    # GIVEN the subnets could not be described and auth mode is CONFIG_MAP
    failure = ApiFailure("ec2:DescribeSubnets", "throttled", "Throttling")
    findings = run({"authentication_mode": "CONFIG_MAP"}, subnets=Observed.failed(failure))
    # WHEN / THEN the VPC part is unknown, the auth part still fails
    assert (Tag.UNKNOWN, Priority.P2, "B.5") in tagged(findings)
    assert (Tag.FAIL, Priority.P1, "B.1") in tagged(findings)


# --------------------------------------------------------------------------- control-plane SG


def test_hyperpod_sg_attached_as_cluster_sg_passes() -> None:
    # GIVEN the HyperPod SG is EKS's cluster security group
    findings = run({"security_group_ids": (), "cluster_security_group_id": SG})
    # WHEN / THEN
    assert tagged(findings) == [(Tag.PASS, None, "B.5")]


def test_cluster_sg_admitting_hyperpod_sg_on_443_passes() -> None:
    # GIVEN the EKS cluster SG admits TCP 443 from the HyperPod SG
    findings = run_detached(rule("tcp", groups=(SG,), ports=(443, 443)))
    # WHEN / THEN
    assert tagged(findings) == [(Tag.PASS, None, "B.5")]


def test_cluster_sg_admitting_all_traffic_from_hyperpod_sg_passes() -> None:
    # GIVEN the EKS cluster SG admits all traffic from the HyperPod SG
    findings = run_detached(rule(groups=(SG,)))
    # WHEN / THEN
    assert tagged(findings) == [(Tag.PASS, None, "B.5")]


def test_eks_sg_ingress_on_non_443_port_does_not_count() -> None:
    # GIVEN the EKS cluster SG admits the HyperPod SG, but only on TCP 22
    findings = run_detached(rule("tcp", groups=(SG,), ports=(22, 22)))
    # WHEN / THEN the reference alone is not enough
    assert tagged(findings) == [(Tag.FAIL, Priority.P1, "B.5")]


def test_eks_sg_failure_points_at_b5_not_a() -> None:
    # GIVEN the EKS cluster SG admits nothing from HyperPod
    findings = run_detached(rule(groups=(EKS_SG,)))
    # WHEN
    fail = next(f for f in findings if f.tag is Tag.FAIL)
    # THEN it is routed to B.5 with the ingress fix on the EKS cluster SG
    assert fail.section == "B.5"
    assert fail.pointer() == "references/node-diagnostics-detail.md § B.5"
    describe, fix = fail.suggested_commands
    assert not describe.mutates
    assert fix.mutates and fix.iac_warning and fix.blast_radius
    argv = shlex.split(fix.command)
    assert argv[:7] == [
        "aws",
        "ec2",
        "authorize-security-group-ingress",
        "--region",
        REGION,
        "--group-id",
        EKS_SG,
    ]
    assert json.loads(argv[argv.index("--ip-permissions") + 1]) == [
        {
            "IpProtocol": "-1",
            "UserIdGroupPairs": [{"GroupId": SG, "Description": "HyperPod nodes to EKS control plane"}],
        }
    ]


def test_cidr_rule_covering_the_hyperpod_subnets_on_443_passes() -> None:
    # GIVEN the EKS cluster SG admits 443 from the VPC CIDR containing the HyperPod subnet
    findings = run_detached(rule("tcp", ipv4=("10.0.0.0/16",), ports=(443, 443)))
    # WHEN / THEN
    assert tagged(findings) == [(Tag.PASS, None, "B.5")]


def test_cidr_rule_not_covering_the_hyperpod_subnets_fails() -> None:
    # GIVEN 443 is only open to an unrelated range
    findings = run_detached(rule("tcp", ipv4=("192.168.0.0/16",), ports=(443, 443)))
    # WHEN / THEN
    assert tagged(findings) == [(Tag.FAIL, Priority.P1, "B.5")]


def test_cluster_sg_not_described_is_unknown_p2() -> None:
    # GIVEN the HyperPod SG is not attached and the EKS cluster SG was not described
    findings = run({"security_group_ids": ()})
    # WHEN / THEN
    assert tagged(findings) == [(Tag.UNKNOWN, Priority.P2, "B.5")]
    assert EKS_SG in findings[0].message
    assert all(not c.mutates for c in findings[0].suggested_commands)


def test_unreadable_security_groups_make_sg_part_unknown() -> None:
    # GIVEN DescribeSecurityGroups failed and the HyperPod SG is not attached
    failure = ApiFailure("ec2:DescribeSecurityGroups", "timeout", "timed out")
    findings = run({"security_group_ids": ()}, security_groups=Observed.failed(failure))
    # WHEN / THEN
    assert tagged(findings) == [(Tag.UNKNOWN, Priority.P2, "B.5")]


# --------------------------------------------------------------------------- authentication mode


def test_config_map_auth_mode_fails_p1_in_b1_with_update_command() -> None:
    # GIVEN EKS authenticates through the aws-auth ConfigMap only
    findings = run({"authentication_mode": "CONFIG_MAP"})
    # WHEN
    assert tagged(findings) == [(Tag.FAIL, Priority.P1, "B.1")]
    fix = findings[0].suggested_commands[-1]
    # THEN the fix is the mutating access-config update, with its one-way nature stated
    assert fix.mutates and fix.iac_warning
    assert "one-way" in fix.blast_radius.lower()
    assert shlex.split(fix.command) == [
        "aws",
        "eks",
        "update-cluster-config",
        "--region",
        REGION,
        "--name",
        "demo-eks",
        "--access-config",
        "authenticationMode=API_AND_CONFIG_MAP",
    ]


@pytest.mark.parametrize("mode", ["API", "API_AND_CONFIG_MAP"])
def test_access_entry_modes_pass(mode: str) -> None:
    # GIVEN an access-entry capable mode
    # WHEN / THEN
    assert tagged(run({"authentication_mode": mode})) == [(Tag.PASS, None, "B.5")]


def test_missing_access_config_is_unknown_p2() -> None:
    # GIVEN EKS did not report accessConfig
    findings = run({"authentication_mode": None})
    # WHEN / THEN
    assert tagged(findings) == [(Tag.UNKNOWN, Priority.P2, "B.1")]
    assert "did not report accessConfig" in findings[0].message


# --------------------------------------------------------------------------- endpoint access


def test_private_only_endpoint_warns_p2_in_b4() -> None:
    # GIVEN the API endpoint is private only
    findings = run({"endpoint_public": False, "endpoint_private": True})
    # WHEN / THEN
    assert tagged(findings) == [(Tag.WARN, Priority.P2, "B.4")]


def test_public_and_private_endpoint_passes() -> None:
    # GIVEN public and private access
    # WHEN / THEN
    assert tagged(run({"endpoint_public": True, "endpoint_private": False})) == [(Tag.PASS, None, "B.5")]


# --------------------------------------------------------------------------- combined / safety


def test_every_problem_is_a_separate_finding() -> None:
    # GIVEN everything wrong at once
    spec = detached(rule("tcp", groups=(SG,), ports=(22, 22)))
    findings = run(
        {
            **spec["eks_overrides"],
            "status": "UPDATING",
            "vpc_id": VPC_B,
            "authentication_mode": "CONFIG_MAP",
            "endpoint_public": False,
            "endpoint_private": True,
        },
        security_groups=spec["security_groups"],
    )
    # WHEN / THEN one finding per problem, no PASS
    assert sorted(tagged(findings)) == sorted(
        [
            (Tag.FAIL, Priority.P0, "B.5"),
            (Tag.FAIL, Priority.P0, "B.5"),
            (Tag.FAIL, Priority.P1, "B.5"),
            (Tag.FAIL, Priority.P1, "B.1"),
            (Tag.WARN, Priority.P2, "B.4"),
        ]
    )


@pytest.mark.parametrize("hostile", ["demo;rm -rf /", "$(curl evil)", "a'b\"c"])
def test_hostile_eks_name_stays_one_shell_token(hostile: str) -> None:
    # GIVEN an EKS cluster with a hostile name and the CONFIG_MAP mode
    findings = run({"name": hostile, "authentication_mode": "CONFIG_MAP"})
    # WHEN the commands are split like a shell would
    for f in findings:
        for c in f.suggested_commands:
            argv = shlex.split(c.command)
            # THEN the name is one argument right after --name
            assert argv[argv.index("--name") + 1] == hostile


def test_hostile_sg_ids_stay_one_shell_token() -> None:
    # GIVEN hostile HyperPod and EKS cluster SG ids and no admitting rule
    hp, cp = "sg-1;reboot", "sg-$(id)"
    control_plane = SecurityGroup(cp, "eks", VPC, (), ())
    findings = run(
        {"security_group_ids": (), "cluster_security_group_id": cp},
        cluster_overrides={"vpc": VpcConfig((hp,), (SUBNET,))},
        security_groups=Observed.ok({hp: self_ref_sg(hp), cp: control_plane}),
        subnets=Observed.ok({SUBNET: subnet()}),
    )
    # WHEN
    fix = next(f for f in findings if f.tag is Tag.FAIL).suggested_commands[1]
    argv = shlex.split(fix.command)
    # THEN
    assert argv[argv.index("--group-id") + 1] == cp
    assert json.loads(argv[argv.index("--ip-permissions") + 1])[0]["UserIdGroupPairs"][0]["GroupId"] == hp
