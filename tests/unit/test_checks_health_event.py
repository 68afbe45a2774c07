"""HyperPod's verdict from a Node Health Event, as a finding beside ours (pure)."""

from __future__ import annotations

from typing import Any

from hyperpod_debugger.checks.health_event import CHECK, health_event_findings
from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.domain.observations import NodeHealthReport
from tests import builders as b

NODE = "i-0fdc8ceb3bfecc215"


def report(**fields) -> NodeHealthReport:
    values: dict[str, Any] = {
        "instance_id": NODE,
        "status": "Unhealthy",
        "reason": "HyperPod Health Monitoring Agent (HMA) has detected fault type NvidiaErrorTerminate on this node",
        "repair_action": "None",
        "recommendation": "Please Replace the Faulty Node.",
        "event_id": "60196056-7245-ee37-b872-54761ba04a7c",
    }
    values.update(fields)
    return NodeHealthReport(**values)


def test_an_unhealthy_node_is_a_warning_with_hyperpods_words_verbatim():
    [f] = health_event_findings(b.observation(), report())
    assert (f.check, f.tag, f.priority, f.section, f.instance_id) == (CHECK, Tag.WARN, Priority.P1, "F", NODE)
    assert "NvidiaErrorTerminate" in f.message
    assert "Recommendation: Please Replace the Faulty Node." in f.evidence
    assert "RepairAction: None" in f.evidence
    assert f.node_action == "investigate"
    assert "it recommends: Please Replace the Faulty Node." in f.next_step
    assert not f.suggested_commands


def test_when_hyperpod_repairs_the_node_itself_we_say_wait_and_suggest_nothing():
    [f] = health_event_findings(b.observation(), report(repair_action="Replace", reason=None))
    assert f.node_action is None and "already acting (repair action Replace)" in f.next_step
    assert "HealthStatusReason: (not given)" in f.evidence
    assert f.message == f"HyperPod's health agent reports {NODE} Unhealthy"


def test_a_healthy_node_is_a_pass_that_resolves_the_warning():
    [f] = health_event_findings(b.observation(), report(status="Healthy"))
    assert f.tag is Tag.PASS and f.priority is None


def test_an_event_without_a_status_is_not_read_as_healthy():
    [f] = health_event_findings(b.observation(), report(status=None))
    assert f.tag is Tag.WARN and "without a status" in f.message
