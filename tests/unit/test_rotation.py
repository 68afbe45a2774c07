"""The sweep's probe rotation, pure: who is probed each sweep, and that nobody waits longer than the period."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from hyperpod_debugger.domain.observations import ClusterNode
from hyperpod_debugger.lifecycle.rotation import chunk, describe_node, node_of, plan_rotation

T0 = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)
INTERVAL = timedelta(minutes=15)
DAY = timedelta(days=1)


def node(i: int, *, instance_type: str = "ml.p5.48xlarge", status: str = "Running", group: str = "workers"):
    return ClusterNode(f"i-{i:017x}", group, instance_type, status, "", None, hostname=f"ip-10-0-{i // 250}-{i % 250}")


def simulate(nodes, *, days: float, cap: int, suspects_of=lambda now: ()):
    """Run the rotation sweep after sweep with a clock; every planned node is probed. Returns probe times."""
    last: dict[str, datetime] = {}
    times: dict[str, list[datetime]] = {n.instance_id: [] for n in nodes}
    now = T0
    end = T0 + timedelta(days=days)
    while now < end:
        plan = plan_rotation(nodes, last, now, suspects=suspects_of(now), interval=INTERVAL, period=DAY, cap=cap)
        for n in plan.nodes:
            last[n.instance_id] = now
            times[n.instance_id].append(now)
        now += INTERVAL
    return times


def test_every_node_is_probed_at_least_once_a_day_once_the_first_pass_is_done():
    # GIVEN 2,000 nodes and a cap of 48 per sweep (the first pass takes ~42 sweeps, about 10.5 h)
    nodes = [node(i) for i in range(2000)]

    times = simulate(nodes, days=3, cap=48)

    first_pass_done = max(ts[0] for ts in times.values())
    assert first_pass_done < T0 + timedelta(hours=11)
    for ts in times.values():
        gaps = [b - a for a, b in zip(ts, ts[1:], strict=False)]
        assert gaps and max(gaps) <= DAY  # never longer than the period between two probes


def test_an_unchanged_cluster_settles_at_the_quota_per_sweep():
    # 960 nodes covered in one sweep less than a day (95 sweeps): 11 per sweep. Pacing at exactly 96 sweeps
    # let a node probed early in one sweep and late in a later one wait up to an interval past the period
    # (measured in bench/sweep_bench.py).
    nodes = [node(i) for i in range(960)]
    last = {n.instance_id: T0 - timedelta(hours=1) for n in nodes}
    plan = plan_rotation(nodes, last, T0, interval=INTERVAL, period=DAY, cap=480)
    assert plan.quota == 11 and len(plan.nodes) == 11 and plan.behind == 0 and plan.notes == []


def test_suspects_come_first_but_take_at_most_half_the_cap():
    nodes = [node(i) for i in range(100)]
    suspects = [n.instance_id for n in nodes[:40]]
    last = {n.instance_id: T0 for n in nodes}  # everybody probed just now: only suspects are due

    plan = plan_rotation(nodes, last, T0, suspects=suspects, interval=INTERVAL, period=DAY, cap=20)

    assert [n.instance_id for n in plan.nodes[:10]] == suspects[:10]
    assert plan.suspects == 10
    assert len(plan.nodes) == 10 + plan.quota  # quota 2 of the rest: the rotation keeps moving


def test_never_probed_first_then_the_oldest_accelerator_nodes_before_others():
    gpu_new = node(1)
    cpu_new = node(2, instance_type="ml.m5.2xlarge")
    gpu_old = node(3)
    gpu_recent = node(4)
    last = {gpu_old.instance_id: T0 - timedelta(hours=23, minutes=50), gpu_recent.instance_id: T0 - timedelta(hours=1)}

    plan = plan_rotation([gpu_recent, gpu_old, cpu_new, gpu_new], last, T0, cap=3, interval=INTERVAL, period=DAY)

    assert [n.instance_id for n in plan.nodes] == [gpu_new.instance_id, cpu_new.instance_id, gpu_old.instance_id]


def test_overdue_nodes_are_caught_up_beyond_the_quota_up_to_the_cap():
    nodes = [node(i) for i in range(200)]
    last = {n.instance_id: T0 - DAY for n in nodes}  # all due at once (e.g. after an outage)
    plan = plan_rotation(nodes, last, T0, interval=INTERVAL, period=DAY, cap=50)
    assert plan.quota == 3 and len(plan.nodes) == 50
    assert plan.behind == 150 and plan.notes and "wait for the next sweep" in plan.notes[0]


def test_a_cap_too_small_for_the_period_says_how_long_a_rotation_takes():
    nodes = [node(i) for i in range(20000)]
    plan = plan_rotation(nodes, {}, T0, interval=INTERVAL, period=DAY, cap=100, batch_size=25)
    assert plan.quota == 211 and len(plan.nodes) == 100 and len(plan.batches) == 4
    assert plan.notes and "211 probes per sweep" in plan.notes[0] and "50 h" in plan.notes[0]


def test_only_running_nodes_are_planned():
    nodes = [node(1), node(2, status="Pending"), node(3, status="ShuttingDown"), node(4, status="Failure")]
    plan = plan_rotation(nodes, {}, T0, suspects=[nodes[1].instance_id], interval=INTERVAL, period=DAY)
    assert [n.instance_id for n in plan.nodes] == [nodes[0].instance_id]
    assert plan.running == 1 and plan.suspects == 0


def test_batches_keep_the_planned_order_and_size():
    nodes = [node(i) for i in range(7)]
    assert [len(b) for b in chunk(nodes, 3)] == [3, 3, 1]
    assert [n for b in chunk(nodes, 3) for n in b] == nodes
    assert chunk([], 3) == []


def test_an_empty_cluster_plans_nothing():
    plan = plan_rotation([], {}, T0)
    assert plan.nodes == [] and plan.batches == [] and plan.quota == 0


@pytest.mark.parametrize("interval,period", [(timedelta(0), DAY), (INTERVAL, timedelta(0))])
def test_a_non_positive_interval_or_period_is_refused(interval, period):
    with pytest.raises(ValueError):
        plan_rotation([node(1)], {}, T0, interval=interval, period=period)


def test_descriptor_round_trip_and_refusal():
    n = node(7, group="gpu/odd group")
    d = describe_node(n, controller=True)
    assert d["role"] == "controller"
    back = node_of(d)
    assert (back.instance_id, back.group, back.instance_type, back.status, back.hostname) == (
        n.instance_id,
        n.group,
        n.instance_type,
        n.status,
        n.hostname,
    )
    with pytest.raises(ValueError, match="instance_type"):
        node_of({"instance_id": "i-0123456789abcdef0", "group": "g"})
