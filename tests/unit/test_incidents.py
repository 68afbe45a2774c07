"""Incidents from findings: one per problem a person acts on (issue 27 item 1), and their lifecycle.

The expected incidents come from the rules the issue and the runbook state, not from the code: a node's verdict
(the CLI's ladder) makes a node incident; a cluster-level root cause is one incident with what it explains under
it (the cause-and-effect pairs of ``references/node-diagnostics-detail.md`` § B.4 / § D); UNKNOWN is one coverage
problem per cluster; HyperPod repairing a node is not paged unless the repair fails or overruns.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hyperpod_debugger.domain.checking import make_finding
from hyperpod_debugger.domain.model import Finding, Priority, Tag
from hyperpod_debugger.lifecycle.incidents import (
    COVERAGE_KEY,
    IncidentState,
    IncidentTransition,
    StoredIncident,
    desired_incidents,
    plan_incidents,
)

ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/abc123"
NOW = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
A, B, C = "i-0aaaaaaaaaaaaaaa1", "i-0bbbbbbbbbbbbbbb2", "i-0ccccccccccccccc3"


def _f(
    check: str, message: str, *, node: str | None = None, tag: Tag = Tag.FAIL, priority=Priority.P1, **kw
) -> Finding:
    ident = {
        "cluster_arn": ARN,
        "cluster_name": "train",
        "instance_id": node,
        "instance_group": "gpu" if node else None,
    }
    section = kw.pop("section", "G.1" if node else "B.4")
    return make_finding(ident, check, tag, message, priority=priority, section=section, **kw)


def _pairs(*findings: Finding) -> list[tuple[str, Finding]]:
    return [(f"fp{i:02d}", f) for i, f in enumerate(findings)]


def _xid79(node: str) -> list[Finding]:
    return [
        _f(
            "probe.xid",
            "Xid 79 (GPU has fallen off the bus) on GPU 0",
            node=node,
            priority=Priority.P0,
            node_action="replace",
        ),
        _f("probe.gpu_count", "7 of 8 GPUs visible to nvidia-smi", node=node, priority=Priority.P0),
    ]


def _lifecycle_s3(node: str) -> list[Finding]:
    return [
        _f("vpc.endpoints", "S3 gateway endpoint vpce-1 is not associated with route table(s) rtb-1", section="B.4"),
        _f(
            "logs.lifecycle",
            f"Lifecycle script failed on {node}: the script could not reach Amazon S3",
            node=node,
            priority=Priority.P0,
            section="D",
        ),
        _f(
            "nodes.status",
            f"Node {node} is in Failure: lifecycle script failure",
            node=node,
            priority=Priority.P0,
            section="D",
            node_action="investigate",
        ),
        _f("cluster.events", f"1 Error event(s) for {node}: lifecycle script failure", node=node, section="D"),
    ]


# --------------------------------------------------------------------------- what the findings hold


def test_a_node_with_an_xid_79_and_its_missing_gpu_is_one_replace_incident():
    got = desired_incidents(ARN, _pairs(*_xid79(A)))
    assert list(got) == [f"NODE#{A}"]
    incident = got[f"NODE#{A}"]
    assert (incident.verdict, incident.priority, incident.kind) == ("replace", Priority.P0, "node")
    assert incident.title.startswith("Xid 79") and set(incident.checks) == {"probe.xid", "probe.gpu_count"}


def test_a_lifecycle_failure_caused_by_the_s3_route_is_one_cluster_incident_naming_the_node():
    got = desired_incidents(ARN, _pairs(*_lifecycle_s3(A)))
    assert len(got) == 1, got.keys()
    [incident] = got.values()
    assert incident.kind == "cause" and incident.check == "vpc.endpoints"
    # its priority is the worst of the cause and what it explains (the node is down)
    assert incident.priority is Priority.P0
    assert incident.nodes == (A,)
    assert {e.check for e in incident.explains} == {"logs.lifecycle", "nodes.status", "cluster.events"}


def test_a_node_with_its_own_fault_besides_an_explained_one_keeps_its_own_incident():
    got = desired_incidents(ARN, _pairs(*_lifecycle_s3(A), *_xid79(A)))
    assert set(got) == {f"NODE#{A}", next(k for k in got if k.startswith("CAUSE#"))}
    assert got[f"NODE#{A}"].verdict == "replace"


def test_unknowns_are_one_coverage_problem_not_one_per_node():
    unknowns = [
        _f("probe.session", f"Could not probe {n}: the SSM agent is not connected", node=n, tag=Tag.UNKNOWN)
        for n in (A, B, C)
    ]
    got = desired_incidents(ARN, _pairs(*unknowns))
    assert list(got) == [COVERAGE_KEY]
    coverage = got[COVERAGE_KEY]
    assert coverage.nodes == (A, B, C) and coverage.verdict == "unknown"
    # the three nodes share one reason: the node's id is not part of it
    assert coverage.reasons == (("Could not probe <node>: the SSM agent is not connected", 3),)
    assert coverage.title == "3 nodes could not be probed: Could not probe <node>: the SSM agent is not connected"
    # a likely cause the probe states is the reason, in its first clause (fleet.outcome_findings' wording)
    stated = [
        u.model_copy(update={"root_cause": "the SSM agent is not connected: the node is not Running"}) for u in unknowns
    ]
    coverage = desired_incidents(ARN, _pairs(*stated))[COVERAGE_KEY]
    assert coverage.title == "3 nodes could not be probed: the SSM agent is not connected"
    # a node-side check that could not look is not "probed"
    checked = _f("nodes.labels", f"Labels of {A} unreadable", node=A, tag=Tag.UNKNOWN)
    assert desired_incidents(ARN, _pairs(checked))[COVERAGE_KEY].title.startswith("1 node could not be fully checked")


def test_an_unknown_never_hides_a_failure_on_the_same_node():
    got = desired_incidents(
        ARN, _pairs(_f("probe.session", f"Could not read dmesg on {A}", node=A, tag=Tag.UNKNOWN), *_xid79(A))
    )
    assert set(got) == {f"NODE#{A}"}


def test_a_node_hyperpod_repairs_is_an_incident_held_back():
    got = desired_incidents(ARN, _pairs(*_xid79(A)), recovering={A: "node status PendingReplacement"})
    incident = got[f"NODE#{A}"]
    assert incident.verdict == "hyperpod-acting" and incident.hyperpod == "node status PendingReplacement"
    plan = plan_incidents({}, got, NOW, cluster_arn=ARN)
    [change] = plan.changes
    assert change.kind is IncidentTransition.OPENED and change.item.held and not change.paged


def test_a_pass_alone_makes_no_incident():
    assert desired_incidents(ARN, _pairs(_f("probe.xid", "no Xid", node=A, tag=Tag.PASS, priority=None))) == {}


# --------------------------------------------------------------------------- the lifecycle


def _open(findings: list[Finding], at: datetime = NOW, **kw) -> dict[str, StoredIncident]:
    plan = plan_incidents({}, desired_incidents(ARN, _pairs(*findings), **kw), at, cluster_arn=ARN)
    return {c.item.key: c.item for c in plan.changes}


def test_opened_then_unchanged_says_nothing_more():
    stored = _open(_xid79(A))
    again = plan_incidents(
        stored, desired_incidents(ARN, _pairs(*_xid79(A))), NOW + timedelta(minutes=15), cluster_arn=ARN
    )
    assert again.changes == []


def test_climbing_the_ladder_escalates_once_and_stepping_back_does_not_repeat_it():
    investigate = [_f("nodes.status", f"Node {A} is Unhealthy", node=A, node_action="investigate", section="F")]
    stored = _open(investigate)
    assert stored[f"NODE#{A}"].incident.verdict == "investigate"
    replace = plan_incidents(
        stored, desired_incidents(ARN, _pairs(*_xid79(A))), NOW + timedelta(minutes=15), cluster_arn=ARN
    )
    [change] = replace.changes
    assert change.kind is IncidentTransition.ESCALATED and change.paged and "REPLACE" in (change.item.reason or "")
    stored = {change.item.key: change.item}
    back = plan_incidents(
        stored, desired_incidents(ARN, _pairs(*investigate)), NOW + timedelta(minutes=30), cluster_arn=ARN
    )
    assert [c.kind for c in back.changes] == [IncidentTransition.UPDATED] and not back.changes[0].paged
    stored = {back.changes[0].item.key: back.changes[0].item}
    up_again = plan_incidents(
        stored, desired_incidents(ARN, _pairs(*_xid79(A))), NOW + timedelta(minutes=45), cluster_arn=ARN
    )
    assert [c.kind for c in up_again.changes] == [IncidentTransition.UPDATED]


def test_resolved_once_when_the_node_is_healthy_and_reopened_as_a_new_incident():
    stored = _open(_xid79(A))
    first_id = stored[f"NODE#{A}"].incident_id
    gone = plan_incidents(stored, {}, NOW + timedelta(hours=1), cluster_arn=ARN)
    [resolved] = gone.changes
    assert resolved.kind is IncidentTransition.RESOLVED and resolved.paged
    assert resolved.item.state is IncidentState.RESOLVED
    stored = {resolved.item.key: resolved.item}
    assert plan_incidents(stored, {}, NOW + timedelta(hours=2), cluster_arn=ARN).changes == []
    back = plan_incidents(stored, desired_incidents(ARN, _pairs(*_xid79(A))), NOW + timedelta(hours=3), cluster_arn=ARN)
    [reopened] = back.changes
    assert reopened.kind is IncidentTransition.OPENED and reopened.item.incident_id != first_id
    assert reopened.item.occurrences == 2


def test_a_run_that_did_not_look_at_a_node_neither_opens_nor_resolves_its_incident():
    stored = _open(_xid79(A))
    plan = plan_incidents(stored, desired_incidents(ARN, _pairs(*_xid79(B))), NOW, cluster_arn=ARN, nodes_in_scope={C})
    assert plan.changes == []
    plan = plan_incidents(
        stored, desired_incidents(ARN, _pairs(*_xid79(B))), NOW, cluster_arn=ARN, nodes_in_scope={A, B}
    )
    assert {(c.item.key, c.kind) for c in plan.changes} == {
        (f"NODE#{A}", IncidentTransition.RESOLVED),
        (f"NODE#{B}", IncidentTransition.OPENED),
    }


def test_a_held_repair_is_paged_when_it_overruns_its_grace():
    acting = {A: "node status PendingReplacement"}
    stored = _open(_xid79(A), recovering=acting)
    desired = desired_incidents(ARN, _pairs(*_xid79(A)), recovering=acting)
    early = plan_incidents(stored, desired, NOW + timedelta(minutes=59), cluster_arn=ARN)
    assert all(not c.paged for c in early.changes)
    late = plan_incidents(stored, desired, NOW + timedelta(minutes=61), cluster_arn=ARN)
    [change] = late.changes
    assert change.kind is IncidentTransition.ESCALATED and change.paged and "61 min" in (change.item.reason or "")


def test_a_held_repair_that_ends_with_the_fault_still_there_is_paged():
    stored = _open(_xid79(A), recovering={A: "node status PendingReplacement"})
    after = plan_incidents(
        stored, desired_incidents(ARN, _pairs(*_xid79(A))), NOW + timedelta(minutes=20), cluster_arn=ARN
    )
    [change] = after.changes
    assert change.paged and change.item.incident.verdict == "replace" and not change.item.held


def test_a_held_repair_that_fixed_the_node_resolves_without_a_word():
    stored = _open(_xid79(A), recovering={A: "node status PendingReplacement"})
    gone = plan_incidents(stored, {}, NOW + timedelta(minutes=20), cluster_arn=ARN)
    [change] = gone.changes
    assert change.kind is IncidentTransition.RESOLVED and not change.paged and not change.item.pending


def test_the_first_triage_of_a_cluster_marks_what_it_opens_as_baseline():
    plan = plan_incidents({}, desired_incidents(ARN, _pairs(*_xid79(A))), NOW, cluster_arn=ARN, baseline=True)
    assert all(c.item.baseline for c in plan.changes)


def test_pending_transitions_accumulate_until_told():
    stored = _open([_f("nodes.status", f"Node {A} is Unhealthy", node=A, node_action="investigate", section="F")])
    up = plan_incidents(stored, desired_incidents(ARN, _pairs(*_xid79(A))), NOW + timedelta(minutes=1), cluster_arn=ARN)
    kinds = sorted(up.changes[0].item.pending.values())
    assert kinds == ["ESCALATED", "OPENED"]
