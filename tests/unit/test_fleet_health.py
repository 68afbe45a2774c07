"""Fleet-health verdicts and the finding event's bounds, from the rules the docs state (module docstrings of
``hyperpod_debugger.lifecycle.health`` and ``hyperpod_debugger.notify.finding_event``)."""

from __future__ import annotations

import json
import pathlib
from datetime import UTC, datetime, timedelta

from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.domain.observations import ClusterNode
from hyperpod_debugger.lifecycle.findings import State, StoredFinding, TransitionKind
from hyperpod_debugger.lifecycle.health import fleet_health
from hyperpod_debugger.notify import finding_event

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/abcdefghijkl"


def node(iid: str, group: str = "gpu", status: str = "Running", launched: datetime | None = None) -> ClusterNode:
    return ClusterNode(iid, group, "ml.p5.48xlarge", status, "", launched)


def finding(
    iid: str | None, tag: Tag, priority: Priority = Priority.P1, state: State = State.OPEN, **kw
) -> StoredFinding:
    return StoredFinding(
        fingerprint=f"{iid}-{tag}-{priority}",
        cluster_arn=ARN,
        instance_id=iid,
        check="probe.gpu.ecc",
        section="C",
        tag=tag,
        priority=priority,
        state=state,
        first_seen=kw.get("first_seen", "2026-12-01T12:00:00Z"),
        last_seen="2026-12-02T11:00:00Z",
        count=3,
        message=kw.get("message", "uncorrectable ECC errors"),
        evidence=tuple(kw.get("evidence", ())),
    )


def test_each_node_gets_the_weightiest_verdict_and_unprobed_nodes_are_not_healthy():
    nodes = [
        node("i-a"),
        node("i-b"),
        node("i-c"),
        node("i-d", status="Pending"),
        node("i-e", group="cpu"),
        node("i-f"),
    ]
    findings = [
        finding("i-a", Tag.UNKNOWN),
        finding("i-a", Tag.FAIL, Priority.P0),  # FAIL outweighs UNKNOWN
        finding("i-b", Tag.UNKNOWN),
        finding("i-c", Tag.FAIL, state=State.RESOLVED),  # resolved: ignored
        finding(None, Tag.WARN, Priority.P2),  # cluster-wide: counted for the cluster only
    ]
    probed = {
        "i-a": NOW - timedelta(hours=1),
        "i-b": NOW - timedelta(hours=2),
        "i-c": NOW - timedelta(hours=3),
        "i-e": NOW - 2 * DAY,
    }  # i-e probed too long ago, i-f never
    health = fleet_health("c", nodes, findings, probed, NOW, period=DAY)
    whole = health.cluster
    assert dict(whole.verdicts) == {"HEALTHY": 1, "WARN": 0, "FAIL": 1, "UNKNOWN": 1, "UNOBSERVED": 2, "NOT_RUNNING": 1}
    assert whole.healthy_share == 100 / 6 and whole.unknown_share == 100 / 6
    assert dict(whole.open_by_priority) == {"P0": 1, "P1": 2, "P2": 1}
    assert health.problems == {
        "i-a": "FAIL",
        "i-b": "UNKNOWN",
        "i-d": "NOT_RUNNING",
        "i-e": "UNOBSERVED",
        "i-f": "UNOBSERVED",
    }
    # i-f never probed: counted from the oldest probe the rotation remembers (i-e's, 2 days ago)
    assert whole.oldest_probe_age_s == 2 * DAY.total_seconds() and whole.never_probed == 1
    gpu, cpu = {g.group: g for g in health.groups}["gpu"], {g.group: g for g in health.groups}["cpu"]
    assert gpu.nodes == 5 and cpu.nodes == 1 and dict(cpu.verdicts)["UNOBSERVED"] == 1
    assert dict(gpu.open_by_priority) == {"P0": 1, "P1": 2, "P2": 0}


def test_without_probing_nothing_is_unobserved_and_no_age_is_claimed():
    health = fleet_health("c", [node("i-a"), node("i-b")], [], {}, NOW, period=None)
    assert dict(health.cluster.verdicts)["HEALTHY"] == 2 and health.cluster.oldest_probe_age_s is None


def test_before_the_rotation_probed_anything_no_age_is_reported():
    health = fleet_health("c", [node("i-a", launched=NOW - 90 * DAY)], [], {}, NOW, period=DAY)
    assert health.cluster.oldest_probe_age_s is None and dict(health.cluster.verdicts)["UNOBSERVED"] == 1


def test_a_never_probed_node_launched_after_the_rotation_began_counts_from_its_launch():
    nodes = [node("i-a"), node("i-new", launched=NOW - timedelta(hours=5))]
    health = fleet_health("c", nodes, [], {"i-a": NOW - timedelta(hours=30)}, NOW, period=DAY * 2)
    assert health.cluster.oldest_probe_age_s == timedelta(hours=30).total_seconds()
    only_new = fleet_health("c", nodes[1:], [], {"i-x": NOW - timedelta(hours=30)}, NOW, period=DAY)
    assert only_new.cluster.oldest_probe_age_s == timedelta(hours=5).total_seconds()


def test_the_committed_schema_is_the_models():
    committed = json.loads((pathlib.Path(__file__).parents[2] / "references" / "finding-event.schema.json").read_text())
    assert committed == finding_event.schema()


def put_events_entry_size(entry: dict) -> int:
    """An entry's size as EventBridge documents it: UTF-8 bytes of source, detail-type, detail and resources."""
    fields = [entry["Source"], entry["DetailType"], entry["Detail"], *entry.get("Resources", ())]
    return sum(len(text.encode()) for text in fields)


def test_a_huge_finding_still_fits_ten_to_a_put_events_request():
    huge = finding("i-a", Tag.FAIL, evidence=["€" * 5000] * 40, message="x" * 50_000)
    detail = finding_event.detail_of(TransitionKind.NEW, "2026-12-02T12:00:00Z", huge)
    assert detail.truncated and finding_event.detail_bytes(detail) <= finding_event.DETAIL_BYTES
    entries = [finding_event.entry(detail, "default")] * 10
    # PutEvents: 256 KB per request, counted as EventBridge documents it
    assert sum(put_events_entry_size(e) for e in entries) < 256 * 1024
    assert detail.finding.evidence and detail.finding.evidence[0].startswith("€")  # the first lines stay


def test_resolution_time_and_event_id_are_stable():
    f = finding("i-a", Tag.FAIL, first_seen="2026-12-02T10:00:00Z")
    one = finding_event.detail_of(TransitionKind.RESOLVED, "2026-12-02T12:30:00Z", f)
    two = finding_event.detail_of(TransitionKind.RESOLVED, "2026-12-02T12:30:00Z", f)
    assert one.open_seconds == 2.5 * 3600 and one.event_id == two.event_id
    assert one.finding.runbook == "references/node-diagnostics-detail.md § C"


def test_a_node_findings_event_names_its_group_type_and_logical_id_and_a_cluster_wide_one_none():
    from dataclasses import replace

    node = replace(
        finding("i-a", Tag.FAIL), instance_group="gpu-workers", instance_type="ml.p5.48xlarge", node_logical_id="lg-7"
    )
    detail = finding_event.detail_of(TransitionKind.NEW, "2026-12-02T12:00:00Z", node)
    assert (detail.instance_group, detail.instance_type, detail.node_logical_id) == (
        "gpu-workers",
        "ml.p5.48xlarge",
        "lg-7",
    )
    wide = finding_event.detail_of(TransitionKind.NEW, "2026-12-02T12:00:00Z", finding(None, Tag.FAIL))
    assert (wide.instance_group, wide.instance_type, wide.node_logical_id) == (None, None, None)
