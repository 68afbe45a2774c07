"""The alert policy as deployed (issue 27): small worlds of faults run through the monitor's real handlers on
moto and a simulated clock (``hyperpod_sim.alert_scenarios``), the stream's records handed to the notifier
ten per invocation as the stack's event source mapping does, in shuffled order, then the alert groups, the
outbox and the courier to a local Slack stand-in and SNS email.

Each rule of the policy and each grouping bound is asserted on what people receive: how many messages per
channel, and what they say. Slack payloads are validated with slack_sdk's Block Kit models. No timing is
asserted: the simulated clock only decides what is due.
"""

from __future__ import annotations

import json

import pytest
from slack_sdk.models.blocks import Block

from hyperpod_debugger.lifecycle.incidents import COVERAGE_KEY, IncidentState
from hyperpod_debugger.store.incidents import IncidentStore
from hyperpod_sim.alert_scenarios import (
    CLUSTER_ARN,
    CLUSTER_NAME,
    AlertSimulation,
    Fault,
    Received,
    World,
    alert_simulation,
    node_ids,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: Long enough for the stream, the group wait, the outbox and the courier; shorter than a group interval.
SETTLE_S = 60
#: A cluster's next message waits out the alert groups' interval after its last one (the stack's default).
INTERVAL_S = 300


def quiet_start(sim: AlertSimulation, *, probe: bool = True) -> None:
    """A cluster already watched: its first sweep (the baseline) is behind us, and nothing was wrong."""
    sim.sweep(probe=probe)
    sim.run(seconds=SETTLE_S)
    assert sim.received == [], "a healthy cluster's baseline sweep tells nobody anything"


def slack(sim: AlertSimulation) -> list[dict]:
    return [r.payload for r in sim.messages("slack")]


def emails(sim: AlertSimulation) -> list[Received]:
    return sim.messages("email")


def header(payload: dict) -> str:
    return payload["blocks"][0]["text"]["text"]


def text_of(payload: dict) -> str:
    return json.dumps(payload, ensure_ascii=False)


def assert_block_kit(payloads: list[dict]) -> None:
    for payload in payloads:
        assert payload.get("text"), "a notification fallback text is required"
        assert len(payload["blocks"]) <= 50
        for block in payload["blocks"]:
            parsed = Block.parse(block)
            assert parsed is not None, block
            parsed.validate_json()


def outbox_channels(sim: AlertSimulation) -> list[str]:
    """The channels of every message the alert groups queued in the outbox so far (read from the idempotency
    ledger would be indirect: the courier's sink and the mailbox say what arrived; this says what was sent)."""
    return [r.channel for r in sim.received]


# --------------------------------------------------------------------------- one incident


@pytest.mark.parametrize("seed", [None, 3, 11])
def test_one_node_with_xid_79_is_one_incident_told_once_when_it_opens_and_once_when_it_resolves(seed):
    world = World(node_ids(16))
    bad = world.nodes[3]
    with alert_simulation(world, seed=seed) as sim:
        quiet_start(sim)
        world.faults.add(Fault("xid79", bad))
        sim.node_health_event(bad)
        sim.run(seconds=SETTLE_S)

        # ONE incident for the node (the Xid and the missing GPU are one problem), told once per channel
        [incident] = [s for s in sim.incidents() if s.is_open]
        assert incident.incident.instance_id == bad and str(incident.incident.verdict).upper().endswith("REPLACE")
        [opened] = slack(sim)
        [mail] = emails(sim)
        assert_block_kit([opened])
        # the header names the cluster, the node and the verdict, with the severity visible
        top = header(opened)
        assert CLUSTER_NAME in top and bad in top and "REPLACE" in top.upper() and "P0" in text_of(opened)
        body = text_of(opened)
        assert "Suggested command (run this yourself)" in body
        assert "Xid 79" in body
        assert CLUSTER_NAME in mail.payload.subject and bad in mail.payload.subject
        assert len(mail.payload.subject) < 100 and not mail.payload.subject.endswith(("…", "..."))

        # WHEN the operator replaces it and the next sweep sees a healthy cluster
        sim.replace_node(bad)
        sim.received.clear()
        sim.sweep()
        sim.run(seconds=INTERVAL_S + SETTLE_S)

        # THEN the incident resolves once: one message per channel, and never again
        [resolved] = slack(sim)
        assert len(emails(sim)) == 1
        assert "resolved" in text_of(resolved).lower() and bad in text_of(resolved)
        assert [s.state for s in sim.incidents() if s.incident.instance_id == bad] == [IncidentState.RESOLVED]
        sim.received.clear()
        sim.sweep()
        sim.run(seconds=SETTLE_S)
        assert sim.received == []


def test_a_lifecycle_failure_caused_by_the_s3_route_is_one_incident_naming_the_route_not_the_script():
    world = World(node_ids(16))
    bad = world.nodes[5]
    with alert_simulation(world) as sim:
        quiet_start(sim)
        world.faults.add(Fault("lifecycle_s3", bad))
        sim.cluster_event(bad, f"Lifecycle script execution for EC2 Instance {bad} failed: exit code 1")
        sim.run(seconds=SETTLE_S)

        # one incident: the cluster-level root cause, with the node it explains under it
        [incident] = [s for s in sim.incidents() if s.is_open]
        assert incident.incident.instance_id is None
        assert bad in incident.incident.nodes
        [message] = slack(sim)
        assert len(emails(sim)) == 1
        body = text_of(message)
        # the likely cause is the S3 endpoint's route, and the command that fixes it is suggested, not run
        assert "rtb-0f1e2d3c4b5a69788" in body and "vpce-0a1b2c3d4e5f60718" in body
        assert "modify-vpc-endpoint" in body and "Suggested command (run this yourself)" in body
        assert bad in body


# --------------------------------------------------------------------------- grouping bounds


@pytest.mark.parametrize("seed", [None, 5])
def test_twelve_nodes_failing_three_checks_reach_each_channel_as_one_message_and_resolve_as_one(seed):
    world = World(node_ids(24))
    bad = world.nodes[:12]
    with alert_simulation(world, seed=seed) as sim:
        quiet_start(sim, probe=False)  # the next sweep probes every node: it finds all twelve at once
        world.faults |= {Fault("three_gpu_faults", n) for n in bad}
        sim.sweep()
        sim.run(seconds=SETTLE_S)

        # twelve incidents (one per node, not 36 findings) told in one message per channel
        opened = [s for s in sim.incidents() if s.is_open]
        assert sorted(s.incident.instance_id for s in opened) == sorted(bad)
        [message] = slack(sim)
        assert len(emails(sim)) == 1
        assert_block_kit([message])
        assert "12" in header(message) and CLUSTER_NAME in header(message)
        # the group lists ten nodes and counts the rest
        listed = [n for n in bad if n in text_of(message)]
        assert len(listed) >= 10

        world.faults.clear()
        sim.received.clear()
        sim.sweep()
        sim.run(seconds=INTERVAL_S + SETTLE_S)
        [resolved] = slack(sim)
        assert len(emails(sim)) == 1
        assert "12" in header(resolved) and "resolved" in text_of(resolved).lower()


def test_a_storm_of_node_events_is_bounded_by_the_group_interval():
    """30 nodes fail one by one over four minutes: the first message goes after the group wait, then at
    most one per channel per group interval (300 s), whatever arrives meanwhile."""
    world = World(node_ids(40))
    with alert_simulation(world, seed=2) as sim:
        quiet_start(sim)
        for node in world.nodes[:30]:
            world.faults.add(Fault("xid79", node))
            sim.node_health_event(node)
            sim.run(seconds=8)
        sim.run(seconds=400)
        told = slack(sim)
        # 240 s of events: one flush at the start, one after the interval; never one per node
        assert 1 <= len(told) <= 2 and len(emails(sim)) == len(told)
        named = {n for n in world.nodes[:30] if any(n in text_of(m) for m in told)}
        counted = sum(int(s) for m in told for s in [header(m).split()[0]] if s.isdigit())
        assert len([s for s in sim.incidents() if s.is_open]) == 30
        assert named or counted  # the messages are about those nodes


# --------------------------------------------------------------------------- the policy's rules


def test_the_first_sweep_of_a_cluster_is_one_baseline_message_listing_every_problem():
    from hyperpod_sim.alert_scenarios import CONFIG_PROBLEMS

    world = World(node_ids(16))
    world.faults |= {Fault(kind) for kind, *_ in CONFIG_PROBLEMS}
    with alert_simulation(world) as sim:
        sim.sweep()
        sim.run(seconds=SETTLE_S)
        assert len([s for s in sim.incidents() if s.is_open]) == len(CONFIG_PROBLEMS)
        [message] = slack(sim)
        [mail] = emails(sim)
        assert_block_kit([message])
        body = text_of(message)
        # one summary, every problem in it, the P2s too (they are the starting point)
        assert "subnet-0123456789abcdef0" in body and "ThreadsPerCore" in body and "sg-0aa11bb22cc33dd44" in body
        assert str(len(CONFIG_PROBLEMS)) in header(message)
        assert "sg-0aa11bb22cc33dd44" in mail.payload.message
        # and the next sweep, with the same problems, says nothing
        sim.received.clear()
        sim.sweep()
        sim.run(seconds=SETTLE_S)
        assert sim.received == []


def test_a_p2_problem_pages_nobody_and_appears_in_the_daily_summary():
    from functions.monitor.handlers import alerts

    world = World(node_ids(8))
    with alert_simulation(world) as sim:
        quiet_start(sim)
        world.faults.add(Fault("ips"))  # 11 free IP addresses: P2
        sim.sweep()
        sim.run(seconds=SETTLE_S)
        [incident] = [s for s in sim.incidents() if s.is_open]
        assert incident.peak_priority == "P2"
        assert sim.received == []

        # the daily schedule fires: one summary per channel, naming the P2
        scheduled = {
            "version": "0",
            "id": "d0c5b1a7-0000-4000-8000-000000000001",
            "detail-type": "Scheduled Event",
            "source": "aws.events",
            "account": "123456789012",
            "time": sim.now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": "us-west-2",
            "resources": ["arn:aws:events:us-west-2:123456789012:rule/hyperpod-debugger-daily"],
            "detail": {},
        }
        sim.monitor.invoke(alerts.handler, scheduled, function_name="hyperpod-alert-groups")
        sim.run(seconds=SETTLE_S)
        [summary] = slack(sim)
        [mail] = emails(sim)
        assert_block_kit([summary])
        assert "11 free IP addresses" in text_of(summary) and "11 free IP addresses" in mail.payload.message


def test_nodes_that_could_not_be_probed_are_one_coverage_problem_and_never_a_reboot():
    world = World(node_ids(16))
    dark = world.nodes[:6]
    with alert_simulation(world) as sim:
        quiet_start(sim, probe=False)
        world.faults |= {Fault("ssm_offline", n) for n in dark}
        sim.sweep()
        sim.run(seconds=SETTLE_S)
        opened = [s for s in sim.incidents() if s.is_open]
        assert [s.key for s in opened] == [COVERAGE_KEY]
        assert sorted(opened[0].incident.nodes) == sorted(dark)
        [message] = slack(sim)
        assert len(emails(sim)) == 1
        body = text_of(message)
        assert "6 nodes could not be probed: the SSM agent is not connected" in body
        assert "reboot-cluster-nodes" not in body and "replace-cluster-nodes" not in body


def test_no_page_while_hyperpod_repairs_a_node_unless_the_repair_runs_too_long():
    world = World(node_ids(16))
    bad = world.nodes[2]
    with alert_simulation(world, env={"REPAIR_GRACE_S": "900"}) as sim:
        quiet_start(sim)
        world.faults.add(Fault("xid79", bad))
        sim.node_health_event(bad, repair_action="Replace")
        sim.run(seconds=SETTLE_S)
        [held] = [s for s in sim.incidents() if s.is_open]
        assert held.held and held.incident.instance_id == bad
        assert sim.received == []

        # still not fixed after the grace: the next look at the node pages, saying the repair overran
        sim.run(seconds=900)
        sim.sweep()
        sim.run(seconds=SETTLE_S)
        [message] = slack(sim)
        assert len(emails(sim)) == 1
        body = text_of(message)
        assert bad in body and "HyperPod" in body


def test_a_repair_that_fixes_the_node_in_time_tells_nobody():
    world = World(node_ids(16))
    bad = world.nodes[2]
    with alert_simulation(world, env={"REPAIR_GRACE_S": "900"}) as sim:
        quiet_start(sim)
        world.faults.add(Fault("xid79", bad))
        sim.node_health_event(bad, repair_action="Replace")
        sim.run(seconds=SETTLE_S)
        new = sim.replace_node(bad)
        sim.sweep()
        sim.run(seconds=SETTLE_S)
        assert sim.received == []
        assert all(not s.is_open for s in sim.incidents())
        assert new in sim.world.nodes


# --------------------------------------------------------------------------- channels only when configured


def test_without_a_slack_secret_there_is_no_slack_channel_and_email_still_goes():
    world = World(node_ids(16))
    bad = world.nodes[1]
    with alert_simulation(world, env={"SLACK_SECRET_NAME": None}) as sim:
        quiet_start(sim)
        world.faults.add(Fault("xid79", bad))
        sim.node_health_event(bad)
        sim.run(seconds=SETTLE_S)
        assert slack(sim) == [] and sim.monitor.sink.requests == 0
        [mail] = emails(sim)
        assert bad in mail.payload.subject
        # nothing for Slack waits anywhere: the outbox is empty and nothing was dead-lettered
        assert sim.monitor.outbox.depth() == 0


# --------------------------------------------------------------------------- a record that cannot be rendered


def test_an_incident_that_cannot_be_rendered_is_set_aside_whole_and_the_others_still_go():
    world = World(node_ids(16))
    first, second = world.nodes[1], world.nodes[2]
    with alert_simulation(world) as sim:
        quiet_start(sim)
        world.faults |= {Fault("xid79", first), Fault("xid79", second)}
        sim.node_health_event(first)
        sim.run(seconds=5)  # its triage ran (the window's leading edge); the group still waits
        # the first node's incident as a newer layer might have written it: a priority this one does not know
        table = sim.monitor.clients.client("dynamodb")
        store = IncidentStore(sim.monitor.clients, sim.monitor.resources.findings_table)
        [item] = [s for s in store.incidents(CLUSTER_ARN).values() if s.incident.instance_id == first]
        key = {"pk": {"S": f"CLUSTER#{CLUSTER_ARN}"}, "sk": {"S": f"INCIDENT#{item.key}"}}
        got = table.get_item(TableName=sim.monitor.resources.findings_table, Key=key)["Item"]
        raw = json.dumps(got).replace('"P0"', '"P00"')
        table.put_item(TableName=sim.monitor.resources.findings_table, Item=json.loads(raw))
        sim.node_health_event(second)
        sim.run(seconds=200)  # the cluster is not quiet now: its event window coalesces the second event

        # the other incident reached people; the broken one is kept with its content, not a pointer
        told = slack(sim)
        assert told and all(second in text_of(m) for m in told)
        sqs = sim.monitor.clients.client("sqs")
        kept = sqs.receive_message(
            QueueUrl=sim.monitor.resources.unprocessed_queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
        ).get("Messages", [])
        assert kept, "the unrenderable incident is kept for inspection"
        assert any(first in m["Body"] and "P00" in m["Body"] for m in kept)
