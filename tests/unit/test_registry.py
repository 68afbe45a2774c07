"""The runner: coverage states, permission findings, and no crash from one bad check."""

from __future__ import annotations

from hyperpod_debugger.aws.iam import READ_ONLY_ACTIONS
from hyperpod_debugger.checks.registry import ACTION_SECTIONS, ALL_CHECKS, run_checks
from hyperpod_debugger.domain.checking import Check
from hyperpod_debugger.domain.model import CheckStatus, Priority, Tag
from hyperpod_debugger.domain.observations import ApiFailure, Observed
from tests import builders as b

DENIED = ApiFailure(
    "ec2:DescribeSecurityGroups", "denied", "You are not authorized to perform this operation.", "UnauthorizedOperation"
)


def _checks(*ids):
    return tuple(c for c in ALL_CHECKS if c.id in ids)


def test_access_denied_names_the_action_points_at_the_blocked_check_and_the_run_continues():
    # GIVEN EC2 refuses DescribeSecurityGroups
    obs = b.observation(network=b.network(security_groups=Observed.failed(DENIED)))
    obs.failures.append(DENIED)
    # WHEN the SG check and the DNS check run
    findings, coverage = run_checks(obs, b.context(), _checks("network.efa_sg", "vpc.dns"))
    # THEN one finding names the exact IAM action, routed to § A (not § K), and DNS still ran
    [iam] = [f for f in findings if f.check == "iam.permission"]
    assert iam.message.startswith("Missing IAM permission ec2:DescribeSecurityGroups")
    assert iam.section == "A" and iam.priority is Priority.P1
    status = {c.check: c.status for c in coverage}
    assert status == {"network.efa_sg": CheckStatus.UNKNOWN, "vpc.dns": CheckStatus.RAN}


def test_denied_listing_is_not_reported_as_zero_nodes():
    failure = ApiFailure("sagemaker:ListClusterNodes", "denied", "denied", "AccessDeniedException")
    obs = b.observation(nodes=Observed.failed(failure))
    obs.failures.append(failure)
    findings, coverage = run_checks(obs, b.context(), _checks("nodes.status"))
    assert [c.status for c in coverage] == [CheckStatus.UNKNOWN]
    assert not any(f.tag is Tag.PASS for f in findings)
    assert any("sagemaker:ListClusterNodes" in f.message for f in findings)


def test_throttled_input_makes_the_check_unknown_with_a_p1_finding():
    failure = ApiFailure("ec2:DescribeSubnets", "throttled", "Rate exceeded", "RequestLimitExceeded")
    obs = b.observation(network=b.network(subnets=Observed.failed(failure)))
    findings, coverage = run_checks(obs, b.context(), _checks("vpc.subnet_ips"))
    [f] = findings
    assert (f.tag, f.priority) == (Tag.UNKNOWN, Priority.P1)
    assert not f.suggested_commands or not any(c.mutates for c in f.suggested_commands)
    assert coverage[0].status is CheckStatus.UNKNOWN and "throttled" in coverage[0].reason


def test_a_crashing_check_is_reported_not_raised():
    def boom(obs, ctx):
        raise KeyError("surprise")

    findings, coverage = run_checks(b.observation(), b.context(), (Check("x.boom", "F", "Boom", boom),))
    assert findings[0].tag is Tag.UNKNOWN and coverage[0].status is CheckStatus.UNKNOWN


def test_every_check_is_listed_in_coverage_once():
    _, coverage = run_checks(b.observation(), b.context())
    ids = [c.check for c in coverage]
    assert ids == [c.id for c in ALL_CHECKS] and len(set(ids)) == len(ids)


def test_every_called_action_has_a_section_for_its_permission_finding():
    assert set(READ_ONLY_ACTIONS) == set(ACTION_SECTIONS)


def test_a_focused_run_keeps_cluster_findings_and_only_the_focus_nodes_findings():
    # GIVEN two failed nodes and a focus on one of them
    other, focus = "i-0bbbbbbbbbbbbbbbb", "i-0aaaaaaaaaaaaaaaa"
    nodes = [b.node(other, status="Failure", message="x"), b.node(focus, status="Failure", message="x")]
    obs = b.observation(nodes=Observed.ok(nodes), cluster=b.cluster(node_recovery="None"))
    # WHEN the checks run focused on one node
    findings, _ = run_checks(obs, b.context(scope_node=focus), _checks("nodes.status", "cluster.node_recovery"))
    # THEN the other node is not reported, the cluster-level finding is
    assert {f.instance_id for f in findings} == {None, focus}
    assert any(f.check == "cluster.node_recovery" for f in findings)
