"""network.efa_sg: node-to-node all-traffic rules on every security-group set (runbook § A)."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import pytest

from hyperpod_debugger.checks.network import CHECKS, check_efa_sg
from hyperpod_debugger.domain.model import Finding, Priority, Tag
from hyperpod_debugger.domain.observations import (
    ApiFailure,
    NotApplicable,
    Observed,
    SecurityGroup,
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
    group,
    network,
    observation,
    rule,
    self_ref_sg,
)

SG_B = "sg-0bbbbbbbbbbbbbbb1"
SG_C = "sg-0ccccccccccccccc1"
SG_D = "sg-0ddddddddddddddd1"


# --------------------------------------------------------------------------- helpers


def run_with(sgs: list[SecurityGroup], *, missing: tuple[str, ...] = (), **cluster_overrides) -> list[Finding]:
    obs = observation(
        cluster=cluster(**cluster_overrides),
        network=network(
            security_groups=Observed.ok({sg.group_id: sg for sg in sgs}),
            missing_security_groups=missing,
        ),
    )
    return check_efa_sg(obs, context())


def problems(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.is_problem]


def sg(group_id: str, *, ingress=(), egress=()) -> SecurityGroup:
    return SecurityGroup(group_id=group_id, name=f"n-{group_id}", vpc_id=VPC, ingress=ingress, egress=egress)


def overrides_two_sets() -> dict:
    """Cluster set {SG} for group 'workers'; override set {SG_B} for group 'gpu-b'."""
    return {
        "instance_groups": (
            group("workers"),
            group("gpu-b", override_vpc=VpcConfig(security_group_ids=(SG_B,), subnet_ids=(SUBNET,))),
        )
    }


# --------------------------------------------------------------------------- healthy


def test_check_is_registered_for_section_a() -> None:
    # GIVEN / WHEN the module's exported checks
    ids = {(c.id, c.section) for c in CHECKS}
    # THEN the EFA SG check is exported under section A
    assert ids == {("network.efa_sg", "A")}


def test_self_referencing_sg_passes_with_one_pass_finding() -> None:
    # GIVEN the default cluster whose only SG references itself both ways
    # WHEN the check runs
    findings = run_with([self_ref_sg()])
    # THEN exactly one PASS without priority
    assert [f.tag for f in findings] == [Tag.PASS]
    assert findings[0].priority is None
    assert findings[0].section == "A"
    assert findings[0].check == "network.efa_sg"


def test_sgs_referencing_each_other_pass() -> None:
    # GIVEN two cluster SGs that only reference each other (no self reference at all)
    a = sg(SG, ingress=(rule(groups=(SG_B,)),), egress=(rule(groups=(SG_B,)),))
    b = sg(SG_B, ingress=(rule(groups=(SG,)),), egress=(rule(groups=(SG,)),))
    # WHEN the check runs on the cluster VpcConfig carrying both
    findings = run_with([a, b], vpc=VpcConfig(security_group_ids=(SG, SG_B), subnet_ids=(SUBNET,)))
    # THEN every node carries both, so node-to-node traffic is admitted
    assert [f.tag for f in findings] == [Tag.PASS]


def test_rule_split_across_sgs_of_one_set_passes() -> None:
    # GIVEN SG carries the inbound self rule and SG_B the outbound rule to SG
    a = sg(SG, ingress=(rule(groups=(SG,)),))
    b = sg(SG_B, egress=(rule(groups=(SG,)),))
    # WHEN the check runs
    findings = run_with([a, b], vpc=VpcConfig(security_group_ids=(SG, SG_B), subnet_ids=(SUBNET,)))
    # THEN the union of the set's rules is what counts
    assert [f.tag for f in findings] == [Tag.PASS]


# --------------------------------------------------------------------------- missing rules


def test_missing_outbound_self_reference_fails_p0_with_egress_commands() -> None:
    # GIVEN an SG with inbound self reference but no outbound one
    findings = run_with([self_ref_sg(egress=(rule(ipv4=("10.0.0.0/8",)),))])
    # WHEN / THEN one FAIL P0 about outbound traffic
    fails = problems(findings)
    assert len(fails) == 1
    fail = fails[0]
    assert (fail.tag, fail.priority, fail.section) == (Tag.FAIL, Priority.P0, "A")
    assert "outbound" in fail.message and SG in fail.message
    assert fail.instance_group is None
    # AND an investigate command first, then the mutating fix with its reach stated
    first, fix = fail.suggested_commands
    assert not first.mutates
    assert shlex.split(first.command) == [
        "aws",
        "ec2",
        "describe-security-group-rules",
        "--region",
        REGION,
        "--filters",
        f"Name=group-id,Values={SG}",
    ]
    assert fix.mutates and fix.blast_radius and fix.iac_warning
    assert "revoke" in fix.blast_radius.lower()
    assert any("VpcConfig" in p for p in fix.preconditions)
    argv = shlex.split(fix.command)
    assert argv[:6] == ["aws", "ec2", "authorize-security-group-egress", "--region", REGION, "--group-id"]
    assert argv[6] == SG
    assert argv[7] == "--ip-permissions"
    assert json.loads(argv[8]) == [
        {
            "IpProtocol": "-1",
            "UserIdGroupPairs": [{"GroupId": SG, "Description": "HyperPod node-to-node (EFA)"}],
        }
    ]


def test_missing_inbound_self_reference_fails_p0_with_ingress_command() -> None:
    # GIVEN an SG whose inbound rules only allow a CIDR
    findings = run_with([self_ref_sg(ingress=(rule(ipv4=("10.0.0.0/16",)),))])
    # WHEN / THEN
    fails = problems(findings)
    assert len(fails) == 1
    assert (fails[0].tag, fails[0].priority) == (Tag.FAIL, Priority.P0)
    assert "missing inbound all-traffic rule from its own security group(s)" in fails[0].message
    assert "authorize-security-group-ingress" in fails[0].suggested_commands[1].command


def test_self_reference_limited_to_tcp_does_not_count() -> None:
    # GIVEN self references that only allow TCP
    tcp = rule("tcp", groups=(SG,), ports=(0, 65535))
    findings = run_with([self_ref_sg(ingress=(tcp,), egress=(tcp,))])
    # WHEN / THEN both directions fail: EFA needs all protocols
    fails = problems(findings)
    assert sorted("inbound" in f.message for f in fails) == [False, True]
    assert all(f.priority is Priority.P0 for f in fails)


def test_reference_to_foreign_sg_does_not_count() -> None:
    # GIVEN the SG references an SG that is not part of its set
    findings = run_with([self_ref_sg(ingress=(rule(groups=(SG_D,)),), egress=(rule(groups=(SG_D,)),))])
    # WHEN / THEN both directions fail
    assert len([f for f in findings if f.tag is Tag.FAIL]) == 2


def test_broad_ipv4_egress_without_self_reference_still_fails() -> None:
    # GIVEN the common default egress 0.0.0.0/0 instead of the self reference
    findings = run_with([self_ref_sg(egress=(rule(ipv4=("0.0.0.0/0",)),))])
    # WHEN / THEN the missing self reference is a FAIL and the broad egress a WARN
    tags = sorted((f.tag.value, str(f.priority)) for f in findings)
    assert tags == [("FAIL", "P0"), ("WARN", "P2")]


# --------------------------------------------------------------------------- broad egress


def test_ipv4_broad_egress_warns_p2() -> None:
    # GIVEN a healthy SG that also allows all egress to 0.0.0.0/0
    findings = run_with([self_ref_sg(egress=(rule(groups=(SG,)), rule(ipv4=("0.0.0.0/0",))))])
    # WHEN / THEN one WARN P2 and no PASS
    assert [(f.tag, f.priority) for f in findings] == [(Tag.WARN, Priority.P2)]
    assert "0.0.0.0/0" in findings[0].message
    assert any("0.0.0.0/0" in line for line in findings[0].evidence)


def test_ipv6_broad_egress_warns() -> None:
    # GIVEN a healthy SG that allows all egress to ::/0
    findings = run_with([self_ref_sg(egress=(rule(groups=(SG,)), rule(ipv6=("::/0",))))])
    # WHEN / THEN
    assert [(f.tag, f.priority) for f in findings] == [(Tag.WARN, Priority.P2)]
    assert "::/0" in findings[0].message


def test_broad_egress_on_a_single_port_is_not_flagged() -> None:
    # GIVEN egress to 0.0.0.0/0 only on TCP 443
    https = rule("tcp", ipv4=("0.0.0.0/0",), ports=(443, 443))
    findings = run_with([self_ref_sg(egress=(rule(groups=(SG,)), https))])
    # WHEN / THEN
    assert [f.tag for f in findings] == [Tag.PASS]


# --------------------------------------------------------------------------- missing security groups


def test_security_group_that_does_not_exist_fails_p0() -> None:
    # GIVEN the cluster references SG_B that EC2 did not find
    findings = run_with(
        [self_ref_sg()],
        missing=(SG_B,),
        vpc=VpcConfig(security_group_ids=(SG, SG_B), subnet_ids=(SUBNET,)),
    )
    # WHEN / THEN exactly one FAIL naming it, the rest of the set is still evaluated
    fails = problems(findings)
    assert len(fails) == 1
    assert (fails[0].tag, fails[0].priority, fails[0].section) == (Tag.FAIL, Priority.P0, "A")
    assert f"security group {SG_B} does not exist" in fails[0].message.lower()


def test_every_sg_missing_reports_only_the_missing_sgs() -> None:
    # GIVEN no SG of the set exists
    findings = run_with([], missing=(SG,))
    # WHEN / THEN one FAIL for the missing SG, no rule noise about a group that is not there
    assert len(findings) == 1
    assert "does not exist" in findings[0].message


def test_sg_neither_described_nor_missing_is_unknown_not_fail() -> None:
    # GIVEN SG_B of the set was not described (and not reported missing), SG has no rules
    findings = run_with(
        [sg(SG)],
        vpc=VpcConfig(security_group_ids=(SG, SG_B), subnet_ids=(SUBNET,)),
    )
    # WHEN / THEN the verdict is UNKNOWN P2: the rule may live on SG_B
    assert {(f.tag, f.priority) for f in findings} == {(Tag.UNKNOWN, Priority.P2)}
    assert all(not c.mutates for f in findings for c in f.suggested_commands)


# --------------------------------------------------------------------------- override sets


def test_override_sg_set_is_checked() -> None:
    # GIVEN a healthy cluster SG and an override group whose SG lacks the outbound self reference
    broken = self_ref_sg(SG_B, egress=())
    findings = run_with([self_ref_sg(), broken], **overrides_two_sets())
    # WHEN / THEN the override set fails, attributed to its instance group
    egress_fails = [f for f in findings if f.tag is Tag.FAIL]
    assert len(egress_fails) == 1
    assert egress_fails[0].instance_group == "gpu-b"
    assert SG_B in egress_fails[0].message
    assert egress_fails[0].priority is Priority.P0


def test_two_sets_that_do_not_admit_each_other_warn_p1_naming_groups() -> None:
    # GIVEN two self-referencing sets that do not reference each other
    findings = run_with([self_ref_sg(), self_ref_sg(SG_B)], **overrides_two_sets())
    # WHEN / THEN a WARN P1 names both instance groups
    assert [(f.tag, f.priority) for f in findings] == [(Tag.WARN, Priority.P1)]
    assert "workers" in findings[0].message and "gpu-b" in findings[0].message
    assert findings[0].section == "A"


def test_two_sets_that_admit_each_other_pass() -> None:
    # GIVEN each set allows all inbound traffic from the other
    a = self_ref_sg(ingress=(rule(groups=(SG,)), rule(groups=(SG_B,))))
    b = self_ref_sg(SG_B, ingress=(rule(groups=(SG_B,)), rule(groups=(SG,))))
    # WHEN
    findings = run_with([a, b], **overrides_two_sets())
    # THEN
    assert [f.tag for f in findings] == [Tag.PASS]


def test_one_way_admission_between_sets_still_warns() -> None:
    # GIVEN only SG admits SG_B, not the other way round
    a = self_ref_sg(ingress=(rule(groups=(SG,)), rule(groups=(SG_B,))))
    findings = run_with([a, self_ref_sg(SG_B)], **overrides_two_sets())
    # WHEN / THEN the blocked direction is reported
    assert [f.tag for f in findings] == [Tag.WARN]
    assert "workers -> gpu-b" in findings[0].message


def test_override_equal_to_cluster_set_is_checked_once() -> None:
    # GIVEN an override that repeats the cluster SG set, and that set lacks the egress rule
    groups = (group("workers"), group("more", override_vpc=VpcConfig((SG,), (SUBNET,))))
    findings = run_with([self_ref_sg(egress=())], instance_groups=groups)
    # WHEN / THEN one FAIL, not one per config
    assert len([f for f in findings if f.tag is Tag.FAIL]) == 1


# --------------------------------------------------------------------------- no input


def test_no_vpc_config_is_not_applicable() -> None:
    # GIVEN a cluster without VpcConfig and without overrides
    obs = observation(cluster=cluster(vpc=None))
    # WHEN / THEN the check says it does not apply instead of crashing
    with pytest.raises(NotApplicable):
        check_efa_sg(obs, context())


def test_unreadable_security_groups_propagate_unobservable() -> None:
    # GIVEN DescribeSecurityGroups was denied
    failure = ApiFailure("ec2:DescribeSecurityGroups", "denied", "AccessDenied")
    obs = observation(network=network(security_groups=Observed.failed(failure)))
    # WHEN / THEN
    with pytest.raises(Unobservable):
        check_efa_sg(obs, context())


# --------------------------------------------------------------------------- shell safety


@pytest.mark.parametrize("hostile", ["sg-1;rm -rf /", "sg-$(id)", "sg-'`x`'\"y\""])
def test_hostile_sg_id_stays_one_shell_token(hostile: str) -> None:
    # GIVEN a cluster whose SG id is hostile and has no self references
    bad = sg(hostile)
    findings = run_with([bad], vpc=VpcConfig(security_group_ids=(hostile,), subnet_ids=(SUBNET,)))
    # WHEN the suggested commands are split like a shell would
    commands = [c.command for f in findings for c in f.suggested_commands]
    assert commands
    for command in commands:
        argv = shlex.split(command)
        # THEN the id is a single argument, never broken into shell syntax
        assert (
            hostile in argv
            or f"Name=group-id,Values={hostile}" in argv
            or any(json.loads(a)[0]["UserIdGroupPairs"][0]["GroupId"] == hostile for a in argv if a.startswith("["))
        )


def test_hostile_instance_group_name_is_kept_verbatim_and_commands_parse() -> None:
    # GIVEN an override group named with shell metacharacters whose SG lacks rules
    name = "g1;rm -rf /"
    groups = (group(name, override_vpc=VpcConfig((SG_C,), (SUBNET,))),)
    findings = run_with([sg(SG_C)], instance_groups=groups, vpc=None)
    # WHEN / THEN the group is attributed verbatim and every command still splits cleanly
    assert {f.instance_group for f in findings} == {name}
    for f in findings:
        for c in f.suggested_commands:
            argv = shlex.split(c.command)
            assert argv[0] == "aws" and ";" not in argv[1:3]
            assert SG_C in c.command


def test_findings_are_valid_models_with_cluster_identity() -> None:
    # GIVEN a broken SG
    findings = run_with([replace(self_ref_sg(), ingress=(), egress=())])
    # WHEN / THEN every finding carries the cluster identity and round-trips through the model
    for f in findings:
        assert f.cluster_name == "demo-cluster"
        assert Finding.model_validate(f.model_dump()) == f
