"""Node status and the --node focus."""

from __future__ import annotations

import pytest

from hyperpod_debugger.checks.nodes import check_focus_node, check_node_status
from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.domain.observations import ApiFailure, NotApplicable, Observed
from tests import builders as b


@pytest.mark.parametrize(
    "status", ["Pending", "SystemUpdating", "DeepHealthCheckInProgress", "AttachInProgress", "ShuttingDown"]
)
def test_service_work_in_progress_is_not_a_failure(status):
    obs = b.observation(nodes=Observed.ok([b.node(), b.node("i-0123456789abcdef1", status=status)]))
    findings = check_node_status(obs, b.context())
    assert not any(f.is_problem for f in findings)
    assert any(status in f.message for f in findings if f.tag is Tag.INFO)


def test_failed_node_gets_its_own_finding_routed_by_message():
    msg = (
        'Instance i-0123456789abcdef1 failed to provision with the following error: "Lifecycle scripts did not '
        'run successfully."'
    )
    obs = b.observation(nodes=Observed.ok([b.node(), b.node("i-0123456789abcdef1", status="Failure", message=msg)]))
    [f] = [f for f in check_node_status(obs, b.context()) if f.is_problem]
    assert (f.tag, f.priority, f.section, f.instance_id) == (Tag.FAIL, Priority.P1, "D", "i-0123456789abcdef1")
    assert any("LifecycleConfig/workers/i-0123456789abcdef1" in c.command for c in f.suggested_commands)


def test_hardware_failure_with_automatic_recovery_suggests_no_duplicate_action():
    obs = b.observation(nodes=Observed.ok([b.node(status="Failure", message="hardware failure detected")]))
    [f] = [f for f in check_node_status(obs, b.context()) if f.is_problem]
    assert not any(c.mutates for c in f.suggested_commands)
    assert "automatic recovery" in (f.root_cause or "")


def test_hardware_failure_without_recovery_asks_for_a_reboot_never_a_replace():
    obs = b.observation(
        cluster=b.cluster(node_recovery="None"),
        nodes=Observed.ok([b.node(status="Failure", message="hardware failure detected")]),
    )
    [f] = [f for f in check_node_status(obs, b.context()) if f.is_problem]
    assert f.node_action == "reboot"
    assert not f.suggested_commands[0].mutates  # investigate first; the engine adds the reboot


def test_hardware_failure_with_recovery_only_asks_to_investigate():
    obs = b.observation(nodes=Observed.ok([b.node(status="Failure", message="hardware failure detected")]))
    [f] = [f for f in check_node_status(obs, b.context()) if f.is_problem]
    assert f.node_action == "investigate"


def test_all_running_passes():
    [f] = check_node_status(b.observation(), b.context())
    assert f.tag is Tag.PASS


def test_unknown_node_fails_and_nothing_else_is_chosen():
    failure = ApiFailure(
        "sagemaker:DescribeClusterNode", "not_found", "Node i-0aaaaaaaaaaaaaaaa not found", "ResourceNotFound"
    )
    obs = b.observation(node_detail=Observed.failed(failure))
    [f] = check_focus_node(obs, b.context(scope_node="i-0aaaaaaaaaaaaaaaa"))
    assert (f.tag, f.priority, f.instance_id) == (Tag.FAIL, Priority.P0, "i-0aaaaaaaaaaaaaaaa")
    # and the status check looks only at that node: with it absent, nobody else is reported on
    scoped = check_node_status(obs, b.context(scope_node="i-0aaaaaaaaaaaaaaaa"))
    assert all(f.instance_id in (None, "i-0aaaaaaaaaaaaaaaa") for f in scoped)


def test_focus_check_is_skipped_without_node():
    with pytest.raises(NotApplicable):
        check_focus_node(b.observation(), b.context())
