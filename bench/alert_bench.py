"""Benchmark: what an on-call engineer receives for fixed incidents, through the monitor's real handlers.

    make bench            # or: PYTHONPATH=. .venv/bin/python bench/alert_bench.py

Each scenario runs on the simulated account and clock (``hyperpod_sim.alert_scenarios``): the stream's records
handed to the notifier ten per invocation (the stack's batch size) in shuffled order, the event windows, the
alert groups, the outbox and the courier to a local Slack stand-in and SNS email, with the stack's default
settings. One line per scenario: incidents opened, Slack messages and emails (when opened / when resolved), and
the simulated seconds from the first event to the first message (the triage itself takes no simulated time:
the probe session is not counted).

Targets (issue 27): one incident → 1 message when it opens and 1 when it resolves; 50 nodes failing 3 checks
each → at most 3 messages per channel; a first deployment on a cluster with 8 configuration problems → 1
message; event to first message ≤ 30 s. A storm (1,000 Node Health Events in 10 minutes on a 2,000-node
cluster) has no count of its own: it is held to the alert group's bound, at most 4 messages per channel
(:func:`node_health_storm` says why).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from hyperpod_sim.alert_scenarios import CONFIG_PROBLEMS, AlertSimulation, Fault, World, alert_simulation, node_ids

FIRST_MESSAGE_TARGET_S = 30.0


@dataclass
class Line:
    name: str
    incidents: int
    slack_open: int
    slack_resolved: int
    email_open: int
    email_resolved: int
    first_s: float | None
    target_messages: int
    wall_s: float = 0.0
    target_first: bool = True

    @property
    def met(self) -> bool:
        most = max(self.slack_open + self.slack_resolved, self.email_open + self.email_resolved)
        fast = not self.target_first or (self.first_s is not None and self.first_s <= FIRST_MESSAGE_TARGET_S)
        return most <= self.target_messages and fast

    def text(self) -> str:
        first = f"{self.first_s:.0f}" if self.first_s is not None else "-"
        return (
            f"alerts scenario={self.name} incidents={self.incidents} "
            f"slack={self.slack_open}+{self.slack_resolved} email={self.email_open}+{self.email_resolved} "
            f"event_to_first_message_s={first} target_messages_per_channel<={self.target_messages} "
            f"{'met' if self.met else 'MISSED'} (wall {self.wall_s:.0f} s)"
        )


def _counts(sim: AlertSimulation, mark: int) -> tuple[int, int, int, int]:
    """(slack before the mark, after it, email before, after): messages when opened and when resolved."""
    slack = [r for r in sim.received if r.channel == "slack"]
    email = [r for r in sim.received if r.channel == "email"]
    return (
        sum(1 for r in slack if r.at < mark),
        sum(1 for r in slack if r.at >= mark),
        sum(1 for r in email if r.at < mark),
        sum(1 for r in email if r.at >= mark),
    )


def _quiet_start(sim: AlertSimulation, *, probe: bool = True) -> None:
    """A cluster already watched: the first sweep (its baseline) is behind us (``probe`` False: its nodes not
    probed yet, so the next sweep probes every one of them)."""
    sim.sweep(probe=probe)
    sim.run(seconds=600)
    sim.received.clear()
    sim.events_at.clear()


def _opened(sim: AlertSimulation, before: set[str]) -> int:
    return len({s.incident_id for s in sim.incidents()} - before)


def one_node_xid79() -> Line:
    world = World(node_ids(64))
    bad = world.nodes[3]
    with alert_simulation(world) as sim:
        _quiet_start(sim)
        known = {s.incident_id for s in sim.incidents()}
        world.faults.add(Fault("xid79", bad))
        sim.node_health_event(bad)
        sim.run(seconds=900)
        mark = int(sim.offset)
        sim.replace_node(bad)  # the operator replaced it, as the message suggested
        sim.sweep()
        sim.run(seconds=900)
        return Line("one-node-xid79", _opened(sim, known), *_counts(sim, mark), sim.first_message_after_event(), 2)


def lifecycle_s3_route() -> Line:
    world = World(node_ids(64))
    bad = world.nodes[5]
    with alert_simulation(world) as sim:
        _quiet_start(sim)
        known = {s.incident_id for s in sim.incidents()}
        world.faults.add(Fault("lifecycle_s3", bad))
        sim.cluster_event(bad, f"Lifecycle script execution for EC2 Instance {bad} failed: exit code 1")
        sim.run(seconds=900)
        mark = int(sim.offset)
        world.faults.clear()  # the operator associated the endpoint with the route table
        sim.sweep()
        sim.run(seconds=900)
        return Line("lifecycle-s3-route", _opened(sim, known), *_counts(sim, mark), sim.first_message_after_event(), 2)


def fifty_nodes_three_checks() -> Line:
    world = World(node_ids(200))
    bad = world.nodes[:50]
    with alert_simulation(world) as sim:
        _quiet_start(sim, probe=False)  # the next sweep probes all 200 nodes: it finds all 50 at once
        known = {s.incident_id for s in sim.incidents()}
        world.faults |= {Fault("three_gpu_faults", n) for n in bad}
        sim.events_at.append(sim.offset)  # found by the sweep: "first event" is the sweep's start
        sim.sweep()
        sim.run(seconds=1800)
        mark = int(sim.offset)
        world.faults.clear()
        sim.sweep()
        sim.run(seconds=1800)
        return Line("50-nodes-x-3-checks", _opened(sim, known), *_counts(sim, mark), sim.first_message_after_event(), 3)


def first_deployment() -> Line:
    world = World(node_ids(64))
    world.faults |= {Fault(kind) for kind, *_ in CONFIG_PROBLEMS}
    with alert_simulation(world) as sim:
        sim.events_at.append(sim.offset)
        sim.sweep()  # the first sweep after the stack is deployed
        sim.run(seconds=1800)
        mark = int(sim.offset) + 1
        return Line(
            "first-deployment-8-problems", len(sim.incidents()), *_counts(sim, mark), sim.first_message_after_event(), 1
        )


#: Event windows: a cluster is read at most once per ``WINDOW_S`` (100 s), twice that after the first follow-up
#: of a run that began with a leading window (``functions.monitor.logic.windows``); the alert group: the first
#: message ``GROUP_WAIT_S`` (10 s) after the first transition, then at most one per ``GROUP_INTERVAL_S`` (300 s)
#: (``functions.monitor.logic.alert_groups``). The stack's defaults, restated for the bound below.
STORM_WINDOW_LAG_S = 200
STORM_GROUP_WAIT_S = 10
STORM_GROUP_INTERVAL_S = 300


def storm_bound(minutes: int) -> int:
    """The most messages per channel a storm of ``minutes`` may bring: its last event's transitions are written
    at most ``STORM_WINDOW_LAG_S`` after it, so a storm's transitions span at most ``minutes`` × 60 + 200 s
    from the first; the group tells the first 10 s in and then one flush per 300 s while any is pending. For 10
    minutes: 1 + ⌈(800 − 10) / 300⌉ = 4, resolutions inside the storm included (told in the same flushes)."""
    span = minutes * 60 + STORM_WINDOW_LAG_S
    return 1 + math.ceil((span - STORM_GROUP_WAIT_S) / STORM_GROUP_INTERVAL_S)


def node_health_storm(events: int = 1000, nodes: int = 2000, minutes: int = 10) -> Line:
    """``events`` Node Health Events (Unhealthy) spread evenly over ``minutes`` on a cluster of ``nodes`` nodes
    (each on a node of its own while ``events`` ≤ ``nodes``), then 15 quiet minutes. Held to
    :func:`storm_bound` messages per channel."""
    world = World(node_ids(nodes))
    with alert_simulation(world) as sim:
        _quiet_start(sim)
        known = {s.incident_id for s in sim.incidents()}
        gap = minutes * 60 / events
        for k in range(events):
            sim.node_health_event(world.nodes[k % nodes])
            sim.run(seconds=gap)
        sim.run(seconds=900)
        mark = int(sim.offset) + 1
        opened = _opened(sim, known)
        # a storm has no target count of its own; it shows the alert group's bound (storm_bound)
        return Line(
            f"node-health-storm-{events}-in-{minutes}min-{nodes}-nodes",
            opened,
            *_counts(sim, mark),
            sim.first_message_after_event(),
            storm_bound(minutes),
        )


SCENARIOS: dict[str, Callable[[], Line]] = {
    "one-node-xid79": one_node_xid79,
    "lifecycle-s3-route": lifecycle_s3_route,
    "50-nodes-x-3-checks": fifty_nodes_three_checks,
    "first-deployment": first_deployment,
    "storm": node_health_storm,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", help=f"which scenarios (default: all of {', '.join(SCENARIOS)})")
    args = parser.parse_args(argv)
    chosen = args.scenarios or list(SCENARIOS)
    missed = 0
    for name in chosen:
        began = time.monotonic()
        line = SCENARIOS[name]()
        line.wall_s = time.monotonic() - began
        print(line.text(), flush=True)
        missed += not line.met
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
