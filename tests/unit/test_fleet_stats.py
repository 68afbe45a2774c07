"""The findings history's month, summed (``lifecycle.stats``). The scenario is a month written out by hand and
every expected figure below was worked out from it by hand (in the comments), not by running the code."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.lifecycle.findings import State, StoredFinding, TransitionKind
from hyperpod_debugger.lifecycle.stats import Transition, fleet_stats, percentile

NEW, RESOLVED, REOPENED = TransitionKind.NEW, TransitionKind.RESOLVED, TransitionKind.REOPENED
ESCALATED = TransitionKind.ESCALATED
SINCE = datetime(2026, 11, 4, tzinfo=UTC)
UNTIL = datetime(2026, 12, 4, tzinfo=UTC)
P5, M5 = "ml.p5.48xlarge", "ml.m5.xlarge"


def at(day: int, hour: int = 0, month: int = 11) -> datetime:
    return datetime(2026, month, day, hour, tzinfo=UTC)


def t(when, fp, kind, check, node=None, *, group="gpu-workers", itype=P5, logical=None, section="G.1", tag=Tag.FAIL):
    return Transition(
        at=when,
        fingerprint=fp,
        transition=kind,
        check=check,
        tag=tag,
        priority=Priority.P1,
        section=section,
        instance_id=node,
        instance_group=group if node else None,
        instance_type=itype if node else None,
        node_logical_id=logical,
    )


MONTH = [
    # node A: Xid 79 three times (2 h, 1 h, 3 h); during the first, the GPU count too (11:00-13:00): the first
    # incident runs 10:00-13:00 = 3 h. A: 3 incidents, 3 + 1 + 3 = 7 node-hours
    t(at(5, 10), "fp1", NEW, "probe.xid", "i-a"),
    t(at(5, 11), "fp2", NEW, "probe.gpu_count", "i-a"),
    t(at(5, 12), "fp1", RESOLVED, "probe.xid", "i-a"),
    t(at(5, 13), "fp2", RESOLVED, "probe.gpu_count", "i-a"),
    t(at(12, 8), "fp1", REOPENED, "probe.xid", "i-a"),
    t(at(12, 9), "fp1", RESOLVED, "probe.xid", "i-a"),
    t(at(20, 0), "fp1", REOPENED, "probe.xid", "i-a"),
    t(at(20, 3), "fp1", RESOLVED, "probe.xid", "i-a"),
    # node B: root volume full from Nov 30 00:00, still open on Dec 4 00:00: 1 incident, 96 node-hours
    t(at(30, 0), "fp3", NEW, "probe.root_volume", "i-b", section="I.2"),
    # logical node lg-7: i-c1 fails 6 h, is replaced, i-c2 fails 2 h: one repeat offender, 2 incidents, 8 h
    t(at(10, 0), "fp4", NEW, "probe.xid", "i-c1", logical="lg-7"),
    t(at(10, 6), "fp4", RESOLVED, "probe.xid", "i-c1", logical="lg-7"),
    t(at(25, 0), "fp5", NEW, "probe.xid", "i-c2", logical="lg-7"),
    t(at(25, 2), "fp5", RESOLVED, "probe.xid", "i-c2", logical="lg-7"),
    # node D (cpu group): open since before the month (escalated Nov 6), resolved Nov 7 00:00: 0 incidents in
    # the month, 72 node-hours (Nov 4 00:00 to Nov 7 00:00); its opening is not counted
    t(at(6, 0), "fp6", ESCALATED, "probe.services", "i-d", group="cpu", itype=M5, section="H"),
    t(at(7, 0), "fp6", RESOLVED, "probe.services", "i-d", group="cpu", itype=M5, section="H"),
    # a cluster-level problem, 5 h: counts by check and cause, not by node
    t(at(15, 0), "fp7", NEW, "network.efa_sg", section="A"),
    t(at(15, 5), "fp7", RESOLVED, "network.efa_sg", section="A"),
    # what could not be read is no failure
    t(at(16, 0), "fp8", NEW, "probe.session", "i-e", tag=Tag.UNKNOWN, section="K"),
    # outside the month: ignored
    t(at(1, 0), "fp9", NEW, "probe.xid", "i-f"),
]

OPEN_NOW = [
    StoredFinding(
        fingerprint="fp3",
        cluster_arn="arn",
        instance_id="i-b",
        check="probe.root_volume",
        section="I.2",
        tag=Tag.FAIL,
        priority=Priority.P0,
        state=State.OPEN,
        first_seen="2026-11-30T00:00:00.000Z",
        last_seen="2026-12-03T23:45:00.000Z",
        count=380,
        message="Root volume / is 97% full",
        instance_group="gpu-workers",
        instance_type=P5,
    )
]


@pytest.fixture(scope="module")
def stats():
    return fleet_stats("ml-train", MONTH, OPEN_NOW, SINCE, UNTIL)


def test_nodes_are_ranked_by_incidents_then_node_hours(stats):
    got = [(n.node, n.incidents, n.hours_unhealthy) for n in stats.nodes]
    assert got == [("i-a", 3, 7.0), ("lg-7", 2, 8.0), ("i-b", 1, 96.0), ("i-d", 0, 72.0)]


def test_repeat_offenders_follow_a_node_across_its_replacement(stats):
    assert [n.node for n in stats.repeat_offenders] == ["i-a", "lg-7"]
    [slot] = [n for n in stats.nodes if n.node == "lg-7"]
    assert slot.instance_ids == ("i-c1", "i-c2")


def test_groups_and_types_sum_their_nodes(stats):
    # gpu-workers: incidents 3 + 2 + 1 = 6 on 3 nodes, 7 + 8 + 96 = 111 h; cpu: 0 incidents, 1 node, 72 h
    assert [(g.name, g.incidents, g.nodes_affected, g.hours_unhealthy) for g in stats.groups] == [
        ("gpu-workers", 6, 3, 111.0),
        ("cpu", 0, 1, 72.0),
    ]
    assert [(g.name, g.incidents, g.hours_unhealthy) for g in stats.types] == [(P5, 6, 111.0), (M5, 0, 72.0)]


def test_what_fails_most_counts_openings_in_the_month(stats):
    # probe.xid opened 3 (A) + 1 (i-c1) + 1 (i-c2) = 5 times on 2 nodes; D's escalation was no opening
    assert [(c.name, c.opened, c.nodes) for c in stats.checks] == [
        ("probe.xid", 5, 2),
        ("network.efa_sg", 1, 0),
        ("probe.gpu_count", 1, 1),
        ("probe.root_volume", 1, 1),
    ]
    # by runbook section: G.1 5 + 1 = 6, then A and I.2 once each
    assert [(c.name, c.opened) for c in stats.causes] == [("G.1", 6), ("A", 1), ("I.2", 1)]
    assert stats.causes[0].label.startswith("§ G.1 ")


def test_time_to_resolve_uses_nearest_rank(stats):
    # opened and resolved in the month: 2, 2, 1, 3, 6, 2, 5 h → sorted 1 2 2 2 3 5 6; p50 rank 4 → 2, p90 rank 7 → 6
    assert (stats.resolved, stats.resolve_hours_p50, stats.resolve_hours_p90) == (7, 2.0, 6.0)


def test_what_is_still_open_and_for_how_long(stats):
    assert [(p.fingerprint, p.instance_id, p.hours_open) for p in stats.open_now] == [("fp3", "i-b", 96.0)]


def test_an_open_finding_with_no_transition_in_the_month_is_open_since_the_start():
    old = [
        StoredFinding(
            fingerprint="fpX",
            cluster_arn="arn",
            instance_id="i-z",
            check="probe.xid",
            section="G.1",
            tag=Tag.FAIL,
            priority=Priority.P1,
            state=State.ACKNOWLEDGED,
            first_seen="2026-10-01T00:00:00.000Z",
            last_seen="2026-12-03T00:00:00.000Z",
            count=9,
            message="Xid 79",
        )
    ]
    stats = fleet_stats("c", [], old, SINCE, UNTIL)
    [node] = stats.nodes
    # 30 days in the month, no incident opened in it
    assert (node.incidents, node.hours_unhealthy, node.instance_group) == (0, 720.0, "(group not recorded)")


@pytest.mark.parametrize(("values", "p", "expected"), [([], 0.5, None), ([4.0], 0.9, 4.0), ([3, 1, 2, 4], 0.5, 2)])
def test_percentile_by_nearest_rank(values, p, expected):
    assert percentile(values, p) == expected


def test_an_empty_period_says_why_it_may_be_empty(stats):
    from hyperpod_debugger.report.stats import render

    empty = fleet_stats("ml-train", [], [], SINCE, UNTIL)
    text = render(empty)
    assert "0 node incident(s) on 0 node(s)" in text and "No transition in this period" in text
    assert "by_cluster index" in text
    assert "No transition in this period" not in render(stats)


def test_one_table_by_node_lists_every_node_with_its_instances(stats):
    from hyperpod_debugger.report.stats import render

    text = render(stats, "node")
    assert "Nodes: 4" in text and "Repeat offenders" not in text and "By instance group" not in text
    assert "instances: i-c1, i-c2" in text and "[open since 2026-11-30 00:00 UTC]" in text
    assert "72.0 h" in text  # node-hours stay in hours
