"""The findings-store lifecycle, pure: fingerprints and the transitions one sweep plans."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hyperpod_debugger.domain.model import (
    CheckCoverage,
    CheckStatus,
    ClusterRef,
    Coverage,
    Finding,
    Priority,
    RunError,
    SuggestedCommand,
    Tag,
    TriageReport,
)
from hyperpod_debugger.lifecycle.findings import (
    EVIDENCE_MAX_BYTES,
    EVIDENCE_MAX_LINES,
    State,
    StoredFinding,
    TransitionKind,
    bounded_evidence,
    fingerprint,
    iso,
    plan_sweep,
    signature,
)

ARN = "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcdef123456"
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NODE_A = "i-0123456789abcdef0"
NODE_B = "i-0fedcba9876543210"


def finding(**kw) -> Finding:
    base = dict(
        tag=Tag.FAIL,
        priority=Priority.P1,
        check="nodes.health_status",
        section="F",
        message="node unhealthy",
        cluster_arn=ARN,
        instance_id=NODE_A,
    )
    base.update(kw)
    return Finding(**base)


def report(findings, *, ran=("nodes.health_status",), skipped=(), unknown=(), scope_node=None, error=None, probed=None):
    checks = [CheckCoverage(check=c, status=CheckStatus.RAN) for c in ran]
    checks += [CheckCoverage(check=c, status=CheckStatus.SKIPPED) for c in skipped]
    checks += [CheckCoverage(check=c, status=CheckStatus.UNKNOWN) for c in unknown]
    return TriageReport(
        tool_version="0",
        generated_at=T0.isoformat(),
        cluster=ClusterRef(name="c", arn=ARN, region="us-west-2"),
        scope_node=scope_node,
        findings=list(findings),
        coverage=Coverage(checks=checks, probed_nodes=probed),
        error=error,
        exit_code=1 if error else TriageReport.exit_code_for(list(findings)),
    )


def stored_after(plan) -> dict[str, StoredFinding]:
    """What the store holds once a plan is written (the adapter's job, simulated)."""
    return {c.item.fingerprint: c.item for c in plan.changes()}


def sweep(previous, findings, now=T0, **kw):
    return plan_sweep(previous, report(findings, **kw), now)


# --- fingerprint ---------------------------------------------------------------------------------


def test_fingerprint_is_stable_across_runs_and_volatile_message_parts():
    # GIVEN the same problem seen by two sweeps, with counters, times, ids and sizes moved
    first = finding(
        message="XID 79 at 2026-11-30T12:00:01Z on GPU 00000000:3B:00.0 uuid 6f1c2e9a-1b2c-4d5e-8f90-123456789abc, "
        "used 12 GiB, pid 4242, ptr 0xdeadbeef"
    )
    second = finding(
        message="XID 80 at 2026-12-01T08:30:59.123+00:00 on GPU 00000000:5C:00.0 uuid 0a1b2c3d-1111-2222-3333-"
        "444455556666, used 3.5 GiB, pid 17, ptr 0x1f2e"
    )
    # THEN they share one fingerprint: 32 hex characters
    assert fingerprint(first) == fingerprint(second)
    assert len(fingerprint(first)) == 32
    assert int(fingerprint(first), 16) >= 0
    assert "<time>" in signature(first.message) and "<uuid>" in signature(first.message)


def test_fingerprint_is_a_pure_function_of_its_inputs():
    # a fixed value guards against an accidentally salted or process-dependent hash
    assert fingerprint(finding()) == fingerprint(finding())
    assert fingerprint(finding(message="node  unhealthy")) == fingerprint(finding())


def test_instance_ids_in_the_message_are_normalised_but_the_node_field_is_not():
    a = finding(message=f"node {NODE_A} unhealthy", instance_id=NODE_A)
    b = finding(message=f"node {NODE_B} unhealthy", instance_id=NODE_B)
    assert signature(a.message) == signature(b.message) == "node <instance> unhealthy"
    assert fingerprint(a) != fingerprint(b)


def test_fingerprint_differs_by_node_check_cluster_and_wording():
    base = fingerprint(finding())
    assert fingerprint(finding(instance_id=NODE_B)) != base
    assert fingerprint(finding(instance_id=None)) != base
    assert fingerprint(finding(check="nodes.deep_health")) != base
    assert fingerprint(finding(cluster_arn=ARN + "x")) != base
    assert fingerprint(finding(message="node unreachable")) != base


def test_evidence_is_trimmed_to_twenty_lines_and_four_kilobytes():
    assert len(bounded_evidence([f"line {i}" for i in range(100)])) == EVIDENCE_MAX_LINES
    big = bounded_evidence(["é" * 1000] * 10)
    assert sum(len(line.encode()) for line in big) <= EVIDENCE_MAX_BYTES
    assert big[0] == "é" * 1000


# --- transitions ---------------------------------------------------------------------------------


def test_a_new_problem_is_planned_new_and_pass_info_are_not_stored():
    plan = sweep(
        {},
        [
            finding(),
            Finding(tag=Tag.PASS, check="nodes.health_status", message="all healthy"),
            Finding(tag=Tag.INFO, check="cluster.identity", message="hello"),
        ],
    )
    assert [c.kind for c in plan.new] == [TransitionKind.NEW]
    item = plan.new[0].item
    assert (item.state, item.first_seen, item.last_seen, item.count) == (State.OPEN, iso(T0), iso(T0), 1)
    assert item.cluster_arn == ARN and item.instance_id == NODE_A and item.priority is Priority.P1
    assert len(plan.changes()) == 1


def test_suggested_commands_are_stored_as_dicts():
    cmd = SuggestedCommand(command="aws sagemaker describe-cluster-node", purpose="look", mutates=False)
    plan = sweep({}, [finding(suggested_commands=[cmd])])
    assert plan.new[0].item.suggested_commands[0]["command"] == "aws sagemaker describe-cluster-node"


def test_unchanged_within_the_heartbeat_writes_nothing_and_after_it_a_heartbeat():
    stored = stored_after(sweep({}, [finding()]))
    soon = sweep(stored, [finding()], now=T0 + timedelta(minutes=59))
    assert soon.changes() == [] and soon.heartbeat_skipped == 1
    later = sweep(stored, [finding()], now=T0 + timedelta(hours=1))
    assert [c.kind for c in later.unchanged] == [TransitionKind.UNCHANGED]
    beat = later.unchanged[0]
    assert beat.item.first_seen == iso(T0)
    assert beat.item.last_seen == iso(T0 + timedelta(hours=1))
    assert beat.item.count == 2 and beat.item.version == beat.previous.version + 1


def test_heartbeat_bound_1000_unchanged_findings_swept_twice_within_the_hour():
    # GIVEN 1,000 problems on 1,000 nodes, stored by a first sweep
    problems = [finding(instance_id=f"i-{n:017x}") for n in range(1000)]
    first = sweep({}, problems)
    assert len(first.new) == 1000
    # WHEN the unchanged cluster is swept again 10 minutes later
    second = sweep(stored_after(first), problems, now=T0 + timedelta(minutes=10))
    # THEN no write at all is planned
    assert second.changes() == []
    assert second.heartbeat_skipped == 1000


def test_priority_rise_is_an_escalation_and_reopens_an_acknowledged_finding():
    stored = stored_after(sweep({}, [finding(priority=Priority.P2, tag=Tag.WARN)]))
    fp = next(iter(stored))
    stored[fp] = replace(stored[fp], state=State.ACKNOWLEDGED, acknowledged_by="ops")
    plan = sweep(stored, [finding(priority=Priority.P1, tag=Tag.WARN)], now=T0 + timedelta(minutes=1))
    assert [c.kind for c in plan.escalated] == [TransitionKind.ESCALATED]
    item = plan.escalated[0].item
    assert item.priority is Priority.P1 and item.state is State.OPEN and item.acknowledged_by is None
    assert item.first_seen == iso(T0)


def test_warn_to_fail_at_the_same_priority_is_an_escalation():
    stored = stored_after(sweep({}, [finding(tag=Tag.WARN)]))
    plan = sweep(stored, [finding(tag=Tag.FAIL)], now=T0 + timedelta(minutes=1))
    assert len(plan.escalated) == 1


def test_a_priority_drop_is_not_an_escalation():
    stored = stored_after(sweep({}, [finding(priority=Priority.P0)]))
    plan = sweep(stored, [finding(priority=Priority.P2, tag=Tag.FAIL)], now=T0 + timedelta(minutes=1))
    assert plan.escalated == [] and plan.changes() == []


def test_a_check_that_ran_and_did_not_see_the_problem_resolves_it():
    stored = stored_after(sweep({}, [finding()]))
    plan = sweep(stored, [], now=T0 + timedelta(minutes=5))
    assert [c.kind for c in plan.resolved] == [TransitionKind.RESOLVED]
    assert plan.resolved[0].item.state is State.RESOLVED
    assert plan.resolved[0].item.first_seen == iso(T0)


def test_skipped_or_unknown_checks_resolve_nothing():
    stored = stored_after(sweep({}, [finding()]))
    later = T0 + timedelta(minutes=5)
    assert sweep(stored, [], now=later, ran=(), unknown=("nodes.health_status",)).resolved == []
    assert sweep(stored, [], now=later, ran=(), skipped=("nodes.health_status",)).resolved == []
    assert sweep(stored, [], now=later, ran=()).resolved == []  # absent from coverage
    # a check that ran on one node's probe but was unknown on another is not trusted to resolve
    mixed = sweep(stored, [], now=later, ran=("nodes.health_status",), unknown=("nodes.health_status",))
    assert mixed.resolved == []


def test_an_unknown_finding_of_the_same_check_and_node_resolves_nothing():
    stored = stored_after(sweep({}, [finding()]))
    blind = finding(tag=Tag.UNKNOWN, priority=Priority.P2, message="could not read node status")
    assert sweep(stored, [blind], now=T0 + timedelta(minutes=5)).resolved == []
    cluster_blind = finding(tag=Tag.UNKNOWN, priority=Priority.P2, message="could not list", instance_id=None)
    assert sweep(stored, [cluster_blind], now=T0 + timedelta(minutes=5)).resolved == []


def test_a_failed_run_resolves_nothing():
    stored = stored_after(sweep({}, [finding()]))
    err = RunError(kind="credentials", message="expired")
    assert sweep(stored, [], now=T0 + timedelta(minutes=5), error=err).resolved == []


def test_a_focused_run_resolves_only_findings_of_its_node():
    stored = stored_after(
        sweep({}, [finding(instance_id=NODE_A), finding(instance_id=NODE_B), finding(instance_id=None)])
    )
    plan = sweep(stored, [], now=T0 + timedelta(minutes=5), scope_node=NODE_B)
    assert [c.item.instance_id for c in plan.resolved] == [NODE_B]


def test_an_on_node_finding_resolves_only_when_its_node_was_probed():
    # GIVEN remapped-row findings on two nodes, from their probes
    ran = ("probe.gpu_row_remap",)
    a = finding(check="probe.gpu_row_remap", section="G.1.a", instance_id=NODE_A, message="row remap pending")
    b = finding(check="probe.gpu_row_remap", section="G.1.a", instance_id=NODE_B, message="row remap pending")
    stored = stored_after(sweep({}, [a, b], ran=ran, probed=[NODE_A, NODE_B]))
    later = T0 + timedelta(minutes=15)

    # WHEN a later batch probes only node B (the check "ran", but not on A) and B is clean now
    plan = sweep(stored, [], now=later, ran=ran, probed=[NODE_B])

    # THEN only B's finding resolves; A was not looked at
    assert [c.item.instance_id for c in plan.resolved] == [NODE_B]
    # and a report that probed nobody resolves no on-node finding, even though the check is listed as ran
    assert sweep(stored, [], now=later, ran=ran, probed=None).resolved == []
    assert sweep(stored, [], now=later, ran=ran, probed=[]).resolved == []


def test_findings_of_a_node_that_left_the_cluster_resolve_when_the_node_list_was_read():
    # GIVEN an on-node finding on A, an API finding on B, and a cluster-wide finding
    probe = finding(check="probe.gpu_row_remap", section="G.1.a", instance_id=NODE_A, message="row remap pending")
    api = finding(instance_id=NODE_B)
    wide = finding(instance_id=None, check="vpc.dns", section="B.2", message="dns off")
    stored = stored_after(sweep({}, [probe, api, wide], ran=("probe.gpu_row_remap", "nodes.health_status", "vpc.dns")))
    later = T0 + timedelta(minutes=15)

    # WHEN a run that probed nobody and ran no check on them reads a node list without A
    plan = plan_sweep(stored, report([api, wide], ran=()), later, nodes_present={NODE_B})

    # THEN A's finding resolves (the node is gone); B's and the cluster-wide one stay
    assert [c.item.instance_id for c in plan.resolved] == [NODE_A]
    # and without a node list nothing is resolved for being absent
    assert plan_sweep(stored, report([api, wide], ran=()), later).resolved == []


def test_api_check_findings_do_not_depend_on_which_nodes_were_probed():
    stored = stored_after(sweep({}, [finding()]))
    plan = sweep(stored, [], now=T0 + timedelta(minutes=5), probed=[])
    assert [c.item.instance_id for c in plan.resolved] == [NODE_A]


def test_a_resolved_fingerprint_seen_again_is_reopened_with_its_first_seen():
    stored = stored_after(sweep({}, [finding()]))
    resolved = stored_after(sweep(stored, [], now=T0 + timedelta(minutes=5)))
    assert next(iter(resolved.values())).state is State.RESOLVED
    plan = sweep(resolved, [finding()], now=T0 + timedelta(minutes=10))
    assert [c.kind for c in plan.reopened] == [TransitionKind.REOPENED]
    item = plan.reopened[0].item
    assert item.state is State.OPEN and item.first_seen == iso(T0) and item.count == 2
    # a resolved finding is never resolved twice
    assert sweep(resolved, [], now=T0 + timedelta(minutes=10)).resolved == []


def test_two_findings_with_one_fingerprint_keep_the_more_severe():
    plan = sweep({}, [finding(tag=Tag.WARN, message="errors 3"), finding(tag=Tag.FAIL, message="errors 9")])
    assert len(plan.new) == 1 and plan.new[0].item.tag is Tag.FAIL


def test_coverage_summary_counts_each_check_once_worst_status_winning():
    plan = sweep({}, [], ran=("a.x", "a.y", "a.y"), skipped=("a.z",), unknown=("a.x",))
    assert plan.coverage.counts() == {"ran": 1, "skipped": 1, "unknown": 1}
    assert plan.coverage.ran == ("a.y",) and plan.coverage.unknown == ("a.x",)


def test_one_trim_serves_checks_and_store():
    from hyperpod_debugger.domain.model import trim_evidence

    # what a check shows: 20 lines and a line saying how many more there were
    shown = trim_evidence([f"line {i}" for i in range(25)])
    assert shown[-1] == "… and 5 more" and len(shown) == 21
    assert trim_evidence(["a", "b"]) == ["a", "b"]
    # what the store keeps: the same bound, silent, and at most so many bytes (cut at a character)
    assert bounded_evidence(["é" * 3000, "x"]) == ("é" * (EVIDENCE_MAX_BYTES // 2),)


# --- a check that looked at some nodes only (a window of HyperPod events) -----------------------------------


def test_hyperpods_verdict_in_a_window_resolves_only_the_nodes_the_window_named():
    verdict = dict(check="events.node_health", section="F", tag=Tag.WARN, message="HyperPod says unhealthy")
    first = plan_sweep({}, report([finding(**verdict, instance_id=NODE_A)], ran=("events.node_health",)), T0)
    stored = stored_after(first)
    # a later window names only NODE_B (healthy): NODE_A's verdict is not its to resolve
    coverage = [CheckCoverage(check="events.node_health", status=CheckStatus.RAN, nodes=[NODE_B])]
    later = report([], ran=())
    later.coverage.checks.extend(coverage)
    assert plan_sweep(stored, later, T0 + timedelta(minutes=5)).resolved == []
    # the window that names NODE_A again, healthy now, resolves it
    named_a = report([], ran=())
    named_a.coverage.checks.append(CheckCoverage(check="events.node_health", status=CheckStatus.RAN, nodes=[NODE_A]))
    [resolved] = plan_sweep(stored, named_a, T0 + timedelta(minutes=10)).resolved
    assert resolved.item.instance_id == NODE_A


def test_a_window_names_what_made_it_look_per_node():
    from hyperpod_debugger.lifecycle.findings import Trigger

    plan = plan_sweep(
        {},
        report([finding(instance_id=NODE_A), finding(instance_id=NODE_B), finding(instance_id=None, message="vpc")]),
        T0,
        trigger=Trigger("event", "2 HyperPod events in one window"),
        node_triggers={NODE_A: Trigger("event", f"Node Health Event for {NODE_A}", NODE_A)},
    )
    said = {c.item.instance_id: (c.item.trigger, c.item.trigger_node) for c in plan.new}
    assert said[NODE_A] == (f"Node Health Event for {NODE_A}", NODE_A)
    assert said[NODE_B] == ("2 HyperPod events in one window", None)
    assert said[None] == ("2 HyperPod events in one window", None)
