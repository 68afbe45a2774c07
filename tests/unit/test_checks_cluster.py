"""Cluster identity, status, NodeRecovery and instance groups."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hyperpod_debugger.checks import cluster as checks
from hyperpod_debugger.domain.model import Priority, Tag
from tests import builders as b


def test_orchestrator_without_eks_key_is_not_silently_slurm():
    # GIVEN an Orchestrator block with a key we do not know
    obs = b.observation(cluster=b.cluster(orchestrator="Unknown", orchestrator_raw={"Ray": {}}, eks_cluster_arn=None))
    # WHEN identity is checked
    [f] = checks.check_identity(obs, b.context())
    # THEN it says so instead of assuming Slurm
    assert f.tag is Tag.WARN and "does not recognise" in f.message


def test_identity_names_cluster_id_from_the_arn_and_the_eks_cluster():
    [f] = checks.check_identity(b.observation(), b.context())
    assert f.tag is Tag.INFO
    assert b.CLUSTER_ID in f.message and "demo-eks" in f.message


def test_slurm_without_orchestrator_block_is_stated_as_inferred():
    obs = b.observation(cluster=b.cluster(orchestrator="Slurm", orchestrator_raw=None, eks_cluster_arn=None))
    [f] = checks.check_identity(obs, b.context())
    assert "no Orchestrator block" in f.message


@pytest.mark.parametrize("status", ["Creating", "Updating", "SystemUpdating"])
def test_cluster_mid_update_is_not_a_failure(status):
    [f] = checks.check_status(b.observation(cluster=b.cluster(status=status)), b.context())
    assert f.tag is Tag.INFO and not f.is_problem


def test_failed_cluster_routes_by_failure_message():
    msg = "We currently do not have sufficient capacity for the requested instance type(s). Please try again."
    [f] = checks.check_status(b.observation(cluster=b.cluster(status="Failed", failure_message=msg)), b.context())
    assert (f.tag, f.priority, f.section) == (Tag.FAIL, Priority.P0, "C")
    assert any(msg in e for e in f.evidence)


def test_node_recovery_is_read_at_cluster_level():
    obs = b.observation(cluster=b.cluster(node_recovery="None"))
    [f] = checks.check_node_recovery(obs, b.context())
    assert (f.tag, f.priority, f.section) == (Tag.WARN, Priority.P1, "F")
    [cmd] = f.suggested_commands
    assert cmd.mutates and cmd.iac_warning and "--node-recovery Automatic" in cmd.command


def test_absent_node_recovery_is_unknown_not_disabled():
    [f] = checks.check_node_recovery(b.observation(cluster=b.cluster(node_recovery=None)), b.context())
    assert f.tag is Tag.UNKNOWN and "disabled" not in f.message.lower()
    assert not any(c.mutates for c in f.suggested_commands)


def test_automatic_node_recovery_passes():
    [f] = checks.check_node_recovery(b.observation(), b.context())
    assert f.tag is Tag.PASS


def test_short_group_points_at_capacity():
    g = b.group(current_count=4, target_count=6)
    [f] = checks.check_instance_groups(b.observation(cluster=b.cluster(instance_groups=(g,))), b.context())
    assert (f.tag, f.section, f.instance_group) == (Tag.WARN, "C", "workers")
    assert "4 of 6" in f.message


def test_short_group_during_an_update_is_expected():
    g = b.group(current_count=4, target_count=6, status="Updating")
    [f] = checks.check_instance_groups(b.observation(cluster=b.cluster(instance_groups=(g,))), b.context())
    assert f.tag is Tag.PASS


def test_degraded_group_fails():
    g = replace(b.group(), status="Degraded")
    [f] = checks.check_instance_groups(b.observation(cluster=b.cluster(instance_groups=(g,))), b.context())
    assert f.tag is Tag.FAIL and f.priority is Priority.P1
